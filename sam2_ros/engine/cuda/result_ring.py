"""Read-back buffers of one masks-out graph, reused once every array handed out of them is gone.

Why: a frame's masks, stats and label are copied from the device into pinned host memory and
handed out as numpy arrays that the caller keeps as long as it likes (the node's publisher and
overlay threads, a user's list). A fresh pinned block per frame went through torch's caching
host allocator, whose lock and event queries, and when its cache ran dry a new page-locked
allocation (page faults with the GIL held), showed up in the node's slow tracking calls (the
stall tracer's samples, docs/performance.md). Here each masks-out bucket owns a few sets
allocated once; a set is reused when no array handed out of it is alive (weak references:
a numpy view of a handed-out array keeps it alive, so a set is never written while any view
of it is held). When every set is held a fresh one is allocated, as before, and counted.
"""

from __future__ import annotations

import weakref
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch


class ResultRing:
    """``sets`` host buffer sets shaped as ``like`` (a masks-out graph's outputs: masks
    [B, H, W] bool, stats [B, 8] float64, label [H, W] uint8), pinned where ``pin``."""

    def __init__(self, like: Sequence[torch.Tensor], sets: int, pin: bool):
        self.shapes = [(tuple(t.shape), t.dtype) for t in like]
        self.pin = pin
        self.sets = [self._new() for _ in range(sets)]
        # per set: weak references to the arrays handed out of it last
        self.handed: List[List[weakref.ref]] = [[] for _ in range(sets)]
        self.misses = 0                 # frames that found every set held

    def take(self) -> Tuple[Optional[int], Tuple[torch.Tensor, ...]]:
        """(index, buffers) of a set no handed-out array uses; (None, a fresh set) when every
        set is held."""
        for i, refs in enumerate(self.handed):
            if all(r() is None for r in refs):
                return i, self.sets[i]
        self.misses += 1
        return None, self._new()

    def hand_out(self, index: Optional[int], arrays: Sequence[np.ndarray]) -> None:
        """Mark set ``index`` in use while any of ``arrays`` (numpy views of its buffers, each
        made by ``Tensor.numpy()`` so that its own views keep it alive) is alive."""
        if index is not None:
            self.handed[index] = [weakref.ref(a) for a in arrays]

    def _new(self) -> Tuple[torch.Tensor, ...]:
        return tuple(torch.empty(shape, dtype=dtype, pin_memory=self.pin)
                     for shape, dtype in self.shapes)
