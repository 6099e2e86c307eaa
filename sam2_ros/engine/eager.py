"""How the per-frame steps are executed: eagerly here, or by the CUDA-graph runner
(``cuda/runner.py``, which holds one of these for whatever a graph cannot run).

Both runners have the same interface, so the tracker never knows which one it has:
``prepare`` (once, after the bank exists), ``encode_frame`` (raw frame -> Features),
``encode_streams`` (the frames of several cameras -> one Features holding them all),
``track`` (Features + the bank rows each object reads -> StepOut for all objects, plus
'graph' or 'eager' per object; with several cameras' features each object reads its own),
``prompt`` / ``mask_prompt`` (one object's prompted step on frame ``position`` of the
features, plus 'graph' or 'eager') and
``results`` (logits -> masks, stats and the label mask on
the host).
The eager runner is the reference path and the off switch of the graph path
(``TrackerConfig.use_cuda_graphs=False``). Both fill holes of the logits as sam2 does
(``TrackerConfig.fill_hole_area``, inside the steps, so inside the captured graphs too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

import numpy as np
import torch

from sam2_ros.engine import encoder, frame_in, masks_out, step, streams
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.memory import MemoryBank, Selection

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base


class EagerRunner:
    """Runs ``step`` functions directly, one object at a time (as sam2 does)."""

    def __init__(self, model: SAM2Base, cfg: TrackerConfig):
        self.model = model
        self.cfg = cfg
        self.last_merge: Optional[str] = None     # one object at a time: no buckets merged

    def prepare(self, bank: MemoryBank, maskmem_pos: torch.Tensor,
                features: encoder.Features) -> None:
        """Nothing to capture."""

    def encode_frame(self, frame: frame_in.Frame) -> encoder.Features:
        """A validated frame [H, W, 3] uint8 -> the image encoder's Features."""
        return self.encode(frame_in.to_model_input(frame, self.model.image_size,
                                                   torch.device(self.cfg.device)))

    def encode(self, image: torch.Tensor) -> encoder.Features:
        return encoder.encode_image(self.model, image)

    def encode_streams(self, frames: Sequence[Optional[frame_in.Frame]]
                       ) -> Tuple[encoder.Features, List[Optional[int]]]:
        """The validated frames of N cameras (None: no frame this step) as one encoder batch
        -> (Features [HW_l, n, C_l] of the n present frames, each camera's position in them or
        None). One camera is ``encode_frame``; several are ``encode_batch``."""
        if len(frames) == 1:
            return self.encode_frame(frames[0]), [0]
        present = [f for f in frames if f is not None]
        positions, n = [], 0
        for f in frames:
            positions.append(None if f is None else n)
            n += f is not None
        dev, size = torch.device(self.cfg.device), self.model.image_size
        image = torch.cat([frame_in.to_model_input(f, size, dev) for f in present])
        return self.encode_batch(image), positions

    def keeps_features(self, features: encoder.Features) -> bool:
        """False: deferred prompts run before the next encode (``GraphRunner.keeps_features``;
        an eager encode returns new tensors, so they could run after it, for no gain)."""
        return False

    def encodes_in_place(self) -> bool:
        """False: each encode returns new tensors, so a failed one leaves earlier intact."""
        return False

    def encode_batch(self, image: torch.Tensor) -> encoder.Features:
        """image [n, 3, S, S] -> Features [HW_l, n, C_l], eagerly (a runner's single-frame
        buffers, such as the graph runner's encoder graph, stay untouched)."""
        return encoder.encode_image(self.model, image)

    def results(self, logits: torch.Tensor, scores: torch.Tensor, h: int, w: int,
                ids: List[int], sync: bool = True) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """logits [B, 1, s, s], scores [B], ids [B] -> masks [B, H, W] bool, stats [B, 8] and
        label [H, W] uint8 on the host (``masks_out.host_results``; complete on return
        whatever ``sync`` says)."""
        return masks_out.host_results(logits, h, w, scores, ids)

    def track(self, features: encoder.Features, bank: MemoryBank, sels: List[Selection],
              maskmem_pos: torch.Tensor) -> Tuple[step.StepOut, List[str]]:
        """Steps for all objects, one at a time; features [HW_l, N, C_l] of N cameras: each
        object reads frame ``Selection.stream`` of them."""
        several = features.vision_feats[-1].shape[1] > 1
        outs = [step.track_step(self.model, features, bank.gather([s], streams=several),
                                maskmem_pos, fill_hole_area=self.cfg.fill_hole_area)
                for s in sels]
        return cat_outputs(outs), ['eager'] * len(outs)

    def prompt(self, features: encoder.Features, bank: MemoryBank, sel: Optional[Selection],
               points: dict, prev: Optional[torch.Tensor], maskmem_pos: torch.Tensor,
               position: int = 0) -> Tuple[step.StepOut, str]:
        """A point/box prompt for one object on frame ``position`` of the features (its
        camera's): sel=None is an initial conditioning frame (no memory read), else a
        correction reading sel's memories; prev [1, 1, s, s] are the frame's previous logits
        (a click on a frame the object already has output on)."""
        mem = None if sel is None else bank.gather([sel])
        features = streams.frame(features, position)
        return step.track_step(self.model, features, mem, maskmem_pos, points=points,
                               prev_logits=prev,
                               fill_hole_area=self.cfg.fill_hole_area), 'eager'

    def mask_prompt(self, features: encoder.Features, mask: torch.Tensor,
                    position: int = 0) -> Tuple[step.StepOut, str]:
        """A mask prompt [1, 1, S, S] for one object on frame ``position`` of the features."""
        return step.mask_step(self.model, streams.frame(features, position), mask,
                              fill_hole_area=self.cfg.fill_hole_area), 'eager'


def cat_outputs(outs: List[step.StepOut]) -> step.StepOut:
    """Concatenate per-object outputs along the batch axis."""
    if len(outs) == 1:
        return outs[0]
    return step.StepOut(*(torch.cat(t) for t in zip(
        *((o.low_res_logits, o.obj_ptr, o.score, o.mem_feats) for o in outs))))

