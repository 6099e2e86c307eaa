"""The stamp pairing of cameras at different rates (sam2_ros/ros/pairing.py): a frame pairs
with the nearest stamp within the tolerance, not the first one, as message_filters'
ApproximateTime does; the frame passed over leaves alone (counted), and no frame waits more
than one period for the choice. Times are integers on explicit clocks; P is the period.
"""

from __future__ import annotations

import random

import pytest

from sam2_ros.ros import paired_mailbox as pm
from sam2_ros.ros import pairing as pr
from sam2_ros.ros.mailbox import FrameItem
from sam2_ros.ros.paired_mailbox import PairedMailbox
from sam2_ros.ros.pairing import StampPairer

P = 100          # the slow camera's period, and the longest a frame waits
TOL = 40         # pairing tolerance (at most P/2)


def stamps(groups):
    """[(per-camera stamp or None, ...), reason] of released groups."""
    return [(tuple(None if f is None else f.stamp_ns for f in g.frames), g.reason)
            for g in groups]


def started(p):
    """Both cameras paired at 900; camera 1 (twice the rate) then delivers 950 alone."""
    assert p.put(0, 900, 'a', 901) == []
    assert stamps(p.put(1, 900, 'b', 902)) == [((900, 900), pr.COMPLETE)]
    assert p.put(1, 950, 'b', 952) == []


def test_a_nearer_frame_of_the_pivots_camera_takes_its_partner():
    """Camera 0's 990 is within the tolerance of camera 1's 950 (40), but camera 1's next
    frame (due about 1000, its stamps 50 apart) would be 10 from it: the pair waits for it,
    990 pairs with 1000 and 950 leaves alone (it once paired with 990 at once)."""
    p = StampPairer(2, P, TOL)
    started(p)
    assert p.put(0, 990, 'a', 992) == []
    assert p.next_deadline() == 952 + P          # the wait is the lone frame's own bound
    assert stamps(p.put(1, 1000, 'b', 1002)) == [((None, 950), pr.NEARER),
                                                 ((990, 1000), pr.COMPLETE)]
    assert p.pending() == 0
    assert (p.counts.complete, p.counts.partial) == (2, 1)
    assert p.counts.by_reason == {pr.COMPLETE: 2, pr.NEARER: 1}


def test_the_wait_for_a_nearer_frame_ends_after_one_period():
    """Camera 1's 1000 is lost: 950 and 990 pair when 950 has waited one period, no later."""
    p = StampPairer(2, P, TOL)
    started(p)
    assert p.put(0, 990, 'a', 992) == []
    assert p.flush(952 + P - 1) == []
    assert stamps(p.flush(952 + P)) == [((990, 950), pr.COMPLETE)]
    assert p.pending() == 0 and p.counts.partial == 0


def test_a_backlog_pairs_with_the_nearest_and_a_tie_keeps_the_earlier():
    """All frames already queued (no waiting involved): camera 0's 990 pairs with camera 1's
    1000, not its 950; at equal distances (950 and 1030 from 990) the earlier pairs."""
    p = StampPairer(2, P, TOL)
    assert p.put(1, 950, 'b', 950) == [] and p.put(1, 1000, 'b', 951) == []
    assert stamps(p.put(0, 990, 'a', 952)) == [((None, 950), pr.NEARER),
                                               ((990, 1000), pr.COMPLETE)]
    q = StampPairer(2, P, TOL)
    assert q.put(1, 950, 'b', 950) == [] and q.put(1, 1030, 'b', 951) == []
    assert stamps(q.put(0, 990, 'a', 952)) == [((990, 950), pr.COMPLETE)]


def test_three_cameras_pass_over_per_camera():
    """Camera 0 at twice the rate: camera 1's 990 goes to camera 0's 1000 (10 from it, not 40),
    camera 2's 955 stays with camera 0's 950; 990's group then waits for camera 2 as any."""
    p = StampPairer(3, P, TOL)
    assert p.put(0, 950, 'a', 950) == []
    assert p.put(2, 955, 'c', 956) == []
    assert p.put(0, 1000, 'a', 1000) == []
    assert stamps(p.put(1, 990, 'b', 991)) == [((950, None, 955), pr.NEARER)]
    assert stamps(p.put(2, 1055, 'c', 1056)) == [((1000, 990, None), pr.MOVED_PAST)]
    assert p.pending() == 1


def test_one_rate_with_an_offset_waits_only_while_its_jitter_is_unknown():
    """Cameras of one rate, regular stamps 40 apart, a tolerance of 50: the next frame of the
    pivot's camera (100 later, 60 from the partner) cannot be nearer, so every pair leaves at
    its second frame's receipt, as before. 45 apart is within the margin kept for jitter while
    a camera's first gaps are seen (an eighth: its next gap could be 88 < 90): those pairs
    wait for the pivot's camera's next frame and pair the same; once GAPS_KEPT regular gaps
    were seen, none waits."""
    p = StampPairer(2, P, P // 2)
    for k in range(20):
        assert p.put(0, 1000 + k * P, 'a', 1002 + k * P) == []
        assert stamps(p.put(1, 1040 + k * P, 'b', 1042 + k * P)) == [
            ((1000 + k * P, 1040 + k * P), pr.COMPLETE)]
    q = StampPairer(2, P, P // 2)
    assert q.put(0, 1000, 'a', 1002) == [] and q.put(1, 1045, 'b', 1047) == []
    for k in range(1, 20):              # camera 0's k-th frame shows its k-th gap
        at = 1000 + k * P
        waited = k - 1 < pr.GAPS_KEPT   # the pair before this frame waited for it
        assert stamps(q.put(0, at, 'a', at + 2)) == (
            [((at - P, at - P + 45), pr.COMPLETE)] if waited else [])
        assert stamps(q.put(1, at + 45, 'b', at + 47)) == (
            [] if k < pr.GAPS_KEPT else [((at, at + 45), pr.COMPLETE)])


@pytest.mark.parametrize('seed', range(8))
def test_two_rates_pair_each_slow_frame_with_its_nearest(seed):
    """A camera at period P and one at P/2, random offsets, jittered stamps, delivered within
    10 of their stamps and flushed on a fine clock: each slow frame pairs with the nearest fast
    frame within the tolerance (a tie: the earlier), every other frame leaves alone exactly
    once, none waits more than a period, and the counts add up."""
    rng = random.Random(seed)
    p = StampPairer(2, P, TOL)
    # the fast camera starts two periods first: its stamps' jitter is judged from the gaps
    # seen (the period before any), so a camera's first frames could misjudge it
    slow_at = 1000 + rng.randrange(P)
    fast_at = slow_at - 2 * P + rng.randrange(P // 2)
    slow = [slow_at + k * P + rng.randint(-8, 8) for k in range(60)]
    fast = [fast_at + k * (P // 2) + rng.randint(-2, 2) for k in range(120)]
    arrivals = sorted([(s + rng.randint(1, 10), 0, s) for s in slow]
                      + [(s + rng.randint(1, 10), 1, s) for s in fast])
    released, i = [], 0
    for now in range(0, arrivals[-1][0] + 2 * P):
        while i < len(arrivals) and arrivals[i][0] == now:
            _, cam, stamp = arrivals[i]
            released += [(now, g) for g in p.put(cam, stamp, (cam, stamp), now)]
            i += 1
        released += [(now, g) for g in p.flush(now)]
    expected = set()
    for s in slow:
        near = [f for f in fast if abs(f - s) <= TOL]
        if near:
            expected.add((s, min(near, key=lambda f: (abs(f - s), f))))
    pairs = {(g.frames[0].stamp_ns, g.frames[1].stamp_ns) for _, g in released if g.complete}
    assert pairs == expected
    out = [f for _, g in released for f in g.frames if f is not None]
    assert sorted(f.item for f in out) == sorted([(0, s) for s in slow] + [(1, f) for f in fast])
    assert all(now - f.recv_ns <= P for now, g in released for f in g.frames if f is not None)
    for cam in (0, 1):
        seq = [f.stamp_ns for f in out if f.camera == cam]
        assert seq == sorted(seq)
    groups = len(released)
    assert p.counts.complete == len(expected)
    assert p.counts.partial == groups - len(expected) == len(slow) + len(fast) - 2 * len(expected)
    assert sum(p.counts.by_reason.values()) == groups and p.pending() == 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def monotonic_ns(self) -> int:
        return self.now


def test_a_passed_over_frame_is_tracked_and_counted_by_the_mailbox(monkeypatch):
    """Through the multi-camera mailbox (FIFO mode): the frame passed over is a group of its
    own for the worker, and the diagnostics count it (pairs_released_nearer)."""
    clock = FakeClock()
    monkeypatch.setattr(pm, 'time', clock)
    mb = PairedMailbox(2, True, 8, 4, period_ns=P, tolerance_ns=TOL)
    for cam, stamp, now in ((0, 900, 901), (1, 900, 902), (1, 950, 952), (0, 990, 992),
                            (1, 1000, 1002)):
        clock.now = now
        mb.put_frame(cam, FrameItem(stamp, stamp, None, 0.0))
    taken = []
    while True:
        group = mb.take(0.0)[0]
        if group is None:
            break
        taken.append(stamps([group])[0])
    assert taken == [((900, 900), pr.COMPLETE), ((None, 950), pr.NEARER),
                     ((990, 1000), pr.COMPLETE)]
    counts = mb.pairing()
    assert counts['pairs_complete'] == 2 and counts['pairs_partial'] == 1
    assert counts['pairs_released_nearer'] == 1
    assert [b.received for b in mb.cameras] == [2, 3] and [b.dropped for b in mb.cameras] == [0, 0]
