"""What the node's threads were doing while a frame's tracking call stalled.

Why: a one-off slow track call (a frame's engine time several times its median, then a queue
of late frames behind it) is the largest part of the node's p99 on a GPU rig, and its cause is
outside what the per-frame timings split: another thread holding Python's GIL, a first-use
CUDA module load, an allocator growing, a page-fault storm. Timings say *that* a call was
slow; only the threads' stacks *during* it say why.

``StallTracer`` is off by default (node parameter ``stall_trace_ms``: 0). On, the worker wraps
each tracking call in :meth:`StallTracer.watch`; a daemon thread samples every thread's Python
stack (``sys._current_frames``) every ``interval_ms`` while a call has run longer than the
threshold, and the call's end files one :class:`Stall`: its duration, how many samples were
taken, the longest gap between them (a gap much longer than the interval means the sampler
could not get the GIL: a thread held it, or the process was not scheduled) and each thread's
most frequent innermost frames. The node logs the stalls from its diagnostics timer.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import traceback
import types
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import ContextManager, Deque, Dict, Iterator, List, Optional, Tuple

DEPTH = 4          # innermost frames kept per sampled stack
TOP = 2            # most frequent stacks per thread in a report


@dataclass
class Stall:
    """One tracking call that ran past the threshold."""
    ms: float                      # the call's duration
    samples: int                   # stack samples taken while it ran past the threshold
    max_gap_ms: float              # longest time between two samples (or threshold to first)
    stacks: Dict[str, List[Tuple[str, int]]] = field(default_factory=dict)
    # thread name -> [(innermost frames 'file:line fn < ...', times seen)], most frequent first

    def describe(self) -> str:
        lines = [f'a tracking call took {self.ms:.1f} ms: {self.samples} stack samples, '
                 f'longest gap {self.max_gap_ms:.1f} ms']
        for name, top in self.stacks.items():
            for stack, n in top:
                lines.append(f'  [{name}] x{n}: {stack}')
        return '\n'.join(lines)


def stack_key(frame: types.FrameType, depth: int = DEPTH) -> str:
    """A frame's innermost ``depth`` entries as one line, innermost first."""
    entries = traceback.extract_stack(frame, limit=depth)
    return ' < '.join(f'{e.filename.rsplit("/", 1)[-1]}:{e.lineno} {e.name}'
                      for e in reversed(entries))


def traced(tracer: Optional['StallTracer']) -> ContextManager[None]:
    """``tracer.watch()``, or nothing when tracing is off (None)."""
    return contextlib.nullcontext() if tracer is None else tracer.watch()


class StallTracer:
    """Samples all threads' stacks while a watched call runs longer than ``threshold_ms``.

    sampler=False: no thread of its own; :meth:`sample` is called by the owner (tests drive
    it so, without clocks)."""

    def __init__(self, threshold_ms: float, interval_ms: float = 1.0, keep: int = 16,
                 sampler: bool = True) -> None:
        self.threshold_s = threshold_ms / 1e3
        self.interval_s = interval_ms / 1e3
        self.stalls: Deque[Stall] = deque(maxlen=keep)
        self.samples_taken = 0                  # over the tracer's life
        self._lock = threading.Lock()
        self._started: Optional[float] = None   # perf_counter() at the watched call's start
        self._counts: Dict[str, Counter] = {}
        self._last_sample = 0.0
        self._max_gap = 0.0
        self._n = 0
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name='stall_trace', daemon=True) \
            if sampler else None
        if self._thread is not None:
            self._thread.start()

    @contextlib.contextmanager
    def watch(self) -> Iterator[None]:
        """Around one tracking call; files a :class:`Stall` when it ran past the threshold."""
        with self._lock:
            self._started = time.perf_counter()
            self._counts, self._n, self._max_gap = {}, 0, 0.0
            self._last_sample = self._started + self.threshold_s
        self._wake.set()
        try:
            yield
        finally:
            with self._lock:
                ms = (time.perf_counter() - self._started) * 1e3
                self._started = None
                self._wake.clear()
                if ms >= self.threshold_s * 1e3:
                    self.stalls.append(Stall(ms, self._n, self._max_gap * 1e3, {
                        name: c.most_common(TOP) for name, c in self._counts.items()}))

    def take(self) -> List[Stall]:
        """The stalls filed since the last call, oldest first."""
        out = []
        while self.stalls:
            out.append(self.stalls.popleft())
        return out

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)

    def sample(self) -> bool:
        """One sample of every other thread's stack if the watched call has run past the
        threshold; whether it was taken."""
        with self._lock:
            now = time.perf_counter()
            if self._started is None or now - self._started < self.threshold_s:
                return False
            names = {t.ident: t.name for t in threading.enumerate()}
            me = threading.get_ident()
            for ident, frame in sys._current_frames().items():
                if ident != me:
                    name = names.get(ident, str(ident))
                    self._counts.setdefault(name, Counter())[stack_key(frame)] += 1
            self._max_gap = max(self._max_gap, now - self._last_sample)
            self._last_sample = now
            self._n += 1
            self.samples_taken += 1
            return True

    def _run(self) -> None:
        # asleep until a call is watched, then until it passes the threshold (a call that
        # ends before costs its thread no sample and no wake-up), then a sample per interval
        while not self._stop:
            self._wake.wait()
            with self._lock:
                started = self._started
            if started is None:
                continue
            time.sleep(max(self.interval_s, started + self.threshold_s - time.perf_counter()))
            self.sample()
