"""The per-frame host account of the benchmarks (``tools/bench/host_frames.py``): which frames
count as disturbed, and the undisturbed frames' percentiles beside those of all frames."""

from __future__ import annotations

import os

import pytest

from tools.bench import host_frames


def frames(waits, steals):
    return [{'cpu_wait_ms': w, 'steal_ms': s} for w, s in zip(waits, steals)]


def test_a_frame_is_disturbed_by_run_queue_wait_or_any_steal():
    assert not host_frames.disturbed({'cpu_wait_ms': host_frames.WAIT_MS / 2, 'steal_ms': 0.0})
    assert host_frames.disturbed({'cpu_wait_ms': host_frames.WAIT_MS, 'steal_ms': 0.0})
    assert host_frames.disturbed({'cpu_wait_ms': 0.0, 'steal_ms': 10.0})
    assert not host_frames.disturbed({'cpu_wait_ms': None, 'steal_ms': None})


def test_summary_leaves_out_the_disturbed_frames_only_from_its_undisturbed_percentiles():
    ms = [2.0] * 98 + [9.0, 12.0]
    per_frame = frames([0.0] * 98 + [6.5, 0.1], [0.0] * 99 + [10.0])
    out = host_frames.summary(ms, per_frame)
    assert out['disturbed_frames'] == 2
    assert out['undisturbed_ms_p50'] == out['undisturbed_ms_p99'] == 2.0
    assert out['cpu_wait_ms_total'] == pytest.approx(6.6) and out['steal_ms_total'] == 10.0
    assert host_frames.cell({'host': out}) == '1.00 (2)'


def test_summary_says_nothing_where_the_host_says_nothing():
    out = host_frames.summary([1.0, 2.0], frames([None, None], [None, None]))
    assert out == {'disturbed_frames': None}
    assert host_frames.cell({'host': out}) == '-' and host_frames.cell({}) == '-'


def test_a_frame_account_reads_this_threads_schedstat_and_the_machines_steal():
    """Both counters are read and differenced as numbers (never negative: both only grow);
    where the host has no schedstat (not Linux, or a kernel without it) the wait is None."""
    import time
    watch = host_frames.HostFrames()
    watch.start()
    time.sleep(0.001)
    frame = watch.take()
    if os.path.exists('/proc/thread-self/schedstat'):
        assert isinstance(frame['cpu_wait_ms'], float) and frame['cpu_wait_ms'] >= 0
        assert isinstance(frame['steal_ms'], float) and frame['steal_ms'] >= 0
    else:
        assert frame['cpu_wait_ms'] is None
