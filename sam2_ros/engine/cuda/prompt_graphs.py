"""The prompted-step graphs: clicks, boxes and masks replay too.

Why: a prompt (a new object, a correction click) run eagerly costs several replayed steps, and
far more on its first occurrence (cuDNN builds an attention plan for each new memory length),
exactly when the user interacts. A prompted step's shape depends on what the prompt is, so
one graph is captured per kind and point count, batch 1 (``buckets.prompt_keys``): a new
object's first frame, with or without output on the frame; a correction, reading memories
padded to bucket c exactly as the padded track-step graphs do (``attention.py``); a
correction of the latest tracked frame starting from the conditioned features its track step
kept (``corrections_reuse_attention``: the same memories give the same memory attention, so
only the SAM heads with the click and the memory encoder run); a mask.

A prompt of another point count runs eagerly and is counted as a fallback with its reason.
Without padded graphs (``compile_mode`` set) corrections run eagerly. The graphs run the model
the track-step graphs run (``fused_kernels``: our kernels and stored constants, so a
correction costs what a tracking step of one object costs, not the ~1,000 kernels of sam2's
modules), except with ``compile_mode``: each prompt shape would then add a compile to
start-up, for steps that run a few times a minute, so they run sam2's plain modules. A fused
prompt capture that fails is redone on sam2's modules, the step graphs keeping the fused copy
(``GraphRunner``, reported).

Several cameras (the encoder graph's features [HW_l, N, C_l]): every prompt graph reads the
frame of one static camera index, written before each replay (``streams.select`` inside the
graph), so one graph per kind serves every camera.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, Optional

import torch

from sam2_ros.engine import encoder, step, streams
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.cuda import buckets
from sam2_ros.engine.cuda.buckets import (CorrectionKey, InitPromptKey, MaskPromptKey,
                                          MemoryCounts, PromptKey, ReusedCorrectionKey)
from sam2_ros.engine.cuda.capture import CapturedGraph, Capturer
from sam2_ros.engine.cuda.step_graphs import static_memory
from sam2_ros.engine.errors import failure_site
from sam2_ros.engine.memory import MemoryBank, Selection

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base


@dataclass
class PromptInputs:
    """Static inputs of one point/box prompt graph."""

    coords: torch.Tensor               # [1, P, 2] float, model pixels
    labels: torch.Tensor               # [1, P] int32
    prev: Optional[torch.Tensor]       # [1, 1, S/4, S/4] previous logits
    mem: Optional[step.Memory]         # padded memories of a correction
    pix: Optional[torch.Tensor] = None  # [1, C, h, w] kept conditioned features (reused)


class PromptGraphs:
    """Prompt graphs over one bank, on the encoder graph's features ``feats``, keyed by
    ``buckets.PromptKey``; ``on_fallback(reason)`` hears of prompts no graph fits."""

    def __init__(self, capturer: Capturer, cfg: TrackerConfig, model: SAM2Base,
                 bank: MemoryBank, maskmem_pos: torch.Tensor, feats: encoder.Features,
                 on_fallback: Callable[[str], None]):
        self.capturer, self.cfg, self.model, self.bank = capturer, cfg, model, bank
        self.maskmem_pos, self.feats, self.on_fallback = maskmem_pos, feats, on_fallback
        self.counts = MemoryCounts.of(model)
        self.padded_on = buckets.padded_graphs_on(cfg)
        self.graphs: Dict[PromptKey, CapturedGraph] = {}
        # [1] long: the prompted camera's frame of feats, with several cameras
        several = feats.vision_feats[-1].shape[1] > 1
        self.camera = torch.zeros(1, dtype=torch.long, device=bank.feats.device) \
            if several else None
        self.reused = 0     # corrections replayed from kept conditioned features

    def frame_feats(self) -> encoder.Features:
        """The prompted camera's features [HW_l, 1, C_l] (called inside the captured
        functions: with several cameras the selection by ``camera`` is part of the graph)."""
        return self.feats if self.camera is None else streams.select(self.feats, self.camera)

    def capture(self) -> None:
        for key in buckets.prompt_keys(self.cfg):
            if isinstance(key, ReusedCorrectionKey) and self.bank.conditioned is None:
                continue        # no track-step graph kept conditioned features
            self.graphs[key] = self.capture_prompt(key)

    def capture_prompt(self, key: PromptKey) -> CapturedGraph:
        b, fill = self.bank, self.cfg.fill_hole_area
        dev = b.feats.device
        if isinstance(key, MaskPromptKey):
            s = self.model.image_size
            return self.capturer.capture(
                lambda m: step.mask_step(self.model, self.frame_feats(), m,
                                         fill_hole_area=fill),
                torch.zeros(1, 1, s, s, device=dev))
        if isinstance(key, ReusedCorrectionKey):
            return self.capturer.capture(lambda x: step.prompted_heads(
                self.model, self.frame_feats(), x.pix,
                {'point_coords': x.coords, 'point_labels': x.labels}, x.prev,
                fill_hole_area=fill), PromptInputs(
                coords=torch.zeros(1, key.points, 2, device=dev),
                labels=torch.ones(1, key.points, dtype=torch.int32, device=dev),
                prev=b.logits.new_zeros(1, *b.logits.shape[1:]), mem=None,
                pix=b.conditioned[:1].clone()))
        if isinstance(key, InitPromptKey):
            has_prev, mem = key.has_prev, None
        else:
            has_prev, mem = True, static_memory(b, self.counts, 1, key.cond, padded=True)
        inputs = PromptInputs(
            coords=torch.zeros(1, key.points, 2, device=dev),
            labels=torch.ones(1, key.points, dtype=torch.int32, device=dev),
            prev=b.logits.new_zeros(1, *b.logits.shape[1:]) if has_prev else None, mem=mem)
        return self.capturer.capture(lambda x: step.track_step(
            self.model, self.frame_feats(), x.mem, self.maskmem_pos,
            points={'point_coords': x.coords, 'point_labels': x.labels},
            prev_logits=x.prev, fill_hole_area=fill,
            split_padded=self.cfg.padded_split_attention), inputs)

    def find(self, sel: Optional[Selection], points: dict, prev: Optional[torch.Tensor],
             features: encoder.Features) -> Optional[CapturedGraph]:
        """The graph for this point/box prompt, or None (eager; a fallback is reported when
        graphs could have run it but none fits)."""
        if not self.graphs or features is not self.feats:
            return None
        n_pts = points['point_coords'].shape[1]
        key: Optional[PromptKey]
        reused = self.graphs.get(ReusedCorrectionKey(n_pts))
        if sel is not None and prev is not None and reused is not None and \
                self.bank.holds_conditioned(sel):
            return reused
        if sel is None:
            key = InitPromptKey(n_pts, prev is not None)
        elif not self.padded_on:
            return None
        else:
            conds = [k.cond for k in self.graphs if isinstance(k, CorrectionKey)]
            c = self.counts.smallest_holding(sel.key, conds)
            key = None if c is None or prev is None else CorrectionKey(c, n_pts)
        cap = self.graphs.get(key)
        if cap is None:
            self.on_fallback(f'no prompt graph for {key or "this correction"} '
                             f'({n_pts} points; buckets {self.cfg.prompt_point_buckets})')
        return cap

    def run(self, cap: CapturedGraph, sel: Optional[Selection], points: dict,
            prev: Optional[torch.Tensor], position: int = 0) -> step.StepOut:
        """Copy the prompt (on frame ``position`` of the features) into the graph's static
        inputs and replay it."""
        self._set_camera(position)
        x = cap.inputs
        x.coords.copy_(points['point_coords'])
        x.labels.copy_(points['point_labels'])
        if x.prev is not None:
            x.prev.copy_(prev)
        if x.mem is not None:
            self.bank.gather([sel], out=x.mem)
        if x.pix is not None:
            x.pix.copy_(self.bank.conditioned[sel.slot:sel.slot + 1])
        cap.graph.replay()
        self.reused += x.pix is not None
        return cap.outputs

    def run_mask(self, features: encoder.Features, mask: torch.Tensor,
                 position: int = 0) -> Optional[step.StepOut]:
        """A mask prompt [1, 1, S, S] on frame ``position`` of the features by its graph;
        None when there is none (eager)."""
        cap = self.graphs.get(MaskPromptKey())
        if cap is None or features is not self.feats:
            return None
        self._set_camera(position)
        cap.inputs.copy_(mask)
        cap.graph.replay()
        return cap.outputs

    def _set_camera(self, position: int) -> None:
        """Which camera's frame the next replay reads (nothing to set with one camera)."""
        if self.camera is not None:
            self.camera.fill_(position)


def capture_prompt_graphs(cfg: TrackerConfig, model: SAM2Base, plain: SAM2Base,
                          bank: MemoryBank, maskmem_pos: torch.Tensor, feats: encoder.Features,
                          report: Callable[[str], None]) -> PromptGraphs:
    """The prompt graphs (captured unless ``cfg.prompt_graphs`` is off) on ``model``, the step
    graphs' (fused kernels, stored constants), unless compile_mode (the module docstring says
    why); if their capture fails with fused kernels, on sam2's modules (``plain``; reported).
    Their own memory pool: deferred ones run beside the encoder graph (``kept_features.py``)."""
    capturer = Capturer()
    first = plain if cfg.compile_mode is not None else model
    prompts = PromptGraphs(capturer, cfg, first, bank, maskmem_pos, feats, report)
    if not cfg.prompt_graphs:
        return prompts
    try:
        prompts.capture()
    except Exception as exc:  # noqa: BLE001 - sam2's modules for the prompts instead
        if first is plain:
            raise
        prompts = PromptGraphs(capturer, cfg, plain, bank, maskmem_pos, feats, report)
        prompts.capture()
        report(f'prompt graph capture with fused kernels failed, captured sam2\'s modules for '
               f'the prompts instead: {exc!r} (at {failure_site(exc)})')
    return prompts
