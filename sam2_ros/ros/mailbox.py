"""Hand-offs between the ROS callbacks and the worker: what waits, and what is dropped.

Frames: by default a one-slot mailbox keeps only the newest frame (a live camera wants the
freshest result; every replaced frame counts as dropped). ``every_frame=True`` is a FIFO of
``fifo_size`` frames whose ``put`` blocks while full (bag replay: nothing is dropped; the
subscription then keeps all history, so DDS holds the backlog instead of losing it).

Prompts: a FIFO of ``prompt_queue_size``; when full the NEWEST prompt is rejected with an error
(the user sees it and can resend; silently dropping an older accepted prompt would be worse).
Jobs (``~/segment_image`` requests, :mod:`~sam2_ros.ros.segment_service`): run by the worker
between frames, before the frame taken with them; closing abandons those not started.
Nothing here imports ROS: items carry the raw messages, converted by the worker.
"""

from __future__ import annotations

import collections
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional, Protocol, Tuple

import numpy as np
# np.percentile's first call imports numpy.ma (np.unique checks np.ma.is_masked): tens of ms of
# module code holding the GIL on the first diagnostics tick, while frames stream
import numpy.ma  # noqa: F401

from sam2_ros.engine.frame_in import Frame
from sam2_ros.engine.types import FrameResult

# PromptItem.stamp_ns of a click without a stamp (rqt_image_view's Point): the user clicked
# what is shown, the latest processed frame; before any frame it waits for the next one.
LATEST = -1

_ARRIVALS = itertools.count(1)
_ARRIVALS_LOCK = threading.Lock()


def arrival_seq() -> int:
    """The next number of one process-wide count: the order in which frames, prompts and clock
    jumps arrived, whichever callback thread took them. The worker takes frames and prompts from
    separate queues (every waiting prompt before the next frame); this order tells which frames
    came before a /clock jump (time_line.py), and which before a prompt applied as old."""
    with _ARRIVALS_LOCK:
        return next(_ARRIVALS)


def describe(kind: str, stamp_ns: int) -> str:
    """A prompt's name in messages: its kind and the frame its stamp names."""
    if stamp_ns == LATEST:
        return f'{kind} (no stamp: the latest frame)'
    if stamp_ns == 0:
        return f'{kind} (stamp 0: the next frame)'
    return f'{kind} (stamp {stamp_ns} ns)'


@dataclass
class FrameItem:
    msg: Any            # the raw ROS image message; decoded by the worker, not the callback
    stamp_ns: int
    header: Any
    recv_t: float       # time.monotonic() at receipt
    seq: int = field(default_factory=arrival_seq, compare=False)   # arrival order, when made


@dataclass
class FrameTimes:
    """When one frame passed each stage of the node, on ``time.monotonic()`` (one clock for
    every process of the host, so a benchmark can put them between its camera's publish and
    its mask receipt). Filled by the worker (receipt to engine end) and the publisher (mask
    sent); written out by :mod:`sam2_ros.ros.timing_log` when the node's ``timing_log`` is set."""

    recv: float = 0.0          # image callback (message taken and converted by rclpy)
    decode0: float = 0.0       # the worker took the frame and starts decoding
    decode1: float = 0.0
    engine0: float = 0.0       # tracker.track() called (due prompts applied before it; several
    #                            cameras: their one track call, after every camera's decode)
    engine1: float = 0.0
    handed: float = 0.0        # the worker handed the result to the output stage
    out0: float = 0.0          # the publisher starts on this frame (the mask message built)
    mask0: float = 0.0         # mask publish() called
    mask1: float = 0.0         # mask publish() returned
    state1: float = 0.0        # state publish() returned


@dataclass
class PromptItem:
    msg: Any            # raw ROS message (Prompt or PointStamped); converted by the worker
    kind: str           # 'prompt' | 'click' | 'detections' (vision_msgs Detection2DArray)
    stamp_ns: int       # 0 = next frame; LATEST = the latest processed frame
    seq: int = field(default_factory=arrival_seq, compare=False)   # arrival order, when made


@dataclass
class Published:
    """What the node publishes for one frame (all ROS-free; the node builds the messages)."""

    result: FrameResult
    rgb: Frame          # [H, W, 3] uint8: numpy, or a CUDA tensor decoded by nvJPEG
    header: Any
    decode_ms: float
    recv_t: Optional[float]   # None when re-published after a prompt on an old frame
    errors: List[str]
    processed: int = 0        # frames processed in this activation when it was handed over
    dropped: int = 0          # frames dropped in this activation (newest-frame policy)
    times: Optional[FrameTimes] = None   # None for a re-publish after a prompt
    publish_s: float = 0.0    # seconds spent publishing it so far (its masks, its state)
    masks_sent: Optional[bool] = None   # its masks went out (False: failed) before its state


class Job(Protocol):
    """Work for the worker thread (the one that may touch the tracker)."""

    def run(self) -> None: ...                       # on the worker thread; never raises

    def abandon(self, reason: str) -> bool: ...      # it will not run: answer ``reason``


class Mailbox:
    """Frames, prompts and jobs waiting for the worker, behind one condition variable."""

    def __init__(self, every_frame: bool, fifo_size: int, prompt_queue_size: int) -> None:
        self.every_frame = every_frame
        self.fifo_size = max(1, int(fifo_size)) if every_frame else 1
        self.prompt_queue_size = max(1, int(prompt_queue_size))
        self._frames: Deque[FrameItem] = collections.deque()
        self._prompts: Deque[PromptItem] = collections.deque()
        self._jobs: Deque[Job] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self.received = 0
        self.dropped = 0
        self.last_recv_t: Optional[float] = None
        # diagnostics ticks in a row with no frame and no image publisher; None once logged
        # (diagnostics.warn_silent_topic: once per activation, as each has its own mailbox)
        self.silent_ticks: Optional[int] = 0

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

    def put_job(self, job: Job) -> bool:
        """Queue a job for the worker; False when the mailbox is closed (the worker stops)."""
        with self._cond:
            if self._closed:
                return False
            self._jobs.append(job)
            self._cond.notify_all()
            return True

    def take_jobs(self) -> List[Job]:
        """The jobs waiting now (the worker runs them in order)."""
        with self._cond:
            jobs = list(self._jobs)
            self._jobs.clear()
            return jobs

    def take(self, timeout: float) -> Tuple[Optional[FrameItem], List[PromptItem]]:
        """Wait up to ``timeout`` s; return (oldest frame or None, all waiting prompts)."""
        with self._cond:
            if not (self._frames or self._prompts or self._jobs or self._closed):
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
            jobs = list(self._jobs)
            self._jobs.clear()
            self._cond.notify_all()
        for job in jobs:
            job.abandon('the tracker stopped (deactivated) before the request ran')


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
