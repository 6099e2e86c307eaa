"""A correction deferred to the next frame (``corrections_on_next_frame``) on a camera that
stopped: after ``deferred_wait_ms`` without a frame the worker applies it to the last frame and
publishes that frame again (sam2_ros/ros/deferred_wait.py). Fake clock and tracker, no DDS."""

from types import SimpleNamespace

import numpy as np

from sam2_ros.engine.errors import StepError
from sam2_ros.engine.types import FrameResult, Prompt
from sam2_ros.ros.deferred_wait import DeferredWait
from sam2_ros.ros.worker import Mailbox, TrackingWorker

from test_ros_worker import ADD, FakeTracker, frame, host, outputs, prompt


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class DeferringTracker(FakeTracker):
    """FakeTracker with the deferral API: deferred prompts run with the next track, or by
    apply_deferred (newest per id wins, as the real tracker)."""

    def __init__(self):
        super().__init__()
        self.deferred = {}
        self.fail_apply = False

    @property
    def frame_index(self):
        return self.frame

    @property
    def object_ids(self):
        return sorted(self.ids)

    @property
    def deferred_ids(self):
        return sorted(self.deferred)

    def defer_prompt(self, p):
        self.deferred.pop(p.obj_id, None)
        self.deferred[p.obj_id] = p

    def apply_deferred(self):
        if self.fail_apply:
            self.deferred.clear()
            raise StepError('CUDA out of memory (simulated)')
        if not self.deferred:
            return None
        self.calls += [('deferred', i) for i in self.deferred]
        self.deferred.clear()
        return FrameResult(self.frame, 2, 2)

    def track(self, rgb):
        self.calls += [('deferred', i) for i in self.deferred]
        self.deferred.clear()
        return super().track(rgb)


def deferring_worker(wait_s):
    tr, published, clock = DeferringTracker(), [], Clock()

    def convert(item):
        action, obj = item.msg
        return action, Prompt(obj, points=np.zeros((1, 2)))
    w = TrackingWorker(tr, Mailbox(True, 4, 3), host(lambda m: np.full((2, 2, 3), m, np.uint8),
                                                     convert),
                       outputs(published.append), corrections_on_next_frame=True,
                       deferred_wait_s=wait_s)
    w.deferred_wait.clock = clock
    return w, tr, published, clock


def track_and_correct(w):
    """Object 1 tracked on frame 100 (a box on the next frame), then a correction there,
    deferred."""
    w.handle_prompt(prompt(ADD, 1, 0))
    w.handle_frame(frame(10, 100))
    w.handle_prompt(prompt(ADD, 1, 100))


def test_a_paused_cameras_correction_is_applied_and_shown_after_the_wait():
    w, tr, pub, clock = deferring_worker(0.1)
    track_and_correct(w)
    assert tr.deferred_ids == [1] and len(pub) == 1
    clock.t += 0.05
    w.idle()
    assert tr.deferred_ids == [1] and len(pub) == 1   # still waiting for the next frame
    clock.t += 0.06
    w.idle()
    assert tr.deferred_ids == [] and tr.calls[-1] == ('deferred', 1)
    assert len(pub) == 2 and pub[-1].header.stamp == 100 and pub[-1].recv_t is None
    w.idle()                                          # nothing waits: nothing more
    assert len(pub) == 2


def test_a_correction_the_next_frame_ran_is_not_applied_again():
    w, tr, pub, clock = deferring_worker(0.1)
    track_and_correct(w)
    clock.t += 0.05
    w.handle_frame(frame(11, 200))                    # the next frame runs it
    w.handle_prompt(prompt(ADD, 1, 200))              # a new correction on that frame
    clock.t += 0.06                                   # 0.11 s after the first, 0.06 after it
    w.idle()
    assert tr.deferred_ids == [1] and len(pub) == 2   # the new one waits its own 0.1 s
    clock.t += 0.05
    w.idle()
    assert tr.deferred_ids == [] and len(pub) == 3 and pub[-1].header.stamp == 200
    assert [c for c in tr.calls if c[0] == 'deferred'] == [('deferred', 1)] * 2


def test_wait_zero_keeps_corrections_for_the_next_frame():
    w, tr, pub, clock = deferring_worker(0.0)
    track_and_correct(w)
    clock.t += 3600
    w.idle()
    assert tr.deferred_ids == [1] and len(pub) == 1


def test_a_failed_late_correction_is_reported_and_the_worker_goes_on():
    w, tr, pub, clock = deferring_worker(0.1)
    track_and_correct(w)
    tr.fail_apply = True
    clock.t += 1.0
    w.idle()
    assert w.counters.prompt_errors == 1 and len(pub) == 1
    w.handle_frame(frame(11, 200))
    assert any('deferred on frame 0' in e and 'out of memory' in e for e in pub[-1].errors)


def test_due_forgets_corrections_a_reset_dropped():
    clock, tr = Clock(), SimpleNamespace(frame_index=3, deferred_ids=[2])
    wait = DeferredWait(0.1, clock)
    wait.note(3)
    clock.t += 0.2
    tr.deferred_ids = []                              # reset() or remove_object() dropped it
    assert not wait.due(tr) and wait.since is None
