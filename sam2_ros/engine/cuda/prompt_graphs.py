"""The prompted-step CUDA graphs of the graph runner: clicks, boxes and masks replay too.

Why: a prompt (a new object, a correction click) ran eagerly, about 3-4x a replayed step and
far more on its first occurrence (cuDNN builds an attention plan for each new memory length),
exactly when the user interacts. A prompted step's shape depends on what the prompt is, so
one graph is captured per kind, batch 1:

* ('init', P, prev): an initial conditioning frame with P points (a box is 2 points), no
  memory; prev=True when the object already has output on this frame (sam2 then feeds those
  logits to the decoder with the points);
* ('corr', c, P): a correction with P points and the previous logits, reading memories
  padded to bucket c exactly as the tracking graphs do (``attention.py``);
* ('mask',): a mask prompt.

P runs over ``TrackerConfig.prompt_point_buckets``; a prompt of another point count runs
eagerly and is counted as a fallback with its reason. Without padded graphs (``compile_mode``
set) corrections run eagerly. ``PromptGraphs`` belongs to a ``GraphRunner`` (``cuda/runner.py``):
it captures with the runner's ``_capture`` (same memory pool) on the runner's encoder-graph
features, always with sam2's plain modules: with ``compile_mode`` each prompt shape would
otherwise add a compile to start-up, for steps that run a few times a minute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional

import torch

from sam2_ros.engine import step
from sam2_ros.engine.memory import MemoryBank, Selection

if TYPE_CHECKING:
    from sam2_ros.engine.cuda.runner import GraphRunner, _Captured


@dataclass
class PromptInputs:
    """Static inputs of one prompt graph."""

    coords: Optional[torch.Tensor]     # [1, P, 2] float, model pixels
    labels: Optional[torch.Tensor]     # [1, P] int32
    prev: Optional[torch.Tensor]       # [1, 1, S/4, S/4] previous logits
    mem: Optional[step.Memory]         # padded memories of a correction
    mask: Optional[torch.Tensor] = None    # [1, 1, S, S] mask prompt


class PromptGraphs:
    """Prompt graphs of one ``GraphRunner``, keyed as in the module docstring."""

    def __init__(self, runner: GraphRunner):
        self.runner = runner
        self.graphs: Dict[tuple, _Captured] = {}

    def keys(self) -> List[tuple]:
        """Every prompt graph captured at start-up."""
        r = self.runner
        pts = r.cfg.prompt_point_buckets
        keys: List[tuple] = [('init', p, prev) for p in pts for prev in (False, True)]
        if r.padded:
            conds = sorted({c for _, c in r.padded_steps})
            keys += [('corr', c, p) for c in conds for p in pts]
        return keys + [('mask',)]

    def capture(self) -> None:
        for key in self.keys():
            self.graphs[key] = self._capture(key)

    def _capture(self, key: tuple) -> _Captured:
        r, b = self.runner, self.runner.bank
        dev, feats = b.feats.device, r.encoder.outputs
        if key[0] == 'mask':
            s = r.model.image_size
            return r._capture(lambda m: step.mask_step(r.model, feats, m,
                                                       fill_hole_area=r.cfg.fill_hole_area),
                              torch.zeros(1, 1, s, s, device=dev))
        if key[0] == 'init':
            _, n_pts, has_prev = key
            mem = None
        else:
            _, c, n_pts = key
            has_prev, mem = True, r.step_memory(1, c, padded=True)
        inputs = PromptInputs(
            coords=torch.zeros(1, n_pts, 2, device=dev),
            labels=torch.ones(1, n_pts, dtype=torch.int32, device=dev),
            prev=b.logits.new_zeros(1, *b.logits.shape[1:]) if has_prev else None, mem=mem)
        return r._capture(lambda x: step.track_step(
            r.model, feats, x.mem, r.maskmem_pos,
            points={'point_coords': x.coords, 'point_labels': x.labels},
            prev_logits=x.prev, fill_hole_area=r.cfg.fill_hole_area), inputs)

    def find(self, sel: Optional[Selection], points: dict, prev: Optional[torch.Tensor],
             features) -> Optional[_Captured]:
        """The graph for this prompt, or None (eager; a fallback is reported when graphs
        could have run it but none fits)."""
        r = self.runner
        if not self.graphs or features is not r.encoder.outputs:
            return None
        n_pts = points['point_coords'].shape[1]
        if sel is None:
            key = ('init', n_pts, prev is not None)
        elif not r.padded:
            return None
        else:
            c = r.padded_bucket(sel)
            key = None if c is None or prev is None else ('corr', c, n_pts)
        cap = self.graphs.get(key)
        if cap is None:
            r.on_fallback(f'no prompt graph for {key or "this correction"} '
                          f'({n_pts} points; buckets {r.cfg.prompt_point_buckets})')
        return cap

    def run(self, cap: _Captured, bank: MemoryBank, sel: Optional[Selection], points: dict,
            prev: Optional[torch.Tensor]) -> step.StepOut:
        """Copy the prompt into the graph's static inputs and replay it."""
        x = cap.inputs
        x.coords.copy_(points['point_coords'])
        x.labels.copy_(points['point_labels'])
        if x.prev is not None:
            x.prev.copy_(prev)
        if x.mem is not None:
            bank.gather([sel], out=x.mem)
        cap.graph.replay()
        return cap.outputs
