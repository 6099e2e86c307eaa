"""tools.probes.overlay_probe on the CPU at a tiny size: every mode tracks every step, the
overlay thread renders every camera's overlay of every step (none: no overlay), and the rows
carry their provenance."""

import json

from tools.probes import overlay_probe


def test_overlay_probe_renders_every_cameras_overlay_per_step(tmp_path, one_thread):
    out = tmp_path / 'probe.json'
    argv = ['--device', 'cpu', '--res', '64', '--cameras', '2', '--objects', '1',
            '--steps', '3', '--rate', '0', '--out', str(out)]
    assert overlay_probe.main(argv) == 0
    rows = json.loads(out.read_text())['rows']
    assert [r['overlay'] for r in rows] == ['none', 'gpu', 'host']
    for r in rows:
        assert r['steps'] == 3 and r['track_ms_p50'] > 0 and r['cameras'] == 2
        assert r['overlays_rendered'] == (0 if r['overlay'] == 'none' else 6)
        assert r['overlay_steps_behind_at_end'] >= 0
        assert r['run'] and r['command'].endswith(' '.join(argv))
