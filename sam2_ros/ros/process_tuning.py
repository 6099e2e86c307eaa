"""The node's process-wide settings, applied once at configure (not undone): glibc's
allocation thresholds (``tune_malloc``, :mod:`~sam2_ros.ros.malloc`) and OpenCV's worker threads
(``opencv_threads``).

Why OpenCV's threads: the overlay (``sam2_ros/overlay.py``) and the host decoders run whole-image
OpenCV calls, which OpenCV splits over a pool of one thread per core. With two 60 Hz cameras in
one node, each overlay's burst over every core competes with the tracking worker, the receiving
processes and the publishers for the same cores; a pool of one or two threads keeps the overlay
on its own thread (it releases the GIL inside OpenCV either way).
"""

from __future__ import annotations

from typing import Any, Callable

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

    def apply(self, opts: Any, warn: Callable[[str], None]) -> None:
        """``opts``: the node's options (``tune_malloc``, ``opencv_threads``)."""
        self.malloc.apply(opts.tune_malloc, warn)
        set_opencv_threads(opts.opencv_threads)
        self.opencv_threads = opts.opencv_threads
