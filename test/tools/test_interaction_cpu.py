"""CPU test of the interaction benchmark (``python -m tools.bench.interaction``) end to end at
a tiny size: the rows' fields, their step counts against the stream's schedule, and the results
file's row replacement. Timings on the CPU mean nothing; the counts prove that every correction
and the new object were applied on the frames the GPU run will time."""

from __future__ import annotations

import json

import pytest

from tools.bench import results
from tools.bench import interaction as bench

FRAMES, EVERY, NEW_AT = 20, 10, 15
ROW_KEYS = {'model', 'res', 'objects', 'variant', 'corrections', 'run', 'frames', 'ms_p50',
            'ms_p99', 'ms_max', 'eager_steps', 'graph_steps', 'prompt_steps', 'deferred_prompts',
            'buckets_merged_steps', 'buckets_apart_steps',
            'fallbacks', 'slowest', 'gc', 'host', 'src', 'weights', 'date', 'commit', 'gpu',
            'command'}


def test_interaction_main_rows_counts_and_replacement(tmp_path, one_thread, capsys):
    """Both correction modes; a row from before the modes (no 'corrections': immediate) is
    replaced by the immediate row of its key only."""
    out = tmp_path / 'interaction.json'
    stale = {'model': 'tiny', 'res': 64, 'objects': 1, 'variant': 'swap', 'run': 'old',
             'gpu': 'cpu', 'ms_p50': -1.0}
    other = {'model': 'tiny', 'res': 512, 'objects': 3, 'variant': 'swap', 'run': 'old'}
    out.write_text(json.dumps([stale, other]))
    argv = ['--device', 'cpu', '--precision', 'fp32', '--model', 'tiny', '--res', '64',
            '--h', '64', '--w', '96', '--frames', str(FRAMES), '--correct-every', str(EVERY),
            '--new-at', str(NEW_AT), '--objects', '1', '--variants', 'swap',
            '--corrections', 'immediate,deferred', '--random-weights', '--out', str(out)]
    assert bench.main(argv) == 0
    printed = capsys.readouterr().out
    assert 'RANDOM WEIGHTS' in printed
    assert '| tiny | 64 | 1 | swap | deferred | 20 |' in printed

    rows = json.loads(out.read_text())
    # the stale row of the same key is replaced, the other key is kept, the rest are added
    assert [(r['res'], r['objects'], r['variant'], r.get('corrections'), r['run'] == 'old')
            for r in rows] == [(512, 3, 'swap', None, True), (64, 1, 'swap', 'immediate', False),
                               (64, 1, 'swap', 'deferred', False)]
    new = rows[1:]
    assert len({r['run'] for r in new}) == 1 and new[0]['run'] != 'old'   # one id per run
    corrections = FRAMES // EVERY
    for r in new:
        assert set(r) == ROW_KEYS | {'prompt_eager_steps'}, set(r) ^ ROW_KEYS
        assert r['prompt_eager_steps'] == r['prompt_steps']      # the CPU runs no graphs
        # deferred: every correction ran inside the next frame's track (one per correction)
        assert r['deferred_prompts'] == (corrections if r['corrections'] == 'deferred' else 0)
        assert r['frames'] == FRAMES and r['src'] == '96x64' and r['weights'] == 'random'
        assert r['gpu'] == 'cpu' and r['command'].endswith(' '.join(argv))
        assert 0 < r['ms_p50'] <= r['ms_p99'] <= r['ms_max']
        # a correction every 10 frames (10, 20) plus the new object's box on frame 15
        assert r['prompt_steps'] == corrections + 1
        # eager on the CPU: the object every frame, the new one from the frame after its box
        assert r['eager_steps'] == FRAMES + (FRAMES - NEW_AT) and r['graph_steps'] == 0
        assert r['fallbacks'] == 0
        slow = r['slowest']
        assert len(slow) == 5 and [s['ms'] for s in slow] == sorted(
            (s['ms'] for s in slow), reverse=True) and slow[0]['ms'] == r['ms_max']
        for s in slow:
            want = bench.prompts_on(s['frame'], EVERY, NEW_AT)
            assert s['prompt'] == ('+'.join(want) if want else None)
            assert s['mode'] == 'eager' and 0 <= s['since_prompt'] < EVERY
            assert 0 <= s['gc_ms'] <= s['ms']
            # what the host took from the frame: its thread's run-queue wait, within the frame
            assert s['cpu_wait_ms'] is None or 0 <= s['cpu_wait_ms'] <= s['ms']
        disturbed = r['host']['disturbed_frames']
        assert disturbed is None or 0 <= disturbed <= FRAMES
        assert len(r['gc']['collections']) == 3 and r['gc']['max_ms'] <= r['gc']['total_ms']


def test_interaction_needs_weights_chosen_explicitly():
    with pytest.raises(SystemExit):
        bench.parse(['--device', 'cpu'])
    assert bench.parse(['--random-weights', '--out']).out == bench.DEFAULT_OUT
    assert bench.parse(['--random-weights']).out is None
    assert bench.parse(['--random-weights']).corrections == ['deferred']
    with pytest.raises(SystemExit):
        bench.parse(['--random-weights', '--corrections', 'later'])


def test_step_counts_report_every_steps_key_the_tracker_has():
    """Counters the engine adds later (prompt_graph_steps, ...) appear without a change."""
    before = {'eager_steps': 3, 'prompt_steps': 2, 'frames': 1}
    after = {'eager_steps': 5, 'prompt_steps': 4, 'prompt_graph_steps': 2, 'frames': 9,
             'fallbacks': 1}
    got = bench.step_counts(after, before)
    assert got == {'eager_steps': 2, 'graph_steps': 0, 'prompt_steps': 2,
                   'prompt_graph_steps': 2, 'fallbacks': 1, 'deferred_prompts': 0,
                   'buckets_merged_steps': 0, 'buckets_apart_steps': 0}
    row = {'model': 'tiny', 'res': 512, 'objects': 1, 'variant': 'swap', 'frames': 9,
           'ms_p50': 1.0, 'ms_p99': 1.5, 'ms_max': 2.0, 'slowest': [], **got}
    assert '| prompt_graph_steps |' in bench.table([row]) and '| 1.50 |' in bench.table([row])


def test_cli_ratio_only_within_one_run(monkeypatch):
    """x official_eager is taken against the official row of the same run only."""
    base = {'model': 'tiny', 'res': 512, 'objects': 1, 'ms_p99': 1.0, 'gpu_kernel_ms': None,
            'peak_mib': None, 'compile_s': None}
    rows = [{**base, 'variant': 'official_eager', 'ms_p50': 20.0, 'fps': 50.0, 'run': 'a'},
            {**base, 'variant': 'ours_graph', 'ms_p50': 5.0, 'fps': 200.0, 'run': 'a'},
            {**base, 'variant': 'ours_eager', 'ms_p50': 10.0, 'fps': 100.0, 'run': 'b'}]
    text = results.table(rows, {})
    assert '| ours_graph | 5.00 | 1.00 | 200.0 | 4.00x |' in text
    assert '| ours_eager | 10.00 | 1.00 | 100.0 | - |' in text
    prov = {'run': 'r1', 'date': 'd', 'commit': None, 'gpu': 'cpu', 'command': 'c'}
    assert results.stamp({'run': 'old', 'gpu': 'H200'}, prov) == {
        'run': 'r1', 'gpu': 'H200', 'date': 'd', 'commit': None, 'command': 'c'}
    monkeypatch.setenv('SAM2_ROS_COMMIT', 'abc1234')      # wins over a (stale) .git
    assert results.provenance('cpu', 'prog', ['--x'])['commit'] == 'abc1234'


def test_interaction_frames_probe_times_every_frame_and_its_window(tmp_path, one_thread):
    """tools/probes/interaction_frames_probe.py: one wall time per timed frame of the same
    stream, and a window entry per profiled frame (kernel fields None on the CPU)."""
    from tools.probes import interaction_frames_probe as probe

    out = tmp_path / 'frames.json'
    assert probe.main(['--device', 'cpu', '--precision', 'fp32', '--res', '64', '--frames', '6',
                       '--window', '2-3', '--out', str(out)]) == 0
    row = json.loads(out.read_text())['rows'][0]
    assert len(row['frame_ms']) == 6 and all(ms > 0 for ms in row['frame_ms'])
    assert sorted(row['window']) == ['2', '3']
    assert row['window']['2']['kernels'] is None


def test_interaction_merge_variants_name_their_rows(tmp_path, one_thread):
    """--merge-buckets takes 'on', 'off' and 'always' (merged wherever buckets differ, the
    configure timings forgotten); the rows say which, anything else is refused."""
    out = tmp_path / 'interaction.json'
    argv = ['--device', 'cpu', '--precision', 'fp32', '--model', 'tiny', '--res', '64',
            '--h', '64', '--w', '96', '--frames', '4', '--correct-every', '2', '--new-at', '0',
            '--objects', '1', '--variants', 'swap', '--corrections', 'deferred',
            '--merge-buckets', 'off,always', '--random-weights', '--out', str(out)]
    assert bench.main(argv) == 0
    assert [r['variant'] for r in json.loads(out.read_text())] == [
        'swap+separate_buckets', 'swap+merge_always']
    with pytest.raises(SystemExit):
        bench.main(argv[:-5] + ['--merge-buckets', 'sometimes', '--random-weights'])


def test_steady_frames_time_identical_frames_after_the_stream(tmp_path, one_thread, capsys):
    """--steady-frames: the row's 'steady' holds that many more frames' p50/p99 (the machine's
    own jitter), timed after the settle frames; the stream's counters stay the stream's."""
    out = tmp_path / 'interaction.json'
    argv = ['--device', 'cpu', '--precision', 'fp32', '--model', 'tiny', '--res', '64',
            '--h', '64', '--w', '96', '--frames', '4', '--correct-every', '0', '--new-at', '0',
            '--objects', '1', '--variants', 'swap', '--steady-frames', '3', '--random-weights',
            '--out', str(out)]
    assert bench.main(argv) == 0
    assert 'steady p99/p50' in capsys.readouterr().out
    (row,) = json.loads(out.read_text())
    steady = row['steady']
    assert steady['frames'] == 3 and 0 < steady['ms_p50'] <= steady['ms_p99']
    assert steady['p99_over_p50'] == round(steady['ms_p99'] / steady['ms_p50'], 3)
    # what ran in them: eager steps on the CPU, one per frame, and their collections
    assert steady['modes'] == {'eager': 3} and steady['steps']['eager_steps'] == 3
    assert steady['gc']['total_ms'] >= steady['gc']['max_ms'] >= 0
    # and what the host took from them (None-valued where the host does not say)
    assert 'disturbed_frames' in steady['host']
    assert row['eager_steps'] == 4          # the stream's 4 frames, not the 23 after them
    with pytest.raises(SystemExit):
        bench.parse(argv[:-2] + ['--steady-frames', '-1'])
