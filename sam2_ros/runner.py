"""How the per-frame steps are executed: eagerly, or by the CUDA-graph runner.

Both runners have the same interface, so the tracker never knows which one it has:
``prepare`` (once, after the bank exists), ``encode_frame`` (raw frame -> Features),
``track`` (Features + the bank rows each object reads -> StepOut for all objects, plus
'graph' or 'eager' per object) and ``results`` (logits -> masks, stats and the label mask on
the host).
The eager runner is the reference path and the off switch of the graph path
(``TrackerConfig.use_cuda_graphs=False``).
"""

from __future__ import annotations

from typing import Callable, List, Tuple

import numpy as np
import torch

from sam2_ros import postprocess, preprocess, step
from sam2_ros.bank import MemoryBank, Selection
from sam2_ros.config import TrackerConfig


class EagerRunner:
    """Runs ``step`` functions directly, one object at a time (as sam2 does)."""

    def __init__(self, model, cfg: TrackerConfig):
        self.model = model
        self.cfg = cfg

    def prepare(self, bank: MemoryBank, maskmem_pos: torch.Tensor,
                features: step.Features) -> None:
        """Nothing to capture."""

    def encode_frame(self, frame: preprocess.Frame) -> step.Features:
        """A validated frame [H, W, 3] uint8 -> the image encoder's Features."""
        return self.encode(preprocess.to_model_input(frame, self.model.image_size,
                                                     torch.device(self.cfg.device)))

    def encode(self, image: torch.Tensor) -> step.Features:
        return step.encode_image(self.model, image)

    def results(self, logits: torch.Tensor, scores: torch.Tensor, h: int, w: int,
                ids: List[int]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """logits [B, 1, s, s], scores [B], ids [B] -> masks [B, H, W] bool, stats [B, 8] and
        label [H, W] uint8 on the host (``postprocess.host_results``)."""
        return postprocess.host_results(logits, h, w, scores, ids)

    def track(self, features: step.Features, bank: MemoryBank, sels: List[Selection],
              maskmem_pos: torch.Tensor) -> Tuple[step.StepOut, List[str]]:
        outs = [step.track_step(self.model, features, bank.gather([s]), maskmem_pos)
                for s in sels]
        return cat_outputs(outs), ['eager'] * len(outs)


def cat_outputs(outs: List[step.StepOut]) -> step.StepOut:
    """Concatenate per-object outputs along the batch axis."""
    if len(outs) == 1:
        return outs[0]
    return step.StepOut(*(torch.cat(t) for t in zip(
        *((o.low_res_logits, o.obj_ptr, o.score, o.mem_feats) for o in outs))))


def make_runner(model, cfg: TrackerConfig, on_fallback: Callable[[str], None]):
    """The graph runner when enabled and on CUDA, else the eager runner."""
    if cfg.use_cuda_graphs and torch.device(cfg.device).type == 'cuda':
        from sam2_ros.graphs import GraphRunner
        return GraphRunner(model, cfg, on_fallback)
    return EagerRunner(model, cfg)
