"""The output stage of the node: how a tracked frame's results leave the worker thread.

Serial (``pipeline: false``, the reference): the worker publishes mask, state and, while
someone subscribes, the overlay itself, then takes the next frame; its throughput is bounded
by decode + engine + publish.

Pipelined (``pipeline: true``): the worker hands each :class:`Published` to this stage and
goes on with the next frame while a publisher thread sends mask and state (in frame order,
every frame: a bounded FIFO of ``depth`` items; a full FIFO blocks the worker, so a slow
subscriber slows tracking down instead of losing masks). The overlay is for eyes only and the
costliest output (render + 2.7 MB at 720p), so it gets a third thread behind a newest-only
slot: an overlay that cannot keep up is replaced by the next frame's and counted in
``overlays_dropped``; it never delays a mask. Throughput is then set by the slowest stage.
The cameras of one node serving a rig share one publisher thread instead
(:mod:`~sam2_ros.ros.shared_publisher`): their results are ready together, and it sends every
camera's masks before their states.

Nothing here imports ROS: the node hands in its :class:`Outputs` (the publishers object,
:class:`sam2_ros.ros.publishers.Publishers`), so the policy is testable with fakes
(test/ros/test_ros_pipeline.py).
"""

from __future__ import annotations

import collections
import threading
import traceback
from typing import Any, Callable, Deque, Optional, Protocol

from sam2_ros.ros.mailbox import Published

# Items (frames' results) waiting for the publisher thread before the worker blocks: two lets
# the engine run one frame ahead of publishing without letting latency pile up.
DEFAULT_DEPTH = 2


class Outputs(Protocol):
    """Where a frame's results go: ``publish`` sends mask, state (and objects), which is
    ``publish_masks`` then ``publish_state`` (what a shared publisher calls);
    ``publish_overlay`` renders and sends the overlay, only where ``has_overlay`` and while
    ``wants_overlay()`` (someone subscribes to it now); ``alive()`` says whether messages can
    still go out at all (False once Ctrl-C shut the ROS context down: failures then are
    expected and not reported)."""

    has_overlay: bool

    def publish(self, p: Published) -> None: ...

    def publish_masks(self, p: Published) -> None: ...     # publish's halves, in its order

    def publish_state(self, p: Published) -> None: ...

    def publish_overlay(self, p: Published) -> None: ...

    def wants_overlay(self) -> bool: ...

    def alive(self) -> bool: ...


class OutputStage:
    """Publishes :class:`Published` items to ``outputs``, serially or on threads (see the
    module docstring).

    ``done(p)`` runs after ``outputs.publish(p)`` (latency bookkeeping); ``report_error(text)``
    is called for an exception in any of them (the stage keeps going); ``thread_init()`` runs
    first in each thread of the stage (e.g. the CUDA device). ``shared`` (pipelined only): the
    masks and states go out on that :class:`~sam2_ros.ros.shared_publisher.SharedPublisher`'s
    thread with those of other cameras' stages, masks first; this stage keeps its overlay
    thread and counters. ``masks_inline`` (pipelined only): ``put`` publishes the frame's
    masks in the caller's thread (the worker, right after tracking) and hands over the rest.
    """

    def __init__(self, outputs: Outputs, *,
                 done: Callable[[Published], None] = lambda p: None,
                 report_error: Callable[[str], None] = lambda text: None,
                 threaded: bool = False, depth: int = DEFAULT_DEPTH,
                 thread_init: Optional[Callable[[], None]] = None,
                 shared: Optional[Any] = None, masks_inline: bool = False) -> None:
        self.outputs = outputs
        self._publish = outputs.publish
        self._overlay = outputs.publish_overlay if outputs.has_overlay else None
        self._wants, self._alive = outputs.wants_overlay, outputs.alive
        self._done, self._report, self._init = done, report_error, thread_init
        self.threaded = threaded
        self.shared = shared if threaded else None
        self.masks_inline = masks_inline and threaded
        self.depth = max(1, int(depth))
        self._items: Deque[Published] = collections.deque()
        self._overlay_item: Optional[Published] = None
        self._cond = threading.Condition()
        self._closed = False
        self._publisher_done = False
        self._threads: list = []
        self.published = 0          # frames whose mask and state were sent
        self.overlays = 0           # overlays sent
        self.overlays_dropped = 0   # overlays replaced by a newer frame's before they were sent

    # ------------------------------------------------------------------ control
    def start(self) -> None:
        """Start the publisher and overlay threads (pipelined only)."""
        if not self.threaded:
            return
        self._closed = self._publisher_done = False
        self._threads = [] if self.shared is not None else [
            threading.Thread(target=self._run_publisher, daemon=True,
                             name='sam2_tracker_publisher')]
        if self._overlay is not None:
            self._threads.append(threading.Thread(target=self._run_overlay, daemon=True,
                                                  name='sam2_tracker_overlay'))
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Publish what was handed over (every mask and state, and the last overlay), then
        end the threads: after stop() returns nothing is published any more."""
        with self._cond:
            self._closed = True
            # the shared publisher was stopped first (its owner's order): nothing more comes
            self._publisher_done = self._publisher_done or self.shared is not None
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)
        self._threads = []

    @property
    def alive(self) -> bool:
        """Serial: always; pipelined: every thread of the stage (and the shared publisher)
        still runs."""
        if not self.threaded:
            return True
        own = all(t.is_alive() for t in self._threads)
        if self.shared is not None:
            return own and self.shared.alive
        return bool(self._threads) and own

    def pending(self) -> int:
        """Frames handed over and not published yet."""
        if self.shared is not None:
            return self.shared.pending(self)
        with self._cond:
            return len(self._items)

    # ------------------------------------------------------------------ hand-off
    def put(self, p: Published) -> None:
        """Called by the worker for each result, in order. Serial: publish now. Pipelined:
        queue it (blocks while ``depth`` items wait, until the publisher takes one); with
        ``masks_inline`` its masks go out first, from this thread."""
        if not self.threaded:
            self._send(p)
            if self._overlay is not None and self._guard(self._wants) is True:
                self._guard(lambda: self._send_overlay(p))
            return
        if self.masks_inline:
            self.send_masks(p)
        if self.shared is not None:
            self.shared.put(self, p)
            return
        with self._cond:
            while len(self._items) >= self.depth and not self._closed:
                self._cond.wait(0.1)
            if self._closed:
                return
            self._items.append(p)
            self._cond.notify_all()

    # ------------------------------------------------------------------ threads
    def _run_publisher(self) -> None:
        if self._init is not None:
            self._init()
        while True:
            with self._cond:
                while not self._items and not self._closed:
                    self._cond.wait(0.1)
                if not self._items:          # closed and drained
                    self._publisher_done = True
                    self._cond.notify_all()  # the overlay thread may finish too
                    return
                p = self._items.popleft()
                self._cond.notify_all()      # a blocked put may go on
            if p.masks_sent is None:         # masks and state in one call
                self._send(p)
                self.offer_overlay(p)
            else:
                self.finish(p)

    def offer_overlay(self, p: Published) -> None:
        """After p's mask and state: its overlay to the overlay thread while someone
        subscribes (replacing one not sent yet)."""
        if self._overlay is not None and self._guard(self._wants) is True:
            with self._cond:
                if self._overlay_item is not None:
                    self.overlays_dropped += 1
                self._overlay_item = p
                self._cond.notify_all()

    def _run_overlay(self) -> None:
        if self._init is not None:
            self._init()
        while True:
            with self._cond:
                while self._overlay_item is None and not self._publisher_done:
                    self._cond.wait(0.1)
                p, self._overlay_item = self._overlay_item, None
            if p is None:
                return
            self._guard(lambda: self._send_overlay(p))

    # ------------------------------------------------------------------ sending
    def _send(self, p: Published) -> None:
        if self._guard(lambda: self._publish(p)) is not _FAILED:
            self._sent(p)

    def _sent(self, p: Published) -> None:
        with self._cond:
            self.published += 1
        self._guard(lambda: self._done(p))

    def send_masks(self, p: Published) -> None:
        """The first half of p: its masks, noted in ``p.masks_sent`` (False when that failed,
        reported: its state is then not sent, as ``publish`` would not)."""
        p.masks_sent = self._guard(lambda: self.outputs.publish_masks(p)) is not _FAILED

    def finish(self, p: Published) -> None:
        """The second half of p, after ``send_masks``: its state and objects (when the masks
        went out), the bookkeeping, the overlay."""
        if p.masks_sent and self._guard(lambda: self.outputs.publish_state(p)) is not _FAILED:
            self._sent(p)
        self.offer_overlay(p)

    def _send_overlay(self, p: Published) -> None:
        self._overlay(p)
        with self._cond:
            self.overlays += 1

    def _guard(self, fn: Callable[[], object]) -> object:
        """``fn()``, or ``_FAILED`` after reporting its exception (with the traceback): one
        bad message never stops the stage."""
        try:
            return fn()
        except Exception as exc:  # a message that cannot be built, a destroyed publisher...
            if self._alive():
                self._report(f'publishing failed: {exc!r}\n{traceback.format_exc()}')
            return _FAILED


_FAILED = object()
