"""The pairer's waits follow the stamps' rate (sam2_ros/ros/pairing.py, ``receipt_scale``):
``camera_period_ms`` is a period of the stamps, the waits are receipt time, so a bag played at
rate 0.5 (or a simulator slower than real time) doubles the receipt skew between two cameras'
frames of one stamp; a period of receipt time then split pairs that the same skew at rate 1
keeps. Live (rate 1, receipt jitter) and faster replays keep one period.

Times are explicit fake ns (the pairer only sees the ``now`` it is given), so nothing here
depends on the machine's speed.
"""

from __future__ import annotations

import random

import pytest

from sam2_ros.ros import paired_mailbox as pm
from sam2_ros.ros import pairing as pr
from sam2_ros.ros.mailbox import FrameItem
from sam2_ros.ros.paired_mailbox import PairedMailbox
from sam2_ros.ros.pairing import StampPairer

P = 33_333_333             # a 30 Hz camera's period (ns)
SKEW = 20_000_000          # the right camera's frame arrives this long after the left's, live
T0 = 1_000_000_000         # the first stamp
WARM = 5           # frames a camera delivers before its rate is measured (RATE_GAPS_MIN + 1)


def replay(p, n, rate, first=0, start_ns=0):
    """Groups of n stamps (T0 + i P, i from ``first``) of two cameras played at ``rate``: the
    left frame at i P / rate (after ``start_ns``), the right one SKEW / rate later, the
    pairer flushed just before the right one comes (as the mailbox wakes at its deadline)."""
    out = []
    for i in range(first, first + n):
        t = start_ns + int((i - first) * P / rate)
        out += p.put(0, T0 + i * P, ('L', i), t)
        out += p.flush(t + int(SKEW / rate) - 1)
        out += p.put(1, T0 + i * P, ('R', i), t + int(SKEW / rate))
    return out


@pytest.mark.parametrize('rate', [1.0, 0.9, 0.5, 0.25])
def test_a_slow_replay_pairs_what_the_live_camera_pairs(rate):
    """At rate 0.5 the 20 ms skew is 40 ms of receipt time, more than the 33 ms period: every
    group timed out (the defect). Once each camera's rate is measured, every group pairs."""
    p = StampPairer(2, P)
    paired = {g.frames[0].item[1] for g in replay(p, 30, rate) if g.complete}
    if rate > 0.8:          # within the dead band: as live, from the first frame
        assert paired == set(range(30)) and p.receipt_scale() == 1.0
    else:
        assert paired >= set(range(WARM, 30))
        assert WARM == pr.RATE_GAPS_MIN + 1
        assert p.receipt_scale() == pytest.approx(1 / rate, rel=1e-6)


def test_a_lone_frame_waits_the_stretched_period_and_not_more():
    """After the rate is measured at 0.5, a frame whose partner is lost times out after two
    periods of receipt time (its deadline says so), not before."""
    p = StampPairer(2, P)
    replay(p, 10, 0.5)
    t = int(10 * P / 0.5)
    assert p.put(0, T0 + 10 * P, 'L10', t) == []          # R10 lost
    assert p.next_deadline() == t + int(P * p.receipt_scale())
    assert p.flush(t + 2 * P - 2) == []
    [group] = p.flush(t + 2 * P)
    assert group.reason == pr.TIMEOUT and group.frames[1] is None


@pytest.mark.parametrize('period', [P, P // 2])
def test_live_receipt_jitter_keeps_one_period(period):
    """Rate 1 with receipts jittered by up to 10 ms (transport and executor) at 30 and 60 Hz:
    the scale stays 1 and a lone frame times out after exactly one period, as before the rate
    was followed."""
    rng = random.Random(3)
    p = StampPairer(2, period)
    for i in range(300):
        t = i * period
        p.put(0, T0 + i * period, ('L', i), t + rng.randint(0, 10_000_000))
        p.put(1, T0 + i * period, ('R', i), t + rng.randint(0, 10_000_000))
        assert p.receipt_scale() == 1.0
    t = 300 * period
    p.put(0, T0 + 300 * period, 'L300', t)
    assert p.next_deadline() == t + period


def test_a_fast_replay_waits_one_period():
    """Rate 2: the stamps run faster than the receipt clock; a wait never drops below one
    period of receipt time (a tighter one would split a live skew)."""
    p = StampPairer(2, P)
    replay(p, 20, 2.0)
    t = int(20 * P / 2.0)
    p.put(0, T0 + 20 * P, 'L20', t)
    assert p.receipt_scale() == 1.0 and p.next_deadline() == t + P


def test_a_looping_bag_keeps_its_rate_after_the_reset():
    """The bag starts over (stamps go back: a reset): the rate measured before holds until
    the new time line has its own, so its first groups pair too."""
    p = StampPairer(2, P)
    replay(p, 20, 0.5)
    again = replay(p, 10, 0.5, start_ns=int(21 * P / 0.5))
    assert p.counts.resets == 1
    assert all(g.complete for g in again if g.reason != pr.RESET)


def test_a_long_pause_stretches_the_waits_at_most_to_the_cap():
    """A player paused for a minute (flow control waiting for a slow node): the scale is
    capped, so a lone frame after it waits RATE_MAX_SCALE periods at most."""
    p = StampPairer(2, P)
    replay(p, 10, 1.0)
    replay(p, 1, 1.0, first=10, start_ns=60 * 10**9)
    assert p.receipt_scale() == pr.RATE_MAX_SCALE


def test_follow_rate_off_keeps_the_wait_as_given():
    """positions_node's wait is receipt time as documented: not scaled."""
    p = StampPairer(2, P, follow_rate=False)
    groups = replay(p, 20, 0.5)
    assert p.receipt_scale() == 1.0
    assert not any(g.complete for g in groups)


class FakeClock:
    """``time`` as the mailbox reads it: ``monotonic_ns`` returns ``now``."""

    def __init__(self) -> None:
        self.now = 0

    def monotonic_ns(self) -> int:
        return self.now


@pytest.mark.parametrize('every_frame', [True, False])
def test_the_mailbox_pairs_a_slow_replay(monkeypatch, every_frame):
    """The node's hand-off at rate 0.5: a worker that takes a group whenever one is ready
    gets every group complete once the rate is measured (its take timing out at the
    pairer's deadline just before each right frame comes)."""
    clock = FakeClock()
    monkeypatch.setattr(pm, 'time', clock)
    mb = PairedMailbox(2, every_frame, 8, 4, period_ns=P)
    taken = []

    def take():
        group, _ = mb.take(0.0)
        if group is not None:
            taken.append(group)
    for i in range(20):
        clock.now = int(i * P / 0.5)
        mb.put_frame(0, FrameItem(('L', i), T0 + i * P, None, 0.0))
        take()
        clock.now += int(SKEW / 0.5) - 1
        take()
        clock.now += 1
        mb.put_frame(1, FrameItem(('R', i), T0 + i * P, None, 0.0))
        take()
    assert len(taken) >= 20 and all(g.complete for g in taken[-(20 - WARM):])
    assert mb.pairing()['pairs_complete'] >= 20 - WARM
