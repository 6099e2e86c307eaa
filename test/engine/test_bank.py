"""Bounded memory: the MemoryBank reads what sam2 reads, evicts as documented, and a long
stream neither reallocates nor grows.

Pure-bank tests use tiny fake tensors whose values are their frame number, so a gather can be
checked by value. The reference for ``select`` is written from sam2_base
``_prepare_memory_conditioned_features`` (num_maskmem=7, max_obj_ptrs_in_encoder=16, stride 1,
forward tracking): conditioning frames first in insertion order (temporal-encoding index 6,
pointer distance f - t, pointers only from t <= f), then non-conditioning frames f-6..f-1
oldest first (index t_rel - 1), then pointers of non-conditioning frames f-1..f-15.
"""

import gc
import resource
import tracemalloc
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import HYPOTHESIS_COUNTS, LEAN, examples, make_tracker, reuse_encoder
from sam2_ros.engine.memory import EMPTY, MemoryBank
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')

NUM_MASKMEM, MAX_PTRS = 7, 16


def bank(max_cond=3, capacity=2):
    return MemoryBank.allocate(capacity, max_cond, NUM_MASKMEM, MAX_PTRS,
                               torch.zeros(1, 2, 2, dtype=torch.bfloat16), torch.zeros(4),
                               torch.zeros(1, 4, 4))


def put(b, slot, frame, cond):
    """Store a memory whose every value is ``frame`` (feats), ``frame + 0.5`` (pointer)."""
    b.write(slot, frame, torch.full((1, 2, 2), float(frame)), torch.full((4,), frame + 0.5),
            torch.full((1, 4, 4), float(frame)), torch.full((1, 1), 1.0), as_cond=cond)


def read(b, slot, frame):
    """(spatial frames, tpos indices, pointer frames, distances) a step on ``frame`` reads,
    recovered from the gathered tensors' values."""
    sel = b.select(slot, frame)
    if not sel.feat_rows and not sel.ptr_rows:
        return [], [], [], []
    mem = b.gather([sel])
    feats = [int(mem.feats[i, 0, 0, 0, 0]) for i in range(mem.feats.shape[0])]
    ptrs = [int(mem.ptrs[i, 0, 0] - 0.5) for i in range(mem.ptrs.shape[0])]
    assert mem.tpos_idx[:, 0].tolist() == sel.tpos_idx
    assert mem.ptr_dist[:, 0].tolist() == sel.ptr_dist
    return feats, sel.tpos_idx, ptrs, sel.ptr_dist


def test_select_order_and_distances_hand_written():
    b = bank(max_cond=3)
    put(b, 0, 0, cond=True)                        # first prompt
    for f in range(1, 5):
        put(b, 0, f, cond=False)
    put(b, 0, 5, cond=True)                        # a prompted frame (never tracked)
    for f in range(6, 20):
        put(b, 0, f, cond=False)
    feats, tpos, ptrs, dist = read(b, 0, 20)
    assert feats == [0, 5, 14, 15, 16, 17, 18, 19]
    assert tpos == [6, 6, 5, 4, 3, 2, 1, 0]
    # cond pointers (distance 20 - t), then t_diff 1..15 = frames 19..5; 5 is conditioning
    # (no non-conditioning output), so it is skipped, as sam2 does
    assert ptrs == [0, 5] + list(range(19, 5, -1))
    assert dist == [20, 15] + list(range(1, 15))
    # the other slot is empty and reads nothing
    assert read(b, 1, 20) == ([], [], [], [])


def test_select_early_frames_and_future_cond():
    b = bank(max_cond=3)
    put(b, 0, 0, cond=True)
    put(b, 0, 1, cond=False)
    assert read(b, 0, 2) == ([0, 1], [6, 0], [0, 1], [2, 1])
    put(b, 0, 2, cond=False)
    put(b, 0, 10, cond=True)                       # a conditioning frame ahead of the read
    feats, tpos, ptrs, dist = read(b, 0, 3)
    assert feats == [0, 10, 1, 2] and tpos == [6, 6, 1, 0]   # spatial: all cond frames
    assert ptrs == [0, 2, 1] and dist == [3, 1, 2]             # pointers: only t <= 3


def test_ring_keeps_only_what_can_be_read():
    b = bank()
    put(b, 0, 0, cond=True)
    for f in range(1, 40):
        put(b, 0, f, cond=False)
    assert sorted(b.ring_frame[0].tolist()) == list(range(33, 40))     # 7 = 6 read + latest
    assert sorted(b.ptr_frame[0].tolist()) == list(range(24, 40))      # 16 = 15 read + latest
    # re-running the latest frame (a correction) reads f-6..f-1, not the frame itself
    feats, tpos, _, dist = read(b, 0, 39)
    assert feats == [0, 33, 34, 35, 36, 37, 38] and 0 not in dist


def test_eviction_keeps_first_prompt_and_insertion_order():
    b = bank(max_cond=3)
    for f in (0, 10, 20):
        put(b, 0, f, cond=True)
    assert b.cond_frames(0) == [0, 10, 20]
    put(b, 0, 30, cond=True)                       # at the cap: evict the oldest later one
    assert b.cond_frames(0) == [0, 20, 30]
    put(b, 0, 30, cond=True)                       # same frame again: replaced in place
    assert b.cond_frames(0) == [0, 20, 30]
    put(b, 0, 40, cond=True)
    assert b.cond_frames(0) == [0, 30, 40]
    feats, tpos, ptrs, dist = read(b, 0, 41)
    assert feats[:3] == [0, 30, 40] and ptrs[:3] == [0, 30, 40] and dist[:3] == [41, 11, 1]
    # another object's rows are independent
    put(b, 1, 40, cond=True)
    assert b.cond_frames(1) == [40] and b.cond_frames(0) == [0, 30, 40]
    b.clear(0)
    assert b.cond_frames(0) == [] and read(b, 0, 41) == ([], [], [], [])
    assert b.cond_frames(1) == [40]


def test_frame_becoming_conditioning_leaves_the_rings():
    """sam2 drops a frame's non-conditioning output when it becomes a conditioning frame."""
    b = bank()
    put(b, 0, 0, cond=True)
    for f in range(1, 6):
        put(b, 0, f, cond=False)
    put(b, 0, 5, cond=True)                        # correction on the latest frame
    assert 5 not in b.ring_frame[0] and 5 not in b.ptr_frame[0]
    feats, tpos, ptrs, dist = read(b, 0, 6)
    assert feats == [0, 5, 1, 2, 3, 4] and tpos == [6, 6, 4, 3, 2, 1]
    assert ptrs == [0, 5, 4, 3, 2, 1] and dist == [6, 1, 2, 3, 4, 5]


# ---- the bank against a model of sam2's unbounded dicts -------------------------------------
class DictModel:
    """sam2's per-object output dicts (every frame forever), plus the documented cap."""

    def __init__(self, max_cond):
        self.cond, self.non_cond, self.max_cond = {}, {}, max_cond

    def write(self, f, cond):
        if cond:
            self.non_cond.pop(f, None)
            if f not in self.cond and len(self.cond) == self.max_cond:
                later = list(self.cond)[1:] or list(self.cond)
                del self.cond[later[0]]
            self.cond[f] = True
        else:
            self.non_cond[f] = True

    def read(self, f):
        feats, tpos = list(self.cond), [NUM_MASKMEM - 1] * len(self.cond)
        for t_pos in range(1, NUM_MASKMEM):
            t_rel = NUM_MASKMEM - t_pos
            if f - t_rel in self.non_cond:
                feats.append(f - t_rel)
                tpos.append(NUM_MASKMEM - t_pos - 1)
        ptrs = [t for t in self.cond if t <= f]
        dist = [f - t for t in ptrs]
        for t_diff in range(1, MAX_PTRS):
            t = f - t_diff
            if t < 0:
                break
            if t in self.non_cond:
                ptrs.append(t)
                dist.append(t_diff)
        return feats, tpos, ptrs, dist


@settings(max_examples=examples(60), deadline=None)
@given(max_cond=st.integers(2, 5),
       events=st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(1, 3)),
                       min_size=1, max_size=80))
def test_bank_equals_unbounded_dicts(max_cond, events):
    """A random stream: every frame tracked (or skipped), some prompted (conditioning), with
    gaps. After every frame, the next frame's read and a re-run of the latest frame equal
    what sam2's unbounded dicts (with the cap applied) give. max_examples=60."""
    c = HYPOTHESIS_COUNTS.setdefault('test_bank_equals_unbounded_dicts', {'examples': 0})
    c['examples'] += 1
    b, ref = bank(max_cond=max_cond, capacity=1), DictModel(max_cond)
    put(b, 0, 0, cond=True)
    ref.write(0, True)
    f = 0
    for tracked, prompted, gap in events:
        f += gap if not tracked else 1
        if tracked:
            put(b, 0, f, cond=False)
            ref.write(f, False)
        if prompted:
            put(b, 0, f, cond=True)
            ref.write(f, True)
        for g in (f, f + 1):
            assert read(b, 0, g) == ref.read(g), (g, b.cond_frames(0))
        assert b.cond_frames(0)[0] == 0
        n_s, n_p = b.select(0, f + 1).key
        assert n_s <= max_cond + NUM_MASKMEM - 1 and n_p <= max_cond + MAX_PTRS - 1


# ---- a long stream through the tracker ------------------------------------------------------
N_FRAMES = 210
TRACE_FROM = 140
CORRECT_EVERY = 30


def rss_bytes():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def live_tensors():
    with warnings.catch_warnings():              # isinstance() pokes deprecated torch aliases
        warnings.simplefilter('ignore')
        return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))


def test_long_stream_memory_is_flat():
    """210 frames at image_size 64 with 2 objects (one queued on frame 3) and a correction
    every 30 frames alternating between them, max_cond_frames=3, so conditioning rows fill
    and evict. Asserted every frame: the bank's tensors keep their storage and shapes; occupied
    rows <= max_cond + 7 (spatial) and <= max_cond + 16 (pointers); reads <= max_cond + 6 and
    max_cond + 15; the first prompt frame of each object is kept. Growth between frames
    150-200 versus 50-100: live torch tensors (gc) must not grow at all, traced Python
    allocations (tracemalloc) by < 256 KiB, process RSS by < 16 MiB (allocator noise).

    tracemalloc runs from frame TRACE_FROM on (it slows every Python allocation): the growth
    150-200 it reports then counts every block allocated since TRACE_FROM and still live at
    200, minus only those of them freed, so it is never below the growth a trace from frame 0
    reports (which also subtracts frees of older blocks)."""
    max_cond = 3
    tr = make_tracker(image_size=64, max_cond_frames=max_cond, max_objects=3,
                      extra_hydra_overrides=list(LEAN))
    h, w = 48, 64
    rng = np.random.default_rng(0)
    bg = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    # the frames repeat every w (np.roll below): the encoder runs on the first w only
    key = reuse_encoder(tr)
    b = tr.bank
    storage = {k: (getattr(b, k).data_ptr(), getattr(b, k).shape)
               for k in ('feats', 'ptrs', 'logits')}
    first = {}
    samples = {}
    evicted = 0
    try:
        for f in range(N_FRAMES):
            if f == TRACE_FROM:
                tracemalloc.start()
            frame = np.roll(bg, f, axis=1)
            key[0] = f % w
            if f == 3:
                tr.queue_prompt(Prompt(2, box=(30.0, 10.0, 50.0, 30.0)))
            tr.track(frame)
            if f == 0:
                tr.add_prompt(Prompt(1, points=np.array([[20.0, 20.0]]), labels=np.array([1])))
            elif f % CORRECT_EVERY == 0:
                oid = 1 + (f // CORRECT_EVERY) % 2
                before = b.cond_frames(tr.objects[oid].slot)
                tr.add_prompt(Prompt(oid, points=np.array([[f % w, 25.0]]),
                                     labels=np.array([1])))
                evicted += len(before) == max_cond
            for oid, o in tr.objects.items():
                conds = b.cond_frames(o.slot)
                first.setdefault(oid, conds[0])
                assert conds[0] == first[oid] == o.created_frame
                assert len(conds) <= max_cond
                n_ring = int((b.ring_frame[o.slot] != EMPTY).sum())
                n_ptr = int((b.ptr_frame[o.slot] != EMPTY).sum())
                assert len(conds) + n_ring <= max_cond + NUM_MASKMEM
                assert len(conds) + n_ptr <= max_cond + MAX_PTRS
                n_s, n_p = b.select(o.slot, f + 1).key
                assert n_s <= max_cond + NUM_MASKMEM - 1 and n_p <= max_cond + MAX_PTRS - 1
            assert tr.bank is b
            for k, (ptr, shape) in storage.items():
                assert getattr(b, k).data_ptr() == ptr and getattr(b, k).shape == shape
            if f in (50, 100, 150, 200):
                gc.collect()
                traced = tracemalloc.get_traced_memory()[0] if f > TRACE_FROM else None
                samples[f] = (live_tensors(), traced, rss_bytes())
    finally:
        tracemalloc.stop()
    assert first == {1: 0, 2: 3}
    assert evicted >= 2, 'the scenario must evict conditioning rows'
    early = [samples[100][i] - samples[50][i] for i in (0, 2)]
    late = [samples[200][i] - samples[150][i] for i in range(3)]
    print('growth 50->100 (tensors, rss):', early, ' 150->200 (tensors, traced bytes, rss):',
          late)
    assert samples[200][0] <= samples[150][0] and samples[200][0] <= samples[100][0]
    assert late[1] < 256 * 1024
    assert late[2] < 16 * 2 ** 20
