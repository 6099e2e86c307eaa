"""Per-object memory of the streaming tracker, preallocated with fixed capacities.

SAM 2 reads, for an object on frame f (sam2_base ``_prepare_memory_conditioned_features``):
  * the spatial memory and object pointer of every conditioning (prompted) frame,
  * spatial memories of the non-conditioning frames f-1 .. f-(num_maskmem-1),
  * object pointers of the non-conditioning frames f-1 .. f-(max_obj_ptrs-1).
The official predictor keeps every frame forever; this bank keeps exactly what can still be
read, in rings indexed by frame number, plus one slot so the latest frame can be re-run with a
correction click. Memory is therefore flat however long the stream runs.

Corrections read the memories as they were when their frame was tracked: sam2 keeps a click's
output apart (``temp_output_dict``) until the next propagation, so a second click on the same
frame never reads the first one's memory. Here a correction writes its rows at once (the next
frame reads them); ``corrected_frame`` marks the frame whose conditioning row corrections
rewrote, and a snapshot row per object (the last of each slot) keeps that row as it was
tracked, where it existed (an object started on that frame by a queued prompt).

Conditioning frames are capped at ``max_cond_frames``: the first prompt frame is kept, and a
new one beyond the cap evicts the oldest later one.

Tensors live on the model device; frame numbers are host-side numpy bookkeeping (they decide
*which* memories a step reads, and never enter a step themselves except as distances).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from sam2_ros.engine.step import Memory
from sam2_ros.engine.staging import IndexStager

EMPTY = -1


@dataclass
class Selection:
    """Which bank rows one object's step reads on one frame, in sam2's order."""

    feat_rows: List[int]     # rows of the flat feature pool
    tpos_idx: List[int]      # maskmem_tpos_enc index of each spatial memory
    ptr_rows: List[int]      # rows of the flat pointer pool
    ptr_dist: List[int]      # signed temporal distance of each pointer
    stream: int = 0          # which frame of the step's features the object reads (its camera's)
    slot: int = 0            # the object's bank slot, and the frame it is selected for
    frame: int = EMPTY

    @property
    def key(self) -> Tuple[int, int]:
        """(n_spatial, n_pointers): the shape bucket of this step."""
        return len(self.feat_rows), len(self.ptr_rows)


def index_sizes(n_s: int, n_p: int, batch: int) -> List[int]:
    """Lengths of the tables ``MemoryBank.gather`` stages, in order: feature rows, pointer
    rows, pointer distances, tpos indices ([n, B] each, memory-major), the validity flags of
    spatial memories and pointers, each object's stream [B] and bank slot [B]."""
    return [n_s * batch, n_p * batch, n_p * batch, n_s * batch, n_s * batch, n_p * batch,
            batch, batch]


def static_index(n_s: int, n_p: int, batch: int,
                 device: torch.device) -> Tuple[torch.Tensor, dict]:
    """A graph's index block ([sum(index_sizes)] int64, set as during capture: distances 1,
    every slot valid) and its views as ``Memory`` fields (tpos_idx, ptr_dist, feat_valid,
    ptr_valid: [n, B]; stream_of, slot_of: [B])."""
    sizes = index_sizes(n_s, n_p, batch)
    block = torch.zeros(sum(sizes), dtype=torch.long, device=device)
    _, _, dist, tpos, fv, pv, stream, slot = block.split(sizes)
    for t in (dist, fv, pv):
        t.fill_(1)
    return block, dict(tpos_idx=tpos.view(n_s, batch), ptr_dist=dist.view(n_p, batch),
                       feat_valid=fv.view(n_s, batch), ptr_valid=pv.view(n_p, batch),
                       stream_of=stream, slot_of=slot)


def _table(columns: List[List[int]], n: int, pad: int) -> np.ndarray:
    """[n * B] int64: the [n, B] table whose column b holds ``columns[b]`` then ``pad``,
    flattened memory-major (row i holds memory i of every object)."""
    out = np.full((n, len(columns)), pad, np.int64)
    for b, values in enumerate(columns):
        out[:len(values), b] = values
    return out.ravel()


@dataclass
class MemoryBank:
    """Fixed-capacity memory for up to ``capacity`` objects (object slots 0..capacity-1).

    Row layout per object slot: conditioning rows [0, K), then ring rows.
    feats: [O, K + R, Cm, h, w] (bf16);  ptrs: [O, K + P, C];  logits: [O, 1, S/4, S/4].

    conditioned: [O, C, h, w], each object's memory-conditioned features (memory attention's
    output) of its latest tracking step, written inside the track-step graphs
    (``keep_conditioned``; allocated by the first, with that output's dtype), and
    conditioned_frame [O] the frame they are of, EMPTY once the object's memories changed: a
    correction on that frame reads the same memories (every correction of it: they read the
    memories as tracked), so it can start from them
    (``TrackerConfig.corrections_reuse_attention``).
    """

    feats: torch.Tensor
    ptrs: torch.Tensor
    logits: torch.Tensor
    cond_frame: np.ndarray   # [O, K] frame of each conditioning row, EMPTY if free
    cond_age: np.ndarray     # [O, K] insertion counter (sam2 keeps insertion order)
    ring_frame: np.ndarray   # [O, R] frame held in each spatial ring row
    ptr_frame: np.ndarray    # [O, P] frame held in each pointer ring row
    scores: torch.Tensor     # [O] latest object score logit of each object (fp32)
    num_maskmem: int
    max_ptrs: int
    stage: IndexStager
    conditioned_frame: np.ndarray
    corrected_frame: np.ndarray   # [O] frame whose conditioning row corrections rewrote
    snap_frame: np.ndarray        # [O] frame of the snapshot row's tracked state, EMPTY if none
    conditioned: Optional[torch.Tensor] = None
    _counter: int = 0

    @classmethod
    def allocate(cls, capacity: int, max_cond: int, num_maskmem: int, max_ptrs: int,
                 feat_like: torch.Tensor, ptr_like: torch.Tensor,
                 logits_like: torch.Tensor) -> 'MemoryBank':
        """feat_like [Cm, h, w], ptr_like [C], logits_like [1, S/4, S/4] give shape/dtype.

        Ring sizes are num_maskmem (7) and max_ptrs (16): one more than a step reads, so the
        latest frame's own entry survives while frames f-1.. are read to re-run frame f. The
        last row of each slot is the snapshot row (module docstring).
        """
        ring, pring = num_maskmem, max_ptrs
        dev = feat_like.device
        return cls(
            feats=feat_like.new_zeros(capacity, max_cond + ring + 1, *feat_like.shape),
            ptrs=ptr_like.new_zeros(capacity, max_cond + pring + 1, *ptr_like.shape),
            logits=logits_like.new_zeros(capacity, *logits_like.shape).to(dev),
            cond_frame=np.full((capacity, max_cond), EMPTY, np.int64),
            cond_age=np.zeros((capacity, max_cond), np.int64),
            ring_frame=np.full((capacity, ring), EMPTY, np.int64),
            ptr_frame=np.full((capacity, pring), EMPTY, np.int64),
            scores=torch.zeros(capacity, device=dev),
            num_maskmem=num_maskmem, max_ptrs=max_ptrs, stage=IndexStager(dev),
            conditioned_frame=np.full(capacity, EMPTY, np.int64),
            corrected_frame=np.full(capacity, EMPTY, np.int64),
            snap_frame=np.full(capacity, EMPTY, np.int64))

    # ---- geometry --------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.feats.shape[0]

    @property
    def max_cond(self) -> int:
        return self.cond_frame.shape[1]

    def _feat_row(self, slot: int, row: int) -> int:
        return slot * self.feats.shape[1] + row

    def _ptr_row(self, slot: int, row: int) -> int:
        return slot * self.ptrs.shape[1] + row

    # ---- bookkeeping -----------------------------------------------------------------
    def clear(self, slot: int) -> None:
        """Forget an object (removal or reset). Tensors are left as they are: rows are only
        read when their frame bookkeeping says they hold something."""
        self.cond_frame[slot] = EMPTY
        self.ring_frame[slot] = EMPTY
        self.ptr_frame[slot] = EMPTY
        self.conditioned_frame[slot] = EMPTY
        self.corrected_frame[slot] = EMPTY
        self.snap_frame[slot] = EMPTY

    # ---- memory-conditioned features of the latest tracking step ------------------------
    def keep_conditioned(self, slots: torch.Tensor, pix_feat: torch.Tensor) -> None:
        """Store pix_feat [B, C, h, w] as the conditioned features of ``slots`` [B] (device
        indices; inside a track-step graph, so no host work). A padding row repeats an
        object with its inputs, so a repeated slot gets the same values."""
        if self.conditioned is None:
            self.conditioned = pix_feat.new_zeros(self.capacity, *pix_feat.shape[1:])
        self.conditioned.index_copy_(0, slots, pix_feat.to(self.conditioned.dtype))

    def mark_conditioned(self, sels: Sequence['Selection']) -> None:
        """The objects of ``sels`` have their conditioned features of ``sel.frame`` stored
        (after the replay that kept them)."""
        for sel in sels:
            self.conditioned_frame[sel.slot] = sel.frame

    def holds_conditioned(self, sel: 'Selection') -> bool:
        """Whether the stored conditioned features are those a step with ``sel`` computes:
        of its frame, and no memory of the object written since but that frame's corrections
        (``write``, ``clear``)."""
        return self.conditioned is not None and sel.frame != EMPTY and \
            self.conditioned_frame[sel.slot] == sel.frame

    def cond_frames(self, slot: int) -> List[int]:
        rows = self._cond_rows(slot)
        return [int(self.cond_frame[slot, r]) for r in rows]

    def _cond_rows(self, slot: int) -> List[int]:
        """Occupied conditioning rows in insertion order (as sam2's dict iterates)."""
        rows = np.flatnonzero(self.cond_frame[slot] != EMPTY)
        return sorted(rows.tolist(), key=lambda r: self.cond_age[slot, r])

    def select(self, slot: int, frame: int) -> Selection:
        """The memories SAM 2 reads for this object on ``frame`` (see module docstring)."""
        k = self.max_cond
        cond = self._cond_as_tracked(slot, frame)         # (frame, feat row, ptr row)
        feat_rows = [f_row for _, f_row, _ in cond]
        tpos = [self.num_maskmem - 1] * len(cond)
        ring = self.ring_frame.shape[1]
        for t_rel in range(self.num_maskmem - 1, 0, -1):     # oldest first, as sam2
            t = frame - t_rel
            if t >= 0 and self.ring_frame[slot, t % ring] == t:
                feat_rows.append(self._feat_row(slot, k + t % ring))
                tpos.append(t_rel - 1)
        ptr_rows, dist = [], []
        for t, _, p_row in cond:                              # pointers only from the past
            if t <= frame:
                ptr_rows.append(p_row)
                dist.append(frame - t)
        pring = self.ptr_frame.shape[1]
        for t_diff in range(1, self.max_ptrs):
            t = frame - t_diff
            if t < 0:
                break
            if self.ptr_frame[slot, t % pring] == t:
                ptr_rows.append(self._ptr_row(slot, k + t % pring))
                dist.append(t_diff)
        return Selection(feat_rows, tpos, ptr_rows, dist, slot=slot, frame=frame)

    def _cond_as_tracked(self, slot: int, frame: int) -> List[Tuple[int, int, int]]:
        """(frame, feature row, pointer row) of each conditioning memory in sam2's order, as
        it was when ``frame`` was tracked: a row corrections of ``frame`` wrote is left out,
        or read from the snapshot where the row existed then."""
        own = self.corrected_frame[slot] == frame
        out = []
        for r in self._cond_rows(slot):
            t = int(self.cond_frame[slot, r])
            if own and t == frame:
                if self.snap_frame[slot] == frame:
                    out.append((t, self._feat_row(slot, self.feats.shape[1] - 1),
                                self._ptr_row(slot, self.ptrs.shape[1] - 1)))
                continue
            out.append((t, self._feat_row(slot, r), self._ptr_row(slot, r)))
        return out

    def _keep_tracked(self, slot: int, frame: int) -> None:
        """Before the first correction of ``frame`` writes: its conditioning row as tracked
        (if any) to the snapshot row."""
        if self.corrected_frame[slot] == frame:
            return
        self.corrected_frame[slot] = frame
        hit = np.flatnonzero(self.cond_frame[slot] == frame)
        self.snap_frame[slot] = frame if hit.size else EMPTY
        if hit.size:
            self.feats[slot, -1].copy_(self.feats[slot, int(hit[0])])
            self.ptrs[slot, -1].copy_(self.ptrs[slot, int(hit[0])])

    def gather(self, sels: List[Selection], out: Optional[Memory] = None,
               streams: bool = False) -> Memory:
        """Stack the selected memories of B objects into a step's Memory: feats
        [n_s, B, ...], tpos_idx [n_s, B], ptrs [n_p, B, C], ptr_dist [n_p, B], and with
        ``streams`` (features of several cameras) stream_of [B] (each ``Selection.stream``;
        with ``out``, written when out has a stream_of buffer).

        Without ``out`` all selections have the same key and the Memory is exactly theirs.
        With ``out`` (a graph's static buffers) everything is written in place; buffers with
        validity flags may be larger than an object's memories (a padded bucket): the extra
        slots read row 0 and are flagged invalid, so the attention skips them.
        """
        padded = out is not None and out.feat_valid is not None
        n_s, n_p = (out.feats.shape[0], out.ptrs.shape[0]) if padded else sels[0].key
        assert all(s.key[0] <= n_s and s.key[1] <= n_p for s in sels), 'bucket too small'
        assert padded or all(s.key == (n_s, n_p) for s in sels), 'mixed shapes need padding'
        batch = len(sels)
        n_feat = np.array([len(sel.feat_rows) for sel in sels])
        n_ptr = np.array([len(sel.ptr_rows) for sel in sels])
        # one host array, staged in one copy: six [n, B] tables (memory-major, so a view gives
        # [n, B, ...]), padding slots filled with `pad`
        values = np.concatenate([
            _table([sel.feat_rows for sel in sels], n_s, 0),
            _table([sel.ptr_rows for sel in sels], n_p, 0),
            _table([sel.ptr_dist for sel in sels], n_p, 1),
            _table([sel.tpos_idx for sel in sels], n_s, 0),
            (np.arange(n_s)[:, None] < n_feat).ravel(),
            (np.arange(n_p)[:, None] < n_ptr).ravel(),
            np.array([sel.stream for sel in sels], np.int64),
            np.array([sel.slot for sel in sels], np.int64)])
        # a graph's index block (static_index): one host copy writes every table, so only
        # the two row gathers below are kernels
        host = self.stage(values) if out is None or out.index is None else \
            self.stage.into(values, out.index)
        f_i, p_i, d_i, t_i, fv, pv, s_i, o_i = host.split(index_sizes(n_s, n_p, batch))
        flat_f = self.feats.flatten(0, 1)
        flat_p = self.ptrs.flatten(0, 1)
        if out is not None and out.index is not None:
            torch.index_select(flat_f, 0, f_i,
                               out=out.feats.view(n_s * batch, *flat_f.shape[1:]))
            torch.index_select(flat_p, 0, p_i,
                               out=out.ptrs.view(n_p * batch, *flat_p.shape[1:]))
            return out
        if out is None:
            feats = flat_f.index_select(0, f_i).view(n_s, batch, *flat_f.shape[1:])
            ptrs = flat_p.index_select(0, p_i).view(n_p, batch, *flat_p.shape[1:])
            return Memory(feats, t_i.view(n_s, batch), ptrs, d_i.view(n_p, batch).float(),
                          stream_of=s_i if streams else None)
        torch.index_select(flat_f, 0, f_i, out=out.feats.view(n_s * batch, *flat_f.shape[1:]))
        torch.index_select(flat_p, 0, p_i, out=out.ptrs.view(n_p * batch, *flat_p.shape[1:]))
        out.ptr_dist.copy_(d_i.view(n_p, batch))
        out.tpos_idx.copy_(t_i.view(n_s, batch))
        if padded:
            out.feat_valid.copy_(fv.view(n_s, batch))
            out.ptr_valid.copy_(pv.view(n_p, batch))
        if out.stream_of is not None:
            out.stream_of.copy_(s_i)
        if out.slot_of is not None:
            out.slot_of.copy_(o_i)
        return out

    def write(self, slot: int, frame: int, feats: torch.Tensor, ptr: torch.Tensor,
              logits: torch.Tensor, score: torch.Tensor, as_cond: bool,
              correction: bool = False) -> None:
        """Store one object's new memory for ``frame``: feats [Cm, h, w], ptr [C],
        logits [1, S/4, S/4]. A conditioning frame replaces a ring entry of the same frame
        (sam2 drops the non-conditioning output of a frame that becomes conditioning); a
        non-conditioning output of a frame that is one already updates only the logits and
        score (sam2 keeps the conditioning output there and drops the other when it
        consolidates: a correction with ``corrections_as_cond`` off on a prompted frame).
        ``correction``: a prompt on a frame already tracked (module docstring)."""
        k = self.max_cond
        if correction:      # another correction of this frame reads the memories as tracked
            self._keep_tracked(slot, frame)
        else:               # a later step reads other memories
            self.conditioned_frame[slot] = EMPTY
        self.logits[slot].copy_(logits)
        self.scores[slot].copy_(score.reshape(()))
        if as_cond:
            row = self._cond_row_for(slot, frame)
            self.feats[slot, row].copy_(feats)
            self.ptrs[slot, row].copy_(ptr)
            ring, pring = self.ring_frame.shape[1], self.ptr_frame.shape[1]
            if self.ring_frame[slot, frame % ring] == frame:
                self.ring_frame[slot, frame % ring] = EMPTY
            if self.ptr_frame[slot, frame % pring] == frame:
                self.ptr_frame[slot, frame % pring] = EMPTY
            return
        if (self.cond_frame[slot] == frame).any():
            return
        ring, pring = self.ring_frame.shape[1], self.ptr_frame.shape[1]
        self.feats[slot, k + frame % ring].copy_(feats)
        self.ring_frame[slot, frame % ring] = frame
        self.ptrs[slot, k + frame % pring].copy_(ptr)
        self.ptr_frame[slot, frame % pring] = frame

    def write_tracked(self, slots: List[int], frame: Union[int, Sequence[int]],
                      feats: torch.Tensor, ptrs: torch.Tensor, logits: torch.Tensor,
                      scores: torch.Tensor) -> None:
        """Store the ordinary (non-conditioning) memory of B tracked objects for ``frame``
        (one frame number, or one per slot: cameras count their own frames) with one
        index_copy per tensor: feats [B, Cm, h, w], ptrs [B, C], logits [B, 1, s, s],
        scores [B, 1]. Equivalent to ``write(..., as_cond=False)`` per object, with O(1)
        kernel launches."""
        k = self.max_cond
        ring, pring = self.ring_frame.shape[1], self.ptr_frame.shape[1]
        n = len(slots)
        frames = [frame] * n if isinstance(frame, (int, np.integer)) else list(frame)
        assert len(frames) == n, 'one frame number per slot'
        rows = [self._feat_row(s, k + f % ring) for s, f in zip(slots, frames)]
        rows += [self._ptr_row(s, k + f % pring) for s, f in zip(slots, frames)] + list(slots)
        idx = self.stage(rows)
        self.feats.view(-1, *self.feats.shape[2:]).index_copy_(0, idx[:n], feats)
        self.ptrs.view(-1, *self.ptrs.shape[2:]).index_copy_(0, idx[n:2 * n], ptrs)
        self.logits.index_copy_(0, idx[2 * n:], logits)
        self.scores.index_copy_(0, idx[2 * n:], scores.reshape(-1).float())
        f = np.asarray(frames, np.int64)
        self.ring_frame[slots, f % ring] = f
        self.ptr_frame[slots, f % pring] = f

    def _cond_row_for(self, slot: int, frame: int) -> int:
        """Row for a new conditioning frame: the same frame's row, a free row, or, at the
        cap, the oldest row other than the first prompt's (which anchors the object)."""
        frames = self.cond_frame[slot]
        hit = np.flatnonzero(frames == frame)
        if hit.size:
            return int(hit[0])
        free = np.flatnonzero(frames == EMPTY)
        if free.size:
            row = int(free[0])
        else:
            order = self._cond_rows(slot)
            row = order[1] if len(order) > 1 else order[0]
        self.cond_frame[slot, row] = frame
        self._counter += 1
        self.cond_age[slot, row] = self._counter
        return row
