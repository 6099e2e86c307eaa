"""The CUDA-graph runner: preallocate, warm up, capture, copy in, replay, copy out, fall back.

Per-frame SAM 2 at 512 px is launch-bound (about 1,200 small kernels per frame; the GPU is
busy for a fifth of the wall time). Replaying captured graphs removes the launch overhead.

* The image encoder (Hiera + FPN) is one graph over a static [1, 3, S, S] input; its static
  outputs are the features every step of that frame reads (no copy).
* The track step (memory attention, SAM heads, memory encoder, object-pointer temporal
  encoding) is captured per shape bucket. A bucket is the steady state of an object with c
  conditioning frames: c + 6 spatial memories and c + 15 pointers. Pointer distances are a
  device buffer written before each replay, so temporal distances stay true (no frozen
  frame index). An object in that steady state replays its exact bucket (sam2's own
  attention call). With ``padded_graphs`` (the default) each bucket also has a padded graph:
  an object with fewer memories (the 15 frames after a prompt or a correction) runs in the
  smallest one that holds it, its memories padded and flagged, and the memory attention
  attends only to the flagged ones (``attention.py``), so every tracking frame replays a
  graph. Without it such frames run eagerly. At steady state the padded graph (FlashAttention's
  variable-length kernel) and the exact one (cuDNN by default) differ in speed with model,
  resolution and batch (tiny@512: padded 4-9% slower); ``steady_attention='auto'`` times them
  and split-KV at capture and keeps the fastest per batch size.
* Prompted steps (a new object's box or clicks, a correction, a mask) replay graphs too, one
  per kind and point count (``cuda/prompt_graphs.py``).
* 'swap' mode: one graph per c with batch 1; each object's memories are gathered into the
  graph's static buffers (one index_select per tensor), the graph replays, outputs are
  copied out. 'batched' mode: graphs per (B, c); objects of the same c are stacked on the
  batch axis, padded up to the next captured B.
* Frame in and masks out are graphs too (``cuda/io_graphs.py``), captured on first use per source
  resolution (and per object-count bucket for the masks): the uint8 frame goes through a
  pinned staging buffer into a static device buffer, one replay resizes and normalizes it
  into the encoder's static input; one replay upsamples all objects' logits to source
  resolution, reduces box/area/centroid and builds the label mask, and pinned copies bring
  them to the host.
  They replace some 40 small kernel launches and two pageable copies per frame.
* ``precompile`` (``cuda/precompiled.py``): the encoder graph and the tracking steps' heads run
  inductor-fused functions compiled once and loaded from disk. ``compile_mode`` (off by
  default): the captured graphs run ``torch.compile``d copies of sam2's modules (minutes of
  compile at every start). The eager fallback keeps the plain modules in both.
* Any capture error disables graphs (eager throughout); any replay error falls back to eager
  for that step; a failed I/O graph capture makes that I/O eager. Every fallback is reported
  with its reason to the tracker's stats.
All graphs share one memory pool: they never run concurrently, so their intermediates can
share memory, while each graph's static outputs stay alive and are never reused.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from sam2_ros.engine import attention, encoder, frame_in, step
from sam2_ros.engine.cuda import precompiled
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.eager import EagerRunner
from sam2_ros.engine.cuda.io_graphs import GraphIO
from sam2_ros.engine.cuda.prompt_graphs import PromptGraphs
from sam2_ros.engine.memory import MemoryBank, Selection
from sam2_ros.engine.model import compiled_copy

log = logging.getLogger(__name__)
# Eager runs of a function before its capture (lazy initialisation: cuBLAS/cuDNN handles and
# plans, sam2's RoPE tables). One suffices (graphs equal eager on the GPU tests) and saved 1.5
# s of configure at tiny@512 against three (54 graphs; bench.startup --warmup-iters, H200).
WARMUP_ITERS = 1
AUTO_MARGIN = 0.05      # steady_attention='auto' takes flash only when this much faster


class _Captured:
    """One captured graph with its static inputs and outputs (and, for I/O graphs, pinned
    host buffers and the event of the last copy that read them)."""

    def __init__(self, graph: torch.cuda.CUDAGraph, inputs, outputs):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs
        self.host = None
        self.event: Optional[torch.cuda.Event] = None


class GraphRunner(EagerRunner):
    """CUDA-graph runner; subclasses the eager runner, which is its fallback."""

    def __init__(self, model, cfg: TrackerConfig, on_fallback: Callable[[str], None]):
        super().__init__(model, cfg)
        self.on_fallback = on_fallback
        self.enabled = True
        self.pool = None
        self.encoder: Optional[_Captured] = None
        # (batch, n_cond) -> graph: exact steady-state buckets, and padded ones (any object
        # whose memories fit; the frames after a prompt)
        self.steps: Dict[Tuple[int, int], _Captured] = {}
        self.padded_steps: Dict[Tuple[int, int], _Captured] = {}
        self.cuda = torch.device(cfg.device).type == 'cuda'
        self.store: Optional[precompiled.Store] = None       # precompiled parts, if any
        self.graph_io = GraphIO(self)           # frame-in and masks-out graphs
        self.prompts = PromptGraphs(self)       # prompted steps
        # inductor would re-trace the swapped attention module on every call: compiled
        # graphs keep sam2's attention and exact steady-state buckets
        self.padded = cfg.padded_graphs and cfg.compile_mode is None
        if cfg.padded_graphs and not self.padded:
            log.warning('compile_mode=%s: padded_graphs off (frames after a prompt run '
                        'eagerly)', cfg.compile_mode)
        self.capture_s = 0.0
        self.capture_phases: Dict[str, float] = {}
        self.steady_choice: Dict[Tuple[int, int], str] = {}   # buckets not on sam2's call

    # ---- capture ---------------------------------------------------------------------
    def prepare(self, bank: MemoryBank, maskmem_pos: torch.Tensor,
                features: encoder.Features) -> None:
        self.bank, self.maskmem_pos = bank, maskmem_pos
        t0 = last = time.perf_counter()

        def phase(name: str) -> None:
            """Add the seconds since the previous phase to capture_phases[name]."""
            nonlocal last
            torch.cuda.synchronize()
            now = time.perf_counter()
            self.capture_phases[name] = self.capture_phases.get(name, 0.0) + now - last
            last = now
        try:
            self.pool = torch.cuda.graph_pool_handle()
            self.cmodel = compiled_copy(self.model, self.cfg.compile_mode)
            if self.cfg.precompile:
                self.store = precompiled.Store(self.model, self.cfg)
            self.max_batch = max(self.batch_sizes())     # objects per replay, at most
            self._capture_encoder()
            phase('encoder')
            for key in self._bucket_keys():
                self.steps[key] = self._capture_step(*key, padded=False)
                phase('steps')
                if self.padded:
                    self.padded_steps[key] = self._capture_step(*key, padded=True)
                    phase('padded_steps')
            if self.cfg.prompt_graphs:
                self.prompts.capture()
                phase('prompts')
            if self.cfg.steady_attention != 'sam2' and self.cfg.compile_mode is None:
                self._choose_steady_graphs()
                phase('steady_choice')
        except Exception as exc:  # noqa: BLE001 - any capture failure means eager
            self.enabled = False
            self.steps.clear()
            self.padded_steps.clear()
            self.prompts.graphs.clear()
            self.encoder = None
            self.on_fallback(f'graph capture failed, eager throughout: {exc!r}')
        if self.enabled and self.cfg.io_resolution:
            self.graph_io.prepare(*self.cfg.io_resolution)
        phase('io')                                 # (synchronizes)
        self.capture_s = time.perf_counter() - t0
        log.info('captured %d CUDA graphs in %.2f s (%s)', self.n_graphs(), self.capture_s,
                 ', '.join(f'{k} {v:.2f} s' for k, v in self.capture_phases.items()))

    def _choose_steady_graphs(self) -> None:
        """Steady-state objects replay the exact bucket with sam2's attention call (cuDNN by
        default), the padded one with every slot valid (FlashAttention's variable-length
        kernel), or the exact bucket captured with split-KV memory attention
        (``attention.split_kv``). 'flash' / 'split' force one; 'auto' times the candidates of
        each batch size on its smallest conditioning bucket and leaves sam2's call only for
        one at least AUTO_MARGIN faster (kernel speed depends on model, resolution and batch;
        a near tie keeps sam2's). The choice holds for that batch size's other buckets, which
        differ from it by one spatial memory per conditioning frame: timing and capturing
        every candidate of every bucket took most of configure at large@1024."""
        mode = self.cfg.steady_attention
        choice_of_batch: Dict[int, str] = {}
        for key in sorted(self.steps):              # (batch, cond): smallest cond first
            batch = key[0]
            if mode == 'auto' and batch not in choice_of_batch:
                options = self._steady_options(key, ('flash', 'split'))
                times = {name: self._replay_s(cap) for name, cap in options.items()}
                best = min(times, key=times.get)
                choice = best if times[best] < (1 - AUTO_MARGIN) * times['sam2'] else 'sam2'
                choice_of_batch[batch] = choice
            else:
                wanted = choice_of_batch.get(batch, mode)
                options = self._steady_options(key, (wanted,))
                choice = wanted if wanted in options else 'sam2'
            self.steps[key] = options[choice]
            if choice != 'sam2':
                self.steady_choice[key] = choice
        log.info('steady-state attention per (batch, cond) bucket: %s', self.steady_choice)

    def _steady_options(self, key: Tuple[int, int], names) -> Dict[str, _Captured]:
        """sam2's exact graph of ``key`` and the candidates among ``names`` that exist:
        'flash' (the padded graph, when padded graphs are on), 'split' (captured now)."""
        options = {'sam2': self.steps[key]}
        if 'flash' in names and self.padded:
            options['flash'] = self.padded_steps[key]
        if 'split' in names:
            try:
                options['split'] = self._capture_step(*key, padded=False, split=True)
            except Exception as exc:  # noqa: BLE001 - sam2's call stays
                log.warning('split-KV capture of bucket %s failed: %r', key, exc)
        return options

    @staticmethod
    def _replay_s(cap: _Captured, n: int = 5) -> float:
        cap.graph.replay()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            cap.graph.replay()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n

    def _bucket_keys(self) -> List[Tuple[int, int]]:
        conds = self.cfg.graph_cond_buckets or tuple(range(1, self.cfg.max_cond_frames + 1))
        return [(b, c) for b in sorted(self.batch_sizes(), reverse=True) for c in conds]

    def batch_sizes(self) -> Tuple[int, ...]:
        """Step graphs' object batch sizes: 1 ('swap'), ``cfg.batch_buckets``, or by default
        the masks-out buckets (powers of two up to the capacity, and the capacity)."""
        if self.cfg.graph_mode == 'swap':
            return (1,)
        if self.cfg.batch_buckets:
            return tuple(sorted(set(self.cfg.batch_buckets)))
        return tuple(self.graph_io.out_buckets())

    def _capture(self, fn, inputs):
        """Warm up ``fn(inputs)`` on a side stream, then capture it into a graph."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_ITERS):
                fn(inputs)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            outputs = fn(inputs)
        return _Captured(graph, inputs, outputs)

    def _capture_encoder(self) -> None:
        s = self.model.image_size
        image = torch.zeros(1, 3, s, s, device=self.bank.feats.device)
        fn = self.store.encoder(image) if self.store else None
        self.encoder = self._capture(fn or (lambda x: encoder.encode_image(self.cmodel, x)),
                                     image)

    def _capture_step(self, batch: int, n_cond: int, padded: bool,
                      split: bool = False) -> _Captured:
        mem = self.step_memory(batch, n_cond, padded)
        feats = self.encoder.outputs

        def fn(m: step.Memory) -> step.StepOut:
            split_kv = attention.split_kv(self.cmodel) if split else contextlib.nullcontext()
            with split_kv:
                return step.track_step(self.cmodel, encoder.expand(feats, batch), m,
                                       self.maskmem_pos,
                                       fill_hole_area=self.cfg.fill_hole_area,
                                       heads=self._precompiled_heads if self.store else None,
                                       batch_major=self.cfg.batch_major_memory)
        return self._capture(fn, mem)

    def _precompiled_heads(self, pix_feat: torch.Tensor,
                           feats: encoder.Features) -> step.StepOut:
        """A tracking step's heads: the store's precompiled ones for this batch size (loaded or
        compiled on first use, the warm-up before a capture) where it has them."""
        heads = self.store.heads(pix_feat, self.encoder.outputs)
        if heads is None:
            return step.tracking_heads(self.cmodel, pix_feat, feats, self.cfg.fill_hole_area)
        return heads(pix_feat, self.encoder.outputs)

    def step_memory(self, batch: int, n_cond: int, padded: bool) -> step.Memory:
        """Static memory buffers of bucket n_cond for ``batch`` objects; padded buffers carry
        validity flags."""
        n_s, n_p = self._steady_key(n_cond)
        b = self.bank
        dev = b.feats.device
        # padded buckets flag which slots hold a memory (all do during capture)
        valid = (lambda n: torch.ones(n, batch, dtype=torch.bool, device=dev)) \
            if padded else (lambda n: None)
        mem = step.Memory(
            feats=b.feats.new_zeros(n_s, batch, *b.feats.shape[2:]),
            tpos_idx=torch.zeros(n_s, batch, dtype=torch.long, device=dev),
            ptrs=b.ptrs.new_zeros(n_p, batch, *b.ptrs.shape[2:]),
            ptr_dist=torch.ones(n_p, batch, device=dev),
            feat_valid=valid(n_s), ptr_valid=valid(n_p))
        return mem

    def _steady_key(self, n_cond: int) -> Tuple[int, int]:
        """(n_spatial, n_pointers) of an object with n_cond conditioning frames that has
        tracked long enough for every memory slot to be filled."""
        return (n_cond + self.model.num_maskmem - 1,
                n_cond + self.model.max_obj_ptrs_in_encoder - 1)

    # ---- frame in, masks out (cuda/io_graphs.py) ----------------------------------------------
    @property
    def io(self) -> Dict[tuple, _Captured]:
        """The captured I/O graphs: ('in', H, W) / ('out', batch, H, W) -> graph."""
        return self.graph_io.graphs

    def encode_frame(self, frame: frame_in.Frame) -> encoder.Features:
        if not self.graph_io.load_frame(frame):
            return super().encode_frame(frame)
        self.encoder.graph.replay()
        return self.encoder.outputs

    def results(self, logits: torch.Tensor, scores: torch.Tensor, h: int, w: int,
                ids: List[int]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        out = self.graph_io.results(logits, scores, h, w, ids)
        return super().results(logits, scores, h, w, ids) if out is None else out

    # ---- replay ----------------------------------------------------------------------
    def encode(self, image: torch.Tensor) -> encoder.Features:
        if self.encoder is None:
            return super().encode(image)
        self.encoder.inputs.copy_(image)
        self.encoder.graph.replay()
        return self.encoder.outputs

    def track(self, features: encoder.Features, bank: MemoryBank, sels: List[Selection],
              maskmem_pos: torch.Tensor) -> Tuple[step.StepOut, List[str]]:
        """Steps for all objects; outputs (in the order of ``sels``) are copied out of the
        graphs into preallocated buffers, a few kernels per replay, not per object."""
        out = self._out_buffers(len(sels))
        modes = ['eager'] * len(sels)
        groups: Dict[Tuple[bool, int], List[int]] = {}
        for i, sel in enumerate(sels):
            c = self.bucket_of(sel, features)
            if c is None:
                self._put(out, [i], self._eager([sel], features, bank, maskmem_pos))
            else:
                groups.setdefault(c, []).append(i)
        for c, idx in groups.items():
            for start in range(0, len(idx), self.max_batch):
                part = idx[start:start + self.max_batch]
                res, mode = self._replay(c, [sels[i] for i in part], features, bank,
                                         maskmem_pos)
                self._put(out, part, res)
                for i in part:
                    modes[i] = mode
        return out, modes

    def _out_buffers(self, n: int) -> step.StepOut:
        """Views of length n of the runner's preallocated output buffers."""
        if getattr(self, '_out', None) is None or self._out.obj_ptr.shape[0] < n:
            b = self.bank
            cap = max(n, b.capacity)
            self._out = step.StepOut(b.logits.new_zeros(cap, *b.logits.shape[1:]),
                                     b.ptrs.new_zeros(cap, b.ptrs.shape[-1]),
                                     b.ptrs.new_zeros(cap, 1),
                                     b.feats.new_zeros(cap, *b.feats.shape[2:]))
        o = self._out
        return step.StepOut(o.low_res_logits[:n], o.obj_ptr[:n], o.score[:n], o.mem_feats[:n])

    def _put(self, out: step.StepOut, rows: List[int], res: step.StepOut) -> None:
        """Copy the first len(rows) outputs of ``res`` to ``rows`` of ``out``."""
        n = len(rows)
        pairs = ((out.low_res_logits, res.low_res_logits), (out.obj_ptr, res.obj_ptr),
                 (out.score, res.score), (out.mem_feats, res.mem_feats))
        if rows == list(range(rows[0], rows[0] + n)):
            for dst, src in pairs:
                dst[rows[0]:rows[0] + n].copy_(src[:n])
            return
        idx = self.bank.stage(rows)
        for dst, src in pairs:
            dst.index_copy_(0, idx, src[:n].to(dst.dtype))

    def bucket_of(self, sel: Selection,
                  features: encoder.Features) -> Optional[Tuple[bool, int]]:
        """(padded, n_cond) of the graph that runs this object: the exact steady-state
        bucket of its conditioning-frame count when it is in that state (sam2's attention
        call, bitwise the eager step), else the smallest padded bucket its memories fit
        (the frames after a prompt); None: eager."""
        if not self.enabled or features is not self.encoder.outputs:
            return None
        n_cond = sum(1 for t in sel.tpos_idx if t == self.model.num_maskmem - 1)
        if sel.key == self._steady_key(n_cond) and any(c == n_cond for _, c in self.steps):
            return False, n_cond
        c = self.padded_bucket(sel)
        return None if c is None else (True, c)

    def padded_bucket(self, sel: Selection) -> Optional[int]:
        """The smallest padded bucket whose steady shape holds sel's memories."""
        fits = [c for _, c in self.padded_steps
                if all(n <= m for n, m in zip(sel.key, self._steady_key(c)))]
        return min(fits) if fits else None

    def _replay(self, bucket: Tuple[bool, int], sels: List[Selection], features, bank,
                maskmem_pos):
        """Replay the smallest graph of this bucket that holds ``sels`` (padded by repeating
        the last object; padding rows are ignored). Returns (outputs, mode)."""
        padded, n_cond = bucket
        graphs = self.padded_steps if padded else self.steps
        batch = next((b for b, c in sorted(graphs) if c == n_cond and b >= len(sels)), None)
        if batch is None:
            self.on_fallback(f'no graph for {len(sels)} objects with {n_cond} cond frames')
            return self._eager(sels, features, bank, maskmem_pos), 'eager'
        cap = graphs[(batch, n_cond)]
        try:
            bank.gather(sels + [sels[-1]] * (batch - len(sels)), out=cap.inputs)
            cap.graph.replay()
        except Exception as exc:  # noqa: BLE001 - the step is redone eagerly
            self.on_fallback(f'graph replay failed: {exc!r}')
            return self._eager(sels, features, bank, maskmem_pos), 'eager'
        return cap.outputs, 'graph'

    def n_graphs(self) -> int:
        return (len(self.steps) + len(self.padded_steps) + len(self.prompts.graphs) + 1
                + len(self.io))

    def prompt(self, features: encoder.Features, bank: MemoryBank, sel: Optional[Selection],
               points: dict, prev: Optional[torch.Tensor],
               maskmem_pos: torch.Tensor) -> Tuple[step.StepOut, str]:
        cap = self.prompts.find(sel, points, prev, features) if self.enabled else None
        if cap is not None:
            try:
                return self.prompts.run(cap, bank, sel, points, prev), 'graph'
            except Exception as exc:  # noqa: BLE001 - the prompt is redone eagerly
                self.on_fallback(f'prompt graph replay failed: {exc!r}')
        return super().prompt(features, bank, sel, points, prev, maskmem_pos)

    def mask_prompt(self, features: encoder.Features,
                    mask: torch.Tensor) -> Tuple[step.StepOut, str]:
        cap = self.prompts.graphs.get(('mask',))
        if cap is not None and self.enabled and features is self.encoder.outputs:
            cap.inputs.copy_(mask)
            cap.graph.replay()
            return cap.outputs, 'graph'
        return super().mask_prompt(features, mask)

    def _eager(self, sels, features, bank, maskmem_pos) -> step.StepOut:
        """The reference path (the eager runner's step) for objects a graph cannot take."""
        return EagerRunner.track(self, features, bank, sels, maskmem_pos)[0]
