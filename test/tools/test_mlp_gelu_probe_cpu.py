"""tools/probes/mlp_gelu_probe.py on the CPU: its stage shapes from sam2's configs, its
arguments, and one run whose rows carry every timing and an output within bf16 rounding of
sam2's MLP (the kernel in Triton's interpreter: the code is checked, nothing is measured)."""

import json

import pytest

pytest.importorskip('triton')

from tools.probes import mlp_gelu_probe as probe  # noqa: E402

TIMES = ('sam2_fc1_gelu_us', 'ours_fc1_gelu_us', 'sam2_mlp_us', 'ours_mlp_us')


def test_block_shapes_follow_the_hiera_configs():
    tiny = probe.block_shapes('tiny', 512)
    assert [(r['blocks'], r['m'], r['c'], r['hidden']) for r in tiny] == [
        (1, 128 * 128, 96, 384), (2, 64 * 64, 192, 768), (7, 32 * 32, 384, 1536),
        (2, 16 * 16, 768, 3072)]
    large = probe.block_shapes('large', 1024, batch=2)
    assert [(r['blocks'], r['m'], r['c']) for r in large] == [
        (2, 2 * 256 * 256, 144), (6, 2 * 128 * 128, 288), (36, 2 * 64 * 64, 576),
        (4, 2 * 32 * 32, 1152)]


def test_arguments_default_to_both_models_sizes_and_precisions():
    a = probe.parse([])
    assert (a.models, a.res, a.precision, a.batch, a.device) == (
        ['tiny', 'large'], [512, 1024], ['bf16', 'fp32'], 1, 'cuda')
    assert probe.parse(['--res', '768', '--precision', 'fp32']).res == [768]
    with pytest.raises(SystemExit):
        probe.parse(['--precision', 'fp16'])


def test_probe_writes_a_row_per_stage(tmp_path, one_thread, capsys):
    out = tmp_path / 'mlp.json'
    assert probe.main(['--device', 'cpu', '--models', 'tiny', '--res', '32', '--precision',
                       'bf16', '--reps', '1', '--out', str(out)]) == 0
    rows = json.loads(out.read_text())['rows']
    assert [r['stage'] for r in rows] == [1, 2, 3, 4] and [r['m'] for r in rows] == [64, 16, 4, 1]
    for r in rows:
        assert all(r[k] > 0 for k in TIMES), r
        assert r['mlp_speedup'] == round(r['sam2_mlp_us'] / r['ours_mlp_us'], 3)
        assert r['rel_err'] <= 2.0 ** -6, r        # bf16: an ulp flip of the hidden layer
    printed = capsys.readouterr().out
    assert 'tiny@32 bf16:' in printed and 'per_frame_us_saved' in printed
    assert f"speedup >= {min(r['fc1_gelu_speedup'] for r in rows):.3f}" in printed
