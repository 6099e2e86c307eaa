"""CPU smoke test of ``python -m sam2_ros.bench.node_latency``: the real node in a subprocess,
tiny frames and model input, a few frames; the JSON holds a positive latency for every frame
and the parts are ordered (node work fits inside the end-to-end time)."""

import json
import subprocess

from ros_helpers import PYTHON, ROOT, DomainLease, require_messages

FRAMES = 5


def test_node_latency_smoke(tmp_path):
    require_messages()
    lease = DomainLease()
    out = tmp_path / 'lat.json'
    try:
        env = lease.env()
        argv = [PYTHON, '-m', 'sam2_ros.bench.node_latency', '--width', '160', '--height',
                '120', '--frames', str(FRAMES), '--warmup', '1', '--rate', '4', '--model',
                'tiny', '--image-size', '64', '--objects', '2', '--device', 'cpu', '--domain-id',
                str(lease.domain_id), '--start-timeout', '40', '--timeout', '20',
                '--out', str(out)]
        p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=100)
    finally:
        lease.release()
    assert p.returncode == 0, f'{p.stdout}\n{p.stderr}'
    assert '| end-to-end: image published -> mask received |' in p.stdout

    r = json.loads(out.read_text())
    assert r['random_weights'] is True and r['node_params']['process_every_frame'] is True
    assert r['node_params']['image_size'] == 64 and 'sam2_ros.ros.node' in r['node_command']
    frames = r['frames']
    assert [f['index'] for f in frames] == list(range(FRAMES))
    assert [f['warmup'] for f in frames] == [True] + [False] * (FRAMES - 1)
    stamps = [f['stamp_ns'] for f in frames]
    assert stamps == sorted(stamps) and len(set(stamps)) == FRAMES
    for f in frames:
        for k in ('e2e_mask_ms', 'e2e_state_ms', 'decode_ms', 'engine_ms', 'publish_ms',
                  'node_ms'):
            assert f[k] is not None and f[k] > 0, (k, f)
        assert f['objects'] == 2 and f['errors'] == [], f        # both box prompts took
        # decode and engine finish before the mask and the state are published
        assert f['decode_ms'] + f['engine_ms'] < min(f['e2e_mask_ms'], f['e2e_state_ms']), f
        assert abs(f['transport_ms'] - (f['e2e_mask_ms'] - f['decode_ms'] - f['engine_ms'])) \
            < 0.01 and f['transport_ms'] > 0
        assert abs(f['node_ms'] - (f['decode_ms'] + f['engine_ms'] + f['publish_ms'])) < 0.01
    s = r['summary']
    assert s['measured_frames'] == FRAMES - 1 and s['missing_frames'] == 0
    for k in ('e2e_mask_ms', 'e2e_state_ms', 'engine_ms', 'transport_ms'):
        assert s[k]['n'] == FRAMES - 1 and 0 < s[k]['p50'] <= s[k]['p99'], (k, s[k])
    assert 0 < s['transport_share_of_e2e_mask'] < 1
    assert r['host']['cpu_count'] >= 1 and r['command'].endswith(str(out))
