"""tools/bench/host_watch.py: each frame gets the CPU waits of the windows its span overlaps;
the watcher process finds the processes below its root and writes their waits."""

import os
import subprocess
import sys
import time

from tools.bench import host_watch
from tools.bench.slow_frames import lines

SAMPLES = [  # windows of 20 ms ending at t
    {'t': 10.020, 'wait_ms': {'camera:1': 0.1, 'node:2': 0.0}, 'steal_ms': 0.0},
    {'t': 10.040, 'wait_ms': {'camera:1': 4.0, 'node:2': 0.5}, 'steal_ms': 10.0,
     'minflt': {'camera:1': 600, 'node:2': 2}, 'compact_stalls': 1},
    {'t': 10.060, 'wait_ms': {'camera:1': 0.0, 'node:2': 0.2}, 'steal_ms': 0.0},
]


def test_frame_gets_the_waits_of_the_windows_it_overlaps():
    frames = [{'e2e_mask_ms': 8.0}, {'e2e_mask_ms': 8.0}, {'e2e_mask_ms': None}]
    # frame 0 spans 10.025-10.033 (window 2 only); frame 1 10.035-10.043 (windows 2 and 3)
    host_watch.attach(frames, [10.025, 10.035, 10.0], SAMPLES, 0.020)
    assert frames[0]['host_wait_ms'] == 4.5
    assert frames[0]['host_wait_top'] == 'camera:1'
    assert frames[0]['host_steal_ms'] == 10.0
    assert frames[0]['host_minflt'] == 602 and frames[0]['host_compact_stalls'] == 1
    assert frames[1]['host_wait_ms'] == 4.7
    assert frames[2]['host_wait_ms'] is None          # no mask: no span


def test_a_window_spans_from_its_t0():
    """Reading /proc takes time, so a window can be longer than the period: its t0 says
    where it began."""
    frames = [{'e2e_mask_ms': 5.0}]
    samples = [{'t0': 9.95, 't': 10.05, 'wait_ms': {'node:2': 1.5}, 'steal_ms': 0.0}]
    host_watch.attach(frames, [9.96], samples, 0.02)
    assert frames[0]['host_wait_ms'] == 1.5


def test_frames_without_samples_get_none():
    frames = [{'e2e_mask_ms': 8.0}]
    host_watch.attach(frames, [1.0], [], 0.02)
    assert frames[0]['host_wait_ms'] is None and frames[0]['host_wait_top'] is None


def test_totals_rank_processes_by_wait():
    per, steal = host_watch.totals(SAMPLES)
    assert list(per) == ['camera:1', 'node:2'] and per['camera:1'] == 4.1
    assert steal == 10.0


def test_slow_frames_print_the_runs_waits():
    run = {'frames': [{'e2e_mask_ms': 9.0, 'host_wait_ms': 3.0, 'host_wait_top': 'camera:1'}],
           'host': {'cpu_wait_ms': {'camera:1': 4.1}, 'steal_ms': 10.0}}
    text = '\n'.join(lines(run, 3))
    assert 'camera:1' in text and 'cpu wait ms: camera:1 4.1; steal 10.0 ms' in text


def test_watcher_process_reports_a_child_that_runs(tmp_path):
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])
    out = tmp_path / 'host.jsonl'
    watch = host_watch.HostWatch(out, period_ms=10)
    try:
        watch.start()
        deadline = time.monotonic() + 60          # a loaded CI machine: wait for lines
        while time.monotonic() < deadline and len(watch.samples()) < 3:
            time.sleep(0.05)
    finally:
        watch.stop()
        child.kill()
        child.wait()
    samples = watch.samples()
    assert len(samples) >= 3
    assert any(label.endswith(f':{child.pid}') for label in samples[-1]['wait_ms'])
    assert all(s['t'] > 0 and s['steal_ms'] >= 0 for s in samples)
    assert all(n >= 0 for s in samples for n in s['minflt'].values())
    assert watch.proc.returncode is not None


def test_children_of_finds_this_process():
    assert host_watch.children_of(os.getpid())[os.getpid()].endswith(f':{os.getpid()}')
def test_thp_mode_is_one_word_or_none():
    mode = host_watch.thp_mode()
    assert mode is None or mode in ('always', 'madvise', 'never')
