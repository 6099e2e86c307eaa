"""The image encoder of one frame, and views of its features for the track step.

Pure functions of tensors (run eagerly and inside the encoder's CUDA graph, ``cuda/runner.py``).
Shapes: HW = (S/16)^2 tokens of the coarsest feature map (S = image size), C_l the hidden dim
of level l.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Tuple

import torch

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base


@dataclass
class Features:
    """Backbone output of one frame, flattened as sam2's ``_prepare_backbone_features``."""

    vision_feats: List[torch.Tensor]  # 3 levels, [HW_l, 1, C_l]; the last is [HW, 1, C]
    vision_pos: List[torch.Tensor]    # same shapes as vision_feats
    feat_sizes: List[Tuple[int, int]]  # (h_l, w_l) per level


def encode_image(model: SAM2Base, image: torch.Tensor) -> Features:
    """image: [1, 3, S, S] normalized float. Runs Hiera + FPN (+ the SAM decoder's high-res
    projections, as ``forward_image`` does)."""
    backbone_out = model.forward_image(image)
    _, feats, pos, sizes = model._prepare_backbone_features(backbone_out)
    return Features(feats, pos, sizes)


def feat_sizes(image_size: int) -> List[Tuple[int, int]]:
    """(h_l, w_l) of the three feature levels of an S x S input (strides 4, 8, 16), as
    ``encode_image`` reports them in ``Features.feat_sizes``."""
    return [(image_size // d, image_size // d) for d in (4, 8, 16)]


def expand(features: Features, batch: int) -> Features:
    """Share one frame's features across B objects (a view, as sam2 does)."""
    if batch == 1:
        return features
    return Features([x.expand(-1, batch, -1) for x in features.vision_feats],
                    [x.expand(-1, batch, -1) for x in features.vision_pos],
                    features.feat_sizes)


def high_res_features(features: Features) -> List[torch.Tensor]:
    """The two finer backbone levels as [B, C_l, h_l, w_l] for the SAM decoder."""
    return [x.permute(1, 2, 0).reshape(x.shape[1], x.shape[2], *s)
            for x, s in zip(features.vision_feats[:-1], features.feat_sizes[:-1])]
