"""One camera's time line: the stamps its processed frames went through, and the /clock jumps
noted for it that the worker has not applied yet.

The node keeps it over deactivate and activate, as the tracker keeps its objects: a bag
restarted while the node was inactive goes back from the last stamp of the activation before,
and a /clock jump noted while inactive is applied by the next activation's worker (before its
first frame). Cleanup drops it with the tracker.

A /clock jump is noted by the executor's thread, in arrival order with the frames and prompts
(:func:`~sam2_ros.ros.mailbox.arrival_seq`), never refused. The worker takes every waiting prompt
before the next queued frame, so it applies a jump before the first frame received after it
(or when no frame waits): frames received before the jump, still queued behind a busy worker,
are tracked on the old time line first; prompts received after the jump wait for it. Nothing
here imports ROS.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import List, Optional

from sam2_ros.ros import time_jump
from sam2_ros.ros.mailbox import arrival_seq


@dataclass
class ClockJump:
    """/clock went back by ``back_ns`` to ``to_ns``; ``seq``: when (arrival_seq)."""

    seq: int
    to_ns: int
    back_ns: int


class TimeLine:
    """The stamps of one camera's processed frames (stamped frames only: an unstamped frame
    says nothing about time) and its noted /clock jumps. ``reset_after_s``: time_jump_reset_s
    (time_jump.restarted)."""

    def __init__(self, reset_after_s: float = time_jump.RESET_AFTER_S) -> None:
        self.reset_after_ns = int(round(max(0.0, float(reset_after_s)) * 1e9))
        self.last_ns: Optional[int] = None          # the last stamped frame processed
        self.before_last_ns: Optional[int] = None   # the stamped frame before it
        self.first_ns: Optional[int] = None         # the first stamped frame of this time line
        self._lock = threading.Lock()               # jumps: noted by the executor's thread
        self._jumps: List[ClockJump] = []

    def advance(self, stamp_ns: int) -> None:
        """A frame stamped ``stamp_ns`` was processed (0: unstamped, nothing changes)."""
        if stamp_ns > 0:
            self.before_last_ns, self.last_ns = self.last_ns, stamp_ns
            if self.first_ns is None:
                self.first_ns = stamp_ns

    def restart(self) -> None:
        """A new time line: no stamp seen yet (the noted jumps stay)."""
        self.last_ns = self.before_last_ns = self.first_ns = None

    def restarts(self, back_ns: int, to_ns: int) -> bool:
        """Whether going back by ``back_ns`` to ``to_ns`` is a new time line (a reset)."""
        return time_jump.restarted(back_ns, to_ns, self.first_ns, self.reset_after_ns)

    # ------------------------------------------------------------------ /clock jumps
    def note_jump(self, to_ns: int, back_ns: int) -> None:
        """/clock went back (any thread): applied by the worker in arrival order."""
        with self._lock:
            self._jumps.append(ClockJump(arrival_seq(), int(to_ns), int(back_ns)))

    def jump_before(self, seq: int) -> bool:
        """Whether a jump not applied yet arrived before the item numbered ``seq``: a prompt
        of the new time line, which waits for the jump."""
        with self._lock:
            return any(j.seq < seq for j in self._jumps)

    def take_jumps(self, before_seq: Optional[int] = None) -> Optional[ClockJump]:
        """Remove the jumps that arrived before ``before_seq`` (None: all of them), as one:
        back to the earliest time any went to, by the furthest step; None when there is none."""
        with self._lock:
            taken = [j for j in self._jumps if before_seq is None or j.seq < before_seq]
            self._jumps = self._jumps[len(taken):]      # noted in arrival order
        if not taken:
            return None
        return ClockJump(taken[-1].seq, min(j.to_ns for j in taken),
                         max(j.back_ns for j in taken))

    @property
    def pending_jumps(self) -> int:
        with self._lock:
            return len(self._jumps)
