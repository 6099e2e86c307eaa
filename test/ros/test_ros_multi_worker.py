"""The multi-camera worker's step of a group (sam2_ros/ros/multi_worker.py ``handle_group``) over
a fake core: every camera's engine span is the one track call of the group (not another
camera's decode before it, nor another camera's hand-off after it), results are finished in
camera order (a failed one last), and one camera's failure (a failed frame, an internal error
while finishing it) never stops the other's result."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from sam2_ros.engine.errors import PromptError, StepError
from sam2_ros.engine.types import FrameResult, StreamsResult
from sam2_ros.ros import detections as det
from sam2_ros.ros.multi_worker import MultiCameraWorker
from sam2_ros.ros.paired_mailbox import PairedMailbox
from sam2_ros.ros.pairing import Arrival, Group
from sam2_ros.ros.worker import FrameItem
from test_ros_worker import host, outputs


class FakeCore:
    """Two cameras; ``track`` returns a result per present frame, or ``errors[c]``."""

    cameras = 2

    def __init__(self):
        self.calls, self.errors = [], [None, None]
        self.stats, self.fallback_reasons = {}, {}

    def stream(self, c):
        return SimpleNamespace(stream=SimpleNamespace(queued={}, deferred={}))

    def track(self, frames):
        self.calls.append(('track', time.monotonic()))
        res = [None if f is None or e is not None else FrameResult(len(self.calls), 2, 2)
               for f, e in zip(frames, self.errors)]
        return StreamsResult(res, [None if f is None else e
                                   for f, e in zip(frames, self.errors)])


def worker(core, events, groups=None):
    def decode(msg):
        events.append(('decode', msg))
        return np.zeros((2, 2, 3), np.uint8)

    def publish(c):
        return lambda p: events.append(('publish', c, time.monotonic(), p))
    return MultiCameraWorker(
        core, PairedMailbox(2, True, 4, 8, period_ns=33_000_000),
        [host(decode=decode), host(decode=decode)], [outputs(publish(0)), outputs(publish(1))],
        [det.Association(), det.Association()],
        on_group=None if groups is None else lambda g, r: groups.append(r))


def group(stamp):
    return Group(stamp, [Arrival(c, stamp, 0, FrameItem(c, stamp, SimpleNamespace(stamp=stamp),
                                                        time.monotonic()))
                         for c in range(2)], 'complete')


def published(events):
    return [e for e in events if e[0] == 'publish']


def test_every_cameras_engine_span_is_the_groups_track_call():
    core, events = FakeCore(), []
    w = worker(core, events)
    w.handle_group(group(100))
    pubs = published(events)
    assert [e[1] for e in pubs] == [0, 1]                        # camera order
    t0, t1 = pubs[0][3].times, pubs[1][3].times
    assert t0.engine0 == t1.engine0 >= t1.decode1                # after the last decode
    assert t0.engine0 <= core.calls[0][1] <= t0.engine1
    assert t0.engine1 == t1.engine1 <= pubs[0][2]                # before camera 0's publish


def test_an_internal_error_finishing_one_camera_leaves_the_other_published(monkeypatch):
    core, events, groups = FakeCore(), [], []
    w = worker(core, events, groups)
    reports = []
    monkeypatch.setattr(w.lanes[0].errors, 'report', reports.append)

    def boom(*a, **k):
        raise RuntimeError('injected')
    monkeypatch.setattr(w.lanes[0], 'finish_frame', boom)
    w.handle_group(group(100))
    assert [e[1] for e in published(events)] == [1]
    assert len(reports) == 1 and 'injected' in reports[0]
    assert [lane.counters.consecutive_failures for lane in w.lanes] == [1, 0]
    assert groups[0][0] is None and groups[0][1] is not None
    monkeypatch.undo()
    w.handle_group(group(200))                                      # camera 0 goes on
    assert [e[1] for e in published(events)] == [1, 0, 1]


def test_a_failed_frame_of_one_camera_leaves_the_other_published():
    core, events = FakeCore(), []
    core.errors[0] = StepError('injected')
    w = worker(core, events)
    w.handle_group(group(100))
    assert [e[1] for e in published(events)] == [1]
    assert [lane.counters.frame_errors for lane in w.lanes] == [1, 0]
    assert [lane.counters.processed for lane in w.lanes] == [0, 1]


def test_a_cameras_retried_frame_does_not_delay_the_others_result():
    """A queued prompt refused in the group's call: that camera's frame is tracked again alone
    (the worker's one retry), after the other camera's result is out, not before it."""
    core, events = FakeCore(), []
    core.errors[0] = PromptError('a queued prompt does not fit this frame')
    w = worker(core, events)
    track = core.track

    def track_logged(frames):
        retry = [c for c, f in enumerate(frames) if f is not None] == [0]
        events.append(('retry',) if retry else ('group',))
        if retry:
            core.errors[0] = None
        return track(frames)
    core.track = track_logged
    w.handle_group(group(100))
    order = [(e[0], e[1]) if e[0] == 'publish' else (e[0],) for e in events
             if e[0] != 'decode']
    assert order == [('group',), ('publish', 1), ('retry',), ('publish', 0)], order
    assert [lane.counters.processed for lane in w.lanes] == [1, 1]


def test_a_failing_3d_positions_hook_is_reported_on_camera_0_only(monkeypatch):
    """The positions of a group fail (a bug, a singular calibration slipping through): both
    cameras' results are out already; the failure is camera 0's report, not a failed frame
    of every camera, and the next group is tracked."""
    core, events = FakeCore(), []
    w = worker(core, events)

    def boom(g, r):
        raise RuntimeError('injected')
    w.on_group = boom
    reports = [[], []]
    for c in (0, 1):
        monkeypatch.setattr(w.lanes[c].errors, 'report', reports[c].append)
    w.handle_group(group(100))
    assert [e[1] for e in published(events)] == [0, 1]
    assert len(reports[0]) == 1 and '3D positions failed' in reports[0][0] and reports[1] == []
    assert [lane.counters.consecutive_failures for lane in w.lanes] == [0, 0]
    w.handle_group(group(200))
    assert [e[1] for e in published(events)] == [0, 1, 0, 1]


def test_an_idle_rig_applies_a_clock_jump_on_every_camera_without_a_frame():
    """A /clock jump noted while no frame waits is applied in the worker's next idle round on
    each camera (as the one-camera worker does), not only when that camera's next frame comes:
    a replay restarted into an idle rig resets before the new run's prompts."""
    core, events, seen = FakeCore(), [], []
    w = worker(core, events)
    for c, lane in enumerate(w.lanes):
        lane.time_jumped = lambda why, to_ns=None, c=c: seen.append(c)
        lane.time.line.note_jump(0, 10_000_000_000)          # 10 s back: a new time line
    w.start()
    try:
        end = time.monotonic() + 60.0                        # only ends a broken run
        while sorted(seen) != [0, 1] and time.monotonic() < end:
            time.sleep(0.01)
    finally:
        w.stop()
    assert sorted(seen) == [0, 1] and core.calls == []


def test_a_camera_without_a_frame_idles_while_the_other_streams():
    """A round's cameras without a frame in its group idle (their /clock jumps, corrections
    deferred on a stopped camera: deferred_wait.py), also while another camera streams; a
    round without any group idles every camera; a complete pair idles none."""
    core, events = FakeCore(), []
    w = worker(core, events)
    idled = []
    for c, lane in enumerate(w.lanes):
        lane.idle = lambda mark=None, c=c: idled.append(c)
    lone = Group(200, [group(200).frames[0], None], 'absent')
    for g, want in ((lone, [1]), (group(300), []), (None, [0, 1])):
        idled.clear()
        w.mailbox.take = lambda timeout, g=g: (g, [[], []])
        w.run_once(0.0)
        assert idled == want, (g, idled)


def test_an_exception_of_the_shared_track_call_counts_each_cameras_frame():
    """core.track itself raises (not a per-camera StepError): each camera whose frame was in
    the group counts a frame error and is told (not a camera without a frame in it), and the
    next group goes on."""
    core, events = FakeCore(), []
    w = worker(core, events)

    def boom(frames):
        raise RuntimeError('injected')
    real, core.track = core.track, boom
    lone = Group(100, [group(100).frames[0], None], 'absent')
    w.mailbox.take = lambda timeout: (lone, [[], []])
    w.run_once(0.0)
    assert [lane.counters.frame_errors for lane in w.lanes] == [1, 0]
    assert [lane.counters.consecutive_failures for lane in w.lanes] == [1, 0]
    core.track = real
    w.handle_group(group(200))
    assert [e[1] for e in published(events)] == [0, 1]
    assert any('injected' in e for e in published(events)[0][3].errors)
