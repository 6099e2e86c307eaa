"""The node's /diagnostics tick, kept out of its frames: run in the idle time after a frame's
results went out, not while the worker tracks one (pure Python, no ROS).

Why: a tick builds and publishes a status per camera (window percentiles, a few dozen
key-value messages) in Python, holding the interpreter lock for a while. On the executor
thread it lands at a random moment of the frame period; when that moment is inside a frame,
the tracking worker waits for the lock between its steps, and that frame's engine span grows.
At one tick per second on a 60 Hz camera that is one frame in sixty, more than the 1% a p99
allows (the one-node stereo rows of the node latency benchmark showed it, one slow frame pair
every 60, always at the same phase; ``tools.bench.slow_frames`` lists them).

The rule, while frames flow (one went out within ``FLOWING_S``): the timer's tick only marks
the job due, and the next frame's output runs it (:meth:`QuietTick.frame_out`, called by the
publishers after a frame's state, on the thread that published it, which is then done with
that frame while the worker waits for the next). Without frames (inactive, unconfigured, a
stopped camera) the tick runs the job itself, as a plain timer would: a job due when the
frames stopped runs at the next tick. One job runs at a time.
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

# frames count as flowing while one went out this recently: a camera at 4 Hz or more
FLOWING_S = 0.25


class QuietTick:
    """``job()`` (the node's diagnostics) run by :meth:`tick` (the timer, every period) or
    :meth:`frame_out` (the publishers, after each frame); ``on_error(exc)`` reports a job
    that raised on a publisher's thread (the executor reports its own callbacks' errors)."""

    def __init__(self, job: Callable[[], None],
                 on_error: Optional[Callable[[BaseException], None]] = None) -> None:
        self.job = job
        self.on_error = on_error
        self._lock = threading.Lock()       # the fields below; ``_running``: one job at a time
        self._running = threading.Lock()
        self._last_out: Optional[float] = None
        self._due = False
        self.deferred = 0                   # ticks run after a frame's output instead

    def tick(self, now: float) -> None:
        """The timer's period is up (executor thread, ``now``: time.monotonic())."""
        with self._lock:
            self._due = self._last_out is not None and now - self._last_out < FLOWING_S
            if self._due:
                return
        self._run()

    def frame_out(self, now: float) -> None:
        """A frame's results went out (any thread): runs a due job here, now."""
        with self._lock:
            self._last_out = now
            if not self._due:
                return
            self._due = False
            self.deferred += 1
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - a publisher thread must go on publishing
            if self.on_error is not None:
                try:
                    self.on_error(exc)
                except Exception:  # noqa: BLE001 - e.g. the logger after rclpy's shutdown
                    pass

    def due(self) -> bool:
        """A tick waits for a frame's output."""
        with self._lock:
            return self._due

    def _run(self) -> None:
        with self._running:
            self.job()
