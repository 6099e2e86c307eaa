"""sam2_ros/engine/clock_keeper.py: a spin is queued after a frame only when the last one has
ended (nothing queues up), never on a CPU device or with a zero length; a failing launch only
stops the keeper (told once); the process-wide keeper per GPU is what the runner's frame_done
reaches, and release ends it."""

import pytest
import torch

from sam2_ros.engine import clock_keeper
from sam2_ros.engine.clock_keeper import CYCLES_PER_US, ClockKeeper


class FakeSpin:
    """A spin's handle: ended when the test says so."""

    def __init__(self, cycles):
        self.cycles = cycles
        self.ended = False

    def query(self):
        return self.ended


def test_a_spin_after_each_frame_only_once_the_last_one_ended():
    spins = []
    k = ClockKeeper('cuda:0', 500, launch=lambda c: spins.append(FakeSpin(c)) or spins[-1])
    assert k.frame_done() and [s.cycles for s in spins] == [500 * CYCLES_PER_US]
    assert not k.frame_done() and not k.frame_done()      # still spinning: nothing queued
    assert (k.spins, k.skipped) == (1, 2)
    spins[-1].ended = True
    assert k.frame_done()
    assert (k.spins, k.skipped, len(spins)) == (2, 2, 2)


@pytest.mark.parametrize('device, us', [('cpu', 500), ('cuda:0', 0)])
def test_off_on_a_cpu_device_or_with_zero_length(device, us):
    k = ClockKeeper(device, us)
    assert not k.enabled and not k.frame_done() and k.spins == 0
    assert clock_keeper.keeps_clocks(device) == (device != 'cpu')


def test_an_unindexed_cuda_device_is_the_callers_gpu(monkeypatch):
    """'cuda' without an index names the caller's current GPU, so the node's 'cuda' and the
    runner's frame_done('cuda') find one keeper."""
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'current_device', lambda: 3)
    assert ClockKeeper('cuda', 100).device == torch.device('cuda', 3)
    assert ClockKeeper('cuda:1', 100).device == torch.device('cuda', 1)


def test_a_failing_launch_stops_only_the_keeper_and_is_told_once():
    def launch(_cycles):
        raise RuntimeError('no device')
    told = []
    k = ClockKeeper('cuda:0', 100, launch=launch, on_error=told.append)
    assert not k.frame_done() and not k.frame_done()
    assert 'no device' in k.error and k.spins == 0 and not k.enabled
    assert len(told) == 1 and 'clock keeper stopped' in told[0] and 'no device' in told[0]


def test_frame_done_reaches_the_kept_gpu_until_released(monkeypatch):
    monkeypatch.setattr(torch.cuda, 'is_current_stream_capturing', lambda: False)
    spins = []

    def launch(cycles):
        spins.append(FakeSpin(cycles))
        spins[-1].ended = True
        return spins[-1]
    k = clock_keeper.keep('cuda:1', 200, launch=launch)
    try:
        clock_keeper.frame_done('cuda:0')            # another GPU: not kept
        assert spins == []
        clock_keeper.frame_done('cuda:1')
        clock_keeper.frame_done(torch.device('cuda', 1))
        assert k.spins == 2
        monkeypatch.setattr(torch.cuda, 'is_current_stream_capturing', lambda: True)
        clock_keeper.frame_done('cuda:1')            # never inside a graph capture
        assert k.spins == 2
    finally:
        clock_keeper.release('cuda:1')
    monkeypatch.setattr(torch.cuda, 'is_current_stream_capturing', lambda: False)
    clock_keeper.frame_done('cuda:1')
    assert k.spins == 2
    assert not clock_keeper.keep('cuda:1', 0).enabled          # off: nothing is kept
    clock_keeper.frame_done('cuda:1')
    assert k.spins == 2


def test_node_tuning_keeps_the_clocks_of_a_gpu_while_active(monkeypatch):
    """process_tuning: gpu_clock_keeper_us from the options; keep_clocks at activate keeps a
    GPU's clocks (a CPU tracker: nothing is kept), release_clocks ends it."""
    from types import SimpleNamespace

    from sam2_ros.ros import malloc
    from sam2_ros.ros.process_tuning import ProcessTuning

    monkeypatch.setattr(malloc, 'keep_large_buffers', lambda: True)
    t = ProcessTuning()
    t.apply(SimpleNamespace(tune_malloc=False, opencv_threads=0, gil_switch_interval_ms=0.0,
                            gpu_clock_keeper_us=250.0), print)
    t.keep_clocks('cpu', print)
    assert t.keeper is not None and not t.keeper.enabled
    t.release_clocks()
    assert t.keeper is None
    t.keep_clocks('cuda:0', print)
    try:
        assert t.keeper.enabled and t.keeper.hold_us == 250.0
        assert clock_keeper.kept('cuda:0') is t.keeper
    finally:
        t.release_clocks()
    assert clock_keeper.kept('cuda:0') is None
