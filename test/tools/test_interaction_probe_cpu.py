"""CPU test of the interaction frames probe (``python -m tools.probes.interaction_frames_probe``)
and of the benchmark's ``--tune-malloc`` rows, at a tiny size: every timed frame has its wall
time and the engine_ms its result reported (which says whether a slow frame lost its time
before or after the masks' read-back), the window's frames their profile (no kernels on the
CPU), and a tuned allocator is recorded in the probe and named in the benchmark's variant."""

from __future__ import annotations

import json

import pytest

from tools.bench import interaction as bench
from tools.probes import interaction_frames_probe as probe


def test_probe_records_wall_and_engine_ms_of_every_frame(tmp_path, one_thread, capsys):
    out = tmp_path / 'frames.json'
    argv = ['--device', 'cpu', '--precision', 'fp32', '--res', '64', '--frames', '4',
            '--window', '2-3', '--objects', '1', '--tune-malloc', '--out', str(out)]
    assert probe.main(argv) == 0
    printed = capsys.readouterr().out
    assert '# tune_malloc: True' in printed and 'frame 2: ' in printed and 'engine_ms' in printed
    row = json.loads(out.read_text())['rows'][0]
    assert row['tune_malloc'] is True and row['objects'] == 1
    assert len(row['frame_ms']) == len(row['engine_ms']) == 4
    # the engine's time is part of the frame's wall time
    assert all(0 < e <= w for e, w in zip(row['engine_ms'], row['frame_ms']))
    assert sorted(row['window']) == ['2', '3']
    assert len(row['replays']) == 4 and all(r['first_replays'] == 0 for r in row['replays'])


def test_tuned_allocator_rows_are_named_apart(tmp_path, one_thread, capsys):
    out = tmp_path / 'interaction.json'
    argv = ['--device', 'cpu', '--precision', 'fp32', '--model', 'tiny', '--res', '64',
            '--h', '64', '--w', '96', '--frames', '3', '--objects', '1', '--variants', 'swap',
            '--random-weights', '--tune-malloc', '--out', str(out)]
    assert bench.main(argv) == 0
    assert '# tune_malloc: True' in capsys.readouterr().out
    assert [r['variant'] for r in json.loads(out.read_text())] == ['swap+tune_malloc']


def test_frozen_heap_rows_are_named_apart_and_the_heap_is_unfrozen(tmp_path, one_thread):
    """--gc-freeze freezes after the set-up frame, as the node after configure, and unfreezes
    when the row's tracker is released; every row says what its frames spent in collections."""
    import gc

    out = tmp_path / 'interaction.json'
    argv = ['--device', 'cpu', '--precision', 'fp32', '--model', 'tiny', '--res', '64',
            '--h', '64', '--w', '96', '--frames', '3', '--objects', '1', '--variants', 'swap',
            '--random-weights', '--gc-freeze', '--out', str(out)]
    assert bench.main(argv) == 0
    assert gc.get_freeze_count() == 0
    (row,) = json.loads(out.read_text())
    assert row['variant'] == 'swap+gc_freeze'
    assert len(row['gc']['collections']) == 3 and row['gc']['total_ms'] >= 0


def test_probe_records_each_frames_gc_ms(tmp_path, one_thread, capsys):
    out = tmp_path / 'frames.json'
    argv = ['--device', 'cpu', '--precision', 'fp32', '--res', '64', '--frames', '3',
            '--window', '1-1', '--gc-freeze', '--out', str(out)]
    assert probe.main(argv) == 0
    assert 'slow frame ' in capsys.readouterr().out
    row = json.loads(out.read_text())['rows'][0]
    assert row['gc_freeze'] is True and len(row['gc_ms']) == 3
    assert all(0 <= g <= w for g, w in zip(row['gc_ms'], row['frame_ms']))


def test_trace_profiles_every_frame_once_with_its_host_calls(tmp_path, one_thread, capsys):
    """--trace: one profiler session over the whole stream; every timed frame gets its wall
    there and its longest host calls (aten ops on the CPU; no kernels there)."""
    out = tmp_path / 'frames.json'
    argv = ['--device', 'cpu', '--precision', 'fp32', '--res', '64', '--frames', '4',
            '--window', '1-1', '--trace', '--out', str(out)]
    assert probe.main(argv) == 0
    assert 'traced slow frame ' in capsys.readouterr().out
    trace = json.loads(out.read_text())['rows'][0]['trace']
    assert sorted(trace, key=int) == ['1', '2', '3', '4']
    for f in trace.values():
        assert f['wall_ms'] > 0 and f['kernel_ms'] == 0.0
        assert 0 < f['host_ops_ms'] <= f['wall_ms']
        calls = f['top_calls']
        assert calls and all(ms <= f['wall_ms'] for _, ms in calls)
        assert [ms for _, ms in calls] == sorted((ms for _, ms in calls), reverse=True)
        assert not any(n.startswith('probe_frame_') for n, _ in calls)


def test_replay_watch_counts_first_replays_and_restores_replay(monkeypatch):
    """A graph replayed twice counts one first replay; a second graph another; a capture
    counts in its frame; the class's methods are restored on exit, an exception included.
    CUDAGraph's methods are stand-ins here (no CUDA on the CPU)."""
    import torch

    from tools.probes import replay_watch

    class Graph:        # weakly referenced, as torch.cuda.CUDAGraph is
        pass

    calls = []
    monkeypatch.setattr(torch.cuda.CUDAGraph, 'replay', lambda g: calls.append(g))
    monkeypatch.setattr(torch.cuda.CUDAGraph, 'capture_end', lambda g: calls.append('end'))
    standins = (torch.cuda.CUDAGraph.replay, torch.cuda.CUDAGraph.capture_end)
    g1, g2 = Graph(), Graph()
    with pytest.raises(RuntimeError):
        with replay_watch.ReplayWatch() as watch:
            torch.cuda.CUDAGraph.replay(g1)
            first = watch.frame()
            torch.cuda.CUDAGraph.capture_end(g2)
            torch.cuda.CUDAGraph.replay(g1)
            torch.cuda.CUDAGraph.replay(g2)
            second = watch.frame()
            raise RuntimeError('a frame failed')
    assert (torch.cuda.CUDAGraph.replay, torch.cuda.CUDAGraph.capture_end) == standins
    assert calls == [g1, 'end', g1, g2]
    assert (first['replays'], first['first_replays'], first['captures']) == (1, 1, 0)
    assert (second['replays'], second['first_replays'], second['captures']) == (2, 1, 1)
    assert first['host_allocs'] == second['host_allocs'] == 0       # no pinned pool on the CPU
