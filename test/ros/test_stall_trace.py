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

WAIT_S = 60.0     # a bound for a hung sampler only; the waits end on samples, not on time


def wait_for_samples(tracer: StallTracer, n: int) -> None:
    """Block (in the caller's frame: the stall the tracer must see) until ``n`` samples."""
    end = time.monotonic() + WAIT_S
    while tracer.samples_taken < n:
        assert time.monotonic() < end, 'the sampler took no samples'
        time.sleep(0.001)


def held_by_the_lock_marker(tracer: StallTracer, n: int) -> None:
    wait_for_samples(tracer, n)


def test_a_call_past_the_threshold_is_filed_with_the_blocking_function():
    tracer = StallTracer(threshold_ms=0.5, interval_ms=0.5)
    other = threading.Event()
    helper = threading.Thread(target=other.wait, name='helper_thread', daemon=True)
    helper.start()
    try:
        with tracer.watch():
            held_by_the_lock_marker(tracer, 3)
        stalls = tracer.take()
        assert len(stalls) == 1 and tracer.take() == []
        s = stalls[0]
        assert s.samples >= 3 and s.ms >= 0.5 and s.max_gap_ms > 0
        main = s.stacks['MainThread']
        assert any('held_by_the_lock_marker' in stack for stack, _ in main)
        assert any('wait' in stack for stack, _ in s.stacks['helper_thread'])
        assert 'stall_trace' not in s.stacks          # the sampler leaves itself out
        text = s.describe()
        assert text.startswith('a tracking call took') and '[MainThread]' in text
    finally:
        other.set()
        tracer.close()


def test_a_call_under_the_threshold_files_nothing():
    tracer = StallTracer(threshold_ms=60_000.0)
    try:
        for _ in range(3):
            with tracer.watch():
                pass
        assert tracer.take() == [] and tracer.samples_taken == 0
    finally:
        tracer.close()


def test_a_raising_call_is_still_filed_and_the_tracer_rearms():
    tracer = StallTracer(threshold_ms=0.5, interval_ms=0.5)
    try:
        with pytest.raises(RuntimeError):
            with tracer.watch():
                wait_for_samples(tracer, 1)
                raise RuntimeError('step failed')
        with tracer.watch():
            wait_for_samples(tracer, tracer.samples_taken + 1)
        assert len(tracer.take()) == 2
    finally:
        tracer.close()


def test_traced_none_is_a_no_op():
    with traced(None):
        pass


def test_the_worker_files_a_stalled_track_call():
    tracer = StallTracer(threshold_ms=0.5, interval_ms=0.5)

    class SlowTracker:
        def track(self, rgb):
            held_by_the_lock_marker(tracer, 2)
            return FrameResult(0, 2, 2)

    published = []
    w = TrackingWorker(SlowTracker(), Mailbox(True, 4, 3),
                       host(lambda m: np.zeros((2, 2, 3), np.uint8), None),
                       outputs(published.append), stall=tracer)
    try:
        w._on_frame(frame(1, 100))
        stalls = tracer.take()
        assert len(published) == 1 and len(stalls) == 1
        assert any('track' in stack and 'held_by_the_lock_marker' in stack
                   for stack, _ in stalls[0].stacks['MainThread'])
    finally:
        tracer.close()


@pytest.mark.parametrize('bad', [-1.0, math.nan])
def test_stall_trace_ms_must_be_zero_or_positive(bad):
    with pytest.raises(ValueError, match='stall_trace_ms'):
        NodeOptions(stall_trace_ms=bad).validate()
    assert NodeOptions().stall_trace_ms == 0.0
