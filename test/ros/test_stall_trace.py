"""stall_trace: a tracking call past the threshold is filed with what every thread was doing."""

import math
import threading
import time

import numpy as np
import pytest

from sam2_ros.engine.types import FrameResult
from sam2_ros.ros.options import NodeOptions
from sam2_ros.ros.stall_trace import StallTracer, traced
from sam2_ros.ros.worker import Mailbox, TrackingWorker

from test_ros_worker import frame, host, outputs


def held_by_the_lock_marker(inside: threading.Event, release: threading.Event) -> None:
    inside.set()
    release.wait()


def in_a_watched_call(tracer: StallTracer, body):
    """Run ``body`` on a thread of its own inside ``tracer.watch()``; returns the thread once
    the call is under way (threshold 0: past it at once) and the release event."""
    inside, release = threading.Event(), threading.Event()

    def run():
        with tracer.watch():
            body(inside, release)
    t = threading.Thread(target=run, name='tracked_thread', daemon=True)
    t.start()
    inside.wait()
    return t, release


def test_a_call_past_the_threshold_is_filed_with_the_blocking_function():
    tracer = StallTracer(threshold_ms=0.0, sampler=False)
    other = threading.Event()
    helper = threading.Thread(target=other.wait, name='helper_thread', daemon=True)
    helper.start()
    t, release = in_a_watched_call(tracer, held_by_the_lock_marker)
    assert all(tracer.sample() for _ in range(3))      # this thread samples the others
    release.set()
    t.join()
    other.set()
    stalls = tracer.take()
    assert len(stalls) == 1 and tracer.take() == []
    s = stalls[0]
    assert s.samples == 3 and s.ms >= 0.0 and s.max_gap_ms > 0
    tracked = s.stacks['tracked_thread']
    assert sum(n for _, n in tracked) == 3
    assert any('held_by_the_lock_marker' in stack for stack, _ in tracked)
    assert any('wait' in stack for stack, _ in s.stacks['helper_thread'])
    assert 'MainThread' not in s.stacks                # the sampling thread leaves itself out
    text = s.describe()
    assert text.startswith('a tracking call took') and '[tracked_thread]' in text
    assert not tracer.sample()                         # no call watched: nothing to sample


def test_a_call_under_the_threshold_files_nothing():
    tracer = StallTracer(threshold_ms=60_000.0)
    try:
        for _ in range(3):
            with tracer.watch():
                assert not tracer.sample()
        assert tracer.take() == [] and tracer.samples_taken == 0
    finally:
        tracer.close()


def test_a_raising_call_is_still_filed_and_the_tracer_rearms():
    tracer = StallTracer(threshold_ms=0.0, sampler=False)
    with pytest.raises(RuntimeError):
        with tracer.watch():
            raise RuntimeError('step failed')
    with tracer.watch():
        pass
    assert len(tracer.take()) == 2


def test_the_sampler_thread_samples_a_call_that_stays_past_the_threshold():
    """The tracer's own thread: a call that waits until it was sampled twice is filed with
    those samples (the wait ends on the samples, not on a clock)."""
    tracer = StallTracer(threshold_ms=0.5, interval_ms=0.5)

    def until_sampled(inside, release):
        inside.set()
        while tracer.samples_taken < 2:
            time.sleep(0.001)
    try:
        t, _ = in_a_watched_call(tracer, until_sampled)
        t.join()
        s = tracer.take()[0]
        assert s.samples >= 2 and s.ms >= 0.5 and s.max_gap_ms > 0
        assert any('until_sampled' in stack for stack, _ in s.stacks['tracked_thread'])
        assert 'stall_trace' not in s.stacks
    finally:
        tracer.close()


def test_traced_none_is_a_no_op():
    with traced(None):
        pass


def test_the_worker_files_a_stalled_track_call():
    tracer = StallTracer(threshold_ms=0.0, sampler=False)
    inside, release = threading.Event(), threading.Event()

    class SlowTracker:
        def track(self, rgb):
            held_by_the_lock_marker(inside, release)
            return FrameResult(0, 2, 2)

    published = []
    w = TrackingWorker(SlowTracker(), Mailbox(True, 4, 3),
                       host(lambda m: np.zeros((2, 2, 3), np.uint8), None),
                       outputs(published.append), stall=tracer)
    t = threading.Thread(target=w.handle_frame, args=(frame(1, 100),), name='tracked_thread')
    t.start()
    inside.wait()
    assert tracer.sample()
    release.set()
    t.join()
    stalls = tracer.take()
    assert len(published) == 1 and len(stalls) == 1
    assert any('track' in stack and 'held_by_the_lock_marker' in stack
               for stack, _ in stalls[0].stacks['tracked_thread'])


@pytest.mark.parametrize('bad', [-1.0, math.nan])
def test_stall_trace_ms_must_be_zero_or_positive(bad):
    with pytest.raises(ValueError, match='stall_trace_ms'):
        NodeOptions(stall_trace_ms=bad).validate()
    assert NodeOptions().stall_trace_ms == 0.0
