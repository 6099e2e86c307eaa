"""The multi-camera hand-off (sam2_ros/ros/paired_mailbox.py) without DDS or a model, and one
camera of a MultiStreamTracker seen as a one-camera tracker (sam2_ros/engine/camera.py).

The mailbox's clock is replaced by a fake one (the pairer only sees the ``now`` it is given),
so no frame times out unless a test moves the clock. Waits are observed through a condition
that records each ``wait`` call; ``threading.Event`` timeouts are failure guards only.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from sam2_ros.ros import paired_mailbox as pm
from sam2_ros.ros import pairing as pr
from sam2_ros.ros.mailbox import FrameItem, PromptItem
from sam2_ros.ros.paired_mailbox import PairedMailbox

P = 1_000_000_000          # the camera period (fake ns)
GUARD = 60.0               # s: only bounds a test that would otherwise hang


class FakeClock:
    """``time`` as the mailbox reads it: ``monotonic_ns`` returns ``script`` values first,
    then ``now``."""

    def __init__(self) -> None:
        self.now = 0
        self.script: list = []

    def monotonic_ns(self) -> int:
        return self.script.pop(0) if self.script else self.now


class SpyCondition(threading.Condition):
    """A condition that sets ``waiting`` each time a thread waits on it."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Event()

    def wait(self, timeout=None):
        self.waiting.set()
        return super().wait(timeout)


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(pm, 'time', c)
    return c


def box(every_frame=False, fifo_size=4, prompts=4, cameras=2, tolerance_ns=0):
    mb = PairedMailbox(cameras, every_frame, fifo_size, prompts, period_ns=P,
                       tolerance_ns=tolerance_ns)
    mb.cond = SpyCondition()
    return mb


def frame(stamp, tag=None):
    return FrameItem(tag if tag is not None else stamp, stamp, None, 0.0)


def stamps(group):
    return tuple(None if f is None else f.stamp_ns for f in group.frames)


def in_thread(fn):
    """Run ``fn`` on a thread; (done event, result list)."""
    done, result = threading.Event(), []

    def run():
        result.append(fn())
        done.set()
    threading.Thread(target=run, daemon=True).start()
    return done, result


# ---------------------------------------------------------------------- newest-group policy
def test_newest_group_replaces_older_ones_and_counts_their_frames_dropped(clock):
    mb = box(every_frame=False)
    mb.put_frame(0, frame(1000))
    mb.put_frame(1, frame(1000))
    assert mb.pending_frames(0) == mb.pending_frames(1) == 1
    mb.put_frame(1, frame(1100))          # waits in the pairer, the group stays
    assert [b.dropped for b in mb.cameras] == [0, 0]
    mb.put_frame(0, frame(1100))          # a newer complete group replaces the first
    assert [b.dropped for b in mb.cameras] == [1, 1]
    # a lone frame of camera 0 (1200), then 1300 of both: the lone group and the 1100 group
    # are replaced; only camera 0 had a frame in the lone one
    mb.put_frame(0, frame(1200))
    mb.put_frame(0, frame(1300))
    mb.put_frame(1, frame(1300))
    assert [b.dropped for b in mb.cameras] == [3, 2]
    assert [b.received for b in mb.cameras] == [4, 3]
    group, prompts = mb.take(GUARD)
    assert stamps(group) == (1300, 1300) and group.complete
    assert [f.item.msg for f in group.frames] == [1300, 1300]
    assert prompts == [[], []]
    assert mb.pending_frames(0) == mb.pending_frames(1) == 0
    # every frame put is either taken or counted dropped
    assert sum(b.received - b.dropped for b in mb.cameras) == 2
    assert not mb.cond.waiting.is_set()     # nothing here had to wait


def test_a_lone_frame_released_beside_the_next_group_is_kept_while_the_worker_waits(clock):
    """Newest-only mode drops a group only when a newer one comes while the worker is busy,
    as the one-camera node drops frames: a lone frame that leaves (its partner camera moved
    past) just before the next pair completes is tracked too when the worker waits for
    work; once the worker is busy with a group, the newest waiting one wins again."""
    mb = box(every_frame=False)
    assert mb.take(0.0)[0] is None            # the worker waits for work
    mb.put_frame(0, frame(1000))              # camera 1 skips 1000
    mb.put_frame(1, frame(1100))              # 1000 leaves alone (camera 1 moved past)
    mb.put_frame(0, frame(1100))              # the 1100 pair completes beside it
    assert [b.dropped for b in mb.cameras] == [0, 0]
    assert stamps(mb.take(GUARD)[0]) == (1000, None)     # now busy with it
    mb.put_frame(0, frame(1200))
    mb.put_frame(1, frame(1200))              # newer, while busy: 1100 is replaced
    assert [b.dropped for b in mb.cameras] == [1, 1]
    assert stamps(mb.take(GUARD)[0]) == (1200, 1200)


def test_a_lone_frame_never_drops_the_other_cameras_only_frame(clock):
    """Newest-only mode keeps each camera's newest frame, as a one-camera node does: a pair
    waits while the worker is busy, then camera 0 goes on alone (camera 1 stopped). Camera 0's
    older frames are dropped, camera 1's frame of the pair is not (it was dropped with the
    group before): the worker gets it, alone, then camera 0's newest."""
    mb = box(every_frame=False)
    mb.put_frame(0, frame(1000))
    mb.put_frame(1, frame(1000))              # a pair waits (the worker is busy)
    for k, stamp in enumerate((1100, 1200, 1300), start=1):
        clock.now = k * 2 * P                 # camera 1 is silent: each leaves alone
        mb.put_frame(0, frame(stamp))
    clock.now = 8 * P
    got = [stamps(mb.take(0.0)[0]) for _ in range(2)]
    assert got[0] == (None, 1000) and got[1][0] is not None and got[1][1] is None, got
    assert [b.dropped for b in mb.cameras] == [mb.cameras[0].received - 1, 0]


def test_nothing_waiting_returns_none_after_the_timeout(clock):
    mb = box()
    assert mb.take(0.0) == (None, [[], []])


# ---------------------------------------------------------------------- lone frames
def test_lone_frame_leaves_when_the_other_camera_moves_past(clock):
    mb = box(every_frame=True)
    mb.put_frame(0, frame(1000))
    assert mb.pending_frames(0) == 1 and mb.take(0.0)[0] is None   # its partner may come
    mb.put_frame(1, frame(1100))          # camera 1 is past 1000: 1000 leaves alone
    group, _ = mb.take(GUARD)
    assert stamps(group) == (1000, None) and group.reason == pr.MOVED_PAST
    assert mb.pending_frames(1) == 1 and mb.pending_frames(0) == 0
    mb.put_frame(0, frame(1100))
    assert stamps(mb.take(GUARD)[0]) == (1100, 1100)
    assert [b.dropped for b in mb.cameras] == [0, 0]


def test_take_wakes_at_a_lone_frames_deadline(clock):
    """The consumer waits no longer than the lone frame's period: at the deadline (here
    reached while it waits) the frame leaves without any other put waking it."""
    mb = box(every_frame=True)
    mb.put_frame(0, frame(1000))          # received at fake 0: its deadline is P
    # take: its first flush sees 0 (the frame waits), the wait's deadline sees P (no wait
    # left), the flush after the wait P (timed out)
    clock.script = [0, P]
    clock.now = P
    done, result = in_thread(lambda: mb.take(3600.0))
    assert done.wait(GUARD), 'take slept past the lone frame deadline'
    group, _ = result[0]
    assert stamps(group) == (1000, None) and group.reason == pr.TIMEOUT


def test_a_lone_frame_that_timed_out_leaves_at_the_next_take(clock):
    mb = box(every_frame=False)
    mb.put_frame(1, frame(5000))
    clock.now = P                          # one period later
    group, _ = mb.take(GUARD)
    assert stamps(group) == (None, 5000) and group.reason == pr.TIMEOUT
    assert not mb.cond.waiting.is_set()


# ---------------------------------------------------------------------- stamps going back
@pytest.mark.parametrize('every_frame', [True, False])
def test_stamps_going_back_release_everything_and_pair_anew(clock, every_frame):
    mb = box(every_frame=every_frame, fifo_size=4)
    mb.put_frame(0, frame(1000))
    mb.put_frame(1, frame(1000))
    mb.put_frame(0, frame(2000))          # waits for camera 1's 2000
    mb.put_frame(1, frame(500))           # the bag restarted: a reset
    assert mb.pairer.counts.resets == 1
    mb.put_frame(0, frame(500))           # not a reset: camera 0's stamps were forgotten
    assert mb.pairer.counts.resets == 1
    taken = []
    while True:
        group, _ = mb.take(0.0)
        if group is None:
            break
        taken.append((stamps(group), group.reason))
    new = ((500, 500), pr.COMPLETE)
    if every_frame:                       # nothing lost, in order
        assert taken == [((1000, 1000), pr.COMPLETE), ((2000, None), pr.RESET), new]
        assert [b.dropped for b in mb.cameras] == [0, 0]
    else:                                 # only the newest group; the others dropped
        assert taken == [new]
        assert [b.dropped for b in mb.cameras] == [2, 1]
    assert mb.pending_frames(0) == mb.pending_frames(1) == 0


# ---------------------------------------------------------------------- FIFO back-pressure
def test_fifo_put_blocks_while_full_and_goes_on_after_a_take(clock):
    mb = box(every_frame=True, fifo_size=2)
    for s in (1000, 1100):
        mb.put_frame(0, frame(s))
        mb.put_frame(1, frame(s))
    assert mb.pending_frames(0) == 2 and mb.pairer.pending() == 0
    done, _ = in_thread(lambda: mb.put_frame(0, frame(1200)))
    assert mb.cond.waiting.wait(GUARD), 'the put never waited'
    assert not done.is_set()
    assert mb.cameras[0].received == 3 and mb.pairer.pending(0) == 0   # not queued yet
    group, _ = mb.take(GUARD)
    assert stamps(group) == (1000, 1000)
    assert done.wait(GUARD), 'a take did not let the blocked put go on'
    assert mb.pairer.pending(0) == 1
    mb.put_frame(1, frame(1200))
    assert [stamps(mb.take(GUARD)[0]) for _ in range(2)] == [(1100, 1100), (1200, 1200)]
    assert [b.dropped for b in mb.cameras] == [0, 0]


def test_newest_mode_never_blocks_a_put(clock):
    mb = box(every_frame=False, fifo_size=1)
    for s in range(1000, 1010):
        mb.put_frame(0, frame(s))
        mb.put_frame(1, frame(s))
    assert not mb.cond.waiting.is_set()
    assert [b.dropped for b in mb.cameras] == [9, 9]


# ---------------------------------------------------------------------- prompts
def test_prompts_are_kept_per_camera(clock):
    mb = box(prompts=2)
    a, b, c, d, e = (PromptItem(n, 'click', 0) for n in 'abcde')
    assert mb.camera(0).put_prompt(a)
    assert mb.put_prompt(1, b) and mb.put_prompt(1, c)
    assert not mb.put_prompt(1, d)        # camera 1's queue is full: the newest is refused
    assert mb.put_prompt(0, e)            # camera 0's own queue still has room
    assert [mb.camera(i).pending_prompts() for i in (0, 1)] == [2, 2]
    group, prompts = mb.take(GUARD)       # prompts alone wake the worker
    assert group is None and prompts == [[a, e], [b, c]]
    assert [mb.camera(i).pending_prompts() for i in (0, 1)] == [0, 0]
    assert mb.put_prompt(1, d)
    mb.put_frame(0, frame(1000))
    mb.put_frame(1, frame(1000))
    group, prompts = mb.take(GUARD)       # taken with the group, before it is tracked
    assert stamps(group) == (1000, 1000) and prompts == [[], [d]]


# ---------------------------------------------------------------------- close
class FakeJob:
    def __init__(self) -> None:
        self.ran = False
        self.abandoned = None

    def run(self) -> None:
        self.ran = True

    def abandon(self, reason: str) -> bool:
        self.abandoned = reason
        return True


def test_close_wakes_a_waiting_consumer(clock):
    mb = box()
    done, result = in_thread(lambda: mb.take(3600.0))
    assert mb.cond.waiting.wait(GUARD), 'take never waited'
    assert not done.is_set()
    mb.camera(1).close()                  # any camera's side closes the whole mailbox
    assert done.wait(GUARD), 'close did not wake the consumer'
    assert result[0] == (None, [[], []])
    assert mb.take(3600.0) == (None, [[], []])   # closed: never waits again


def test_close_wakes_a_blocked_producer_and_drops_what_waits(clock):
    mb = box(every_frame=True, fifo_size=2)
    for cam, s in ((0, 1000), (1, 1000), (0, 1100), (0, 1200), (1, 1100)):
        mb.put_frame(cam, frame(s))       # two groups wait (full), camera 0's 1200 in the pairer
    assert mb.pending_frames(0) == 3 and mb.pairer.pending(0) == 1
    done, _ = in_thread(lambda: mb.put_frame(1, frame(1200)))
    assert mb.cond.waiting.wait(GUARD), 'the put never waited'
    job = FakeJob()
    assert mb.put_job(job)
    mb.put_prompt(0, PromptItem('p', 'click', 0))
    mb.close()
    assert done.wait(GUARD), 'close did not wake the blocked put'
    assert mb.pending_frames(0) == mb.pending_frames(1) == 0
    assert mb.camera(0).pending_prompts() == 0
    assert job.abandoned and not job.ran
    assert not mb.put_job(FakeJob())
    mb.put_frame(0, frame(1200))          # after close: ignored, never blocks
    assert mb.pending_frames(0) == 0
    assert mb.take(0.0) == (None, [[], []])


def test_jobs_wake_the_consumer_and_run_in_order(clock):
    mb = box()
    jobs = [FakeJob(), FakeJob()]
    done, result = in_thread(lambda: mb.take(3600.0))
    assert mb.cond.waiting.wait(GUARD)
    for j in jobs:
        assert mb.put_job(j)
    assert done.wait(GUARD), 'a job did not wake the consumer'
    assert mb.take_jobs() == jobs and mb.take_jobs() == []


# ---------------------------------------------------------------------- camera view
def test_camera_view_forwards_to_its_camera_only(one_thread):
    from conftest import LEAN, shared_model, small_cfg, textured_frame, tracker_on_shared_model
    from sam2_ros.engine.errors import FrameError
    from sam2_ros.engine.multistream import MultiStreamTracker
    from sam2_ros.engine.types import Prompt
    from sam2_ros.engine.camera import CameraTracker

    cfg = small_cfg(image_size=64, max_objects=3, extra_hydra_overrides=list(LEAN))
    core = MultiStreamTracker(cfg, cameras=2, model=shared_model(
        64, cfg.corrections_as_cond, cfg.extra_hydra_overrides))
    ref = tracker_on_shared_model(cfg)
    view = CameraTracker(core, 1)
    assert view.cfg is core.cfg and view.stats is core.stats
    assert view.fallback_reasons is core.fallback_reasons
    for t in (view, ref):
        t.queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    assert view.queued_ids == [1] and view.object_ids == [] and view.frame_index == -1
    frames = [textured_frame(48, 64, seed=i) for i in range(3)]
    results = []
    for i, f in enumerate(frames):
        if i == 1:
            for t in (view, ref):
                t.add_prompt(Prompt(2, points=np.array([[40.0, 20.0]]), labels=np.array([1])))
        results.append((view.track(f), ref.track(f)))
    for a, b in results:
        assert (a.frame_index, a.height, a.width) == (b.frame_index, b.height, b.width)
        assert [o.obj_id for o in a.objects] == [o.obj_id for o in b.objects]
        for oa, ob in zip(a.objects, b.objects):
            assert torch.equal(oa.low_res_logits, ob.low_res_logits)
            assert oa.score == ob.score
    assert view.object_ids == [1, 2] and view.queued_ids == [] and view.frame_index == 2
    # camera 0 never stepped and holds nothing
    assert core.stream(0).frame_index == -1 and core.stream(0).object_ids == []
    view.remove_object(2)
    assert view.object_ids == [1]
    with pytest.raises(FrameError):       # this camera's error is raised, not returned
        view.track(np.zeros((48, 64, 3), np.float32))
    ref.remove_object(2)
    for t in (view, ref):
        t.reset()
    assert view.object_ids == [] and view.frame_index == ref.frame_index
    # after the reset a frame of another size, as the one-camera tracker takes it
    for t in (view, ref):
        t.queue_prompt(Prompt(3, box=(10, 10, 50, 40)))
    f = textured_frame(60, 80, seed=9)
    a, b = view.track(f), ref.track(f)
    assert (a.frame_index, a.height, a.width) == (b.frame_index, b.height, b.width)
    assert torch.equal(a.by_id(3).low_res_logits, b.by_id(3).low_res_logits)
    assert core.stream(0).frame_index == -1 and core.stream(0).object_ids == []


def test_pairing_counts_reach_diagnostics_and_mostly_unpaired_frames_warn(clock):
    """The pairer's counts are camera 0's diagnostics values; once enough groups were seen,
    most of them released without a partner is a WARN saying what to check."""
    from sam2_ros.ros.rig import PAIRING_JUDGED_AFTER, pairing_health

    mb = box()
    mb.put_frame(0, frame(1 * P))
    mb.put_frame(1, frame(1 * P))            # a pair
    mb.put_frame(0, frame(2 * P))
    mb.put_frame(1, frame(5 * P))            # 2P alone: its partner moved past
    counts = mb.pairing()
    assert counts['pairs_complete'] == 1 and counts['pairs_partial'] >= 1
    assert counts['pairing_resets'] == 0
    assert sum(v for k, v in counts.items() if k.startswith('pairs_released_')) == \
        counts['pairs_complete'] + counts['pairs_partial']
    few = {'pairs_complete': 1, 'pairs_partial': 5}
    assert pairing_health(few, 'OK', 'tracking') == ('OK', 'tracking')      # too early
    bad = {'pairs_complete': 10, 'pairs_partial': PAIRING_JUDGED_AFTER}
    level, message = pairing_health(bad, 'OK', 'tracking')
    assert level == 'WARN' and message.startswith(f'{PAIRING_JUDGED_AFTER} of 70 frame groups '
                                                  f'unpaired') and 'pair_tolerance_ms' in message
    assert pairing_health(bad, 'ERROR', 'worker stopped')[0] == 'ERROR'
    good = {'pairs_complete': 100, 'pairs_partial': 3}
    assert pairing_health(good, 'OK', 'tracking') == ('OK', 'tracking')
