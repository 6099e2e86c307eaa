"""Python's full garbage collections off the frame path: freeze the heap built at configure.

Why: once torch, sam2, rclpy and a model are loaded, the node's process holds some 200,000
objects that the cyclic garbage collector tracks. A full (generation-2) collection walks all of
them, on whichever thread happens to allocate when it is due, the tracking worker included:
a frame late by a full walk of the heap.
``gc.freeze()`` moves every object alive at the end of configure into a permanent generation
that collections skip: the same full collection then walks almost nothing. Objects made
later (messages, results) are collected as before; cleanup unfreezes first, so a released
tracker's reference cycles are still collected. Process-wide, so it lives in the node's
process with an off switch (the node parameter ``gc_freeze``), as ``malloc.py`` does for the
allocator.

``PauseMonitor`` counts full collections and their longest pause for the node's diagnostics, and
keeps those of at least ``LONG_PAUSE_MS`` with their time for the node's log, so a stall of this
kind shows in the field and in a benchmark's node log. The freeze's own collection (configure's,
no frame in flight) is run under ``PauseMonitor.ignoring``: it is not a stall.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections import deque
from typing import Iterator, List, Optional, Tuple

# a full collection at least this long is logged (a third of a 60 Hz frame period)
LONG_PAUSE_MS = 5.0


def freeze() -> int:
    """Collect once, then exempt every surviving object from later collections; returns how
    many objects are frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def unfreeze() -> None:
    """Make frozen objects collectable again (before a tracker is released)."""
    gc.unfreeze()


class PauseMonitor:
    """Full (generation-2) collections of this process: how many, and the longest pause."""

    def __init__(self) -> None:
        self.full_collections = 0
        self.max_pause_ms = 0.0
        self.long_pauses: deque = deque(maxlen=16)    # (time.monotonic() at its end, ms)
        self._t0: Optional[float] = None
        self._ignore = False
        gc.callbacks.append(self._on_gc)

    @contextlib.contextmanager
    def ignoring(self) -> Iterator[None]:
        """Collections inside are not counted (the node's own ``freeze`` at configure)."""
        self._ignore, self._t0 = True, None
        try:
            yield
        finally:
            self._ignore = False

    def _on_gc(self, phase: str, info: dict) -> None:
        if info.get('generation') != 2 or self._ignore:
            return
        if phase == 'start':
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            ms = (time.perf_counter() - self._t0) * 1e3
            self.full_collections += 1
            self.max_pause_ms = max(self.max_pause_ms, ms)
            if ms >= LONG_PAUSE_MS:
                self.long_pauses.append((time.monotonic(), ms))
            self._t0 = None

    def take_long_pauses(self) -> List[Tuple[float, float]]:
        """The long pauses since the last call, oldest first (at most the last 16)."""
        out = []
        while self.long_pauses:
            out.append(self.long_pauses.popleft())
        return out

    def warnings(self) -> List[str]:
        """The node log's line for each long pause since the last call."""
        return [f'a full garbage collection paused the process for {ms:.1f} ms '
                f'(time.monotonic() {t:.3f}): frames in flight were late by as much'
                for t, ms in self.take_long_pauses()]

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

