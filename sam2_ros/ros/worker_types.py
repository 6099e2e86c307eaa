"""What the tracking worker is given and what it keeps, shared by its parts (``worker``,
``worker_detections``, ``worker_time``): the host protocol the node implements, a frame begun,
the worker's counters and its error log. Nothing here imports ROS.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, List, Optional, Protocol, Tuple

from sam2_ros.engine.frame_in import Frame
from sam2_ros.engine.types import Prompt
from sam2_ros.ros import detections as det
from sam2_ros.ros.mailbox import FrameItem, FrameTimes, PromptItem

# Errors kept for the next TrackingState when no frame succeeds for a while (all are logged).
MAX_HELD_ERRORS = 100


class WorkerHost(Protocol):
    """What the worker needs from the node (:class:`sam2_ros.ros.node_host.NodeHost`).

    ``decode`` and ``convert`` raise TrackerError subclasses for bad input; ``log`` takes the
    level 'info' | 'warn' | 'error'; ``thread_init`` runs first in every thread of the worker
    (per-thread settings such as the current CUDA device).
    """

    def decode(self, msg: Any) -> Frame: ...     # [H, W, 3] uint8 RGB, host or CUDA

    def convert(self, item: PromptItem) -> Tuple[int, Optional[Prompt]]: ...

    def convert_detections(self, msg: Any) -> List[det.RawDetection]: ...

    def detection_rules(self) -> det.Rules: ...                      # the run-time rules

    def log(self, level: str, text: str) -> None: ...

    def thread_init(self) -> None: ...


@dataclass
class StartedFrame:
    """A frame decoded, its due prompts applied, waiting for its tracking result."""

    item: FrameItem
    rgb: Frame
    times: FrameTimes


@dataclass
class WorkerCounters:
    processed: int = 0
    frame_errors: int = 0
    prompt_errors: int = 0
    consecutive_failures: int = 0
    objects: int = 0            # objects in the last published result
    # prompt errors are counted by the worker and by the executor's callbacks (a full queue)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add_prompt_errors(self, n: int = 1) -> None:
        with self.lock:
            self.prompt_errors += n


@dataclass
class ErrorCount:
    """Errors since diagnostics last asked, and the last one's text."""

    count: int
    last: str


class ErrorLog:
    """Errors of the worker and its publishers: logged, kept for the next TrackingState.errors
    and counted for diagnostics (thread-safe: the worker and publisher threads report, the
    executor thread reads)."""

    def __init__(self, log: Callable[[str, str], None]) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._held: List[str] = []
        self._since_diag = 0
        self._recent: Deque[str] = collections.deque(maxlen=5)

    def report(self, text: str, level: str = 'error') -> None:
        self._log(level, text)
        with self._lock:
            if len(self._held) < MAX_HELD_ERRORS:
                self._held.append(text)
            self._since_diag += 1
            self._recent.append(text)

    def take_count(self) -> ErrorCount:
        """The errors since the previous call and the last error text; resets the count."""
        with self._lock:
            n, self._since_diag = self._since_diag, 0
            return ErrorCount(n, self._recent[-1] if self._recent else '')

    def drain(self) -> List[str]:
        """The errors for the next TrackingState (each is reported once)."""
        with self._lock:
            errs, self._held = self._held, []
        return errs

