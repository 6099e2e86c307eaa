"""Python's thread switch interval in the node's process (``gil_switch_interval_ms``).

Why: the node runs several Python threads in one process (the executor taking messages, the
tracking worker, the output and overlay threads; with ``cameras``, one worker for every
camera). A thread that waits for the GIL gets it when the holder blocks or, at the latest,
after ``sys.getswitchinterval()`` (5 ms by default): the worker coming back from a CUDA
synchronise while the executor converts a 2.7 MB image can wait that long, once per wait of
the frame. A shorter interval bounds each such wait at the cost of more switches. Process-wide,
so it lives in the node's process with an off switch (0: Python's own interval), set at
configure and restored at cleanup, as ``malloc.py`` does for the allocator.
"""

from __future__ import annotations

import sys
from typing import Optional


class SwitchInterval:
    """The interval set at configure and the one it replaced, restored by ``restore``."""

    def __init__(self) -> None:
        self.saved: Optional[float] = None     # seconds; None while nothing is set

    def apply(self, interval_ms: float) -> None:
        """Set the interval to ``interval_ms`` (> 0); 0 leaves Python's own."""
        if interval_ms <= 0:
            return
        if self.saved is None:
            self.saved = sys.getswitchinterval()
        sys.setswitchinterval(float(interval_ms) / 1e3)

    def restore(self) -> None:
        if self.saved is not None:
            sys.setswitchinterval(self.saved)
            self.saved = None
