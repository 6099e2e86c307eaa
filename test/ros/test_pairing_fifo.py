"""The multi-camera hand-off (sam2_ros/ros/paired_mailbox.py) in FIFO mode
(``process_every_frame``) behind a busy worker: a frame waiting in the pairer for its partner
does not time out while the FIFO stands full (its partner's put is blocked then), and its
period counts only the time the FIFO had room.

The mailbox's clock is a fake one moved by the test; a put that blocks is seen through a
condition that records each ``wait`` call; ``threading.Event`` timeouts are failure guards only.
"""

from __future__ import annotations

import threading

import pytest

from sam2_ros.ros import paired_mailbox as pm
from sam2_ros.ros import pairing as pr
from sam2_ros.ros.mailbox import FrameItem
from sam2_ros.ros.paired_mailbox import PairedMailbox
from test_paired_mailbox import SpyCondition

P = 1_000_000_000          # the camera period (fake ns)
GUARD = 60.0               # s: only bounds a test that would otherwise hang


class FakeClock:
    """``time`` as the mailbox reads it: ``monotonic_ns`` returns ``now``."""

    def __init__(self) -> None:
        self.now = 0

    def monotonic_ns(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(pm, 'time', c)
    return c


def fifo_box(fifo_size=2, every_frame=True):
    mb = PairedMailbox(2, every_frame, fifo_size, 4, period_ns=P)
    mb.cond = SpyCondition()
    return mb


def frame(stamp):
    return FrameItem(stamp, stamp, None, 0.0)


def taken(mb, n):
    """The next ``n`` groups taken: [(per-camera stamps, reason)]."""
    out = []
    for _ in range(n):
        g = mb.take(0.0)[0]
        assert g is not None, f'only {len(out)} of {n} groups waited'
        out.append((tuple(None if f is None else f.stamp_ns for f in g.frames), g.reason))
    return out


def fill_behind_a_busy_worker(mb, ahead):
    """Camera ``ahead`` delivers 900 and 1000 first (both wait in the pairer), the other
    camera's 900 completes a pair that fills the FIFO (800 and 900 wait): the other camera's
    1000 then blocks in its put. Returns the blocked put's done event."""
    late = 1 - ahead
    mb.put_frame(0, frame(800))
    mb.put_frame(1, frame(800))
    mb.put_frame(ahead, frame(900))
    mb.put_frame(ahead, frame(1000))
    mb.put_frame(late, frame(900))
    # the FIFO is full: the late camera's 800 and 900 wait grouped, the other's 1000 unpaired
    assert mb.pairer.pending(late) == 0 and mb.pending_frames(late) == mb.fifo_size
    assert mb.pairer.pending(ahead) == 1
    done = threading.Event()

    def put():
        mb.put_frame(late, frame(1000))
        done.set()
    threading.Thread(target=put, daemon=True).start()
    assert mb.cond.waiting.wait(GUARD), 'the put never waited'
    assert not done.is_set()
    return done


@pytest.mark.parametrize('ahead', [0, 1])
def test_a_pair_behind_a_full_fifo_still_pairs(clock, ahead, request):
    """The worker is busy for two periods with the FIFO full: the frame of the camera ahead
    waits in the pairer while its partner's put is blocked. When the worker takes the next
    group, the partner goes in and pairs; the waiting frame did not time out (it once left
    alone at that take, and its partner after it: two frames unpaired)."""
    mb = fifo_box()
    request.addfinalizer(mb.close)          # a put left blocked by a failure is let go
    done = fill_behind_a_busy_worker(mb, ahead)
    clock.now = 2 * P                        # the worker was busy with 800 for two periods
    assert taken(mb, 1) == [((800, 800), pr.COMPLETE)]
    # the take did not release the waiting frame alone (the put may have paired it by now)
    assert mb.pairer.counts.partial == 0, dict(mb.pairer.counts.by_reason)
    assert done.wait(GUARD), 'a take did not let the blocked put go on'
    assert taken(mb, 2) == [((900, 900), pr.COMPLETE), ((1000, 1000), pr.COMPLETE)]
    assert mb.take(0.0)[0] is None and mb.pairer.pending() == 0
    assert (mb.pairer.counts.complete, mb.pairer.counts.partial) == (3, 0)
    assert [b.dropped for b in mb.cameras] == [0, 0]


def test_a_lone_frame_waits_one_period_of_time_the_fifo_had_room(clock):
    """The partner never comes: the lone frame still leaves, after one period counted from
    when the FIFO had room again (it waited behind the full FIFO anyway), not earlier and
    not later."""
    mb = fifo_box()
    mb.put_frame(0, frame(800))
    mb.put_frame(1, frame(800))
    mb.put_frame(1, frame(900))
    mb.put_frame(1, frame(1000))             # camera 0's 1000 will never come
    mb.put_frame(0, frame(900))              # at 0: the FIFO is full
    clock.now = 5 * P                        # the worker is busy for five periods
    assert taken(mb, 2) == [((800, 800), pr.COMPLETE), ((900, 900), pr.COMPLETE)]
    clock.now = 6 * P - 1                    # the FIFO had room for one period less 1
    assert mb.take(0.0)[0] is None and mb.pairer.pending(1) == 1
    clock.now = 6 * P
    assert taken(mb, 1) == [((None, 1000), pr.TIMEOUT)]
    assert mb.pairer.pending() == 0


def test_newest_mode_times_out_on_the_clock_as_it_was(clock):
    """Newest-only mode never blocks a put, so nothing is held back: a lone frame leaves one
    period after its receipt however many groups were replaced meanwhile."""
    mb = fifo_box(fifo_size=2, every_frame=False)
    mb.put_frame(0, frame(800))
    mb.put_frame(1, frame(800))
    mb.put_frame(1, frame(900))
    clock.now = P
    # the worker was waiting: the lone frame released beside the pair is kept (not dropped)
    assert taken(mb, 2) == [((800, 800), pr.COMPLETE), ((None, 900), pr.TIMEOUT)]
    assert [b.dropped for b in mb.cameras] == [0, 0]
