"""Cameras of one rig on different clocks (sam2_ros/ros/pairing.py, pairing_clocks.py): once
each camera's stamps are seen far from all the other's, frames stop waiting a period for
partners they can never pair with, and pair again once the stamps come back together; a camera
late by a frame or two on the same clock is no other clock.

Times are explicit fake ns (the pairer only sees the ``now`` it is given): nothing here depends
on the machine's speed.
"""

from __future__ import annotations

import pytest

from sam2_ros.ros import paired_mailbox as pm
from sam2_ros.ros import pairing as pr
from sam2_ros.ros.mailbox import FrameItem
from sam2_ros.ros.paired_mailbox import PairedMailbox
from sam2_ros.ros.pairing import StampPairer

P = 33_333_333             # a 30 Hz camera's period (ns)
TOL = 2_000_000            # pairing tolerance
SKEW = 3_000_000           # camera 1's frame arrives this long after camera 0's of one tick
T0 = 1_000_000_000         # the first stamp
R0 = 50_000_000_000        # the first receipt (another clock than the stamps', as live)
SECOND = 1_000_000_000
RESTART = 20               # the tick from which camera 1 stamps on another clock
# ticks after the restart by which the other clock is known: the old stamps must leave the
# ones kept (GAPS_KEPT + 1), then SPLIT_FRAMES frames of each camera
SETTLE = 10


def rig(ticks, offset1, offset0=None, lag=SKEW, silent=()):
    """(receipt, camera, stamp) of two cameras at one rate: camera 1's stamps shifted by
    ``offset1(tick)``, camera 0's by ``offset0(tick)``; camera 1 received ``lag`` after
    camera 0 and silent in the ticks ``silent``."""
    out = []
    for k in range(ticks):
        out.append((R0 + k * P, 0, T0 + k * P + (offset0(k) if offset0 else 0)))
        if k not in silent:
            out.append((R0 + k * P + lag, 1, T0 + k * P + offset1(k)))
    return sorted(out)


def released(p, arrivals):
    """Each arrival put in order, the pairer flushed at its deadlines in between and after
    the last as the mailbox does: per arrival index (release time, the group's reason)."""
    out = {}

    def note(now, groups):
        for g in groups:
            out.update({f.item: (now, g.reason) for f in g.frames if f is not None})

    for i, (now, cam, stamp) in enumerate(arrivals + [(None, None, None)]):
        deadline = p.next_deadline()
        while deadline is not None and (now is None or deadline <= now):
            note(deadline, p.flush(deadline))
            deadline = p.next_deadline()
        if now is not None:
            note(now, p.put(cam, stamp, i, now))
    assert sorted(out) == list(range(len(arrivals)))          # every frame, once
    return out


def waits(arrivals, out, cam, ticks):
    """How long camera ``cam``'s frames of ``ticks`` waited after their receipt."""
    first = R0 + min(ticks) * P
    return [out[i][0] - now for i, (now, c, _) in enumerate(arrivals)
            if c == cam and first <= now < R0 + (max(ticks) + 1) * P]


@pytest.mark.parametrize('offset, silent', [
    (5 * SECOND, ()),                       # restarted on a clock 5 s ahead
    (-5 * SECOND, ()),                      # ...5 s behind (its stamps go back: a reset)
    (3 * SECOND, range(RESTART, RESTART + 30)),   # a driver restart of 1 s, 3 s ahead
])
def test_cameras_on_different_clocks_stop_waiting_a_period_per_frame(offset, silent):
    """Camera 1 comes back on another clock: within a few frames both cameras' frames leave
    as they arrive (the camera ahead waited a period per frame, for ever); the first pairs
    and the parting are counted."""
    start = RESTART + len(silent)               # camera 1 delivers again
    arrivals = rig(start + 40, lambda k: offset if k >= RESTART else 0, silent=silent)
    p = StampPairer(2, P, TOL)
    out = released(p, arrivals)
    assert set(waits(arrivals, out, 0, range(RESTART))) <= {SKEW}     # paired before
    after = range(start + SETTLE, start + 40)
    assert waits(arrivals, out, 0, after) == [0] * 30
    assert waits(arrivals, out, 1, after) == [0] * 30
    assert p.counts.clock_splits == 1 and p.counts.by_reason[pr.CLOCK] >= 30
    assert p.counts.resets == (1 if offset < 0 else 0)


def test_pairing_resumes_when_the_other_camera_joins_the_same_clock():
    """Camera 1 restarted 5 s ahead; later camera 0 restarts onto the same clock (its stamps
    jump ahead too): from its first frame there every tick pairs again, released on the
    second frame's arrival as before the split."""
    rejoin = RESTART + 30
    arrivals = rig(rejoin + 20, lambda k: 5 * SECOND if k >= RESTART else 0,
                   offset0=lambda k: 5 * SECOND if k >= rejoin else 0)
    p = StampPairer(2, P, TOL)
    out = released(p, arrivals)
    apart = range(RESTART + SETTLE, rejoin)
    assert waits(arrivals, out, 1, apart) == [0] * len(apart)         # not a period
    for k in range(rejoin, rejoin + 20):
        left, right = (i for i, a in enumerate(arrivals) if R0 + k * P <= a[0] < R0 + (k + 1) * P)
        assert out[left] == out[right] == (arrivals[right][0], pr.COMPLETE), k
    assert p.counts.clock_splits == 1


@pytest.mark.parametrize('lag', [P // 2, P - 1_000_000, P + P // 2, 2 * P])
def test_a_late_camera_on_the_same_clock_is_no_other_clock(lag):
    """Camera 1's frames arrive up to two frames after camera 0's, same stamps: within a
    period they pair, as before; later its partner timed out before it came and it leaves
    at once (the other camera moved past), as before. Never apart, nothing released for a
    clock."""
    arrivals = rig(60, lambda k: 0, lag=lag)
    p = StampPairer(2, P, TOL)
    out = released(p, arrivals)
    assert p.counts.clock_splits == 0 and p.counts.by_reason[pr.CLOCK] == 0
    if lag < P:
        assert {r for _, r in out.values()} == {pr.COMPLETE}
        assert set(waits(arrivals, out, 0, range(60))) == {lag}
    else:
        assert set(waits(arrivals, out, 0, range(60))) == {P}       # a timeout each
        assert set(waits(arrivals, out, 1, range(60))) == {0}
        assert p.counts.complete == 0


def test_a_camera_stalled_for_a_frame_or_two_stays_paired():
    """Camera 1 drops two frames in a row now and then (same clock): the frames before and
    after still pair, none is released for a clock."""
    silent = {k for k in range(10, 60, 10)} | {k + 1 for k in range(10, 60, 10)}
    arrivals = rig(60, lambda k: 0, silent=silent)
    p = StampPairer(2, P, TOL)
    out = released(p, arrivals)
    assert p.counts.clock_splits == 0 and p.counts.by_reason[pr.CLOCK] == 0
    assert p.counts.complete == 60 - len(silent)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def monotonic_ns(self) -> int:
        return self.now


def test_the_mailbox_diagnostics_count_cameras_on_different_clocks(monkeypatch):
    """The first camera's diagnostics carry the count of partings and the groups released
    for a clock (pairing_clock_splits, pairs_released_clock)."""
    clock = FakeClock()
    monkeypatch.setattr(pm, 'time', clock)
    mb = PairedMailbox(2, True, 8, 4, period_ns=P, tolerance_ns=TOL)
    for now, cam, stamp in rig(RESTART + 30, lambda k: 5 * SECOND if k >= RESTART else 0):
        clock.now = now
        mb.put_frame(cam, FrameItem(None, stamp, None, 0.0))
        while mb.take(0.0)[0] is not None:
            pass
    counts = mb.pairing()
    assert counts['pairing_clock_splits'] == 1 and counts['pairs_released_clock'] >= 20
