"""The node's process-wide settings, applied once at configure (not undone): glibc's
allocation thresholds (``tune_malloc``, :mod:`~sam2_ros.ros.malloc`) and OpenCV's worker threads
(``opencv_threads``) and Python's GIL switch interval (``gil_switch_interval_ms``); and,
while the node is active, the GPU clock keeper (``gpu_clock_keeper_us``,
:mod:`~sam2_ros.engine.clock_keeper`).

Why the switch interval: the tracking worker releases the GIL while it waits for the GPU;
when the wait ends, another thread running Python code (a publisher, the executor, an
overlay) keeps the GIL until it blocks or until the interval (5 ms by default) has passed. A
shorter interval bounds that wait, at the cost of more switches.

Why OpenCV's threads: the overlay (``sam2_ros/overlay.py``) and the host decoders run whole-image
OpenCV calls, which OpenCV splits over a pool of one thread per core. With two 60 Hz cameras in
one node, each overlay's burst over every core competes with the tracking worker, the receiving
processes and the publishers for the same cores; a pool of one or two threads keeps the overlay
on its own thread (it releases the GIL inside OpenCV either way).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

from sam2_ros.engine import clock_keeper
from sam2_ros.engine.clock_keeper import ClockKeeper
from sam2_ros.ros import malloc


def set_opencv_threads(threads: int) -> None:
    """cv2.setNumThreads(threads) for threads > 0; 0 leaves OpenCV's default (a thread per
    core, or what OPENCV_FOR_THREADS_NUM says)."""
    if threads > 0:
        import cv2

        cv2.setNumThreads(int(threads))


class ProcessTuning:
    """What ``apply`` set in this process; ``malloc`` is glibc's part."""

    def __init__(self) -> None:
        self.malloc = malloc.Tuning()
        self.opencv_threads = 0        # the last value applied (0: OpenCV's default)
        self.default_switch_interval = sys.getswitchinterval()    # s, before any apply
        self.clock_keeper_us = 0.0
        self.keeper: Optional[ClockKeeper] = None      # kept while the node is active

    def apply(self, opts: Any, warn: Callable[[str], None]) -> None:
        """``opts``: the node's options (``tune_malloc``, ``opencv_threads``,
        ``gil_switch_interval_ms``)."""
        self.malloc.apply(opts.tune_malloc, warn)
        set_opencv_threads(opts.opencv_threads)
        self.opencv_threads = opts.opencv_threads
        ms = float(opts.gil_switch_interval_ms)
        sys.setswitchinterval(ms / 1e3 if ms > 0 else self.default_switch_interval)
        self.clock_keeper_us = float(opts.gpu_clock_keeper_us)

    def keep_clocks(self, device: str, warn: Callable[[str], None]) -> None:
        """Keep ``device``'s clocks up between frames (activate); nothing when the keeper is
        off or the device is not a GPU. ``warn(text)``: why it stopped, if it fails."""
        self.release_clocks()
        self.keeper = clock_keeper.keep(device, self.clock_keeper_us, on_error=warn)

    def release_clocks(self) -> None:
        """No keeper any more (deactivate, cleanup)."""
        if self.keeper is not None:
            clock_keeper.release(self.keeper.device)
            self.keeper = None
