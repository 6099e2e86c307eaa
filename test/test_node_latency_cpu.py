"""CPU smoke tests of ``python -m sam2_ros.bench.node_latency``: the real node(s) in
subprocesses, tiny frames and model input, a few frames. One camera with corrections and the
shared-memory profile: a positive latency for every frame, the parts ordered (node work fits
inside the end-to-end time), deadline misses counted against the next image, clicks sent, and
one curated row merged into a results file. Two cameras (two tracker nodes in namespaces): one
row per camera."""

import json
import subprocess

from ros_helpers import PYTHON, ROOT, DomainLease, require_messages

FRAMES = 5


def bench(tmp_path, *extra, timeout=150):
    require_messages()
    lease = DomainLease()
    out = tmp_path / 'lat.json'
    try:
        argv = [PYTHON, '-m', 'sam2_ros.bench.node_latency', '--width', '160', '--height',
                '120', '--frames', str(FRAMES), '--warmup', '1', '--model', 'tiny',
                '--image-size', '64', '--domain-id', str(lease.domain_id), '--start-timeout',
                '60', '--timeout', '30', '--out', str(out), '--results',
                str(tmp_path / 'rows.json'), *extra]
        p = subprocess.run(argv, cwd=ROOT, env=lease.env(), capture_output=True, text=True,
                           timeout=timeout)
    finally:
        lease.release()
    assert p.returncode == 0, f'{p.stdout}\n{p.stderr}'
    return p, json.loads(out.read_text()), json.loads((tmp_path / 'rows.json').read_text())


def test_node_latency_smoke(tmp_path):
    p, r, rows = bench(tmp_path, '--rate', '4', '--objects', '2', '--device', 'cpu',
                       '--corrections-every', '0.4', '--transport', 'shm', '--pipeline')
    assert '| end-to-end: image published -> mask received |' in p.stdout
    assert r['random_weights'] is True and r['node_params']['process_every_frame'] is True
    assert r['node_params']['image_size'] == 64 and 'sam2_ros.ros.node' in r['node_command']
    assert r['node_params']['pipeline'] is True
    assert r['host']['FASTDDS_DEFAULT_PROFILES_FILE'].endswith('fastdds_large_frames.xml')
    frames = r['frames']
    assert [f['index'] for f in frames] == list(range(FRAMES))
    assert [f['warmup'] for f in frames] == [True] + [False] * (FRAMES - 1)
    stamps = [f['stamp_ns'] for f in frames]
    assert stamps == sorted(stamps) and len(set(stamps)) == FRAMES
    for f in frames:
        for k in ('e2e_mask_ms', 'e2e_state_ms', 'decode_ms', 'engine_ms', 'publish_ms',
                  'node_ms'):
            assert f[k] is not None and f[k] > 0, (k, f)
        assert f['objects'] == 2 and f['errors'] == [], f        # box prompts and clicks took
        # decode and engine finish before the mask and the state are published
        assert f['decode_ms'] + f['engine_ms'] < min(f['e2e_mask_ms'], f['e2e_state_ms']), f
        assert abs(f['transport_ms'] - (f['e2e_mask_ms'] - f['decode_ms'] - f['engine_ms'])) \
            < 0.01 and f['transport_ms'] > 0
        assert abs(f['node_ms'] - (f['decode_ms'] + f['engine_ms'] + f['publish_ms'])) < 0.01
        # a deadline miss: the mask came after the camera's next image (one period later
        # at 4 Hz once the paced warm-up is over)
        assert f['deadline_miss'] == (f['e2e_mask_ms'] > f['next_image_ms']), f
        if not f['warmup']:
            assert 200 < f['next_image_ms'] < 400, f
    clicks = [f['correction'] for f in frames if f['correction']]
    assert clicks and set(clicks) <= {1, 2} and r['clicks'] == len(clicks)
    s = r['summary']
    assert s['measured_frames'] == FRAMES - 1 and s['missing_frames'] == 0
    assert s['deadline_misses'] == sum(f['deadline_miss'] for f in frames[1:])
    assert s['corrections'] == len(clicks)
    for k in ('e2e_mask_ms', 'e2e_state_ms', 'engine_ms', 'transport_ms'):
        assert s[k]['n'] == FRAMES - 1 and 0 < s[k]['p50'] <= s[k]['p99'], (k, s[k])
    assert 0 < s['transport_share_of_e2e_mask'] < 1
    assert r['host']['cpu_count'] >= 1 and '--results' in r['command']
    (row,) = rows
    for k in ('camera_hz', 'width', 'height', 'cameras', 'objects', 'graph_mode', 'transport',
              'overlay', 'corrections', 'frames', 'e2e_mask_p50', 'e2e_mask_p99',
              'e2e_state_p99', 'deadline_misses', 'date', 'commit', 'command', 'run', 'gpu'):
        assert k in row, k
    assert (row['camera_hz'], row['width'], row['height'], row['cameras'], row['objects'],
            row['transport'], row['pipeline']) == (4.0, 160, 120, 1, 2, 'shm', True)
    assert row['e2e_mask_p99'] == s['e2e_mask_ms']['p99']
    assert row['deadline_misses'] == s['deadline_misses'] and row['frames'] == FRAMES - 1
    # with the shm profile the client mapped its own 32 MiB segment and the node's
    assert row['shm_large_segments'] >= 2, r['shm_segments_mapped']
    assert r['host']['dev_shm_mib'] > 0


def test_node_latency_two_cameras(tmp_path):
    """Two synthetic cameras, two tracker nodes (cam0, cam1), each measured on its own."""
    p, r, rows = bench(tmp_path, '--rate', '2', '--objects', '1', '--devices', 'cpu,cpu',
                       '--no-overlay', '--transport', 'default', '--no-pipeline', timeout=240)
    assert [c['ns'] for c in r['cameras']] == ['cam0', 'cam1']
    for c in r['cameras']:
        assert c['node_params']['image_topic'] == f"/{c['ns']}/image_raw"
        assert f"__ns:=/{c['ns']}" in c['node_command'] and c['node_params']['pipeline'] is False
        assert c['summary']['missing_frames'] == 0 and c['summary']['measured_frames'] == 4
        assert all(f['objects'] == 1 for f in c['frames'])
    assert sorted((x['camera'], x['cameras'], x['transport']) for x in rows) == \
        [(0, 2, 'default'), (1, 2, 'default')]
    assert rows[0]['variant'] != rows[1]['variant'] and 'devcpu+cpu' in rows[0]['variant']
    assert rows[0]['shm_large_segments'] == 0       # default transport: no large segments


def test_row_keys_tell_one_gpu_from_two():
    """Camera 0 on cuda:0 of a two-GPU run must not replace camera 0 of a one-GPU run (rows
    are merged by key): the variant holds every camera's device."""
    from sam2_ros.bench.node_latency_rows import variant

    a = {'rate': 60.0, 'width': 1280, 'height': 720, 'transport': 'shm', 'overlay': True,
         'corrections_every': 2.0}
    cam0 = {'index': 0, 'node_params': {'graph_mode': 'batched', 'pipeline': True}}
    one = variant(dict(a, devices=['cuda:0', 'cuda:0']), cam0)
    two = variant(dict(a, devices=['cuda:0', 'cuda:1']), cam0)
    assert one != two and 'cuda:0+cuda:1' in two and 'pipeline' in two and 'corr2' in two
    assert variant(dict(a, devices=['cuda:0']), cam0) != one
