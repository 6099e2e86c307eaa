"""The real-time policy of the node: what happens between a message arriving and a result.

ROS callbacks only drop messages into a :class:`Mailbox`; ONE :class:`TrackingWorker` thread
decodes and runs the tracker, so the executor never waits on the model and the tracker is only
ever touched by one thread. Its results go to an :class:`~sam2_ros.ros.pipeline.OutputStage`,
which publishes them in this thread (serial) or on threads of its own (pipeline). Nothing here
imports ROS: decoding and publishing are callables handed in by the node, so the policy is
testable with a fake tracker.

What waits and what is dropped is the :class:`~sam2_ros.ros.mailbox.Mailbox`'s policy;
detections are handled in :mod:`sam2_ros.ros.worker_detections`. A prompt's header stamp
picks its frame: zero -> the next frame; equal to the last processed frame -> applied to that
frame now; older -> applied to the latest frame with a warning; newer -> held until the first
frame whose stamp is >= it, and applied before tracking it.
"""

from __future__ import annotations

import collections
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import numpy as np

from sam2_ros.engine.errors import FrameError, StepError, TrackerError
from sam2_ros.engine.types import FrameResult, Prompt
from sam2_ros.ros import detections as det
from sam2_ros.ros.inputs import ACTION_REMOVE, ACTION_RESET
from sam2_ros.ros.mailbox import (  # noqa: F401 (re-exported: the worker's public names)
    LATEST, FrameItem, LatencyWindow, Mailbox, PromptItem, Published)
from sam2_ros.ros.pipeline import OutputStage
from sam2_ros.ros.worker_detections import DetectionsMixin

# Errors kept for the next TrackingState when no frame succeeds for a while (all are logged).
MAX_HELD_ERRORS = 100


@dataclass
class WorkerCounters:
    processed: int = 0
    frame_errors: int = 0
    prompt_errors: int = 0
    consecutive_failures: int = 0
    objects: int = 0            # objects in the last published result
    errors_since_diag: int = 0
    recent_errors: Deque[str] = field(default_factory=lambda: collections.deque(maxlen=5))


class TrackingWorker(DetectionsMixin):
    """The one thread that owns the tracker: prompts between frames, then decode/track, then
    the result to the output stage.

    ``decode(msg) -> rgb`` and ``convert(PromptItem) -> (action, Prompt|None)`` raise
    TrackerError subclasses for bad input; ``publish(Published)`` sends mask and state,
    ``publish_overlay(Published)`` the overlay while ``wants_overlay()``; with ``pipeline``
    both run on threads of the output stage. ``log(level, text)`` with level 'info' | 'warn' |
    'error'. ``thread_init()`` runs first in every thread (per-thread settings such as the
    current CUDA device).
    """

    def __init__(self, tracker: Any, mailbox: Mailbox, *,
                 decode: Callable[[Any], np.ndarray],
                 convert: Callable[[PromptItem], Tuple[int, Optional[Prompt]]],
                 publish: Callable[[Published], None],
                 log: Callable[[str, str], None],
                 thread_init: Optional[Callable[[], None]] = None,
                 convert_detections: Optional[Callable[[Any], List[det.RawDetection]]] = None,
                 detection_rules: Optional[Callable[[], det.Rules]] = None,
                 association: Optional[det.Association] = None,
                 publish_overlay: Optional[Callable[[Published], None]] = None,
                 wants_overlay: Callable[[], bool] = lambda: True,
                 pipeline: bool = False,
                 outputs_alive: Callable[[], bool] = lambda: True) -> None:
        self.tracker = tracker
        # detections (PromptItem kind 'detections'): message -> RawDetections, the run-time
        # rules, and the association memory (owned by the node: it outlives an activation)
        self._convert_detections = convert_detections
        self._detection_rules = detection_rules or det.Rules
        self.association = association if association is not None else det.Association()
        self._held_detections: List[PromptItem] = []   # stamped for frames not processed yet
        # processed frames by stamp: (processed count, width, height, objects) for detections
        self._seen: 'collections.OrderedDict[int, Tuple[int, int, int, List[det.Tracked]]]' = \
            collections.OrderedDict()
        # every key present from the start: diagnostics read it from the executor thread
        self.detection_counts: Dict[str, int] = dict.fromkeys(
            ('messages', det.NEW, det.CORRECT, det.IGNORE, det.FILTERED, det.SKIPPED,
             'rejected'), 0)
        self._thread_init = thread_init
        self.mailbox = mailbox
        self._decode, self._convert, self._log = decode, convert, log
        # the outputs: published from this thread (serial) or handed to the publisher
        # thread (pipeline); see sam2_ros/ros/pipeline.py
        self.output = OutputStage(publish, publish_overlay=publish_overlay,
                                  wants_overlay=wants_overlay, done=self._published,
                                  report_error=self.report_error, threaded=pipeline,
                                  thread_init=thread_init, alive=outputs_alive)
        # prompts waiting for a future frame: (stamp, action, prompt, description)
        self._pending: List[Tuple[int, int, Optional[Prompt], str]] = []
        self._errors: List[str] = []
        self._err_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.last_stamp_ns: Optional[int] = None
        self._last: Optional[Tuple[np.ndarray, Any]] = None  # (rgb, header) of the last frame
        self.latency = LatencyWindow()
        self.counters = WorkerCounters()

    # ------------------------------------------------------------------ thread control
    def start(self) -> None:
        self._stop.clear()
        self.output.start()
        self._thread = threading.Thread(target=self._run, name='sam2_tracker_worker', daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the frame in progress (a model step cannot be interrupted), then
        publish what that and earlier frames handed to the output stage: when stop()
        returns, no thread of the worker runs and nothing more is published."""
        self._stop.set()
        self.mailbox.close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        self.output.stop(timeout)

    def drop_pending(self) -> List[str]:
        """Forget the prompts held for frames not seen yet (the worker is stopping); their
        descriptions, for the caller to report."""
        held, self._pending = self._pending, []
        dets, self._held_detections = self._held_detections, []
        return [what for _, _, _, what in held] + [
            f'detections (stamp {d.stamp_ns} ns)' for d in dets]

    @property
    def waiting_prompts(self) -> int:
        """Prompts held for a frame whose stamp has not arrived yet (read from other threads:
        a length, no lock needed)."""
        return len(self._pending) + len(self._held_detections)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.output.alive

    def _emit(self, res: FrameResult, rgb: np.ndarray, header: Any, decode_ms: float,
              recv_t: Optional[float]) -> None:
        """Hand one result to the output stage with the errors since the last one and the
        counters as they are now (a pipelined publisher must not report later counts)."""
        self.output.put(Published(res, rgb, header, decode_ms, recv_t, self._drain_errors(),
                                  processed=self.counters.processed,
                                  dropped=self.mailbox.dropped))

    def _published(self, p: Published) -> None:
        """After a frame's mask and state were sent: its receive -> published latency."""
        if p.recv_t is not None:
            done = time.monotonic()
            self.latency.add(done, (done - p.recv_t) * 1e3)

    # ------------------------------------------------------------------ errors
    def report_error(self, text: str, level: str = 'error') -> None:
        """Log an error and keep it for the next TrackingState.errors (thread-safe)."""
        self._log(level, text)
        with self._err_lock:
            if len(self._errors) < MAX_HELD_ERRORS:
                self._errors.append(text)
            self.counters.errors_since_diag += 1
            self.counters.recent_errors.append(text)

    def take_error_count(self) -> Tuple[int, str]:
        """(errors since the previous call, the last error text); resets the count."""
        with self._err_lock:
            n, self.counters.errors_since_diag = self.counters.errors_since_diag, 0
            last = self.counters.recent_errors[-1] if self.counters.recent_errors else ''
        return n, last

    def _drain_errors(self) -> List[str]:
        with self._err_lock:
            errs, self._errors = self._errors, []
        return errs

    # ------------------------------------------------------------------ main loop
    def _run(self) -> None:
        if self._thread_init is not None:
            self._thread_init()
        while not self._stop.is_set():
            frame, prompts = self.mailbox.take(0.1)
            if self._stop.is_set():
                break
            try:
                for item in prompts:
                    self._on_prompt(item)
                if frame is not None:
                    self._on_frame(frame)
            except Exception as exc:  # never let the worker die silently
                self.counters.consecutive_failures += 1
                self.report_error(f'internal error: {exc!r}\n{traceback.format_exc()}')

    def _on_prompt(self, item: PromptItem) -> None:
        if item.kind == 'detections':
            self._on_detections(item)
            return
        what = f'{item.kind} (stamp {item.stamp_ns} ns)'
        try:
            action, prompt = self._convert(item)
        except TrackerError as exc:
            self.counters.prompt_errors += 1
            self.report_error(f'rejected {what}: {exc}')
            return
        last = self.last_stamp_ns
        if item.stamp_ns == LATEST:
            item.stamp_ns = 0 if last is None else last
        if item.stamp_ns == 0 or last is None or item.stamp_ns > last:
            if len(self._pending) >= self.mailbox.prompt_queue_size:
                self.counters.prompt_errors += 1
                self.report_error(f'rejected {what}: {len(self._pending)} prompts already wait '
                                  f'for future frames (prompt_queue_size)')
                return
            self._pending.append((item.stamp_ns, action, prompt, what))
            return
        if item.stamp_ns < last:
            self._log('warn', f'{what} is older than the latest frame ({last} ns): '
                              f'applied to the latest frame')
        self._apply_now(action, prompt, what)

    def _apply_now(self, action: int, prompt: Optional[Prompt], what: str) -> None:
        try:
            if action == ACTION_RESET:
                self.tracker.reset()
                self._pending.clear()
            elif action == ACTION_REMOVE:
                self.tracker.remove_object(prompt.obj_id)
            else:
                res = self.tracker.add_prompt(prompt)
                if self._last is not None:
                    # the camera may be paused: show the corrected frame now (same stamp)
                    rgb, header = self._last
                    self._emit(res, rgb, header, 0.0, None)
        except TrackerError as exc:
            self.counters.prompt_errors += 1
            self.report_error(f'{what}: {type(exc).__name__}: {exc}')

    def _apply_due(self, stamp_ns: int) -> None:
        """Hand prompts due on the frame with ``stamp_ns`` to the tracker, in arrival order."""
        due = [p for p in self._pending if p[0] == 0 or p[0] <= stamp_ns]
        self._pending = [p for p in self._pending if not (p[0] == 0 or p[0] <= stamp_ns)]
        for _, action, prompt, what in due:
            try:
                if action == ACTION_RESET:
                    self.tracker.reset()
                elif action == ACTION_REMOVE:
                    self.tracker.remove_object(prompt.obj_id)
                else:
                    self.tracker.queue_prompt(prompt)
            except TrackerError as exc:
                self.counters.prompt_errors += 1
                self.report_error(f'{what}: {type(exc).__name__}: {exc}')

    def _on_frame(self, item: FrameItem) -> None:
        t0 = time.perf_counter()
        try:
            rgb = self._decode(item.msg)
        except TrackerError as exc:
            self._frame_failed(item, f'frame skipped: {exc}')
            return
        decode_ms = (time.perf_counter() - t0) * 1e3
        self._apply_due(item.stamp_ns)
        try:
            res = self.tracker.track(rgb)
        except TrackerError as exc:
            # A queued prompt that only the frame could check (e.g. a point outside it) makes
            # track() refuse; the tracker drops such prompts, so one retry tracks the frame.
            self.report_error(f'{type(exc).__name__}: {exc}')
            if isinstance(exc, (FrameError, StepError)):
                # a wrong-size frame, or a failed computation (e.g. out of memory): this frame
                # is reported failed; the tracker is consistent and takes the next one
                self._frame_failed(item, None)
                return
            try:
                res = self.tracker.track(rgb)
            except TrackerError as exc2:
                self._frame_failed(item, f'frame skipped: {type(exc2).__name__}: {exc2}')
                return
        self.counters.processed += 1
        self.counters.consecutive_failures = 0
        self.counters.objects = len(res.objects)
        self.last_stamp_ns = item.stamp_ns
        self._last = (rgb, item.header)
        self._remember(item.stamp_ns, res)
        self._emit(res, rgb, item.header, decode_ms, item.recv_t)
        if self._held_detections:
            self._detections_due(item.stamp_ns)

    def _frame_failed(self, item: FrameItem, text: Optional[str]) -> None:
        self.counters.frame_errors += 1
        self.counters.consecutive_failures += 1
        if text:
            self.report_error(text)
