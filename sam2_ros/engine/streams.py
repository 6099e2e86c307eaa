"""Image features of several camera streams, and per-object views of them for one batched step.

One tracker for N cameras shares one model and one step: the image encoder runs the N
paired frames as one batch (``stack``: the layout its batched output has), and one track step
runs every object of every camera, object b reading the features of its camera
``stream_of[b]`` (``select``). With one camera ``encoder.expand`` (a view) does the same
without copying.
"""

from __future__ import annotations

from typing import List

import torch

from sam2_ros.engine.encoder import Features


def stack(features: List[Features]) -> Features:
    """Per-camera Features ([HW_l, 1, C_l] each) -> one Features [HW_l, N, C_l] (what the
    encoder returns for the N frames as one batch)."""
    sizes = features[0].feat_sizes
    if any(f.feat_sizes != sizes for f in features):
        raise ValueError('streams of one batch need one model input size')
    return Features([torch.cat(x, dim=1) for x in zip(*(f.vision_feats for f in features))],
                    [torch.cat(x, dim=1) for x in zip(*(f.vision_pos for f in features))],
                    sizes)


def select(features: Features, stream_of: torch.Tensor) -> Features:
    """Features [HW_l, N, C_l] of N streams -> [HW_l, B, C_l] for B objects, object b reading
    stream ``stream_of[b]`` ([B] long on the features' device; a fixed-address buffer in a
    captured graph, written before each replay like the memories' indices)."""
    return Features([x.index_select(1, stream_of) for x in features.vision_feats],
                    [x.index_select(1, stream_of) for x in features.vision_pos],
                    features.feat_sizes)


def frame(features: Features, position: int) -> Features:
    """Frame ``position`` of features of several streams as one frame's [HW_l, 1, C_l] (a
    prompted step reads one camera's); one frame's features are returned as they are."""
    if features.vision_feats[-1].shape[1] == 1:
        return features
    return select(features, torch.tensor([position], device=features.vision_feats[-1].device))
