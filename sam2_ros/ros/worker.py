"""The real-time policy of the node: what happens between a message arriving and a result.

ROS callbacks only drop messages into a :class:`Mailbox`; ONE :class:`TrackingWorker` thread
decodes, runs the tracker and publishes, so the executor never waits on the model and the
tracker is only ever touched by one thread. Nothing here imports ROS: decoding and publishing
are callables handed in by the node, so the policy is testable with a fake tracker.

Frames: by default a one-slot mailbox keeps only the newest frame (a live camera wants the
freshest result; every replaced frame counts as dropped). ``every_frame=True`` is a FIFO of
``fifo_size`` frames whose ``put`` blocks while full (bag replay: nothing is dropped; the
subscription then keeps all history, so DDS holds the backlog instead of losing it).

Prompts: a FIFO of ``prompt_queue_size``; when full the NEWEST prompt is rejected with an error
(the user sees it and can resend; silently dropping an older accepted prompt would be worse).
A prompt's header stamp picks its frame: zero -> the next frame; equal to the last processed
frame -> applied to that frame now; older -> applied to the latest frame with a warning;
newer -> held until the first frame whose stamp is >= it, and applied before tracking it.
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

ACTION_ADD, ACTION_REMOVE, ACTION_RESET = 0, 1, 2
# PromptItem.stamp_ns of a click without a stamp (rqt_image_view's Point): the user clicked
# what is shown, the latest processed frame; before any frame it waits for the next one.
LATEST = -1
# Errors kept for the next TrackingState when no frame succeeds for a while (all are logged).
MAX_HELD_ERRORS = 100


@dataclass
class FrameItem:
    msg: Any            # the raw ROS image message; decoded by the worker, not the callback
    stamp_ns: int
    header: Any
    recv_t: float       # time.monotonic() at receipt


@dataclass
class PromptItem:
    msg: Any            # raw ROS message (Prompt or PointStamped); converted by the worker
    kind: str           # 'prompt' | 'click' | 'detections' (vision_msgs Detection2DArray)
    stamp_ns: int       # 0 = next frame; LATEST = the latest processed frame


@dataclass
class Published:
    """What the node publishes for one frame (all ROS-free; the node builds the messages)."""

    result: FrameResult
    rgb: np.ndarray
    header: Any
    decode_ms: float
    recv_t: Optional[float]   # None when re-published after a prompt on an old frame
    errors: List[str]


class Mailbox:
    """Frames and prompts waiting for the worker, behind one condition variable."""

    def __init__(self, every_frame: bool, fifo_size: int, prompt_queue_size: int) -> None:
        self.every_frame = every_frame
        self.fifo_size = max(1, int(fifo_size)) if every_frame else 1
        self.prompt_queue_size = max(1, int(prompt_queue_size))
        self._frames: Deque[FrameItem] = collections.deque()
        self._prompts: Deque[PromptItem] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self.received = 0
        self.dropped = 0
        self.last_recv_t: Optional[float] = None

    def put_frame(self, item: FrameItem) -> None:
        """Latest mode: replace the waiting frame (counted dropped). FIFO: block while full."""
        with self._cond:
            self.received += 1
            self.last_recv_t = item.recv_t
            if not self.every_frame:
                if self._frames:
                    self._frames.clear()
                    self.dropped += 1
            else:
                while len(self._frames) >= self.fifo_size and not self._closed:
                    self._cond.wait(0.1)
                if self._closed:
                    return
            self._frames.append(item)
            self._cond.notify_all()

    def put_prompt(self, item: PromptItem) -> bool:
        """Queue a prompt; False (newest rejected) when the queue is full."""
        with self._cond:
            if len(self._prompts) >= self.prompt_queue_size:
                return False
            self._prompts.append(item)
            self._cond.notify_all()
            return True

    def take(self, timeout: float) -> Tuple[Optional[FrameItem], List[PromptItem]]:
        """Wait up to ``timeout`` s; return (oldest frame or None, all waiting prompts)."""
        with self._cond:
            if not self._frames and not self._prompts and not self._closed:
                self._cond.wait(timeout)
            prompts = list(self._prompts)
            self._prompts.clear()
            frame = self._frames.popleft() if self._frames else None
            self._cond.notify_all()  # a blocked FIFO put may go on
            return frame, prompts

    def pending_frames(self) -> int:
        with self._cond:
            return len(self._frames)

    def pending_prompts(self) -> int:
        with self._cond:
            return len(self._prompts)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._frames.clear()
            self._prompts.clear()
            self._cond.notify_all()


class LatencyWindow:
    """Receive-to-published latencies of recent frames, for rate and p50/p99."""

    def __init__(self, keep: int = 2000) -> None:
        self._items: Deque[Tuple[float, float]] = collections.deque(maxlen=keep)
        self._lock = threading.Lock()

    def add(self, t_done: float, latency_ms: float) -> None:
        with self._lock:
            self._items.append((t_done, latency_ms))

    def summary(self, now: float, window_s: float) -> Dict[str, float]:
        with self._lock:
            recent = [lat for t, lat in self._items if now - t <= window_s]
        if not recent:
            return {'rate_hz': 0.0, 'latency_p50_ms': float('nan'),
                    'latency_p99_ms': float('nan')}
        return {'rate_hz': len(recent) / window_s,
                'latency_p50_ms': float(np.percentile(recent, 50)),
                'latency_p99_ms': float(np.percentile(recent, 99))}


@dataclass
class WorkerCounters:
    processed: int = 0
    frame_errors: int = 0
    prompt_errors: int = 0
    consecutive_failures: int = 0
    objects: int = 0            # objects in the last published result
    errors_since_diag: int = 0
    recent_errors: Deque[str] = field(default_factory=lambda: collections.deque(maxlen=5))


class TrackingWorker:
    """The one thread that owns the tracker: prompts between frames, then decode/track/publish.

    ``decode(msg) -> rgb`` and ``convert(PromptItem) -> (action, Prompt|None)`` raise
    TrackerError subclasses for bad input; ``publish(Published)`` sends the messages.
    ``log(level, text)`` with level 'info' | 'warn' | 'error'. ``thread_init()`` runs first in
    the worker thread (per-thread settings such as the current CUDA device).
    """

    def __init__(self, tracker: Any, mailbox: Mailbox, *,
                 decode: Callable[[Any], np.ndarray],
                 convert: Callable[[PromptItem], Tuple[int, Optional[Prompt]]],
                 publish: Callable[[Published], None],
                 log: Callable[[str, str], None],
                 thread_init: Optional[Callable[[], None]] = None,
                 convert_detections: Optional[Callable[[Any], List[det.RawDetection]]] = None,
                 detection_rules: Optional[Callable[[], det.Rules]] = None,
                 association: Optional[det.Association] = None) -> None:
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
        self._decode, self._convert, self._publish, self._log = decode, convert, publish, log
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
        self._thread = threading.Thread(target=self._run, name='sam2_tracker_worker', daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the frame in progress (a model step cannot be interrupted)."""
        self._stop.set()
        self.mailbox.close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

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
        return self._thread is not None and self._thread.is_alive()

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
                    self._publish(Published(res, rgb, header, 0.0, None, self._drain_errors()))
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
        self._publish(Published(res, rgb, item.header, decode_ms, item.recv_t,
                                self._drain_errors()))
        done = time.monotonic()
        self.latency.add(done, (done - item.recv_t) * 1e3)
        if self._held_detections:
            self._detections_due(item.stamp_ns)

    def _frame_failed(self, item: FrameItem, text: Optional[str]) -> None:
        self.counters.frame_errors += 1
        self.counters.consecutive_failures += 1
        if text:
            self.report_error(text)

    # ------------------------------------------------------------------ detections
    def _remember(self, stamp_ns: int, res: FrameResult) -> None:
        """A processed frame's objects, for detections stamped like it (kept 256 frames; the
        age limit is the run-time rule max_age_frames)."""
        tracked = [det.Tracked(o.obj_id, det.mask_box(o.box), o.state) for o in res.objects]
        self._seen[stamp_ns] = (self.counters.processed, res.width, res.height, tracked)
        self._seen.move_to_end(stamp_ns)
        while len(self._seen) > 256:
            self._seen.popitem(last=False)
        self.association.observe(tracked)

    def _reject_detections(self, item: PromptItem, why: str) -> None:
        self.counters.prompt_errors += 1
        self.detection_counts['rejected'] += 1
        self.report_error(f'rejected detections (stamp {item.stamp_ns} ns): {why}')

    def _on_detections(self, item: PromptItem) -> None:
        """A Detection2DArray: associated now when its frame was processed, held until its
        frame when it is newer than the latest one (the detector was faster than us). Counted
        in 'messages' once handled (held, associated or rejected)."""
        try:
            self._handle_detections(item)
        finally:
            self.detection_counts['messages'] += 1

    def _handle_detections(self, item: PromptItem) -> None:
        if item.stamp_ns <= 0:
            self._reject_detections(item, 'no stamp: stamp detections like the image they '
                                          'were computed on')
            return
        last = self.last_stamp_ns
        if last is None or item.stamp_ns > last:
            if len(self._held_detections) >= self.mailbox.prompt_queue_size:
                self._reject_detections(item, f'{len(self._held_detections)} detection '
                                              f'messages already wait for their frames')
                return
            self._held_detections.append(item)
            return
        self._associate(item)

    def _detections_due(self, stamp_ns: int) -> None:
        """After the frame ``stamp_ns``: associate the detections held for it; those held for
        an earlier stamp will never see their frame (dropped, failed or never sent)."""
        due = [d for d in self._held_detections if d.stamp_ns <= stamp_ns]
        self._held_detections = [d for d in self._held_detections if d.stamp_ns > stamp_ns]
        for d in due:
            if d.stamp_ns == stamp_ns:
                self._associate(d)
            else:
                self._reject_detections(d, f'no frame with this stamp was processed (the next '
                                           f'one was {stamp_ns} ns): dropped, failed or never '
                                           f'received')

    def _associate(self, item: PromptItem) -> None:
        """Detections of an already processed frame -> box prompts on the latest frame."""
        seen = self._seen.get(item.stamp_ns)
        rules = self._detection_rules()
        if seen is None:
            self._reject_detections(item, 'no processed frame has this stamp (never received, '
                                          'dropped, failed, or long ago)')
            return
        index, width, height, tracked = seen
        age = self.counters.processed - index
        if age > rules.max_age_frames:
            self._reject_detections(item, f'its frame is {age} frames old (more than '
                                          f'detection_max_age_frames {rules.max_age_frames})')
            return
        try:
            raws = self._convert_detections(item.msg)
        except Exception as exc:  # a malformed message: say so, keep tracking
            self._reject_detections(item, f'cannot read the message: {exc!r}')
            return
        dets, errors = det.validate_all(raws, width, height)
        for e in errors:
            self.counters.prompt_errors += 1
            self.detection_counts['rejected'] += 1
            self.report_error(f'rejected {e} (stamp {item.stamp_ns} ns)')
        late = f', applied {age} frames later' if age else ''
        res = None
        for d in self.association.plan(dets, tracked, rules, self.tracker.object_ids):
            self.detection_counts[d.kind] += 1
            box = ', '.join(f'{v:.0f}' for v in d.detection.box)
            label = f'detection {d.detection.index} ({d.detection.class_id or "no class"} ' \
                    f'{d.detection.score:.2f}, box {box})'
            if d.kind in (det.NEW, det.CORRECT):
                try:
                    res = self.tracker.add_prompt(Prompt(obj_id=d.obj_id, box=d.detection.box))
                except TrackerError as exc:
                    self.counters.prompt_errors += 1
                    self.report_error(f'{label}: {type(exc).__name__}: {exc}')
                    continue
                self.association.prompted(d)
                self._log('info', f'{label} ' + (f'starts object {d.obj_id}' if d.kind == det.NEW
                                                 else f're-prompts object {d.obj_id}: {d.reason}')
                          + late)
            elif d.kind == det.IGNORE:
                self.association.matched(d)
            elif d.kind == det.SKIPPED:
                self.report_error(f'{label} not started: {d.reason}', level='warn')
        if res is not None and self._last is not None:
            rgb, header = self._last
            self._remember(self.last_stamp_ns, res)
            self._publish(Published(res, rgb, header, 0.0, None, self._drain_errors()))
