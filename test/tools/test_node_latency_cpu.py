"""CPU smoke tests of ``python -m tools.bench.node_latency``: the real node(s) in
subprocesses, tiny frames and model input, a few frames. One camera with corrections and the
shared-memory profile: a positive latency for every frame, the parts ordered (node work fits
inside the end-to-end time), deadline misses counted against the next image, clicks sent, the
frames published by a camera process of their own (not the receiving one) with its gaps in the
row, and one curated row merged into a results file. Two cameras (two tracker nodes in
namespaces): one row and one camera process per camera. The camera process alone, against a
subscriber in this test: what it reports sent is what arrived, on one clock."""

import json
import os
import subprocess
import threading
import time

from ros_helpers import PYTHON, ROOT, DomainLease, require_messages

FRAMES = 5


def bench(tmp_path, *extra, timeout=150):
    require_messages()
    lease = DomainLease()
    out = tmp_path / 'lat.json'
    try:
        argv = [PYTHON, '-m', 'tools.bench.node_latency', '--width', '160', '--height',
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


def check_split(f):
    """The node's timing log split this frame's image -> mask: every part there, the parts
    add up to it, each between causally ordered marks (the mask's DDS out can only be negative
    by less than its publish() call), the worker's decode the one its state reports."""
    from tools.bench.node_latency_frames import SPLIT

    assert all(f[k] is not None for k in SPLIT), f
    assert abs(sum(f[k] for k in SPLIT) - f['e2e_mask_ms']) < 0.01, f
    assert all(f[k] >= 0 for k in SPLIT if k != 'dds_out_ms'), f
    assert f['dds_out_ms'] + f['mask_publish_call_ms'] > 0, f
    assert abs(f['node_decode_ms'] - f['decode_ms']) < 0.01, f


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
        check_split(f)
        # a deadline miss: the mask came after the camera's next image (one period later
        # at 4 Hz once the paced warm-up is over)
        assert f['deadline_miss'] == (f['e2e_mask_ms'] > f['next_image_ms']), f
        assert f['next_image_ms'] > 0, f
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
    # the frames left from the camera's own process: the image topic's only publisher, as the
    # receiving process saw it, is that process's node
    cam = r['cameras'][0]
    assert cam['camera_pid'] not in (r['bench_pid'], os.getpid())
    assert cam['image_publishers'] == [f"sam2_camera_{cam['camera_pid']}"] == \
        [cam['camera_node']]
    # its publish times came back: one gap per measured frame, on the drift-free 4 Hz
    # schedule: never early, and a gap is the period plus the next frame's lateness minus
    # this one's (an identity, not a timing bound: a loaded CI machine makes frames late)
    gap = s['camera_gap_ms']
    assert gap['n'] == FRAMES - 1 and 0 < gap['p1'] <= gap['p50'] <= gap['p99'], gap
    assert all(f['camera_late_ms'] >= 0 for f in frames[1:]), frames
    for f, nxt in zip(frames[1:], frames[2:]):
        assert abs(f['next_image_ms'] - (250.0 + nxt['camera_late_ms'] - f['camera_late_ms'])) \
            < 0.01, (f, nxt)
    assert (row['camera_gap_ms_p1'], row['camera_gap_ms_p50'], row['camera_gap_ms_p99']) == \
        (gap['p1'], gap['p50'], gap['p99'])


def test_node_latency_jpeg_input(tmp_path):
    """--input jpeg: the camera publishes JPEG CompressedImages on the node's compressed
    topic, the node (input_type compressed) tracks them, the row says jpeg."""
    p, r, rows = bench(tmp_path, '--rate', '4', '--objects', '1', '--device', 'cpu',
                       '--input', 'jpeg', '--transport', 'shm', '--no-overlay')
    assert r['config']['input'] == 'jpeg' and r['node_params']['input_type'] == 'compressed'
    cam = r['cameras'][0]
    assert cam['image_publishers'] == [cam['camera_node']]
    assert 'jpeg q90' in p.stdout
    for f in r['frames']:
        assert f['objects'] == 1 and f['errors'] == [], f
        assert 0 < f['image_bytes'] < 160 * 120 * 3            # compressed
        check_split(f)
    (row,) = rows
    # 'events': the node's default executor, named in the variant as it was when opt-in
    assert row['input'] == 'jpeg'
    assert row['variant'].endswith('_jpeg_events_camser_prep3_rawclient_evclient')
    assert row['camera_publish'] == r['config']['camera_publish'] == 'serialized'
    assert row['camera_prepare_ms'] == r['config']['camera_prepare_ms'] == 3.0
    assert row['dds_in_p50'] is not None and row['image_bytes_p50'] < 160 * 120 * 3


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
    pids = {c['camera_pid'] for c in r['cameras']}    # one camera process per camera
    assert len(pids) == 2 and r['bench_pid'] not in pids
    for c in r['cameras']:
        assert c['image_publishers'] == [f"sam2_camera_{c['camera_pid']}"]
        assert c['summary']['camera_gap_ms']['n'] == 4


def test_node_latency_one_node_two_cameras(tmp_path):
    """--one-node: ONE tracker node (cameras [cam0, cam1]) serves both camera processes; each
    frame pair carries one stamp (so the node pairs them), prompts and clicks go to the
    node's per-camera topics, every frame of both cameras comes back from ~/cam0, ~/cam1, and
    the rows say node_per_camera false (the report's column too)."""
    from tools.bench.report import node_latency

    p, r, rows = bench(tmp_path, '--rate', '2', '--objects', '1', '--devices', 'cpu,cpu',
                       '--one-node', '--corrections-every', '0.5', '--no-overlay',
                       '--transport', 'default', '--publish-without-gil', timeout=240)
    assert r['config']['node_per_camera'] is False and 'one node for all' in p.stdout
    a, b = r['cameras']
    assert (a['ns'], b['ns']) == ('cam0', 'cam1')
    assert a['node_command'] == b['node_command'] and '__ns:=' not in a['node_command']
    assert a['node_params']['cameras'] == ['cam0', 'cam1']
    assert a['node_params']['camera_period_ms'] == 500.0
    assert [f['stamp_ns'] for f in a['frames']] == [f['stamp_ns'] for f in b['frames']]
    for c in (a, b):
        assert c['summary']['missing_frames'] == 0 and c['summary']['measured_frames'] == 4
        assert all(f['objects'] == 1 and f['errors'] == [] for f in c['frames'])
        assert c['image_publishers'] == [f"sam2_camera_{c['camera_pid']}"]
        assert c['clicks'] > 0
        for f in c['frames']:
            check_split(f)        # each camera's part of the node's timing log
    assert a['camera_pid'] != b['camera_pid']
    assert sorted((x['camera'], x['cameras'], x['node_per_camera'], tuple(x['devices']))
                  for x in rows) == [(0, 2, False, ('cpu', 'cpu')), (1, 2, False, ('cpu', 'cpu'))]
    # publish_without_gil: every mask of both cameras came through rcl with the GIL released
    assert a['node_params']['publish_without_gil'] is True
    assert all('_nogil_' in x['variant'] for x in rows)
    assert all(x['variant'].endswith('_onenode_camser_prep3_rawclient_evclient') for x in rows)
    assert all(x['client_masks'] == 'serialized' for x in rows)     # the client took bytes
    assert all(x['client_executor'] == 'events' for x in rows)
    # the host watch gave every frame its CPU waits (Linux: schedstat of the processes)
    assert r['host']['cpu_wait_ms'] and all(
        f['host_wait_ms'] is not None for c in (a, b) for f in c['frames'])
    (tmp_path / 'h200_node_latency.json').write_text(json.dumps(rows))
    table = [ln for ln in node_latency(str(tmp_path)) if ln.startswith('| 2 Hz')]
    assert len(table) == 2 and all('| 2 (' in ln and ': cpu) | 1 | no |' in ln for ln in table)


def test_row_keys_tell_one_gpu_from_two():
    """Camera 0 on cuda:0 of a two-GPU run must not replace camera 0 of a one-GPU run (rows
    are merged by key): the variant holds every camera's device."""
    from tools.bench.node_latency_rows import variant

    a = {'rate': 60.0, 'width': 1280, 'height': 720, 'transport': 'shm', 'overlay': True,
         'corrections_every': 2.0}
    cam0 = {'index': 0, 'node_params': {'graph_mode': 'batched', 'pipeline': True}}
    one = variant(dict(a, devices=['cuda:0', 'cuda:0']), cam0)
    two = variant(dict(a, devices=['cuda:0', 'cuda:1']), cam0)
    assert one != two and 'cuda:0+cuda:1' in two and 'pipeline' in two and 'corr2' in two
    assert variant(dict(a, devices=['cuda:0']), cam0) != one
    # a node with precompiled parts is another configuration: its rows do not replace these
    pre = {'index': 0, 'node_params': dict(cam0['node_params'], precompile=['encoder'])}
    assert variant(dict(a, devices=['cuda:0']), pre) == \
        variant(dict(a, devices=['cuda:0']), cam0) + '_precompile'


def test_camera_process_publishes_from_another_process():
    """The camera process against a subscriber here (no tracker node): the image topic's
    publisher is the child's node, every frame it reports sent arrived with that stamp after
    its reported publish time (one monotonic clock for both processes), the paced warm-up
    waits for this side's 'go', the schedule holds its period, and prompts and clicks arrive."""
    require_messages()
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rclpy.signals import SignalHandlerOptions
    from sensor_msgs.msg import Image

    from tools.bench.camera_process import CameraConfig, CameraProcess
    from sam2_ros.ros.inputs import stamp_ns
    from sam2_ros.ros.messages import interfaces

    m = interfaces()
    lease = DomainLease()
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=lease.domain_id,
               signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node('camera_process_test', context=ctx)
    got, prompts, lock = {}, [], threading.Lock()

    def on_image(msg):
        t = time.monotonic()
        with lock:
            got[stamp_ns(msg.header.stamp)] = t

    def on_prompt(msg):
        with lock:
            prompts.append((msg.object_id, bool(msg.has_box), len(msg.points)))

    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    node.create_subscription(Image, '/camtest/image_raw', on_image, qos)
    node.create_subscription(m.Prompt, '/camtest/prompt', on_prompt, qos)
    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.02)

    def publishers():
        return [i.node_name for i in node.get_publishers_info_by_topic('/camtest/image_raw')]

    spinner = threading.Thread(target=spin, daemon=True)
    frames, warmup, rate = 14, 3, 20.0
    cam = CameraProcess(CameraConfig(
        index=0, domain_id=lease.domain_id, image_topic='/camtest/image_raw',
        prompt_topic='/camtest/prompt', width=64, height=48, objects=2, frames=frames,
        warmup=warmup, rate=rate, corrections_every=0.2))
    try:
        spinner.start()
        assert cam.conn.poll(60), 'the camera process never saw the subscriptions'
        ready = cam.conn.recv()
        assert ready == ('ready', cam.proc.pid) and cam.proc.pid != os.getpid()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and publishers() != [f'sam2_camera_{cam.proc.pid}']:
            time.sleep(0.05)
        assert publishers() == [f'sam2_camera_{cam.proc.pid}']
        cam.send('start')
        waits = []
        while True:
            assert cam.conn.poll(30), 'camera process went quiet'
            msg = cam.conn.recv()
            if msg[0] != 'wait_state':
                break
            waits.append(msg[1])
            cam.send('go')
        assert msg[0] == 'done', msg
        res, sent = msg[1], msg[1]['sent']
        assert len(sent) == frames + 1 and res['pid'] == cam.proc.pid
        assert waits == [s['stamp_ns'] for s in sent[:warmup]]    # paced warm-up, then free
        deadline = time.monotonic() + 60
        # every image and every prompt (2 boxes, then the clicks) the camera says it sent
        while time.monotonic() < deadline and (len(got) < len(sent) or
                                               len(prompts) < 2 + res['clicks']):
            time.sleep(0.05)
        with lock:
            assert sorted(got) == [s['stamp_ns'] for s in sent]    # stamped at publish
            assert all(s['t_pub'] < got[s['stamp_ns']] for s in sent)  # one clock
            boxes = [p for p in prompts if p[1]]
            clicks = [p[0] for p in prompts if p[2] == 1]
        assert boxes == [(1, True, 0), (2, True, 0)]
        # clicks go to the objects in turn, however many a stalled camera process sent
        assert res['clicks'] == len(clicks) >= 2
        assert clicks == [1 + k % 2 for k in range(len(clicks))]
        # drift-free: frame k was due at start + k periods whatever the lateness of those
        # before it (an identity, not a timing bound: a loaded CI machine makes frames late)
        steady = sent[warmup:]
        t0, late0 = steady[0]['t_pub'], steady[0]['late_ms']
        for k, s in enumerate(steady):
            due_k = (s['t_pub'] - t0) - (s['late_ms'] - late0) / 1e3
            assert abs(due_k - k / rate) < 1e-6, (k, s, steady[0])
        assert all(b['t_pub'] > a['t_pub'] for a, b in zip(steady, steady[1:]))
        assert all(s['late_ms'] >= 0 for s in sent)      # never before it was due
    finally:
        code = cam.stop()
        stop.set()
        spinner.join(5)
        executor.shutdown()
        node.destroy_node()
        ctx.try_shutdown()
        lease.release()
    assert code == 0
