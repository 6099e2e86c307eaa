"""The stamp pairing of N cameras (sam2_ros/ros/pairing.py): the policy, on explicit clocks.

Times are integers in ms-like units (the pairer only compares them); P is the frame period.
"""

from __future__ import annotations

import random

import pytest

from sam2_ros.ros import pairing as pr
from sam2_ros.ros.pairing import StampPairer

P = 100          # frame period
TOL = 10         # pairing tolerance


def stamps(groups):
    """[(per-camera stamp or None, ...), reason] of released groups."""
    return [(tuple(None if f is None else f.stamp_ns for f in g.frames), g.reason)
            for g in groups]


def test_in_order_exact():
    p = StampPairer(2, P)
    assert p.put(0, 1000, 'l0', 1001) == []
    out = p.put(1, 1000, 'r0', 1002)
    assert stamps(out) == [((1000, 1000), pr.COMPLETE)]
    assert [f.item for f in out[0].frames] == ['l0', 'r0'] and out[0].complete
    # the right camera first this time
    assert p.put(1, 1100, 'r1', 1101) == []
    assert stamps(p.put(0, 1100, 'l1', 1103)) == [((1100, 1100), pr.COMPLETE)]
    assert p.pending() == 0 and p.counts.complete == 2 and p.counts.partial == 0


def test_exact_mode_does_not_pair_different_stamps():
    p = StampPairer(2, P)
    p.put(0, 1000, 'l', 1000)
    assert stamps(p.put(1, 1001, 'r', 1001)) == [((1000, None), pr.MOVED_PAST)]
    assert p.pending() == 1


def test_jittered_stamps_and_arrival_order():
    """Stamps within the tolerance, delivered in any interleaving within a period: every frame
    paired, each camera's frames in order, each group released at the second frame's arrival."""
    rng = random.Random(5)
    p = StampPairer(2, P, TOL)
    events = []
    for k in range(200):
        for cam in (0, 1):
            stamp = 10_000 + k * P + rng.randint(-TOL // 2, TOL // 2)
            events.append((10_000 + k * P + rng.randint(5, 60), cam, stamp))
    events.sort()
    groups = []
    for now, cam, stamp in events:
        out = p.put(cam, stamp, (cam, stamp), now)
        for g in out:
            assert max(f.recv_ns for f in g.frames) == now     # no waiting beyond the pair
        groups += out
    assert len(groups) == 200 and all(g.reason == pr.COMPLETE for g in groups)
    for cam in (0, 1):
        seq = [g.frames[cam].stamp_ns for g in groups]
        assert seq == sorted(seq)


def test_dropped_frame_released_when_the_other_camera_moves_past():
    p = StampPairer(2, P, TOL)
    p.put(0, 1000, 'l0', 1000)
    p.put(1, 1002, 'r0', 1005)
    p.put(0, 1100, 'l1', 1100)          # r1 is lost
    # the right camera's next frame shows it has moved past 1100: l1 leaves alone at once
    out = p.put(1, 1203, 'r2', 1206)
    assert stamps(out) == [((1100, None), pr.MOVED_PAST)]
    assert stamps(p.put(0, 1200, 'l2', 1210)) == [((1200, 1203), pr.COMPLETE)]


def test_dropped_frame_times_out_after_one_period():
    p = StampPairer(2, P, TOL)
    p.put(0, 1000, 'l0', 1000)
    p.put(1, 1000, 'r0', 1004)
    p.put(0, 1100, 'l1', 1100)          # r1 is lost, r2 not there yet
    assert p.next_deadline() == 1200
    assert p.flush(1199) == []
    assert stamps(p.flush(1200)) == [((1100, None), pr.TIMEOUT)]
    assert p.next_deadline() is None
    # ...or the left camera's next frame, one period later, drives the same release
    p.put(0, 1200, 'l2', 1200)
    assert stamps(p.put(1, 1300, 'r3', 1299)) == [((1200, None), pr.MOVED_PAST)]
    assert stamps(p.put(0, 1300, 'l3', 1300)) == [((1300, 1300), pr.COMPLETE)]


def test_a_late_frame_whose_partner_left_is_released_at_once():
    p = StampPairer(2, P, TOL)
    p.put(0, 1000, 'l0', 1000)
    assert stamps(p.flush(1100)) == [((1000, None), pr.TIMEOUT)]
    p.put(0, 1100, 'l1', 1100)
    assert stamps(p.put(1, 1000, 'r0', 1101)) == [((None, 1000), pr.MOVED_PAST)]


def test_one_camera_stops_and_resumes():
    p = StampPairer(2, P, TOL, absent_periods=2)
    for k in range(3):
        p.put(0, 1000 + k * P, 'l', 1000 + k * P)
        assert p.put(1, 1000 + k * P, 'r', 1001 + k * P)[0].complete
    # the right camera stops after its frame at 1200 (received 1201)
    p.put(0, 1300, 'l', 1300)
    assert stamps(p.flush(1399)) == []
    assert stamps(p.flush(1400)) == [((1300, None), pr.TIMEOUT)]
    # at 1401 it has been silent for two periods: no frame waits for it any more
    assert stamps(p.put(0, 1400, 'l', 1400)) == []          # silent 199 < 200: waits
    assert stamps(p.flush(1401)) == [((1400, None), pr.ABSENT)]
    for k in range(5, 8):
        assert stamps(p.put(0, 1000 + k * P, 'l', 1000 + k * P)) == [
            ((1000 + k * P, None), pr.ABSENT)]
    # it comes back: pairs again
    assert stamps(p.put(1, 1800, 'r', 1801)) == []
    assert stamps(p.put(0, 1800, 'l', 1802)) == [((1800, 1800), pr.COMPLETE)]


def test_a_camera_not_heard_from_yet():
    """At start-up the first frame waits for the other camera as for one that was seen; the
    absence counts from the first frame of any camera."""
    p = StampPairer(2, P, TOL, absent_periods=2)
    assert p.put(0, 1000, 'l', 1000) == []
    assert stamps(p.flush(1100)) == [((1000, None), pr.TIMEOUT)]
    assert stamps(p.put(0, 1100, 'l', 1199)) == []
    assert stamps(p.flush(1200)) == [((1100, None), pr.ABSENT)]


def test_stamps_going_backwards_reset():
    p = StampPairer(2, P, TOL)
    p.put(0, 5000, 'l', 5000)
    p.put(1, 5000, 'r', 5001)
    p.put(0, 5100, 'l', 5100)           # waits for r at 5100
    # the bag restarts: the left camera's stamps jump back
    out = p.put(0, 0, 'l', 5150)
    assert stamps(out) == [((5100, None), pr.RESET)]
    assert p.counts.resets == 1
    # the right camera's old stamps were forgotten: its jump is no second reset
    assert stamps(p.put(1, 3, 'r', 5152)) == [((0, 3), pr.COMPLETE)]
    assert p.counts.resets == 1
    # a repeated stamp (a driver sending a frame twice) does not go back: no reset; the
    # first pairs, the repeat leaves alone once the partner camera moved past it
    p.put(0, 100, 'l', 5250)
    assert stamps(p.put(0, 100, 'l', 5251)) == []
    assert p.counts.resets == 1 and p.pending() == 2
    assert stamps(p.put(1, 100, 'r', 5252)) == [((100, 100), pr.COMPLETE)]
    assert stamps(p.put(1, 200, 'r', 5350)) == [((100, None), pr.MOVED_PAST)]


def test_bounded_queue_under_a_burst():
    """The left camera delivers a burst while the right one's frame is late: the queue stays
    at queue_size, the oldest left frames leave alone, none is lost."""
    p = StampPairer(2, P, TOL, queue_size=3)
    p.put(0, 900, 'l', 900)
    assert p.put(1, 900, 'r', 900)[0].complete
    out = []
    for k in range(6):
        out += p.put(0, 1000 + k * P, k, 950)      # all received at once
        assert p.pending() <= 3
    assert stamps(out) == [((1000, None), pr.OVERFLOW), ((1100, None), pr.OVERFLOW),
                           ((1200, None), pr.OVERFLOW)]
    out = p.put(1, 1300, 'r', 960)
    assert stamps(out) == [((1300, 1300), pr.COMPLETE)]
    assert [g.frames[0].item for g in p.drain()] == [4, 5]


def test_three_cameras_pair_when_complete_or_when_one_moves_past():
    """Three stamps within the tolerance make a complete group; when one camera loses its frame
    the other two leave as a group once that camera moves past their stamp."""
    p = StampPairer(3, P, TOL)
    p.put(2, 1003, 'c', 1003)
    p.put(0, 1000, 'a', 1004)
    assert stamps(p.put(1, 998, 'b', 1005)) == [((1000, 998, 1003), pr.COMPLETE)]
    assert p.counts.complete == 1
    # camera 1 loses its frame: the other two pair as soon as it moves past
    p.put(0, 1100, 'a', 1100)
    p.put(2, 1101, 'c', 1101)
    assert stamps(p.put(1, 1199, 'b', 1199)) == [((1100, None, 1101), pr.MOVED_PAST)]


def test_bad_settings_refused():
    with pytest.raises(ValueError, match='tolerance_ns'):
        StampPairer(2, 100, 51)
    with pytest.raises(ValueError, match='period_ns'):
        StampPairer(2, 0)
    with pytest.raises(ValueError, match='cameras'):
        StampPairer(0, 100)
    with pytest.raises(ValueError, match='out of range'):
        StampPairer(2, 100).put(2, 0, None, 0)


@pytest.mark.parametrize('seed', range(8))
def test_random_streams_conserve_order_and_wait_at_most_one_period(seed):
    """Two or three cameras with jitter, drops, late deliveries and one pause, flushed on a
    fine clock: every frame leaves exactly once, a camera's frames in stamp order, a group's
    stamps within the tolerance, and no frame waits more than one period."""
    rng = random.Random(seed)
    n = rng.choice((2, 3))
    p = StampPairer(n, P, TOL, queue_size=4)
    arrivals = []
    for cam in range(n):
        for k in range(120):
            if rng.random() < 0.1 or (cam == n - 1 and 50 <= k < 70):   # drops, a pause
                continue
            stamp = k * P + rng.randint(-TOL // 2, TOL // 2)
            arrivals.append((stamp + rng.randint(1, 2 * P if rng.random() < 0.05 else 40),
                             cam, stamp))
    arrivals.sort()
    # a camera's deliveries arrive in stamp order (one transport per camera)
    kept, last = [], {}
    for a in arrivals:
        if last.get(a[1], -1) < a[2]:
            kept.append(a)
            last[a[1]] = a[2]
    arrivals = kept
    released, i = [], 0
    for now in range(0, 120 * P + 3 * P):
        while i < len(arrivals) and arrivals[i][0] == now:
            _, cam, stamp = arrivals[i]
            released += [(now, g) for g in p.put(cam, stamp, i, now)]
            i += 1
        released += [(now, g) for g in p.flush(now)]
    out = [(now, f) for now, g in released for f in g.frames if f is not None]
    assert sorted(f.item for _, f in out) == list(range(len(arrivals)))
    for now, f in out:
        assert now - f.recv_ns <= P
    for cam in range(n):
        seq = [f.stamp_ns for _, f in out if f.camera == cam]
        assert seq == sorted(seq) and len(set(seq)) == len(seq)
    for _, g in released:
        s = [f.stamp_ns for f in g.frames if f is not None]
        assert max(s) - min(s) <= TOL and min(s) == g.stamp_ns
    assert p.counts.resets == 0 and p.counts.complete > 0


def test_frames_after_a_pause_of_every_camera_still_pair():
    """Both cameras pause for longer than the absence limit: the first frame after it waits
    for its partner (arriving a millisecond later) instead of leaving as if the other
    camera were gone; likewise when every pair comes slower than the absence limit."""
    p = StampPairer(2, P, TOL)                       # absent after 3 periods
    assert p.put(0, 500, 'l', 500) == []
    assert stamps(p.put(1, 500, 'r', 501)) == [((500, 500), pr.COMPLETE)]
    assert p.put(0, 600, 'l', 900) == []             # 400 of silence from both
    assert stamps(p.put(1, 600, 'r', 901)) == [((600, 600), pr.COMPLETE)]
    for k in range(2, 6):                            # a pair every 350
        t = 900 + 350 * k
        assert p.put(0, 500 + 100 * k, 'l', t) == []
        assert stamps(p.put(1, 500 + 100 * k, 'r', t + 2)) == [
            ((500 + 100 * k, 500 + 100 * k), pr.COMPLETE)]


def test_one_camera_back_from_a_pause_of_both_stops_waiting_once_alone_long_enough():
    """Both cameras pause; only the left comes back. Its first frames wait a period each for
    a partner that may be on its way; once its lone run has lasted the absence limit, the
    right camera is absent and each left frame leaves at once (it waited a period forever)."""
    p = StampPairer(2, P, TOL)                       # absent after 3 periods
    for k in range(3):
        p.put(0, 1000 + k * P, 'l', 1000 + k * P)
        assert p.put(1, 1000 + k * P, 'r', 1001 + k * P)[0].complete
    resumed = 1000 + 10 * P                          # both silent for 8 periods
    released = []                                    # (reason, waited)
    for now in range(resumed, resumed + 12 * P):
        out = p.put(0, 1300 + (now - resumed), 'l', now) if (now - resumed) % P == 0 else []
        out += p.flush(now)
        released += [(g.reason, now - g.frames[0].recv_ns) for g in out]
    assert len(released) >= 10 and all(r in (pr.TIMEOUT, pr.ABSENT) for r, _ in released)
    assert released[0][0] == pr.TIMEOUT and released[0][1] > 0
    assert released[-6:] == [(pr.ABSENT, 0)] * 6, released


def test_a_frame_between_a_slower_cameras_frames_leaves_at_once():
    """Left at 2/P, right at 1/P, stamped alike every other left frame: once the right
    camera's gaps are known, a left frame between two right ones cannot pair (the right's next
    stamp is a period away) and leaves as it comes, instead of waiting out a period; the left
    frames with a right partner still pair."""
    p = StampPairer(2, P, TOL)
    released = []                                           # (left stamp, right?, reason, waited)
    for k in range(40):
        t = 10_000 + k * P // 2                              # the left camera's stamps
        arrivals = [(0, t)] + ([(1, t)] if k % 2 == 0 else [])
        for cam, stamp in arrivals:
            for g in p.put(cam, stamp, (cam, stamp), t + 1 + cam):
                released.append((g.frames[0] and g.frames[0].stamp_ns, g.frames[1] is not None,
                                 g.reason, t + 1 + cam - g.frames[0].recv_ns))
        for g in p.flush(t + P // 2):                       # the next left frame's arrival
            released.append((g.frames[0].stamp_ns, False, g.reason, P // 2 - 1))
    late = [r for r in released if r[0] >= 10_000 + 20 * P // 2]
    assert all(r[1] and r[2] == pr.COMPLETE for r in late if (r[0] - 10_000) % P == 0), late
    lone = [r for r in late if (r[0] - 10_000) % P]
    assert lone and all(r[2] == pr.MOVED_PAST and r[3] == 0 for r in lone), lone


def test_a_burst_after_a_stall_of_both_cameras_still_pairs():
    """A stall both cameras share (a USB or network pause), then each camera's backlog in a
    burst, the right one 2 units after the left: every frame pairs. The left burst's second
    frame once made the right camera look absent, and all six left alone (a queue of 8: a
    burst beyond the queue is an overflow, test_bounded_queue_under_a_burst)."""
    p = StampPairer(2, P, TOL, queue_size=8)         # absent after 3 periods
    for k in range(3):
        p.put(0, 1000 + k * P, 'l', 1000 + k * P)
        assert p.put(1, 1000 + k * P, 'r', 1001 + k * P)[0].complete
    groups = []
    stalled = 1000 + 9 * P                            # both silent for 7 periods
    for k in range(3, 9):
        groups += p.put(0, 1000 + k * P, 'l', stalled + k)
    for k in range(3, 9):
        groups += p.put(1, 1000 + k * P, 'r', stalled + 2 + k)
    assert stamps(groups) == [((1000 + k * P,) * 2, pr.COMPLETE) for k in range(3, 9)]
