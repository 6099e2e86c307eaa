"""The node latency benchmark's transport split and input kinds, without ROS traffic: the parts
of image -> mask from the camera's, the node's and the receiver's timestamps add up to the
end-to-end time, rows carry the input kind and each part's p50/p99, a JPEG camera's frames are
encoded ahead of time and decode to the frame, and the camera publishes where the node
subscribes."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from ros_helpers import require_messages
from tools.bench import node_latency_frames as nlf
from tools.bench import node_latency_rows as rows_mod


def node_times(t0, gaps):
    """FrameTimes as the node logs them: the marks after t0 spaced by ``gaps`` (seconds)."""
    names = ('recv', 'decode0', 'decode1', 'engine0', 'engine1', 'out0', 'mask0', 'mask1',
             'state1')
    out, t = {}, t0
    for name, g in zip(names, gaps):
        t += g
        out[name] = t
    return out


GAPS = (0.0021, 0.0003, 0.0005, 0.0001, 0.0049, 0.0002, 0.0004, 0.0003, 0.0002)


def test_split_adds_up_to_end_to_end():
    t_pub = 100.0
    node = node_times(t_pub, GAPS)
    t_mask = node['mask1'] + 0.0017
    p = nlf.split(t_pub, node, t_mask)
    assert list(p) == list(nlf.SPLIT + nlf.EXTRA)
    assert p['dds_in_ms'] == 2.1 and p['node_engine_ms'] == 4.9 and p['dds_out_ms'] == 1.7
    assert p['publish_mask_ms'] == 0.7 and p['mask_publish_call_ms'] == 0.3
    assert p['handoff_ms'] == round(p['queue_ms'] + p['prompts_ms'] + p['handoff_out_ms'], 3)
    e2e = (t_mask - t_pub) * 1e3
    assert abs(sum(p[k] for k in nlf.SPLIT) - e2e) < 1e-6
    # node times from before the hand-over mark: no parts of the output hand-off
    assert p['finish_ms'] is None and p['wake_ms'] is None
    q = nlf.split(t_pub, dict(node, handed=node['engine1'] + 0.00005), t_mask)
    assert q['finish_ms'] == 0.05 and q['wake_ms'] == 0.15
    assert q['finish_ms'] + q['wake_ms'] == pytest.approx(q['handoff_out_ms'])
    # no node log, no mask receipt, or no mask published (no subscriber): no split
    for args in ((t_pub, None, t_mask), (t_pub, node, None),
                 (t_pub, dict(node, mask0=0.0, mask1=0.0), t_mask)):
        assert set(nlf.split(*args).values()) == {None}


def sent_frames(n, period=1 / 60):
    return [{'index': i, 'stamp_ns': 1000 + i, 't_pub': 10.0 + i * period,
             't_ret': 10.0 + i * period + 1e-4, 'late_ms': 0.01, 'correction': None,
             'publish_call_ms': 0.1, 'bytes': 290_000} for i in range(n + 1)]


def state(decode_ms=0.4, engine_ms=4.9, publish_ms=0.8):
    return SimpleNamespace(decode_ms=decode_ms, engine_ms=engine_ms, publish_ms=publish_ms,
                           objects=[1], engine_mode='graph', errors=[])


def test_frame_rows_join_the_three_records():
    sent = sent_frames(4)
    node = {s['stamp_ns']: node_times(s['t_pub'], GAPS) for s in sent}
    mask_t = {s['stamp_ns']: node[s['stamp_ns']]['mask1'] + 0.002 for s in sent}
    mask_t[1003] = sent[4]['t_pub'] + 0.001             # frame 3: after the next image
    state_t = {k: v + 0.0005 for k, v in mask_t.items()}
    states = {s['stamp_ns']: state() for s in sent}
    del node[1002]                                     # a frame the node did not log
    fr = nlf.frame_rows(sent, 4, 1, mask_t, state_t, states, node)
    assert [f['index'] for f in fr] == [0, 1, 2, 3] and [f['warmup'] for f in fr] == \
        [True, False, False, False]
    assert [f['deadline_miss'] for f in fr] == [False, False, False, True]
    assert fr[2]['dds_in_ms'] is None and fr[2]['e2e_mask_ms'] is not None
    for f in (fr[0], fr[1], fr[3]):
        assert abs(sum(f[k] for k in nlf.SPLIT) - f['e2e_mask_ms']) < 0.01, f
    assert fr[3]['dds_out_ms'] > fr[1]['dds_out_ms']   # the late mask is late out of DDS
    assert all(f['image_bytes'] == 290_000 for f in fr)
    s = rows_mod.summarize(fr)
    assert s['dds_in_ms']['n'] == 2 and s['dds_in_ms']['p50'] == 2.1   # frames 1 and 3
    assert s['image_bytes']['p50'] == 290_000


def result(input_kind, frames):
    cfg = {'width': 1280, 'height': 720, 'frames': 4, 'warmup': 1, 'rate': 60.0,
           'model': 'tiny', 'image_size': 512, 'objects': 1, 'graph_mode': None,
           'pipeline': None, 'tune_malloc': None, 'precompile': None, 'devices': ['cuda'],
           'precision': 'bf16', 'cuda_graphs': True, 'overlay': True, 'transport': 'shm',
           'corrections_every': 2.0, 'camera_spin_ms': 1.0, 'input': input_kind,
           'jpeg_quality': 90}
    cam = {'index': 0, 'ns': '', 'device': 'cuda', 'overlays_received': 3,
           'node_params': {'graph_mode': 'batched', 'pipeline': True},
           'summary': rows_mod.summarize(frames), 'frames': frames}
    return {'config': cfg, 'cameras': [cam], 'date': '2026-12-02', 'command': 'x',
            'host': {'gpu': 'H200'}, 'shm_large_segments': 2}


def test_rows_carry_the_input_and_the_split():
    sent = sent_frames(3)
    node = {s['stamp_ns']: node_times(s['t_pub'], GAPS) for s in sent}
    mask_t = {k: v['mask1'] + 0.002 for k, v in node.items()}
    fr = nlf.frame_rows(sent, 3, 1, mask_t, mask_t, {k: state() for k in mask_t}, node)
    raw, jpeg = (rows_mod.rows(result(k, fr), 'run', 'abc')[0] for k in ('raw', 'jpeg'))
    assert (raw['input'], jpeg['input']) == ('raw', 'jpeg')
    # a JPEG row is another configuration; a raw row keeps the key rows had before inputs
    assert jpeg['variant'] == raw['variant'] + '_jpeg' and 'raw' not in raw['variant']
    for name in rows_mod.ROW_PARTS:
        assert raw[f'{name}_p50'] is not None and raw[f'{name}_p50'] <= raw[f'{name}_p99']
    assert raw['dds_in_p50'] == 2.1 and raw['engine_span_p50'] == 4.9
    assert raw['image_bytes_p50'] == 290_000
    md = rows_mod.markdown(result('jpeg', fr))
    assert '1280x720 jpeg q90' in md and '| split: DDS in' in md


def test_jpeg_camera_frames_are_encoded_ahead_and_decode_to_the_frame():
    from sam2_ros.engine import decode
    from sam2_ros.synthetic import SyntheticCamera
    from tools.bench.camera_process import JPEG_FORMAT, CameraConfig, frame_messages

    cfg = CameraConfig(index=0, domain_id=0, image_topic='/t', prompt_topic='/p', width=160,
                       height=120, objects=2, frames=3, warmup=1, rate=4.0, input='jpeg')
    cam = SyntheticCamera(160, 120, objects=2, seed=0)
    msgs = frame_messages(cfg, cam, 4)
    assert len(msgs) == 4 and all(m.format == JPEG_FORMAT for m in msgs)
    for i, m in enumerate(msgs):
        head = decode.check_compressed(m.data, m.format)
        assert (head.kind, head.width, head.height, head.sof) == ('jpeg', 160, 120, 0xC0)
        out = decode.FrameDecoder('cpu').decode(m.data, m.format)
        assert np.abs(out.astype(int) - cam.frame(i)).mean() < 12     # q90: close, lossy
        assert len(m.data) < 160 * 120 * 3 / 3
    raw = CameraConfig(**{**vars(cfg), 'input': 'raw'})
    assert frame_messages(raw, cam, 4) is None


@pytest.mark.parametrize('kind', ['raw', 'jpeg'])
def test_serialized_camera_frames_read_back_as_the_stamped_message(kind):
    """The camera's default payload (bytes built before the frame is due) is the frame's
    message, stamped, as rclpy reads it back; 'message' gives the message itself."""
    require_messages()
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import CompressedImage, Image

    from sam2_ros.synthetic import SyntheticCamera
    from tools.bench.camera_process import CameraConfig, frame_messages, frame_payload

    cfg = CameraConfig(index=0, domain_id=0, image_topic='/t', prompt_topic='/p', width=160,
                       height=120, objects=2, frames=3, warmup=1, rate=4.0, input=kind)
    cam = SyntheticCamera(160, 120, objects=2, seed=0)
    encoded = frame_messages(cfg, cam, 4)
    ns = 1_700_000_123_456_789_012
    raw = frame_payload(cfg, cam, encoded, 2, ns)
    as_msg = frame_payload(CameraConfig(**{**vars(cfg), 'publish': 'message'}), cam, encoded,
                           2, ns)
    assert isinstance(raw, bytes) and not isinstance(as_msg, bytes)
    back = deserialize_message(raw, Image if kind == 'raw' else CompressedImage)
    assert (back.header.stamp.sec, back.header.stamp.nanosec) == divmod(ns, 10 ** 9)
    assert back == as_msg
    if kind == 'raw':
        img = np.frombuffer(bytes(back.data), np.uint8).reshape(120, 160, 3)
        assert back.encoding == 'rgb8' and np.array_equal(img, cam.frame(2))


@pytest.mark.parametrize('ns, kind, topic', [('', 'raw', '/camera/image_raw'),
                                             ('', 'jpeg', '/camera/image_raw/compressed'),
                                             ('cam1', 'jpeg', '/cam1/image_raw/compressed')])
def test_camera_publishes_where_the_node_subscribes(ns, kind, topic):
    from sam2_ros.ros.node_cli import input_topic
    from tools.bench.node_harness import INPUT_TYPE, camera_topic, image_topic

    assert camera_topic(ns, kind) == topic == input_topic(image_topic(ns), INPUT_TYPE[kind])


def test_slow_frames_lists_each_cameras_slowest_measured_frames(tmp_path, capsys):
    """tools.bench.slow_frames: per camera the slowest measured frames, slowest first, a lost
    mask (None) first of all, warm-up frames never."""
    from tools.bench import slow_frames

    def frame(i, ms, warm=False):
        return {'index': i, 'e2e_mask_ms': ms, 'node_engine_ms': 3.0, 'warmup': warm,
                'correction': i == 7, 'queued': False}
    cams = [{'index': 0, 'ns': 'left', 'frames': [frame(0, 90.0, True), frame(5, 8.0),
                                                  frame(6, None), frame(7, 12.5)]},
            {'index': 1, 'ns': 'right', 'frames': [frame(1, 4.0), frame(2, 6.0)]}]
    assert [f['index'] for f in slow_frames.slowest(cams[0]['frames'], 2)] == [6, 7]
    path = tmp_path / 'run.json'
    path.write_text(json.dumps({'cameras': cams, 'frames': cams[0]['frames']}))
    assert slow_frames.main([str(path), '-n', '1']) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith('camera 0 left: index e2e_mask_ms')
    assert out[1].split()[:2] == ['6', '-'] and out[3].split()[:2] == ['2', '6.00'], out
    assert len(out) == 4


def test_camera_preparation_must_fit_in_the_frame_period():
    """--camera-prepare-ms: 0 (right after the previous publish) up to below the period."""
    from tools.bench.node_latency_args import parse_args

    assert parse_args(['--rate', '60']).camera_prepare_ms == 3.0
    assert parse_args(['--rate', '60', '--camera-prepare-ms', '0']).camera_prepare_ms == 0.0
    for bad in ('-1', '16.7', '20'):
        with pytest.raises(SystemExit):
            parse_args(['--rate', '60', '--camera-prepare-ms', bad])
