"""Python's cyclic garbage collections during a benchmark's frames, per frame.

Why: a slow frame whose GPU work is not slower (``tools.probes.interaction_frames_probe``) lost
its time on the host; a collection that walks the heap of torch and sam2 (about 200,000 tracked
objects) is one such cause, taken on whichever frame allocates when it is due. The node freezes
configure's heap for that reason (``sam2_ros.ros.gc_policy``, its ``gc_freeze`` parameter);
``--gc-freeze`` in the benchmarks does the same after the set-up frame, and this watch says how
much of each frame went to collections either way.
"""

from __future__ import annotations

import gc
import time
from typing import Dict, List, Optional


class GcWatch:
    """Collections since the last ``take``: (generation, ms) each. A context manager: the
    callback is removed on exit."""

    def __init__(self) -> None:
        self.done: List[tuple] = []                  # (generation, ms) since the last take
        self.t0: Optional[float] = None
        self.installed = False

    def __enter__(self) -> 'GcWatch':
        gc.callbacks.append(self.on_gc)
        self.installed = True
        return self

    def __exit__(self, *exc) -> None:
        if self.installed:
            gc.callbacks.remove(self.on_gc)
            self.installed = False

    def on_gc(self, phase: str, info: Dict[str, int]) -> None:
        if phase == 'start':
            self.t0 = time.perf_counter()
        elif self.t0 is not None:
            self.done.append((int(info.get('generation', -1)),
                              (time.perf_counter() - self.t0) * 1e3))
            self.t0 = None

    def take(self) -> List[tuple]:
        """The collections since the last call, oldest first, and forget them."""
        out, self.done = self.done, []
        return out


def frame_ms(collections: List[tuple]) -> float:
    """Milliseconds a frame spent in the collections ``GcWatch.take`` returned for it."""
    return round(sum(ms for _, ms in collections), 3)


def summary(per_frame: List[List[tuple]]) -> Dict[str, object]:
    """A row's collections over its timed frames: counts per generation, the longest and the
    total ms."""
    every = [c for frame in per_frame for c in frame]
    return {'collections': [sum(1 for g, _ in every if g == gen) for gen in (0, 1, 2)],
            'max_ms': round(max((ms for _, ms in every), default=0.0), 3),
            'total_ms': round(sum(ms for _, ms in every), 3)}
