"""CPU smoke test of the benchmark CLI at a tiny size: rows, keys and the markdown table."""

import json

from tools.bench import cli, profiling, results

KEYS = {'model', 'res', 'objects', 'variant', 'ms_p50', 'ms_p99', 'fps', 'gpu_kernel_ms',
        'kernels_per_frame', 'peak_mib', 'compile_s', 'run', 'date', 'commit', 'gpu', 'command'}


def test_cli_rows_and_table(tmp_path):
    out, md = tmp_path / 'r.json', tmp_path / 'b.md'
    md.write_text('# Benchmarks\n\nintro\n')
    argv = ['--device', 'cpu', '--precision', 'fp32', '--models', 'tiny', '--res', '256',
            '--objects', '1', '--variants', 'ours_eager,official_eager', '--frames', '1',
            '--warmup', '0', '--profile-frames', '0', '--out', str(out), '--table', str(md)]
    assert cli.main(argv) == 0
    rows = json.loads(out.read_text())
    assert [r['variant'] for r in rows] == ['ours_eager', 'official_eager']
    for r in rows:
        assert set(r) == KEYS
        assert r['ms_p50'] > 0 and r['fps'] > 0 and r['compile_s'] is None
        assert r['gpu_kernel_ms'] is None and r['peak_mib'] is None      # CPU run
        assert r['kernels_per_frame'] is None
        assert r['gpu'] == 'cpu' and r['command'].endswith(' '.join(argv))
    assert rows[0]['run'] == rows[1]['run'] and rows[0]['run']       # one id per invocation
    text = md.read_text()
    assert text.startswith('# Benchmarks\n\nintro')
    assert results.BEGIN in text and results.END in text
    assert '| tiny | 256 | 1 | ours_eager |' in text
    assert '1.00x' in text and 'torch' in text
    # a second run replaces the marked section instead of appending another
    results.write_table(str(md), results.table(rows, {'GPU': 'cpu'}))
    assert md.read_text().count(results.BEGIN) == 1


def test_gpu_timeline_splits_launch_gaps_from_host_gaps():
    """Two frames: kernels 10 us long, 2 us apart inside a frame (launch latency), the
    frames 500 us apart (the host between frames), one kernel overlapping another."""
    frame = [(0, 10), (12, 22), (24, 34), (30, 40)]            # 3 gaps of 2 us, 1 overlap
    ivs = frame + [(s + 540, e + 540) for s, e in frame]        # 500 us after the first
    t = profiling.gpu_timeline(ivs, frames=2)
    assert t['device_ops_per_frame'] == 4.0
    assert t['short_gaps_per_frame'] == 2.0 and t['short_gaps_ms_per_frame'] == 0.004
    assert t['host_gaps_per_frame'] == 0.5 and t['host_gaps_ms_per_frame'] == 0.25
    assert t['busy_ms_per_frame'] == 0.036                      # 0..40 minus 4 us of gaps
    assert profiling.gpu_timeline([], frames=2) == {}
    assert 'host_gaps_at' not in t                               # no names, no sites


def test_gpu_timeline_names_where_the_gpu_waits_for_the_host():
    """Named intervals: each host gap is put between the operation that ended last before
    it (the overlapped kernel's longer neighbour, not the one listed last) and the next."""
    frame = [(0, 10, 'copy_in'), (100, 110, 'encoder'), (105, 130, 'long'), (128, 129, 'short'),
             (180, 190, 'step'), (192, 200, 'masks')]
    ivs = frame + [(s + 1000, e + 1000, n) for s, e, n in frame]
    t = profiling.gpu_timeline(ivs, frames=2)
    # per frame: copy_in -> encoder 90 us, long -> step 50 us; between frames masks -> copy_in
    assert t['host_gaps_at'] == [['masks', 'copy_in', 0.5, 0.4],
                                 ['copy_in', 'encoder', 1.0, 0.09],
                                 ['long', 'step', 1.0, 0.05]]
    assert t['host_gaps_per_frame'] == 2.5


def test_census_line_lists_groups_by_time():
    row = dict(model='tiny', res=512, objects=1, variant='ours_graph_batched',
               kernels_per_frame=654.0, gpu_kernel_ms=2.71)
    line = cli.census_line(row, {'gemm': [158.0, 0.73], 'copy': [69.0, 0.13]})
    assert line == ('census tiny@512 x1 ours_graph_batched: 654.0 kernels, 2.71 ms | '
                    'gemm 158/0.730, copy 69/0.130')


def test_kernel_groups_of_names():
    from tools.bench.profiling import group_of
    assert group_of('_add_ln_kernel') == 'ours_triton'
    assert group_of('_ln2d_kernel') == 'ours_triton'
    for ours in ('_gemm_kernel', '_dwconv_norm_kernel', '_stage_kernel', '_pass_kernel'):
        assert group_of(ours) == 'ours_triton', ours
    assert group_of('void at::native::vectorized_elementwise_kernel<4>') == \
        'cast_or_elementwise'
    assert group_of('sm90_xmma_gemm_bf16bf16') == 'gemm'
    assert group_of('something_else') == 'other'


def test_two_camera_variant_steps_both_cameras_objects():
    from tools.bench import variants
    spec = variants.Spec('tiny', 128, objects=2, frames=3, device='cpu', precision='fp32')
    run = variants.VARIANTS['ours_graph_batched_cams2'](spec)
    masks = run.step()
    assert len(masks) == 4 and all(m.shape == (720, 1280) for m in masks)
    assert run.info['tracker'].stream(1).object_ids == [1, 2] and run.info['cameras'] == 2


def test_cli_row_of_the_two_camera_variant(tmp_path):
    out = tmp_path / 'r.json'
    argv = ['--device', 'cpu', '--precision', 'fp32', '--only',
            'tiny@128:1:ours_graph_batched_cams2', '--frames', '2', '--warmup', '0',
            '--profile-frames', '0', '--out', str(out)]
    assert cli.main(argv) == 0
    (row,) = json.loads(out.read_text())
    assert row['variant'] == 'ours_graph_batched_cams2' and row['objects'] == 1


def test_paced_rows_are_their_own_variant(tmp_path):
    """--pace-hz: measured frames start at a camera's cadence; the row is a variant of its
    own (a paced row never replaces the back-to-back one)."""
    out = tmp_path / 'r.json'
    base = ['--device', 'cpu', '--precision', 'fp32', '--only', 'tiny@128:1:ours_eager',
            '--frames', '2', '--warmup', '0', '--profile-frames', '0', '--out', str(out)]
    assert cli.main(base + ['--pace-hz', '0,50']) == 0
    rows = json.loads(out.read_text())
    assert [r['variant'] for r in rows] == ['ours_eager', 'ours_eager_paced50hz']
    assert rows[0]['run'] == rows[1]['run'] and '--pace-hz 0,50' in rows[1]['command']


def test_clock_keeper_rows_are_their_own_variant_only_with_a_keeper(tmp_path, monkeypatch):
    """--clock-keeper-us: each row again with the GPU clock keeper kept (a variant _keepN of
    its own, its spins and skips in the extra file, released after the row); on a device
    without one (the CPU) no suffix claims it."""
    from sam2_ros.engine import clock_keeper
    from sam2_ros.engine.clock_keeper import ClockKeeper

    out = tmp_path / 'r.json'
    base = ['--device', 'cpu', '--precision', 'fp32', '--only', 'tiny@128:1:ours_eager',
            '--frames', '2', '--warmup', '0', '--profile-frames', '0', '--out', str(out)]
    assert cli.main(base + ['--clock-keeper-us', '0,200']) == 0
    assert [r['variant'] for r in json.loads(out.read_text())] == ['ours_eager']
    kept = []

    def keep(device, hold_us):      # a GPU's keeper, as the row would keep it
        kept.append(hold_us)
        return ClockKeeper('cuda:0', hold_us, launch=lambda c: None)
    monkeypatch.setattr(clock_keeper, 'keeps_clocks', lambda device: True)
    monkeypatch.setattr(clock_keeper, 'keep', keep)
    released = []
    monkeypatch.setattr(clock_keeper, 'release', released.append)
    assert cli.main(base + ['--clock-keeper-us', '0,200']) == 0
    rows = json.loads(out.read_text())
    assert [r['variant'] for r in rows] == ['ours_eager', 'ours_eager_keep200']
    assert kept == [0.0, 200.0] and len(released) >= 2 and set(released) == {'cpu'}
    extra = json.loads((tmp_path / 'r_extra.json').read_text())['rows']
    stats = [v['clock_keeper'] for v in extra.values() if 'clock_keeper' in v]
    assert stats == [{'spins': 0, 'skipped': 0, 'error': None}]     # eager: no GPU runner


def test_received_frames_are_read_only_views_of_bytes():
    """ours_graph_batched_received's frames are what the node tracks: read-only views of a
    message's bytes, the same pixels."""
    import numpy as np

    from tools.bench.variants import as_received

    frame = np.random.default_rng(0).integers(0, 256, (12, 16, 3), dtype=np.uint8)
    got = as_received(frame)
    assert not got.flags.writeable and got.shape == frame.shape
    assert np.array_equal(got, frame) and not np.shares_memory(got, frame)


def test_breakdown_times_the_runners_public_calls_and_unwraps_them(monkeypatch):
    """The parts are the runner's encode, track and results calls, each counted once per
    frame; afterwards the runner has no wrapper left on it."""
    import torch

    class Runner:
        def encode_streams(self):
            return 'e'

        def track(self):
            return 't'

        def results(self):
            return 'r'

    class Tracker:
        runner = None

    class Run:
        def __init__(self):
            self.info = {'tracker': Tracker()}
            self.info['tracker'].runner = Runner()
            self.calls = []

        def step(self):
            r = self.info['tracker'].runner
            self.calls.append((r.encode_streams(), r.track(), r.results()))

    monkeypatch.setattr(torch.cuda, 'synchronize', lambda *a: None)
    run = Run()
    parts = profiling.breakdown(run, frames=3, device='cuda')
    assert run.calls == [('e', 't', 'r')] * 3
    assert set(parts) == {'preprocess+encoder', 'objects', 'results', 'total', 'other'}
    assert all(parts[k] >= 0 for k in ('preprocess+encoder', 'objects', 'results', 'total'))
    assert vars(run.info['tracker'].runner) == {}        # the wrappers are gone
    assert profiling.breakdown(run, frames=3, device='cpu') is None


def test_rows_say_what_configure_chose_for_steady_state_attention(monkeypatch):
    """``steady_attention`` of a row's tracker: with 'auto', each batch size's candidates
    (sam2's call, the padded graph's flash, split-KV) with their ms per replay and the choice
    per bucket (only buckets not on sam2's call); None without step graphs."""
    from graph_standin import graph_tracker
    tr, _ = graph_tracker('batched', monkeypatch, steady='auto')
    got = cli.steady_attention(tr)
    assert set(got['candidate_ms']) == {'1', '2'}
    for times in got['candidate_ms'].values():
        assert set(times) == {'sam2', 'flash', 'split'} and min(times.values()) > 0
    assert set(got['choice'].values()) <= {'flash', 'split'}
    assert all(k.count('x') == 1 for k in got['choice'])
    assert cli.steady_attention(object()) is None


def test_bands_variant_is_the_default_with_frames_staged_in_four_bands():
    """``ours_graph_batched_bands4``: the default batched tracker with each frame staged in
    four row bands (``staging_bands``; the default stages it whole)."""
    from tools.bench import variants
    spec = variants.Spec('tiny', 128, objects=1, frames=3, device='cpu', precision='fp32')
    run = variants.VARIANTS['ours_graph_batched_bands4'](spec)
    cfg = run.info['tracker'].cfg
    assert cfg.staging_bands == 4 and cfg.graph_mode == 'batched'
    assert [m.shape for m in run.step()] == [(720, 1280)]
