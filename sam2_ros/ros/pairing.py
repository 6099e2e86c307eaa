"""Frames of N cameras grouped by stamp, as one tracker step takes them (pure Python, no ROS).

The policy (like ``message_filters``' approximate-time policy, but an unpaired frame never
waits more than one frame period, and nothing is dropped here):

* each camera's frames queue in arrival order; stamps must increase per camera;
* the *pivot* is the queued frame with the earliest stamp (ties: the lower camera index).
  Its group takes, from every other camera, the head of its queue when that head's stamp is
  within ``tolerance_ns`` of the pivot's (``tolerance_ns=0``: equal stamps only). The head is
  the only candidate: every queued stamp is >= the pivot's, and a camera's frames leave in
  order;
* the nearest stamp wins, as in ``message_filters``' policy: a head that is nearer a later
  frame of the pivot's camera than the pivot (strictly: a tie keeps the pivot) is *passed
  over*, left for that frame (cameras at different rates: a 30 Hz frame between two 60 Hz
  ones pairs with the nearer; the pivot then leaves without it). While no later frame of the
  pivot's camera has come, the group waits for one when it could still be nearer: when that
  camera's least stamp gap of late, less their jitter, is below twice the head's distance
  (cameras of one rate with regular stamps never wait once a few gaps were seen: the
  tolerance is at most half a period; no gap seen yet: ``period_ns``). A *timeout* or
  *overflow* ends that wait, the group leaving as it stands;
* the group is released when it is complete, or when it cannot complete any more: every
  camera it lacks has *passed it over* (*nearer*) or *moved past* it (delivered a stamp beyond
  the pivot's + tolerance; its stamps only grow) or is *absent* (no frame for
  ``absent_periods`` periods, more than a dropped frame's gap and its jitter, while the
  pivot's camera went on delivering alone from within one and a half periods of its last
  frame: after a stall of every camera, a burst of one camera's backlog waits for its
  partners; a camera not heard from yet counts from the first frame of any camera), or a
  queued frame has *timed out* (waited ``period_ns``: the pivot's group leaves so that it can
  follow), or a queue holds more than ``queue_size`` frames (*overflow*: a burst of one
  camera while another is late), or the camera is on another *clock* than the pivot's (its
  latest frames and the pivot camera's were each farther than a few periods from all the
  other's recent stamps, see :mod:`~sam2_ros.ros.pairing_clocks`: a camera restarted on sim
  time, or whose clock jumped ahead, would otherwise hold every frame of the camera ahead a
  period; a frame near the other's stamps pairs them again);
* a stamp below its camera's previous one (time jumped back: a bag restarted, a simulator
  reset) is a *reset*: everything queued is released as it stands, the stamps seen are
  forgotten, then the frame is queued. An equal stamp (a repeated frame) is queued as it is.

Time advances only through the ``now_ns`` arguments of ``put`` and ``flush`` (any monotonic
clock, e.g. the receipt time of the frame put): the pairer never sleeps, so the tests are
deterministic. The caller (the node's mailbox) calls ``flush(now)`` by ``next_deadline()``
so that a lone frame leaves after one period even when no other frame arrives.

``period_ns`` is a period of the stamps, the waits above (timeout, absent, a run's start) are
receipt time: where the stamps advance slower than the receipt clock (a bag played at rate
0.5, a simulator slower than real time), the skew between two cameras' frames of one stamp
grows by as much, and a period of receipt time split pairs that a live camera's skew keeps.
So those waits are scaled by :meth:`StampPairer.receipt_scale`, the receipt time per stamp
time over each camera's latest gaps (the least of the cameras'; ``follow_rate=False``: 1).
Below ``RATE_DEAD_BAND`` it is 1, so that a live camera's receipt jitter changes nothing, and
a wait is never below one period of receipt time.

Every frame put comes out in exactly one group. A tolerance of at most half a frame period
keeps matches of cameras at one rate unambiguous (a wider one could pair a frame with its
partner's neighbour), so a wider one is refused. Not thread safe: the node calls it under
its mailbox lock.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any, Deque, Dict, List, Optional, Tuple

from sam2_ros.ros.pairing_clocks import ClockSplit

COMPLETE, MOVED_PAST, NEARER, ABSENT, CLOCK, TIMEOUT, OVERFLOW, RESET, DRAIN = (
    'complete', 'moved_past', 'nearer', 'absent', 'clock', 'timeout', 'overflow', 'reset',
    'drain')
# stamp gaps kept per camera: their least bounds when its next frame can come (a window, so
# that a camera that slows down is seen after this many frames)
GAPS_KEPT = 8
# the jitter assumed of a camera's stamp gaps while few were seen: this share of the gap
JITTER_SHARE = 8
# receipt_scale: measured over a camera's latest GAPS_KEPT gaps once it has RATE_GAPS_MIN (a
# gap or two of a live camera's jitter can look like a slow replay); below RATE_DEAD_BAND it is
# 1 (10 ms of receipt jitter over 4 gaps of a 60 Hz camera: at most 1.15; a replay faster
# than rate 0.8 keeps live skews within the period too); capped (a player paused long would
# otherwise have a lone frame wait for many periods)
RATE_GAPS_MIN = 4
RATE_DEAD_BAND = 1.25
RATE_MAX_SCALE = 10.0


@dataclass
class Arrival:
    """One camera's frame as it was put."""

    camera: int
    stamp_ns: int
    recv_ns: int
    item: Any


@dataclass
class Group:
    """Frames of one step: ``frames[c]`` is camera c's, None where it has none.

    stamp_ns: the pivot's (earliest) stamp; reason: why it was released (COMPLETE, or why
    not: MOVED_PAST, NEARER, ABSENT, CLOCK, TIMEOUT, OVERFLOW, RESET, DRAIN).
    """

    stamp_ns: int
    frames: List[Optional[Arrival]]
    reason: str

    @property
    def complete(self) -> bool:
        return all(f is not None for f in self.frames)


@dataclass
class PairingCounts:
    complete: int = 0          # groups with a frame of every camera
    partial: int = 0           # groups released without some camera's frame
    resets: int = 0            # stamps that went backwards
    clock_splits: int = 0      # pairs of cameras found on different clocks (pairing_clocks)
    by_reason: Dict[str, int] = field(default_factory=collections.Counter)


class StampPairer:
    """Groups frames of ``cameras`` cameras by stamp (see the module docstring)."""

    def __init__(self, cameras: int, period_ns: int, tolerance_ns: int = 0,
                 queue_size: int = 4, absent_periods: float = 3.0,
                 follow_rate: bool = True) -> None:
        if int(cameras) < 1:
            raise ValueError(f'cameras must be >= 1, got {cameras!r}')
        if int(period_ns) <= 0:
            raise ValueError(f'period_ns must be > 0, got {period_ns!r}')
        if not 0 <= int(tolerance_ns) <= int(period_ns) // 2:
            raise ValueError(f'tolerance_ns must be in 0..period_ns/2 ({int(period_ns) // 2}), '
                             f'got {tolerance_ns!r}: a wider one can pair a frame with the '
                             f'neighbour of its partner')
        if int(queue_size) < 1:
            raise ValueError(f'queue_size must be >= 1, got {queue_size!r}')
        if not absent_periods >= 1:
            raise ValueError(f'absent_periods must be >= 1, got {absent_periods!r}')
        self.cameras = int(cameras)
        self.period_ns = int(period_ns)
        self.tolerance_ns = int(tolerance_ns)
        self.queue_size = int(queue_size)
        self.absent_ns = int(absent_periods * self.period_ns)
        self._queues: List[Deque[Arrival]] = [collections.deque() for _ in range(self.cameras)]
        self._last_stamp: List[Optional[int]] = [None] * self.cameras
        self._last_recv: List[Optional[int]] = [None] * self.cameras
        self._prev_recv: List[Optional[int]] = [None] * self.cameras   # the frame before it
        # per camera: the receipt of its first frame since another camera last delivered (a
        # run of this camera alone; None while the others deliver too)
        self._run_start: List[Optional[int]] = [None] * self.cameras
        self._start_ns: Optional[int] = None     # the first frame's receipt (absent cameras)
        # per camera: its latest stamp gaps (> 0), to tell whether its next frame can be nearer
        self._gaps: List[Deque[int]] = [collections.deque(maxlen=GAPS_KEPT)
                                        for _ in range(self.cameras)]
        # per camera: (stamp, receipt) of its latest frames of increasing stamps (receipt_scale;
        # their stamps tell cameras on other clocks)
        self.follow_rate = bool(follow_rate)
        self._times: List[Deque[Tuple[int, int]]] = [collections.deque(maxlen=GAPS_KEPT + 1)
                                                     for _ in range(self.cameras)]
        self._scale = 1.0       # receipt_scale(): the latest measured
        self._clocks = ClockSplit(self.cameras, self.period_ns)   # cameras on other clocks
        self.counts = PairingCounts()

    # ------------------------------------------------------------------ input
    def put(self, camera: int, stamp_ns: int, item: Any, now_ns: int) -> List[Group]:
        """Queue camera ``camera``'s frame (received at ``now_ns``); the groups released now,
        oldest first."""
        if not 0 <= camera < self.cameras:
            raise ValueError(f'camera {camera} out of range 0..{self.cameras - 1}')
        out: List[Group] = []
        last = self._last_stamp[camera]
        if last is not None and stamp_ns < last:       # an equal stamp is a repeat, not a jump
            self.counts.resets += 1
            out += self._drain(RESET)
            self._last_stamp = [None] * self.cameras
            for times in self._times:   # a new time line: measured anew, the last scale kept
                times.clear()
            self._clocks.forget()
        elif last is not None and stamp_ns > last:
            self._gaps[camera].append(int(stamp_ns) - last)
        self.counts.clock_splits += self._clocks.observe(
            camera, int(stamp_ns), self._times)
        if last is None or stamp_ns > last:
            self._times[camera].append((int(stamp_ns), int(now_ns)))
            self._measure_rate()
        self._queues[camera].append(Arrival(camera, int(stamp_ns), int(now_ns), item))
        self._last_stamp[camera] = int(stamp_ns)
        self._prev_recv[camera] = self._last_recv[camera]
        self._last_recv[camera] = int(now_ns)
        run = self._run_start[camera]       # this camera's run goes on; the others' end
        self._run_start = [None] * self.cameras
        self._run_start[camera] = int(now_ns) if run is None else run
        if self._start_ns is None:
            self._start_ns = int(now_ns)
        return out + self._release(int(now_ns))

    def flush(self, now_ns: int) -> List[Group]:
        """The groups that can leave at ``now_ns`` (lone frames that waited a period)."""
        return self._release(int(now_ns))

    def drain(self) -> List[Group]:
        """Release everything queued as it stands (deactivate: nothing is lost)."""
        return self._drain(DRAIN)

    def next_deadline(self) -> Optional[int]:
        """When the longest-waiting frame times out (``now_ns`` units), None when nothing
        waits: call ``flush`` then."""
        oldest = self._oldest_recv()
        return None if oldest is None else oldest + self._receipt(self.period_ns)

    def pending(self, camera: Optional[int] = None) -> int:
        """Frames queued: all cameras', or camera ``camera``'s."""
        if camera is not None:
            return len(self._queues[camera])
        return sum(len(q) for q in self._queues)

    def receipt_scale(self) -> float:
        """Receipt time per stamp time (1 live, 2 for a bag played at rate 0.5): the least
        of the cameras' ratios of receipt span to stamp span over their latest frames (one
        camera's frames arriving late is no slow replay); 1 below ``RATE_DEAD_BAND`` or with
        ``follow_rate`` off, at most ``RATE_MAX_SCALE``. Until a camera has ``RATE_GAPS_MIN``
        gaps: 1 at first, after a reset the scale measured before it (a bag looping)."""
        return self._scale

    def _measure_rate(self) -> None:
        """receipt_scale from the cameras' latest frames (kept while none has enough)."""
        ratios = [(t[-1][1] - t[0][1]) / (t[-1][0] - t[0][0])
                  for t in self._times if len(t) > RATE_GAPS_MIN]
        if ratios and self.follow_rate:
            scale = min(ratios)
            self._scale = 1.0 if scale < RATE_DEAD_BAND else min(scale, RATE_MAX_SCALE)

    # ------------------------------------------------------------------ policy
    def _receipt(self, stamp_ns: int) -> int:
        """The receipt time a wait of ``stamp_ns`` of stamp time lasts (module docstring)."""
        return int(stamp_ns * self.receipt_scale())

    def _oldest_recv(self) -> Optional[int]:
        """The receipt time of the frame queued longest (a queue is in arrival order)."""
        heads = [q[0].recv_ns for q in self._queues if q]
        return min(heads) if heads else None

    def _pivot(self) -> Optional[Arrival]:
        heads = [q[0] for q in self._queues if q]
        return min(heads, key=lambda a: (a.stamp_ns, a.camera)) if heads else None

    def _release(self, now_ns: int) -> List[Group]:
        out = []
        while True:
            pivot = self._pivot()
            if pivot is None:
                return out
            frames, passed, undecided = self._candidates(pivot)
            reason = self._reason(frames, passed, undecided, pivot, now_ns)
            if reason is None:
                return out
            out.append(self._emit(frames, pivot.stamp_ns, reason))

    def _candidates(self, pivot: Arrival) -> Tuple[List[Optional[Arrival]], List[int], bool]:
        """The pivot's group as it stands: per camera the head of its queue when within the
        tolerance of the pivot's stamp and not nearer a later frame of the pivot's camera;
        the cameras whose head was passed over; whether a head taken may still be passed over
        (the pivot's camera's next frame, not come yet, could be nearer it)."""
        limit = pivot.stamp_ns + self.tolerance_ns
        own = self._queues[pivot.camera]
        # a later frame of the pivot's camera decides; else its next stamp is at least this
        later = next((a.stamp_ns for a in own if a.stamp_ns > pivot.stamp_ns), None)
        earliest_next = pivot.stamp_ns + self._gap_bound(pivot.camera)
        frames: List[Optional[Arrival]] = []
        passed: List[int] = []
        undecided = False
        for c, q in enumerate(self._queues):
            if c == pivot.camera:
                frames.append(pivot)
                continue
            head = q[0] if q and q[0].stamp_ns <= limit else None
            if head is not None:
                # a later stamp of the pivot's camera below this one is nearer the head than
                # the pivot is
                beyond = 2 * head.stamp_ns - pivot.stamp_ns
                if later is not None and later < beyond:
                    passed.append(c)
                    head = None
                elif later is None and earliest_next < beyond:
                    undecided = True
            frames.append(head)
        return frames, passed, undecided

    def _gap_bound(self, camera: int) -> int:
        """How soon after its latest stamp camera ``camera``'s next one can come: its least
        gap of late (``period_ns`` before a gap was seen) less a margin for the jitter of its
        stamps, as the next gap may be shorter than any seen: the gaps' spread (a dropped
        frame's longer gap is no jitter), at least an eighth of the gap until ``GAPS_KEPT``
        gaps were seen (a camera's first few need not show their jitter yet)."""
        gaps = self._gaps[camera] or [self.period_ns]
        least = min(gaps)
        spread = max(g for g in gaps if 2 * g < 3 * least) - least
        if len(gaps) < GAPS_KEPT:
            spread = max(spread, least // JITTER_SHARE)
        return least - spread

    def _reason(self, frames: List[Optional[Arrival]], passed: List[int], undecided: bool,
                pivot: Arrival, now_ns: int) -> Optional[str]:
        """Why the pivot's group leaves now, None when it waits."""
        missing = [c for c, f in enumerate(frames) if f is None]
        if undecided:           # a head may go to a nearer frame: wait, a period at most
            return self._forced(missing, now_ns)
        if not missing:
            return COMPLETE
        limit = pivot.stamp_ns + self.tolerance_ns
        # past: the camera's stamps went beyond the pivot's window, or will: its next stamp,
        # at least _gap_bound after its last, is beyond it (a slower camera between frames;
        # judged once GAPS_KEPT of its gaps were seen, not from camera_period_ms alone)
        past = [c in passed or (self._last_stamp[c] is not None and (
            self._last_stamp[c] > limit or len(self._gaps[c]) >= GAPS_KEPT
            and self._last_stamp[c] + self._gap_bound(c) > limit)) for c in missing]
        heard = [self._start_ns if self._last_recv[c] is None else self._last_recv[c]
                 for c in missing]
        # absent: silent for absent_ns while the pivot's camera went on: for a camera heard
        # before, the pivot's camera kept delivering alone from within a period and a half of
        # its last frame (after a pause of every camera, a burst of one camera's frames is
        # not alone: its partners are on their way), or for absent_ns itself (only one camera
        # came back from the pause); for a camera never heard, the pivot's camera delivered a
        # frame before the pivot
        went_on = self._prev_recv[pivot.camera]
        run = self._run_start[pivot.camera]
        absent_ns, within = self._receipt(self.absent_ns), self._receipt(3 * self.period_ns // 2)
        absent = [now_ns - t >= absent_ns and (
            went_on is not None if self._last_recv[c] is None else
            run is not None and (run - t <= within or now_ns - run >= absent_ns))
            for c, t in zip(missing, heard)]
        apart = [self._clocks.apart(pivot.camera, c) for c in missing]
        if all(p or a or s for p, a, s in zip(past, absent, apart)):
            if passed:
                return NEARER
            if all(past):
                return MOVED_PAST
            return ABSENT if all(p or a for p, a in zip(past, absent)) else CLOCK
        return self._forced(missing, now_ns)

    def _forced(self, missing: List[int], now_ns: int) -> Optional[str]:
        """TIMEOUT or OVERFLOW when the group must leave as it stands (COMPLETE if it is),
        None when it may wait."""
        if now_ns - self._oldest_recv() >= self._receipt(self.period_ns):
            reason = TIMEOUT
        elif any(len(q) > self.queue_size for q in self._queues):
            reason = OVERFLOW
        else:
            return None
        return reason if missing else COMPLETE

    def _emit(self, frames: List[Optional[Arrival]], stamp_ns: int, reason: str) -> Group:
        for f in frames:
            if f is not None:
                self._queues[f.camera].popleft()
        group = Group(stamp_ns, frames, reason)
        if group.complete:
            self.counts.complete += 1
        else:
            self.counts.partial += 1
        self.counts.by_reason[reason] += 1
        return group

    def _drain(self, reason: str) -> List[Group]:
        """Every queued frame out, in the pivot order, grouped as far as they match."""
        out = []
        while True:
            pivot = self._pivot()
            if pivot is None:
                return out
            frames = self._candidates(pivot)[0]
            complete = all(f is not None for f in frames)
            out.append(self._emit(frames, pivot.stamp_ns, COMPLETE if complete else reason))
