"""The CUDA-graph runner: capture at start, then per frame copy in, replay, copy out.

Why: per-frame SAM 2 is launch-bound (on the order of a thousand small kernels per frame, the
GPU idle most of the wall time); replaying captured graphs removes the launch overhead. The
runner has the eager runner's interface (``eager.py``) and holds one for every step a graph
cannot take, so the tracker never knows which one it has.

* The image encoder (Hiera + FPN) is one graph over a static [N, 3, S, S] input, one frame
  per camera (N: the tracker's cameras with ``batch_streams``, else 1); its static outputs are
  the features every step of that frame reads (no copy); the prompt graphs read a copy
  (``kept_features.py``). With N > 1 camera c's frame-in graph writes row c, a camera without
  a frame in a step replays its last input (its latest features stay what they were), and the
  step and prompt graphs select each object's camera inside the graph.
* Track steps (``step_graphs.py``), prompted steps (``prompt_graphs.py``, a memory pool of
  their own), frame in and masks out (``io_graphs.py``) are graphs per shape bucket
  (``buckets.py``), captured through ``capture.Capturer``s.
* 'swap' mode: step graphs of batch 1, each object's memories gathered into the graph's static
  buffers; 'batched': objects of a bucket stacked on the batch axis, padded up to the next
  captured batch.
* ``precompile`` (``precompiled.py``): the encoder graph and the tracking steps' heads run
  inductor-fused functions loaded from disk; ``compile_mode``: ``torch.compile``d copies of
  sam2's modules. The eager fallback keeps the plain modules in both.
* Any capture error disables graphs (eager throughout); any replay error falls back to eager
  for that step; a failed I/O graph capture makes that I/O eager. Every fallback is reported
  with its reason to ``on_fallback`` (the tracker's stats).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ContextManager, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from sam2_ros.engine import clock_keeper, encoder, frame_in, step
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.cuda import buckets, precompiled
from sam2_ros.engine.cuda.buckets import IOKey, StepBucket, StepKey
from sam2_ros.engine.cuda.capture import CapturedGraph, Capturer
from sam2_ros.engine.cuda.io_graphs import GraphIO
from sam2_ros.engine.cuda.kept_features import KeptFeatures, no_hand_over
from sam2_ros.engine.cuda.kernels.fused import fused_copy
from sam2_ros.engine.cuda.prompt_graphs import PromptGraphs, capture_prompt_graphs
from sam2_ros.engine.cuda.step_graphs import StepGraphs
from sam2_ros.engine.eager import EagerRunner
from sam2_ros.engine.errors import failure_site
from sam2_ros.engine.memory import MemoryBank, Selection
from sam2_ros.engine.model import compiled_copy

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

log = logging.getLogger(__name__)


@dataclass
class Graphs:
    """Everything captured by ``GraphRunner.prepare``; the runner has none after a failed
    capture."""

    model: object                  # the model the graphs run (``GraphRunner.graph_model``)
    encoder: CapturedGraph         # [N, 3, S, S] images (one per camera) -> Features
    steps: StepGraphs
    prompts: PromptGraphs          # on ``kept``'s copy of the encoder's features
    io: GraphIO
    kept: KeptFeatures
    max_batch: int                 # objects per step replay, at most


class GraphRunner:
    """CUDA-graph runner; ``eager`` (an ``EagerRunner`` on the plain model) is its fallback.
    ``cameras``: the streams of the tracker; graphs take them as one batch when
    ``cfg.batch_streams``, else one camera's frame (several cameras then run eagerly)."""

    def __init__(self, model: SAM2Base, cfg: TrackerConfig, on_fallback: Callable[[str], None],
                 cameras: int = 1):
        self.model, self.cfg, self.on_fallback = model, cfg, on_fallback
        self.eager = EagerRunner(model, cfg)
        self.cameras = cameras if cfg.batch_streams else 1     # the encoder graph's batch
        self.capturer = Capturer()
        self.store = precompiled.Store(model, cfg) if cfg.precompile else None
        self.graphs: Optional[Graphs] = None          # set by a successful prepare
        self.out: Optional[step.StepOut] = None       # [rows, ...] per-frame step outputs
        if cfg.padded_graphs and not buckets.padded_graphs_on(cfg):
            log.warning('compile_mode=%s: padded_graphs off (frames after a prompt run '
                        'eagerly)', cfg.compile_mode)
        self.capture_s = 0.0
        # the last step with objects in several buckets: 'merged' (one padded replay) or
        # 'apart' (a replay per bucket; merge_step_buckets off or merge_pays said so); None
        self.last_merge: Optional[str] = None
        self.capture_phases: Dict[str, float] = {}
        self.encodes = 0        # encoder graph replays (which one ``kept`` holds)

    # ---- capture ---------------------------------------------------------------------
    def graph_models(self) -> Tuple[torch.nn.Module, torch.nn.Module]:
        """(the model the captured step and encoder graphs run, the one to capture instead if
        that fails); the one place they are built, the same object when nothing is fused.
        ``compile_mode``: a copy with ``torch.compile``d modules, sharing weights; the eager
        fallback keeps ``self.model``, so a fallback never compiles mid-stream. Else with
        ``fused_kernels``: a copy whose modules run our Triton kernels and read stored
        constants (``kernels/fused.py``), sharing weights, and sam2's modules as the second;
        the eager fallback keeps them."""
        plain = compiled_copy(self.model, self.cfg.compile_mode)
        return fused_copy(plain, self.cfg), plain

    def prepare(self, bank: MemoryBank, maskmem_pos: torch.Tensor,
                features: encoder.Features) -> None:
        """Capture every graph over ``bank`` (once, after the bank exists); any failure
        leaves no graphs, and every step runs eagerly."""
        t0 = last = time.perf_counter()

        def phase(name: str) -> None:
            """Add the seconds since the previous phase to capture_phases[name]."""
            nonlocal last
            torch.cuda.synchronize()
            now = time.perf_counter()
            self.capture_phases[name] = self.capture_phases.get(name, 0.0) + now - last
            last = now
        fused, plain = self.graph_models()
        try:
            self.graphs = self._capture(fused, bank, maskmem_pos, phase)
        except Exception as exc:  # noqa: BLE001 - any capture failure means eager
            if fused is plain:
                self.report(f'graph capture failed, eager throughout: {exc!r}')
            else:       # a fused kernel failed to build or run: graphs of sam2's modules
                self.capturer = Capturer()
                try:
                    self.graphs = self._capture(plain, bank, maskmem_pos, phase)
                    self.report(f'graph capture with fused kernels failed, captured sam2\'s '
                                f'modules instead: {exc!r} (at {failure_site(exc)})')
                except Exception as exc2:  # noqa: BLE001 - eager throughout
                    self.report(f'graph capture failed, eager throughout: {exc2!r} (with '
                                f'fused kernels: {exc!r})')
        if self.graphs is not None and self.cfg.io_resolution:
            self.graphs.io.prepare(*self.cfg.io_resolution)
        phase('io')                                 # (synchronizes)
        self.capture_s = time.perf_counter() - t0
        log.info('captured %d CUDA graphs in %.2f s (%s)', self.n_graphs(), self.capture_s,
                 ', '.join(f'{k} {v:.2f} s' for k, v in self.capture_phases.items()))

    def _capture(self, model, bank: MemoryBank, maskmem_pos: torch.Tensor,
                 phase: Callable[[str], None]) -> Graphs:
        cfg = self.cfg
        s = model.image_size
        image = torch.zeros(self.cameras, 3, s, s, device=bank.feats.device)
        fn = self.store.encoder(image) if self.store else None
        enc = self.capturer.capture(fn or (lambda x: encoder.encode_image(model, x)), image)
        phase('encoder')
        steps = StepGraphs(self.capturer, cfg, model, bank, maskmem_pos, enc.outputs,
                           self.store)
        steps.capture(buckets.step_keys(cfg, bank.capacity), phase)
        kept = KeptFeatures(enc, self.cameras)
        prompts = capture_prompt_graphs(cfg, model, self.model, bank, maskmem_pos,
                                        kept.feats, self.report)
        if cfg.prompt_graphs:
            phase('prompts')
        if cfg.steady_attention != 'sam2' and cfg.compile_mode is None:
            steps.choose_steady()
            phase('steady_choice')
        io = GraphIO(self.capturer, cfg, bank, enc.inputs, self.report)
        return Graphs(model, enc, steps, prompts, io, kept,
                      max(buckets.batch_sizes(cfg, bank.capacity)))

    def report(self, reason: str) -> None:
        """Tell ``on_fallback`` why something ran eagerly (the graph parts report through
        this, so replacing ``on_fallback`` reaches them too)."""
        self.on_fallback(reason)

    # ---- what was captured (for tests and tools) --------------------------------------
    @property
    def io(self) -> Dict[IOKey, CapturedGraph]:
        """The captured I/O graphs by key."""
        return self.graphs.io.graphs if self.graphs else {}

    @property
    def steps(self) -> Dict[StepKey, CapturedGraph]:
        """The graphs steady-state objects replay, by key."""
        return self.graphs.steps.exact if self.graphs else {}

    @property
    def padded_steps(self) -> Dict[StepKey, CapturedGraph]:
        return self.graphs.steps.padded if self.graphs else {}

    @property
    def steady_choice(self) -> Dict[StepKey, str]:
        """Buckets whose steady-state graph is not sam2's attention call, and what it is."""
        return self.graphs.steps.steady_choice if self.graphs else {}

    def n_graphs(self) -> int:
        g = self.graphs
        return 0 if g is None else len(g.steps) + len(g.prompts.graphs) + 1 + len(g.io.graphs)

    # ---- frame in, masks out ---------------------------------------------------------
    def encode_frame(self, frame: frame_in.Frame) -> encoder.Features:
        """A validated frame [H, W, 3] uint8 -> the encoder graph's Features: the frame-in
        graph writes its input where there is one, else the eager preprocessing."""
        if self.graphs is None or self.cameras > 1 or not self.graphs.io.load_frame(frame):
            return self.encode(frame_in.to_model_input(frame, self.model.image_size,
                                                       torch.device(self.cfg.device)))
        return self._replay_encoder()

    def encode_streams(self, frames: Sequence[Optional[frame_in.Frame]]
                       ) -> Tuple[encoder.Features, List[Optional[int]]]:
        """As ``EagerRunner.encode_streams``. One camera: ``encode_frame``. Graphs of as many
        cameras: each present frame into its camera's row of the encoder graph's input, one
        replay, its static outputs (camera c at position c). Otherwise (no graphs, or graphs of
        one camera with ``batch_streams`` off) the eager runner's batch; the graphs' buffers
        stay untouched, so the steps of such a frame run eagerly too (``track`` replays only
        on the encoder graph's features)."""
        if len(frames) == 1:
            return self.encode_frame(frames[0]), [0]
        g = self.graphs
        if g is None or len(frames) != self.cameras:
            return self.eager.encode_streams(frames)
        dev, size = torch.device(self.cfg.device), self.model.image_size
        for c, frame in enumerate(frames):
            if frame is not None and not g.io.load_frame(frame, c):
                g.encoder.inputs[c:c + 1].copy_(frame_in.to_model_input(frame, size, dev))
        return self._replay_encoder(), [None if f is None else c for c, f in enumerate(frames)]

    def encodes_in_place(self) -> bool:
        """True with graphs: encodes write the encoder graph's static outputs, which every
        camera's latest features are, so a failed one may leave them half-written."""
        return self.graphs is not None

    def keeps_features(self, features: encoder.Features) -> bool:
        """Prompts deferred on ``features`` run after the next encode: the encoder graph's
        (``deferred_beside_encoder``), ``keep_features`` before it, then ``beside_encoder``."""
        g = self.graphs
        return g is not None and self.cfg.deferred_beside_encoder and \
            features is g.encoder.outputs

    def keep_features(self) -> encoder.Features:    # the prompt graphs' copy of them now
        return self.graphs.kept.current(self.encodes)

    def beside_encoder(self) -> ContextManager[Callable[[torch.Tensor], None]]:
        """``KeptFeatures.beside``: the block's GPU work beside the encode."""
        return self.graphs.kept.beside() if self.graphs else contextlib.nullcontext(no_hand_over)

    def restore_features(self, position: int) -> None:
        self.graphs.kept.restore(position)      # the encode since keep_features, undone

    def encode_batch(self, image: torch.Tensor) -> encoder.Features:
        """image [n, 3, S, S] -> Features [HW_l, n, C_l], by the eager runner."""
        return self.eager.encode_batch(image)

    def encode(self, image: torch.Tensor) -> encoder.Features:
        """image [1, 3, S, S] -> Features (eagerly when the encoder graph is several
        cameras')."""
        if self.graphs is None or self.cameras > 1:
            return self.eager.encode(image)
        self.graphs.encoder.inputs.copy_(image)
        return self._replay_encoder()

    def _replay_encoder(self) -> encoder.Features:
        """Replay the encoder graph on its input, counted (``encodes``: which replay the
        prompt graphs' copy holds); its static outputs."""
        self.graphs.encoder.graph.replay()
        self.encodes += 1
        return self.graphs.encoder.outputs

    def results(self, logits: torch.Tensor, scores: torch.Tensor, h: int, w: int,
                ids: List[int], sync: bool = True) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As ``EagerRunner.results``, by the masks-out graph where there is one; sync=False:
        the copies are only queued (the caller synchronizes the stream before reading)."""
        out = None if self.graphs is None else self.graphs.io.results(logits, scores, h, w,
                                                                       ids, sync=sync)
        clock_keeper.frame_done(self.cfg.device)      # the frame's work is queued
        return self.eager.results(logits, scores, h, w, ids) if out is None else out

    # ---- steps -----------------------------------------------------------------------
    def track(self, features: encoder.Features, bank: MemoryBank, sels: List[Selection],
              maskmem_pos: torch.Tensor) -> Tuple[step.StepOut, List[str]]:
        """Steps for all objects; outputs (in the order of ``sels``) are copied out of the
        graphs into preallocated buffers, a few kernels per replay, not per object. When one
        replay runs every object, in order, its static outputs are the result (views of its
        first len(sels) rows, valid until that graph replays again): nothing is copied."""
        n = len(sels)
        out = self.out_rows(n, bank)
        modes = ['eager'] * len(sels)
        g = self.graphs if self.graphs and features is self.graphs.encoder.outputs else None
        groups: Dict[StepBucket, List[int]] = {}
        for i, sel in enumerate(sels):
            bucket = g.steps.bucket_of(sel) if g else None
            if bucket is None:
                self._put(out, [i], self._eager([sel], features, bank, maskmem_pos), bank)
            else:
                groups.setdefault(bucket, []).append(i)
        self.last_merge = None
        if len(groups) > 1:
            if self.cfg.merge_step_buckets:
                groups = g.steps.merged(groups, sels, g.max_batch)
            self.last_merge = 'merged' if len(groups) == 1 else 'apart'
        for bucket, idx in groups.items():
            for start in range(0, len(idx), g.max_batch):
                part = idx[start:start + g.max_batch]
                res, mode = self._replay(g.steps, bucket, [sels[i] for i in part], features,
                                         bank, maskmem_pos)
                if len(part) == n:          # the only replay, objects in order
                    out = step.StepOut(res.low_res_logits[:n], res.obj_ptr[:n], res.score[:n],
                                       res.mem_feats[:n])
                else:
                    self._put(out, part, res, bank)
                for i in part:
                    modes[i] = mode
        return out, modes

    def _replay(self, steps: StepGraphs, bucket: StepBucket, sels: List[Selection],
                features, bank, maskmem_pos) -> Tuple[step.StepOut, str]:
        """Replay the smallest graph of this bucket holding ``sels``: (outputs, mode)."""
        key = steps.graph_for(bucket, len(sels))
        if key is None:
            self.report(f'no graph for {len(sels)} objects with {bucket.cond} cond frames')
            return self._eager(sels, features, bank, maskmem_pos), 'eager'
        try:
            return steps.replay(bucket, key, sels), 'graph'
        except Exception as exc:  # noqa: BLE001 - the step is redone eagerly
            self.report(f'graph replay failed: {exc!r}')
            return self._eager(sels, features, bank, maskmem_pos), 'eager'

    def out_rows(self, n: int, bank: MemoryBank) -> step.StepOut:
        """Views of length n of the runner's output buffers (allocated on first use)."""
        if self.out is None or self.out.obj_ptr.shape[0] < n:
            rows = max(n, bank.capacity)
            self.out = step.StepOut(bank.logits.new_zeros(rows, *bank.logits.shape[1:]),
                                    bank.ptrs.new_zeros(rows, bank.ptrs.shape[-1]),
                                    bank.scores.new_zeros(rows, 1),     # float32, as stored
                                    bank.feats.new_zeros(rows, *bank.feats.shape[2:]))
        o = self.out
        return step.StepOut(o.low_res_logits[:n], o.obj_ptr[:n], o.score[:n], o.mem_feats[:n])

    @staticmethod
    def _put(out: step.StepOut, rows: List[int], res: step.StepOut, bank: MemoryBank) -> None:
        """Copy the first len(rows) outputs of ``res`` to ``rows`` of ``out``."""
        n = len(rows)
        pairs = ((out.low_res_logits, res.low_res_logits), (out.obj_ptr, res.obj_ptr),
                 (out.score, res.score), (out.mem_feats, res.mem_feats))
        if rows == list(range(rows[0], rows[0] + n)):
            for dst, src in pairs:
                dst[rows[0]:rows[0] + n].copy_(src[:n])
            return
        idx = bank.stage(rows)
        for dst, src in pairs:
            dst.index_copy_(0, idx, src[:n].to(dst.dtype))

    def _eager(self, sels, features, bank, maskmem_pos) -> step.StepOut:
        """The reference path (the eager runner's step) for objects a graph cannot take."""
        return self.eager.track(features, bank, sels, maskmem_pos)[0]

    def prompt(self, features: encoder.Features, bank: MemoryBank, sel: Optional[Selection],
               points: dict, prev: Optional[torch.Tensor], maskmem_pos: torch.Tensor,
               position: int = 0) -> Tuple[step.StepOut, str]:
        g = self.graphs
        features = self.prompt_features(features)
        cap = g.prompts.find(sel, points, prev, features) if g else None
        if cap is not None:
            try:
                return g.prompts.run(cap, sel, points, prev, position), 'graph'
            except Exception as exc:  # noqa: BLE001 - the prompt is redone eagerly
                self.report(f'prompt graph replay failed: {exc!r}')
        return self.eager.prompt(features, bank, sel, points, prev, maskmem_pos, position)

    def mask_prompt(self, features: encoder.Features, mask: torch.Tensor,
                    position: int = 0) -> Tuple[step.StepOut, str]:
        features = self.prompt_features(features)
        out = self.graphs.prompts.run_mask(features, mask, position) if self.graphs else None
        return self.eager.mask_prompt(features, mask, position) if out is None else \
            (out, 'graph')

    def prompt_features(self, features: encoder.Features) -> encoder.Features:
        """What a prompt on ``features`` reads: the prompt graphs' copy when they are the
        encoder graph's outputs (copied unless it holds them already), else ``features``."""
        g = self.graphs
        if g is None or features is not g.encoder.outputs:
            return features
        return g.kept.current(self.encodes)
