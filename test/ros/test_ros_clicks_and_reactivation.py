"""The node's clicks and what survives a reactivation, each checked where it shows: unit tests for
the pure parts, one node scenario over DDS for clicks from rqt_image_view, click_mode at run
time, and what survives a deactivate/activate (counters, diagnostics, held prompts)."""

from __future__ import annotations

import struct
import subprocess
import zlib
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from ros_helpers import (PYTHON, ROOT, Client, Lifecycle, frames, image_msg, prompt_msg,
                         stamp, start_node, wait_until)

from sam2_ros.engine import decode
from sam2_ros.engine.errors import FrameError
from sam2_ros.ros import images
from sam2_ros.ros import node as node_mod
from sam2_ros.ros import params
from sam2_ros.ros.log_filter import FilteredLog


# ----------------------------------------------------------------------------- defect 8
def png_declaring(w: int, h: int, bit_depth: int = 8) -> bytes:
    """A valid PNG signature + IHDR declaring w x h, followed by a tiny (wrong) IDAT."""
    def chunk(kind, data):
        return (struct.pack('>I', len(data)) + kind + data
                + struct.pack('>I', zlib.crc32(kind + data) & 0xffffffff))
    ihdr = struct.pack('>IIBBBBB', w, h, bit_depth, 2, 0, 0, 0)
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr) + chunk(b'IDAT', zlib.compress(b'\0'))
            + chunk(b'IEND', b''))


def compressed(data: bytes, fmt: str = 'png'):
    from sensor_msgs.msg import CompressedImage

    m = CompressedImage()
    m.format = fmt
    m.data = data
    return m


@pytest.fixture(scope='module')
def bridge():
    from cv_bridge import CvBridge

    return CvBridge()


def test_oversized_compressed_image_is_refused_before_decoding(bridge):
    rgb = np.zeros((300, 400, 3), np.uint8)
    ok, buf = cv2.imencode('.png', rgb)
    with pytest.raises(FrameError, match='400x300 = 120000 pixels, more than'):
        images.compressed_to_rgb(compressed(buf.tobytes()), max_pixels=100_000)
    ok, buf = cv2.imencode('.jpg', rgb)
    with pytest.raises(FrameError, match='jpeg declares 400x300'):
        images.compressed_to_rgb(compressed(buf.tobytes(), 'jpeg'), max_pixels=100_000)
    # the 20000x20000 PNG of the issue: refused from its header with the default limit
    with pytest.raises(FrameError, match='20000x20000'):
        images.compressed_to_rgb(compressed(png_declaring(20000, 20000)))
    assert images.compressed_to_rgb(compressed(buf.tobytes(), 'jpeg'),
                                    max_pixels=120_000).shape == (300, 400, 3)


def test_16_bit_png_is_refused_not_cut_to_8_bit(bridge):
    img = (np.arange(64 * 48 * 3, dtype=np.uint32).reshape(48, 64, 3) * 37 % 65535)
    ok, buf = cv2.imencode('.png', img.astype(np.uint16))
    assert decode.compressed_header(buf.tobytes())[3] == 16
    with pytest.raises(FrameError, match='16 bits per sample'):
        images.compressed_to_rgb(compressed(buf.tobytes()))


# ----------------------------------------------------------------------------- defect 10
def test_compressed_input_subscribes_the_image_transport_topic():
    assert node_mod.input_topic('/camera/image_raw', 'compressed') == \
        '/camera/image_raw/compressed'
    assert node_mod.input_topic('/cam/image_raw/compressed', 'compressed') == \
        '/cam/image_raw/compressed'
    assert node_mod.input_topic('/camera/image_raw', 'raw') == '/camera/image_raw'


def test_cuda_device_without_cuda_says_what_to_set():
    import torch

    if torch.cuda.is_available():
        pytest.skip('this machine has CUDA')
    with pytest.raises(ValueError, match='device:=cpu'):
        node_mod.check_device('cuda')
    node_mod.check_device('cpu')


def test_misspelt_parameter_is_named_with_a_suggestion():
    assert params.unknown(['image_sise', 'device', 'use_sim_time', 'zzz',
                           'qos_overrides./camera/image_raw.subscription.depth'],
                          params.names() + ['use_sim_time']) == [
        ('image_sise', 'image_size'), ('zzz', '')]


def test_help_prints_usage_and_does_not_start_a_node():
    p = subprocess.run([PYTHON, '-m', 'sam2_ros.ros.node', '--help'], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert 'usage: sam2-ros-node' in p.stdout and 'click_mode' in p.stdout
    assert '[sam2_tracker]' not in p.stdout + p.stderr   # no node logged anything


def test_misspelt_parameter_fails_autostart(tmp_path, lease):
    proc = start_node(lease, tmp_path, 'typo', extra=['-p', 'image_sise:=128'])
    try:
        assert proc.p.wait(60) == 1, proc.log()
        assert "unknown parameter 'image_sise' (did you mean 'image_size'?)" in proc.log()
    finally:
        proc.stop()


# ----------------------------------------------------------------------------- defect 11
def test_node_log_reports_repeats_on_their_own_line():
    lines = []
    logger = SimpleNamespace(info=lambda t: lines.append(('info', t)),
                             warning=lambda t: lines.append(('warn', t)),
                             error=lambda t: lines.append(('error', t)))
    log = FilteredLog(lambda: logger, 2.0)     # the node's log (TrackerNode.log)
    for _ in range(3):
        log.log('error', 'frame skipped: bad')
    log.log('warn', 'other')
    assert lines == [('error', 'frame skipped: bad'),
                     ('error', 'previous message repeated 2 more times: frame skipped: bad'),
                     ('warn', 'other')]


# ----------------------------------------------------------------------------- defects 9, 12
def set_param(c: Client, name: str, value):
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter

    cli = c.node.create_client(SetParameters, '/sam2_tracker/set_parameters')
    assert cli.wait_for_service(timeout_sec=30)
    req = SetParameters.Request()
    req.parameters = [Parameter(name, value=value).to_parameter_msg()]
    fut = cli.call_async(req)
    wait_until(fut.done, 30, f'set_parameters {name}')
    return fut.result().results[0]


def diag_values(d):
    return {kv.key: kv.value for kv in d.status[0].values}


def test_clicks_from_rqt_image_view_and_what_survives_reactivation(tmp_path, lease):
    from geometry_msgs.msg import Point
    from lifecycle_msgs.msg import Transition
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    proc = start_node(lease, tmp_path, 'clicks', max_objects=4)
    c = Client(lease)
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    rqt = c.node.create_publisher(Point, '/sam2_tracker/overlay_mouse_left', qos)
    fr = frames(3)
    try:
        c.wait_connected(120)
        wait_until(lambda: rqt.get_subscription_count() > 0, 30, 'Point click subscription')
        c.pub_image.publish(image_msg(fr[0], stamp(0)))
        c.wait_state(stamp(0), 60)
        # a Point (no stamp) applies to the frame on screen: its state is re-published
        rqt.publish(Point(x=30.0, y=40.0, z=0.0))
        st = c.wait_state(stamp(0), 60, count=2)
        assert [o.object_id for o in st.objects] == [1]
        # click_mode new at run time: the next click starts object 2 and targets it
        assert set_param(c, 'click_mode', 'new').successful
        assert not set_param(c, 'click_mode', 'bogus').successful
        rqt.publish(Point(x=120.0, y=60.0, z=0.0))
        st = c.wait_state(stamp(0), 60, count=3)
        assert [o.object_id for o in st.objects] == [1, 2]
        proc.wait_log(r'click starts object 2', 10)
        # a correction of object 2 by a negative click
        assert set_param(c, 'click_mode', 'negative').successful
        rqt.publish(Point(x=125.0, y=62.0, z=0.0))
        st = c.wait_state(stamp(0), 60, count=4)
        assert [o.object_id for o in st.objects] == [1, 2]

        c.pub_image.publish(image_msg(fr[1], stamp(1)))
        assert c.wait_state(stamp(1), 60).processed_frames == 2
        c.send_prompts(prompt_msg(3, stamp(50), box=(5, 5, 40, 40)))   # held: stamp not seen
        lc = Lifecycle(c)
        assert lc.transition(Transition.TRANSITION_DEACTIVATE)
        proc.wait_log(r'1 prompt\(s\) held for frames that did not arrive were dropped', 10)
        assert 'did not acknowledge' not in proc.log()
        n = len(c.snapshot(c.diags))
        inactive = wait_until(lambda: [d for d in c.snapshot(c.diags)[n:]
                                       if 'inactive' in d.status[0].message], 10,
                              '/diagnostics while inactive')[0]
        assert inactive.status[0].level in (1, b'\x01')   # WARN (a byte in rclpy)
        assert diag_values(inactive)['processed_frames'] == '2'
        assert lc.transition(Transition.TRANSITION_ACTIVATE)
        c.wait_connected(30)
        c.pub_image.publish(image_msg(fr[2], stamp(2)))
        assert c.wait_state(stamp(2), 60).processed_frames == 3   # since start, not 1
    finally:
        c.close()
        proc.stop()
