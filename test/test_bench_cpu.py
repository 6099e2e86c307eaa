"""CPU smoke test of the benchmark CLI at a tiny size: rows, keys and the markdown table."""

import json

from sam2_ros.bench import cli

KEYS = {'model', 'res', 'objects', 'variant', 'ms_p50', 'ms_p99', 'fps', 'gpu_kernel_ms',
        'peak_mib', 'compile_s'}


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
    text = md.read_text()
    assert text.startswith('# Benchmarks\n\nintro')
    assert cli.BEGIN in text and cli.END in text and '| tiny | 256 | 1 | ours_eager |' in text
    assert '1.00x' in text and 'torch' in text
    # a second run replaces the marked section instead of appending another
    cli.write_table(str(md), cli.table(rows, {'GPU': 'cpu'}))
    assert md.read_text().count(cli.BEGIN) == 1
