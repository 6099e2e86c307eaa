"""The real-time policy of the node: what happens between a message arriving and a result.

ROS callbacks only drop messages into a :class:`Mailbox`; ONE :class:`TrackingWorker` thread
decodes and runs the tracker, so the executor never waits on the model and the tracker is only
ever touched by one thread. Its results go to an :class:`~sam2_ros.ros.pipeline.OutputStage`,
which publishes them in this thread (serial) or on threads of its own (pipeline). Nothing here
imports ROS: the node hands in a :class:`~sam2_ros.ros.worker_types.WorkerHost` (decoding,
conversions, run-time rules, logging) and :class:`~sam2_ros.ros.pipeline.Outputs`
(publishing), so the policy is testable with a fake tracker.

What waits and what is dropped is the :class:`~sam2_ros.ros.mailbox.Mailbox`'s policy; items
stamped for a future frame wait in one :class:`~sam2_ros.ros.hold.StampHold`; detections are
turned into prompts by :mod:`sam2_ros.ros.worker_detections`. A prompt's header stamp picks
its frame: zero -> the next frame; equal to the last processed frame -> applied to that frame
now (``corrections_on_next_frame``: with the next frame, or after ``deferred_wait_ms`` without
one: :mod:`~sam2_ros.ros.deferred_wait`); older -> the latest frame, with a warning; newer ->
held until the first frame whose stamp is >= it, and applied before tracking it. Time going
backwards (:mod:`~sam2_ros.ros.time_jump`, :mod:`~sam2_ros.ros.worker_time`) resets the
objects, the held items and the stamp table.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

from sam2_ros.engine.errors import FrameError, StepError, TrackerError
from sam2_ros.engine.frame_in import Frame
from sam2_ros.engine.types import FrameResult
from sam2_ros.ros import detections as det
from sam2_ros.ros import hold, time_jump
from sam2_ros.ros.deferred_wait import DeferredWait
from sam2_ros.ros.hold import Held, StampHold
from sam2_ros.ros.inputs import ACTION_REMOVE, ACTION_RESET
from sam2_ros.ros.mailbox import (  # noqa: F401 (re-exported: the worker's public names)
    LATEST, FrameItem, FrameTimes, LatencyWindow, Mailbox, PromptItem, Published, arrival_seq,
    describe)
from sam2_ros.ros.pipeline import OutputStage, Outputs
from sam2_ros.ros.stall_trace import StallTracer, traced
from sam2_ros.ros.time_line import TimeLine
from sam2_ros.ros.worker_detections import DetectionPrompts
from sam2_ros.ros.worker_time import TimeKeeper
from sam2_ros.ros.worker_types import (  # noqa: F401 (StartedFrame: re-exported)
    ErrorLog, StartedFrame, WorkerCounters, WorkerHost)


class TrackingWorker:
    """The one thread that owns the tracker: prompts between frames, then decode/track, then
    the result to the output stage (``pipeline``: on threads of its own).

    ``association`` is the detection association memory; the node owns it (it outlives an
    activation), a fresh one by default. ``corrections_on_next_frame``: a correction on the
    last processed frame is deferred to the next one (``defer_prompt``; ``deferred_wait_s``
    without a frame: applied then, re-published) instead of applied and re-published at once
    (NodeOptions says why); a new object's prompt is applied at once either way. ``shared``: a
    :class:`~sam2_ros.ros.shared_publisher.SharedPublisher` that publishes this camera's masks
    and states with other cameras' (pipelined; its owner commits the batches).
    ``masks_from_worker`` (pipelined): this thread publishes each frame's masks as it hands the
    frame over; the publisher thread sends the rest. ``time_line``: as ``association``.
    """

    def __init__(self, tracker: Any, mailbox: Mailbox, host: WorkerHost, outputs: Outputs, *,
                 association: Optional[det.Association] = None,
                 pipeline: bool = False,
                 driver_alive: Optional[Callable[[], bool]] = None,
                 corrections_on_next_frame: bool = False, deferred_wait_s: float = 0.0,
                 stall: Optional[StallTracer] = None,
                 shared: Optional[Any] = None, masks_from_worker: bool = False,
                 time_line: Optional[TimeLine] = None) -> None:
        self.tracker = tracker
        self.stall = stall     # samples the threads' stacks of a stalled track call (or None)
        self.defer_corrections = corrections_on_next_frame
        self.deferred_wait = DeferredWait(deferred_wait_s)
        # a camera of the multi-camera worker has no thread: that worker's thread drives it
        self.driver_alive = driver_alive
        self.mailbox = mailbox
        self.host = host
        self.counters = WorkerCounters()
        self.errors = ErrorLog(host.log)
        self.latency = LatencyWindow()
        self.hold = StampHold(mailbox.prompt_queue_size)
        self.detections = DetectionPrompts(
            tracker, association if association is not None else det.Association(), host,
            self.errors, self.counters, held_prompts=self.hold.add_prompts)
        # the outputs: published from this thread (serial) or handed to the publisher
        # thread (pipeline; ``shared``: one SharedPublisher's for several cameras); see
        # sam2_ros/ros/pipeline.py
        self.output = OutputStage(outputs, done=self._published, report_error=self.errors.report,
                                  threaded=pipeline, thread_init=host.thread_init,
                                  shared=shared, masks_inline=masks_from_worker)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.time = TimeKeeper(time_line or TimeLine(), self.hold, self.errors, self._refuse_item)
        self._last: Optional[Tuple[Frame, Any]] = None  # (rgb, header) of the last frame
        # its stamp, 0 when unstamped (a Point click's frame; the time line keeps stamped
        # frames only); None before the time line's first frame
        self.latest_frame_ns: Optional[int] = None

    # ------------------------------------------------------------------ thread control
    def start(self) -> None:
        self._stop.clear()
        self.output.start()
        self._thread = threading.Thread(target=self._run, name='sam2_tracker_worker', daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the frame in progress (a model step cannot be interrupted), then publish
        what was handed to the output stage: after it no worker thread runs or publishes."""
        self._stop.set()
        self.mailbox.close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.output.stop(timeout)

    def drop_pending(self) -> List[str]:
        """Forget what is held for frames not seen yet (stopping); what, for the caller."""
        return [h.what for h in self.hold.drain()] + [describe(i.kind, i.stamp_ns)
                                                      for i in self.time.take_waiting()]

    @property
    def waiting_prompts(self) -> int:
        """Prompts and detections held for a frame or a /clock jump (any thread: lengths)."""
        return len(self.hold) + self.time.waiting

    @property
    def detection_counts(self) -> Dict[str, int]:
        return self.detections.counts

    @property
    def alive(self) -> bool:
        if self.driver_alive is not None:
            return self.driver_alive() and self.output.alive
        return self._thread is not None and self._thread.is_alive() and self.output.alive

    def _emit(self, res: FrameResult, rgb: Frame, header: Any, decode_ms: float,
              recv_t: Optional[float], times: Optional[FrameTimes] = None) -> None:
        """One result to the output stage with the errors since the last and the counters
        now (a pipelined publisher must not report later counts)."""
        if times is not None:
            times.handed = time.monotonic()
        self.output.put(Published(res, rgb, header, decode_ms, recv_t, self.errors.drain(),
                                  processed=self.counters.processed,
                                  dropped=self.mailbox.dropped, times=times))

    def _emit_again(self, res: FrameResult) -> None:
        """A prompt changed the last frame: published again (a paused camera shows it)."""
        if self._last is not None:
            rgb, header = self._last
            self._emit(res, rgb, header, 0.0, None)

    def _published(self, p: Published) -> None:
        """After a frame's mask and state were sent: its receive -> published latency."""
        if p.recv_t is not None:
            done = time.monotonic()
            self.latency.add(done, (done - p.recv_t) * 1e3)

    def refuse(self, what: str, why: str) -> None:
        """Every refused prompt: counted (``prompt_errors``), 'rejected <what>: <why>'."""
        self.counters.add_prompt_errors()
        self.errors.report(f'rejected {what}: {why}')

    def _refuse_item(self, item: PromptItem, why: str) -> None:
        """A prompt refused, or a detection message (counted with the detections)."""
        if item.kind == hold.DETECTIONS:
            self.detections.reject(item, why)
            self.detections.counts['messages'] += 1
        else:
            self.refuse(describe(item.kind, item.stamp_ns), why)

    # ------------------------------------------------------------------ main loop
    def _run(self) -> None:
        self.host.thread_init()
        while not self._stop.is_set():
            self.run_once(0.1)

    def run_once(self, timeout: float) -> bool:
        """One round of the thread: wait up to ``timeout`` s, then the prompts, the jobs and
        the frame that waited. With no frame waiting, every frame received before a /clock jump
        noted before the round is done: the jump is applied now. Whether anything came."""
        mark = arrival_seq()
        frame, prompts = self.mailbox.take(timeout)
        if self._stop.is_set():
            return False
        try:
            for item in prompts:
                self.handle_prompt(item)
            for job in self.mailbox.take_jobs():   # ~/segment_image requests
                job.run()
            if frame is not None:
                self.handle_frame(frame)
            else:
                self.idle(mark)
        except Exception as exc:  # never let the worker die silently
            self.counters.consecutive_failures += 1
            self.errors.report(f'internal error: {exc!r}\n{traceback.format_exc()}')
        return frame is not None or bool(prompts)

    def handle_prompt(self, item: PromptItem) -> None:
        """A prompt, click or detections message for this camera: applied now or held for its
        frame (the multi-camera worker drives its lanes by this, begin_ and finish_frame)."""
        if self.time.wait_for_jump(item):    # the new time line's: after the jump
            return
        what = describe(item.kind, item.stamp_ns)
        held = Held(item, what)
        if held.detections:
            self._on_detections(held)
            return
        try:
            held.action, held.prompt = self.host.convert(item)
        except TrackerError as exc:
            self.refuse(what, f'{type(exc).__name__}: {exc}')
            return
        if item.stamp_ns == LATEST:
            if self.latest_frame_ns is not None:   # the frame on screen, stamped or not
                self._apply(held, now=True)
                return
            item.stamp_ns = 0
        last = self.time.line.last_ns
        where, why = self.hold.place(held, last, self.latest_frame_ns == 0)
        if where == hold.REFUSE:
            self.refuse(what, why)
        elif where == hold.HOLD:
            self.hold.hold(held)
        else:
            if where == hold.OLD:
                self.host.log('warn', f'{what} is older than the latest frame ({last} ns): '
                                      f'applied to the latest frame')
                self.time.note_old(held)
            self._apply(held, now=True)

    def idle(self, before_seq: Optional[int] = None) -> None:
        """A round without a frame: the /clock jumps noted before it; corrections deferred for
        ``deferred_wait_s`` without a frame applied to the last one, published again."""
        self.apply_jumps(before_seq)
        self.deferred_wait.apply(self.tracker, self._emit_again, self.refuse)

    def apply_jumps(self, before_seq: Optional[int] = None) -> None:
        """The /clock jumps noted before the item numbered ``before_seq`` (None: all): a reset
        when they start a new time line, then the items that waited for them."""
        jump = self.time.clock_jump(before_seq)
        if jump is not None:
            self.time_jumped(time_jump.CLOCK_JUMP_REASON, to_ns=jump.to_ns)
        for item in self.time.take_waiting():
            self.handle_prompt(item)

    def time_jumped(self, why: str, to_ns: Optional[int] = None) -> None:
        """Time went backwards (time_jump.py): as ROS nodes handle a clock reset, forget what
        was kept by time (objects, held items, named in a warning, the stamp table); a new
        run's prompts stamped from ``to_ns`` on are held for their frames (worker_time.py)."""
        self.tracker.reset()
        self.detections.forget_objects()
        dropped = self.time.restart(to_ns)
        if dropped:
            self.host.log('warn', hold.dropped_line(dropped, 'frames before the jump'))
        self.detections.forget_frames()
        self._last = self.latest_frame_ns = None
        self.host.log('warn', f'{why}: objects, held prompts and the stamp table were reset')

    def _on_detections(self, held: Held) -> None:
        """A Detection2DArray: associated now when its frame was processed, held until its
        frame when newer (the detector was faster than us; StampHold.place says how much).
        Counted in 'messages' once handled (held, associated or rejected)."""
        where, why = self.hold.place(held, self.time.line.last_ns, self.latest_frame_ns == 0)
        try:
            if where == hold.REFUSE:
                self.detections.reject(held.item, why)
            elif where == hold.HOLD:
                self.hold.hold(held)
            else:
                self._associate(held.item)
        finally:
            self.detections.counts['messages'] += 1

    def _associate(self, item: PromptItem) -> None:
        res = self.detections.associate(item)
        if res is not None and self._last is not None:
            self.detections.remember(self.latest_frame_ns, res)
            self._emit_again(res)

    def _apply(self, held: Held, now: bool) -> None:
        """A converted prompt: to the last processed frame (``now``: re-published, or deferred
        to the next frame with ``corrections_on_next_frame``) or queued for the frame about to
        be tracked."""
        action, prompt = held.action, held.prompt
        try:
            if action == ACTION_RESET:
                self.tracker.reset()
                self.detections.forget_objects()
                if now:
                    self.hold.drop_prompts()
            elif action == ACTION_REMOVE:
                self.tracker.remove_object(prompt.obj_id)
                self.detections.forget_objects([prompt.obj_id])
            elif now and self.defer_corrections and prompt.obj_id in self.tracker.object_ids:
                self.tracker.defer_prompt(prompt)   # the next frame's result shows it
                self.deferred_wait.note(self.tracker.frame_index)
                self.detections.note_prompt(prompt.obj_id)
            elif now:
                # a new object is on that frame now: detections of it (and its class '')
                # must see it before the next frame
                res = self.tracker.add_prompt(prompt)
                self.detections.note_prompt(prompt.obj_id)
                self.detections.remember(self.latest_frame_ns, res)
                self._emit_again(res)
            else:
                self.tracker.queue_prompt(prompt)
                self.detections.note_prompt(prompt.obj_id, next_frame=True)
        except TrackerError as exc:
            self.refuse(held.what, f'{type(exc).__name__}: {exc}')

    def handle_frame(self, item: FrameItem) -> None:
        """A frame: decoded, tracked and published (one round of this worker's thread)."""
        started = self.begin_frame(item)
        if started is not None:
            self.finish_frame(started, self._track(started.rgb))

    def begin_frame(self, item: FrameItem) -> Optional['StartedFrame']:
        """Decode a frame and apply what is due for it; None when it cannot be decoded
        (reported). The caller tracks ``rgb`` and hands the result to :meth:`finish_frame`."""
        self.apply_jumps(item.seq)      # a /clock jump received before this frame comes first
        times = FrameTimes(recv=item.recv_t, decode0=time.monotonic())
        try:
            rgb = self.host.decode(item.msg)
        except TrackerError as exc:
            self._frame_failed(f'frame skipped: {exc}')
            return None
        times.decode1 = time.monotonic()
        stamp = item.stamp_ns
        self.time.frame_source(str(getattr(item.header, 'frame_id', '')))
        why = self.time.frame_restarts(stamp)
        if why is not None:
            self.time_jumped(why, stamp)
        for held, why in self.hold.never_due(stamp, self.time.line.last_ns is None):
            if held.detections:
                self.detections.reject(held.item, why)
            else:
                self.refuse(held.what, why)
        for held in self.hold.take_due(item.stamp_ns, detections=False):
            self._apply(held, now=False)
        times.engine0 = time.monotonic()
        return StartedFrame(item, rgb, times)

    def finish_frame(self, started: 'StartedFrame', res: Optional[FrameResult],
                     ended: Optional[float] = None) -> None:
        """After tracking a begun frame: publish its result (None: it failed, reported).
        ``ended``: when its tracking ended (``time.monotonic()``; by default now), for the
        multi-camera worker, whose one track call ended before it finishes each camera."""
        if res is None:
            return
        item, rgb, times = started.item, started.rgb, started.times
        decode_ms = (times.decode1 - times.decode0) * 1e3
        times.engine1 = time.monotonic() if ended is None else ended
        self.counters.processed += 1
        self.counters.consecutive_failures = 0
        self.counters.objects = len(res.objects)
        self.time.frame_done(item.seq, item.stamp_ns)
        self.latest_frame_ns = item.stamp_ns
        self._last = (rgb, item.header)
        self.detections.remember(item.stamp_ns, res)
        self._emit(res, rgb, item.header, decode_ms, item.recv_t, times)
        for held in self.hold.take_due(item.stamp_ns, detections=True):
            if held.item.stamp_ns == item.stamp_ns:
                self._associate(held.item)
            else:
                self.detections.reject(held.item, f'no frame with this stamp was processed '
                                                  f'(the next one was {item.stamp_ns} ns): '
                                                  f'dropped, failed or never received')

    def _track(self, rgb: Frame) -> Optional[FrameResult]:
        """The tracker's result for the frame, or None when it failed (reported)."""
        try:
            with traced(self.stall):
                return self.tracker.track(rgb)
        except TrackerError as exc:
            return self.track_failed(rgb, exc)

    def track_failed(self, rgb: Frame, exc: TrackerError) -> Optional[FrameResult]:
        """The frame's tracking raised ``exc``: reported; a refused queued prompt (the
        tracker drops it) gets one retry of the frame, a frame or step error fails it."""
        self.errors.report(f'{type(exc).__name__}: {exc}')
        if isinstance(exc, (FrameError, StepError)):
            # a wrong-size frame, or a failed computation (e.g. out of memory): this frame
            # is reported failed; the tracker is consistent and takes the next one
            self._frame_failed(None)
            return None
        try:
            return self.tracker.track(rgb)
        except TrackerError as exc2:
            self._frame_failed(f'frame skipped: {type(exc2).__name__}: {exc2}')
            return None

    def _frame_failed(self, text: Optional[str]) -> None:
        self.counters.frame_errors += 1
        self.counters.consecutive_failures += 1
        if text:
            self.errors.report(text)
