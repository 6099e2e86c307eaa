"""The tracking worker's side of time going backwards (:mod:`~sam2_ros.ros.time_jump`): which
frame or /clock jump starts a new time line, what is reported instead, and the prompts that a
new time line may claim: those applied as old just before a frame jumped back, and those
received after a /clock jump that frames received before it still hold back.

A prompt older than the latest frame is applied to it (as :mod:`~sam2_ros.ros.worker` says) and
kept here until a frame received after it is processed: when a frame jumps back to its stamp
first, it was the new run's (a replay restarted, its first prompt ahead of its first frame,
maybe with frames of the old run still queued behind a busy worker) and is held for its frame
again. The worker applies what is decided here (reset, apply, refuse); only its thread calls
this. Nothing here imports ROS.
"""

from __future__ import annotations

import collections
from typing import Callable, Deque, List, Optional, Set, Tuple

from sam2_ros.ros import time_jump
from sam2_ros.ros.hold import DETECTIONS, Held, StampHold
from sam2_ros.ros.mailbox import PromptItem
from sam2_ros.ros.time_line import ClockJump, TimeLine
from sam2_ros.ros.worker_types import ErrorLog


MAX_SOURCES_SAID = 8     # frame_id changes reported per worker (a driver renaming at random)


class TimeKeeper:
    """One camera worker's time: its :class:`TimeLine` (``line``), its ``hold``, and what it
    keeps for a jump. ``refuse(item, why)`` refuses an item (prompt or detections) for the
    worker."""

    def __init__(self, line: TimeLine, hold: StampHold, errors: ErrorLog,
                 refuse: Callable[[PromptItem, str], None]) -> None:
        self.line = line
        self.hold = hold
        self.errors = errors
        self.refuse = refuse
        # prompts applied as old, no frame received after them processed yet; the newest
        # prompt_queue_size (a mask prompt keeps a whole image)
        self._applied_old: Deque[Held] = collections.deque(maxlen=hold.capacity)
        # received after a /clock jump not applied yet: handled once it is, in arrival order
        self._after_jump: List[PromptItem] = []
        self._frame_id: Optional[str] = None        # of the latest frame (frame_source)
        self._sources_said: Set[Tuple[str, str]] = set()

    @property
    def waiting(self) -> int:
        """Items waiting for a /clock jump (read from other threads: a length)."""
        return len(self._after_jump)

    @property
    def old_prompts(self) -> int:
        """Prompts applied as old kept for a jump back (at most the hold's capacity)."""
        return len(self._applied_old)

    # ------------------------------------------------------------------ /clock jumps
    def wait_for_jump(self, item: PromptItem) -> bool:
        """Whether ``item`` came after a /clock jump not applied yet: it waits for the jump
        (as many prompts, and detection messages, as the hold takes; the newest is refused
        beyond)."""
        if not self.line.jump_before(item.seq):
            return False
        dets = item.kind == DETECTIONS
        if sum((i.kind == DETECTIONS) == dets for i in self._after_jump) < self.hold.capacity:
            self._after_jump.append(item)
        else:
            what = 'detection messages' if dets else 'prompts'
            self.refuse(item, f'{self.hold.capacity} {what} already wait for the frames after '
                              f'a /clock jump (prompt_queue_size)')
        return True

    def take_waiting(self) -> List[PromptItem]:
        """The items that waited for a jump, oldest first (handled again: one received after a
        later jump waits again)."""
        items, self._after_jump = self._after_jump, []
        return items

    def clock_jump(self, before_seq: Optional[int]) -> Optional[ClockJump]:
        """The /clock jumps noted before the item numbered ``before_seq`` (None: all), as one
        when they start a new time line (a reset is due); a smaller step is reported. Frames
        already nearer the clock's new time than its old one went back before it was seen (a
        new run's first frame delivered before its /clock): that restart was this jump's."""
        jump = self.line.take_jumps(before_seq)
        last = self.line.last_ns
        if jump is None or (last is not None and last - jump.to_ns < jump.back_ns / 2):
            return None
        if self.line.restarts(jump.back_ns, jump.to_ns):
            return jump
        self.errors.report(time_jump.clock_step_reason(jump.back_ns, self.line.reset_after_ns),
                           level='warn')
        return None

    # ------------------------------------------------------------------ frames
    def frame_restarts(self, stamp_ns: int) -> Optional[str]:
        """Why a frame stamped ``stamp_ns`` starts a new time line, or None. A frame older than
        the last processed one after one frame stamped ahead, or by less than
        time_jump_reset_s after the run's first stamp, is reported and the objects kept."""
        line = self.line
        last = line.last_ns
        if last is None or not time_jump.went_back(last, stamp_ns):
            return None
        if time_jump.glitch(line.before_last_ns, stamp_ns):
            self.errors.report(time_jump.glitch_reason(last, stamp_ns))
        elif line.restarts(last - stamp_ns, stamp_ns):
            return time_jump.image_jump_reason(last, stamp_ns)
        else:
            self.errors.report(time_jump.image_step_reason(last, stamp_ns, line.reset_after_ns),
                               level='warn')
        return None

    def frame_source(self, frame_id: str) -> None:
        """Frames of one camera keep one ``frame_id``; two cameras publishing on one topic
        (stamps alike or going back by design) are tracked as one video, wrongly: said once
        per change seen (at most MAX_SOURCES_SAID), in the log and the next state's errors."""
        last, self._frame_id = self._frame_id, frame_id
        if last is None or frame_id == last or len(self._sources_said) >= MAX_SOURCES_SAID:
            return
        if (last, frame_id) not in self._sources_said:
            self._sources_said.add((last, frame_id))
            self.errors.report(f'the frames on this image topic changed frame_id from {last!r} '
                               f'to {frame_id!r}: two cameras on one topic are tracked as one '
                               f'video (give each camera its own topic: the cameras parameter)',
                               level='warn')

    def note_old(self, held: Held) -> None:
        """A prompt older than the latest frame was applied to it."""
        self._applied_old.append(held)

    def frame_done(self, seq: int, stamp_ns: int) -> None:
        """The frame numbered ``seq`` (arrival order), stamped ``stamp_ns``, was processed:
        the prompts applied as old before it arrived were old indeed."""
        self.line.advance(stamp_ns)
        if self._applied_old:
            self._applied_old = collections.deque(
                [h for h in self._applied_old if h.item.seq > seq], self.hold.capacity)

    def restart(self, to_ns: Optional[int]) -> List[str]:
        """A new time line from ``to_ns`` (None: unknown): the hold emptied (its items'
        descriptions returned, to report), the prompts applied as old stamped at or after
        ``to_ns`` held for their frames again. They fit: the hold was just emptied and they
        are at most its capacity."""
        dropped = [h.what for h in self.hold.drain()]
        old, self._applied_old = self._applied_old, collections.deque(maxlen=self.hold.capacity)
        for held in old:
            if to_ns is not None and held.item.stamp_ns >= to_ns:
                self.hold.hold(held)
        self.line.restart()
        return dropped
