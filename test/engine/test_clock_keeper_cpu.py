"""sam2_ros/engine/clock_keeper.py: the keeper spins until stopped, never on a CPU device or
with a zero length, and a failing spin only ends the keeper (its error kept)."""

import threading
import time

import pytest

from sam2_ros.engine.clock_keeper import CYCLES_PER_US, ClockKeeper


def wait_for(cond, timeout=60.0):
    deadline = time.monotonic() + timeout        # a loaded CI machine: generous
    while time.monotonic() < deadline and not cond():
        time.sleep(0.005)
    return cond()


def test_spins_until_stopped_with_the_sized_cycles():
    seen = []
    k = ClockKeeper('cuda:0', 500, spin=lambda c: (seen.append(c), time.sleep(0.001)))
    k.start()
    try:
        assert wait_for(lambda: k.spins >= 3)
        assert k.running
    finally:
        k.stop()
    assert not k.running
    n = k.spins
    time.sleep(0.02)
    assert k.spins == n                                 # nothing after stop
    assert set(seen) == {500 * CYCLES_PER_US}


@pytest.mark.parametrize('device, us', [('cpu', 500), ('cuda:0', 0)])
def test_off_on_a_cpu_device_or_with_zero_length(device, us):
    k = ClockKeeper(device, us)
    assert not k.enabled
    k.start()
    assert not k.running and k.spins == 0
    k.stop()


def test_an_unindexed_cuda_device_is_the_callers_gpu(monkeypatch):
    """'cuda' without an index names the caller's current GPU: the keeper's thread would
    otherwise have none (torch.cuda.set_device refuses an unindexed device)."""
    import torch

    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'current_device', lambda: 3)
    assert ClockKeeper('cuda', 100).device == torch.device('cuda', 3)
    assert ClockKeeper('cuda:1', 100).device == torch.device('cuda', 1)


def test_a_failing_spin_ends_only_the_keeper():
    def spin(_cycles):
        raise RuntimeError('no device')
    told = []
    k = ClockKeeper('cuda:0', 100, spin=spin, on_error=told.append)
    k.start()
    assert wait_for(lambda: not k.running)
    assert 'no device' in k.error and k.spins == 0
    assert len(told) == 1 and 'clock keeper stopped' in told[0] and 'no device' in told[0]
    k.stop()


def test_start_twice_runs_one_thread():
    gate = threading.Event()
    k = ClockKeeper('cuda:0', 100, spin=lambda c: gate.wait(0.01))
    k.start()
    k.start()
    try:
        names = [t.name for t in threading.enumerate() if t.name == 'sam2_clock_keeper']
        assert len(names) == 1
    finally:
        k.stop()


def test_node_tuning_starts_and_stops_the_keeper(monkeypatch):
    """process_tuning: gpu_clock_keeper_us from the options; keep_clocks at activate starts a
    keeper only for a GPU device, release_clocks stops it."""
    from types import SimpleNamespace

    from sam2_ros.ros import malloc
    from sam2_ros.ros.process_tuning import ProcessTuning

    monkeypatch.setattr(malloc, 'keep_large_buffers', lambda: True)
    t = ProcessTuning()
    t.apply(SimpleNamespace(tune_malloc=False, opencv_threads=0, gil_switch_interval_ms=0.0,
                            gpu_clock_keeper_us=250.0), print)
    t.keep_clocks('cpu', print)
    assert t.keeper is not None and not t.keeper.running     # a CPU tracker: nothing runs
    t.release_clocks()
    assert t.keeper is None
    started = []
    monkeypatch.setattr(ClockKeeper, 'start', lambda self: started.append(self.spin_us))
    t.keep_clocks('cuda:0', print)
    assert started == [250.0] and t.keeper.device.type == 'cuda'
    t.release_clocks()
