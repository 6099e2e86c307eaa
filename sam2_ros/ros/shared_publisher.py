"""One publisher thread for the output stages of several cameras (a node serving a rig).

Why: the cameras of one node are tracked in one call, so their results are ready at the same
moment. With a publisher thread per camera, the threads took turns for Python's GIL, and
whichever came second waited for the other's whole publish (mask, state, objects, timing
log) before building its own mask (the split's ``wake_ms``, docs/performance.md). Here one
thread sends what the multi-camera worker handed over between two :meth:`commit` calls (a
group's results, and the re-publishes its prompts caused) as one batch: every item's masks,
in order, then every item's state and objects, then their overlays to each camera's overlay
thread. A camera's messages keep their order on each topic; no camera waits for another's
state before its mask goes out.

Batches wait in a FIFO of ``depth``; a full FIFO blocks :meth:`commit` (the worker), as a full
stage of one camera blocks its worker: a slow subscriber slows tracking down instead of losing
masks. Nothing here imports ROS.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Deque, List, Optional, Tuple

from sam2_ros.ros.mailbox import Published

Item = Tuple[Any, Published]        # (the camera's OutputStage, its result)


class SharedPublisher:
    """Publishes the items that the output stages built with ``shared=self`` hand over, batch
    by batch (see the module docstring). ``thread_init()`` runs first in its thread."""

    def __init__(self, depth: int = 2,
                 thread_init: Optional[Callable[[], None]] = None) -> None:
        self.depth = max(1, int(depth))
        self._init = thread_init
        self._open: List[Item] = []                  # handed over since the last commit
        self._batches: Deque[List[Item]] = collections.deque()
        self._busy: List[Item] = []                  # the batch being published
        self._cond = threading.Condition()
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        self.batches = 0                             # batches published

    # ------------------------------------------------------------------ control
    def start(self) -> None:
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name='sam2_tracker_publisher')
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Publish everything handed over (an open batch too), then end the thread."""
        self.commit()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------ hand-off
    def put(self, stage: Any, p: Published) -> None:
        """``stage``'s result ``p``, sent with the next :meth:`commit`'s batch (never blocks)."""
        with self._cond:
            self._open.append((stage, p))

    def commit(self) -> None:
        """Hand what was put since the last commit to the thread as one batch; blocks while
        ``depth`` batches wait. Nothing put: nothing to do."""
        with self._cond:
            if not self._open:
                return
            while len(self._batches) >= self.depth and not self._closed and self.alive:
                self._cond.wait(0.1)
            self._batches.append(self._open)
            self._open = []
            self._cond.notify_all()

    def pending(self, stage: Any) -> int:
        """``stage``'s items handed over and not published yet."""
        with self._cond:
            waiting = [self._open, self._busy, *self._batches]
            return sum(1 for batch in waiting for s, _ in batch if s is stage)

    # ------------------------------------------------------------------ thread
    def _run(self) -> None:
        if self._init is not None:
            self._init()
        while True:
            with self._cond:
                while not self._batches and not self._closed:
                    self._cond.wait(0.1)
                if not self._batches:        # closed and drained
                    return
                self._busy = self._batches.popleft()
                self._cond.notify_all()      # a blocked commit may go on
            self._publish(self._busy)
            with self._cond:
                self._busy = []
                self.batches += 1

    @staticmethod
    def _publish(batch: List[Item]) -> None:
        """Masks of every item (but those its stage sent when it was handed over), then the
        rest of each: states of the items whose masks went out, the overlays."""
        for stage, p in batch:
            if p.masks_sent is None:
                stage.send_masks(p)
        for stage, p in batch:
            stage.finish(p)
