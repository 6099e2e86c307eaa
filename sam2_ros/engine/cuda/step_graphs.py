"""The track-step graphs: exact and padded buckets, and which attention steady objects replay.

An object in its steady state (``buckets.MemoryCounts.steady``) replays the exact graph of
its bucket: sam2's own attention call, bitwise the eager step. With padded graphs an object
with fewer memories (the frames after a prompt or a correction) runs in the smallest padded
graph that holds it, its memories padded and flagged, and the memory attention attends only
to the flagged ones (``attention.py``), so every tracking frame replays a graph; without them
such frames run eagerly. Pointer distances are a device buffer written before each replay,
so temporal distances stay true (no frame index frozen into a graph).

At steady state the padded graph (FlashAttention's variable-length kernel), the exact one
(cuDNN by default) and an exact one with split-KV attention differ in speed with model,
resolution and batch, so ``steady_attention`` picks one per batch size ('auto': timed at
capture).

Several cameras (``feats`` of the encoder graph's N frames, [HW_l, N, C_l]): each graph also
takes a static ``Memory.stream_of`` [B], written with the objects' memories before each
replay, and selects each object's camera features inside the graph (``streams.select``); with
one camera the features are shared by a view (``encoder.expand``), as before.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from sam2_ros.engine import attention, encoder, step
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.cuda import buckets, precompiled
from sam2_ros.engine.cuda.buckets import MemoryCounts, StepBucket, StepKey
from sam2_ros.engine.cuda.capture import CapturedGraph, Capturer
from sam2_ros.engine.memory import MemoryBank, Selection, static_index

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

log = logging.getLogger(__name__)
AUTO_MARGIN = 0.05      # steady_attention='auto' leaves sam2's call only this much slower
# 'auto' times its candidates in this many interleaved rounds and keeps each one's best: a
# hiccup of a shared host during one candidate's timing does not decide the choice
AUTO_ROUNDS = 3
# merge_step_buckets keeps the objects' buckets apart only where their replays are this much
# faster than the merged one by configure's timings: each extra replay also gathers its
# objects' memories and copies its outputs out, host and copy work the timing does not see
MERGE_MARGIN = 0.15


def static_memory(bank: MemoryBank, counts: MemoryCounts, batch: int, n_cond: int,
                  padded: bool, streams: bool = False) -> step.Memory:
    """Static memory buffers of bucket n_cond for ``batch`` objects; padded buffers carry
    validity flags (all set: during capture every slot holds a memory); ``streams``: a
    stream_of buffer (each object's camera, 0 during capture)."""
    n_s, n_p = counts.steady(n_cond)
    # the tables the gather writes are views of one int64 block (memory.static_index)
    block, views = static_index(n_s, n_p, batch, bank.feats.device)
    if not padded:
        views['feat_valid'] = views['ptr_valid'] = None
    if not streams:
        views['stream_of'] = None
    return step.Memory(feats=bank.feats.new_zeros(n_s, batch, *bank.feats.shape[2:]),
                       ptrs=bank.ptrs.new_zeros(n_p, batch, *bank.ptrs.shape[2:]),
                       index=block, **views)


class StepGraphs:
    """Track-step graphs over one bank, on the encoder graph's features ``feats``: ``exact``
    and ``padded`` per ``StepKey``, and ``steady_choice``, the buckets whose exact entry is
    not sam2's call ('flash': the padded graph, 'split': split-KV). ``feats`` hold one frame
    per camera, [HW_l, cameras, C_l]."""

    def __init__(self, capturer: Capturer, cfg: TrackerConfig, model: SAM2Base,
                 bank: MemoryBank, maskmem_pos: torch.Tensor, feats: encoder.Features,
                 store: Optional[precompiled.Store]):
        self.capturer, self.cfg, self.model, self.bank = capturer, cfg, model, bank
        self.maskmem_pos, self.feats, self.store = maskmem_pos, feats, store
        self.cameras = feats.vision_feats[-1].shape[1]
        self.counts = MemoryCounts.of(model)
        self.padded_on = buckets.padded_graphs_on(cfg)
        self.exact: Dict[StepKey, CapturedGraph] = {}
        self.padded: Dict[StepKey, CapturedGraph] = {}
        self.steady_choice: Dict[StepKey, str] = {}
        # seconds per replay by (padded, batch), timed at configure ('auto'), which
        # ``merge_pays`` compares; empty: not timed
        self.replay_times: Dict[Tuple[bool, int], float] = {}
        # 'auto': every candidate's seconds per replay by batch size (the benchmarks report
        # what configure chose from)
        self.candidate_times: Dict[int, Dict[str, float]] = {}
        # keep each object's conditioned features for a correction's reused graph (none
        # without prompt graphs: corrections then run eagerly and re-run attention)
        self.keep = cfg.corrections_reuse_attention and cfg.prompt_graphs

    # ---- capture ---------------------------------------------------------------------
    def capture(self, keys: Sequence[StepKey], phase: Callable[[str], None]) -> None:
        """The exact graph of every key, and its padded one when padded graphs are on;
        ``phase(name)`` after each (the runner's capture timing)."""
        for key in keys:
            self.exact[key] = self.capture_step(key, padded=False)
            phase('steps')
            if self.padded_on:
                self.padded[key] = self.capture_step(key, padded=True)
                phase('padded_steps')

    def capture_step(self, key: StepKey, padded: bool, split: bool = False) -> CapturedGraph:
        several = self.cameras > 1
        mem = static_memory(self.bank, self.counts, key.batch, key.cond, padded, several)
        heads = self._heads if self.store else None
        # several cameras: track_step selects each object's frame by m.stream_of
        feats = self.feats if several else encoder.expand(self.feats, key.batch)

        def fn(m: step.Memory) -> step.StepOut:
            split_kv = attention.split_kv(self.model) if split else contextlib.nullcontext()
            with split_kv:
                out = step.track_step(self.model, feats, m,
                                      self.maskmem_pos,
                                      fill_hole_area=self.cfg.fill_hole_area, heads=heads,
                                      batch_major=self.cfg.batch_major_memory,
                                      split_padded=self.cfg.padded_split_attention)
            if self.keep:                               # into the bank's rows, in the graph
                self.bank.keep_conditioned(m.slot_of, out.pix_feat)
            # not a static output: every graph's outputs stay allocated (capture.py)
            out.pix_feat = None
            return out
        return self.capturer.capture(fn, mem)

    def _heads(self, pix_feat: torch.Tensor, feats: encoder.Features) -> step.StepOut:
        """A tracking step's heads: the store's precompiled ones for this batch size (loaded or
        compiled on first use, the warm-up before a capture) where it has them. They take the
        frame's features (batch 1) with one camera, each object's selected ones with several."""
        frame = feats if self.cameras > 1 else self.feats
        heads = self.store.heads(pix_feat, frame)
        if heads is None:
            return step.tracking_heads(self.model, pix_feat, feats, self.cfg.fill_hole_area)
        return heads(pix_feat, frame)

    def choose_steady(self) -> None:
        """Steady-state objects replay the exact bucket with sam2's attention call, the padded
        one with every slot valid, or the exact bucket captured with split-KV memory attention
        (``attention.split_kv``). 'flash' / 'split' force one; 'auto' times the candidates of
        each batch size on its smallest conditioning bucket and leaves sam2's call only for
        one at least AUTO_MARGIN faster (kernel speed depends on model, resolution and batch;
        a near tie keeps sam2's). The choice holds for that batch size's other buckets, which
        differ from it by one spatial memory per conditioning frame: timing and capturing
        every candidate of every bucket would dominate configure of the large models."""
        mode = self.cfg.steady_attention
        choice_of_batch: Dict[int, str] = {}
        for key in sorted(self.exact):              # smallest cond first within a batch
            if mode == 'auto' and key.batch not in choice_of_batch:
                options = self._steady_options(key, ('flash', 'split'))
                times = best_of(options, AUTO_ROUNDS)
                self.candidate_times[key.batch] = times
                best = min(times, key=times.get)
                choice = best if times[best] < (1 - AUTO_MARGIN) * times['sam2'] else 'sam2'
                choice_of_batch[key.batch] = choice
                self.replay_times[(False, key.batch)] = times[choice]
                if 'flash' in times:
                    self.replay_times[(True, key.batch)] = times['flash']
            else:
                wanted = choice_of_batch.get(key.batch, mode)
                options = self._steady_options(key, (wanted,))
                choice = wanted if wanted in options else 'sam2'
            self.exact[key] = options[choice]
            if choice != 'sam2':
                self.steady_choice[key] = choice
        log.info('steady-state attention per (batch, cond) bucket: %s', self.steady_choice)
        if self.replay_times:
            log.info('step replay ms per (padded, batch): %s', {
                k: round(v * 1e3, 3) for k, v in sorted(self.replay_times.items())})

    def _steady_options(self, key: StepKey, names: Sequence[str]) -> Dict[str, CapturedGraph]:
        """sam2's exact graph of ``key`` and the candidates among ``names`` that exist:
        'flash' (the padded graph, when padded graphs are on), 'split' (captured now)."""
        options = {'sam2': self.exact[key]}
        if 'flash' in names and self.padded_on:
            options['flash'] = self.padded[key]
        if 'split' in names:
            try:
                options['split'] = self.capture_step(key, padded=False, split=True)
            except Exception as exc:  # noqa: BLE001 - sam2's call stays
                log.warning('split-KV capture of bucket %s failed: %r', key, exc)
        return options

    # ---- replay ----------------------------------------------------------------------
    def bucket_of(self, sel: Selection) -> Optional[StepBucket]:
        """The graphs that run this object: the exact steady-state bucket of its
        conditioning-frame count when it is in that state (sam2's attention call, bitwise the
        eager step), else the smallest padded bucket its memories fit (the frames after a
        prompt); None: eager."""
        n_cond = self.counts.n_cond(sel.tpos_idx)
        if sel.key == self.counts.steady(n_cond) and any(k.cond == n_cond for k in self.exact):
            return StepBucket(False, n_cond)
        c = self.counts.smallest_holding(sel.key, [k.cond for k in self.padded])
        return None if c is None else StepBucket(True, c)

    def one_bucket(self, sels: Sequence[Selection]) -> Optional[StepBucket]:
        """The smallest padded bucket that holds every object of ``sels`` (one replay for
        objects of different buckets, ``merge_step_buckets``), or None: no padded graphs, or
        none holds them all."""
        if not self.padded:
            return None
        widest = tuple(max(n) for n in zip(*(sel.key for sel in sels)))
        c = self.counts.smallest_holding(widest, [k.cond for k in self.padded])
        return None if c is None else StepBucket(True, c)

    def merged(self, groups: Dict[StepBucket, List[int]], sels: Sequence[Selection],
               max_batch: int) -> Dict[StepBucket, List[int]]:
        """The objects of several buckets ({bucket: indices into sels}) as one group of the
        padded bucket holding them all (``merge_step_buckets``), in their order; ``groups``
        when none holds them all or ``merge_pays`` says the replays per bucket are faster."""
        idx = sorted(i for part in groups.values() for i in part)
        bucket = self.one_bucket([sels[i] for i in idx])
        if bucket is None or not self.merge_pays(
                {b: len(part) for b, part in groups.items()}, bucket, max_batch):
            return groups
        return {bucket: idx}

    def merge_pays(self, apart: Dict[StepBucket, int], merged: StepBucket,
                   max_batch: int) -> bool:
        """Whether one replay of the ``merged`` padded bucket for all objects (per chunk of
        max_batch) is expected to cost no more than a replay per bucket of ``apart`` ({bucket:
        objects}), by the replay times of configure, the replays apart being MERGE_MARGIN
        faster at least to be kept apart. Those are one timing per batch size and
        kind (the buckets of a batch size differ by a spatial memory per conditioning frame),
        so a merge is judged by what its graph costs, not by the replays it saves: merging a
        few objects saves a replay's fixed cost, merging many can raise the batch bucket and
        pads every object's memories to the widest (two cameras of three objects, one of
        them corrected: a padded graph of 8 rows instead of exact graphs of 4 and 2).
        True where a time is missing (not timed: the merge is the default)."""
        def cost(bucket: StepBucket, n: int) -> Optional[float]:
            total = 0.0
            for start in range(0, n, max_batch):
                key = self.graph_for(bucket, min(max_batch, n - start))
                t = None if key is None else self.replay_times.get((bucket.padded, key.batch))
                if t is None:
                    return None
                total += t
            return total
        costs = [cost(b, n) for b, n in apart.items()]
        merged_cost = cost(merged, sum(apart.values()))
        if merged_cost is None or any(c is None for c in costs):
            return True
        return sum(costs) >= (1 - MERGE_MARGIN) * merged_cost

    def graph_for(self, bucket: StepBucket, n: int) -> Optional[StepKey]:
        """The key of the smallest graph of ``bucket`` that holds n objects, or None."""
        graphs = self.padded if bucket.padded else self.exact
        batch = buckets.smallest_batch([k.batch for k in graphs if k.cond == bucket.cond], n)
        return None if batch is None else StepKey(batch, bucket.cond)

    def replay(self, bucket: StepBucket, key: StepKey, sels: List[Selection]) -> step.StepOut:
        """Gather ``sels`` into the static memory of graph ``key`` (padded up to its batch by
        repeating the last object; padding rows are ignored), replay; its static outputs. The
        replay kept each object's conditioned features in the bank (``corrections_reuse_
        attention``): a correction of this frame starts from them."""
        cap = (self.padded if bucket.padded else self.exact)[key]
        self.bank.gather(sels + [sels[-1]] * (key.batch - len(sels)), out=cap.inputs)
        cap.graph.replay()
        if self.keep:
            self.bank.mark_conditioned(sels)
        return cap.outputs

    def __len__(self) -> int:
        return len(self.exact) + len(self.padded)


def best_of(options: Dict[str, CapturedGraph], rounds: int) -> Dict[str, float]:
    """Each candidate's seconds per replay: the least of ``rounds`` timings of 3 replays,
    the candidates timed in turn within each round (about twice one 5-replay timing's
    configure time)."""
    times = {name: float('inf') for name in options}
    for _ in range(rounds):
        for name, cap in options.items():
            times[name] = min(times[name], replay_s(cap, n=3))
    return times


def replay_s(cap: CapturedGraph, n: int = 5) -> float:
    """Seconds per replay of ``cap``, after one untimed replay."""
    cap.graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        cap.graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n
