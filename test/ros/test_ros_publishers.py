"""What the node's publishers send for a frame (sam2_ros/ros/publishers.py), with fake ROS
publishers (no DDS): each mask topic only while it has a reader, raw and PNG from one label
mask; the overlay rendered once for its readers, raw and (compressed input) JPEG, from a frame
on the host or one decoded on the GPU (a tensor, copied to the host only then); which
publishers configure makes; the compressed overlay never waited for at release."""

import contextlib
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch

from ros_helpers import require_messages

from sam2_ros.engine.types import TRACKING, FrameResult, ObjectResult
from sam2_ros.overlay import render_overlay
from sam2_ros.ros import publishers as pubs_mod
from sam2_ros.ros.mailbox import Published
from sam2_ros.ros.publishers import Publishers
from sam2_ros.ros.totals import Totals

H, W = 24, 32
WARNINGS = []                      # what the fake node logged


class FakePub:
    def __init__(self, name, readers):
        self.name, self.readers, self.sent = name, readers, []

    def publish(self, msg):
        self.sent.append(msg)

    def get_subscription_count(self):
        return self.readers.get(self.name, 0)

    def wait_for_all_acked(self, timeout):
        return True


def result():
    mask = np.zeros((H, W), bool)
    mask[4:12, 6:20] = True
    obj = ObjectResult(obj_id=3, mask=mask, score=2.0, state=TRACKING, box=(6, 4, 19, 11),
                       centroid=(12.5, 7.5), area=int(mask.sum()), frames_since_prompt=0)
    return FrameResult(7, H, W, [obj])


def frame():
    rng = np.random.default_rng(1)
    return rng.integers(0, 256, (H, W, 3), dtype=np.uint8)


def outputs(readers, names=('mask', 'mask_compressed', 'overlay', 'overlay_compressed',
                            'state'), serialized=False, overlay_device=None, without_gil=False):
    require_messages()
    pubs = {name: FakePub(name, readers) for name in names}
    pubs.setdefault('objects', None)
    logger = SimpleNamespace(warning=WARNINGS.append)
    node = SimpleNamespace(context=SimpleNamespace(ok=lambda: True), get_logger=lambda: logger,
                           destroy_lifecycle_publisher=lambda p: None)
    return Publishers(node, pubs, Totals(), lambda i: '', serial=False,
                      serialized=serialized, overlay_device=overlay_device,
                      without_gil=without_gil), pubs


def published(rgb=None, res=None):
    from std_msgs.msg import Header

    header = Header(frame_id='cam')
    header.stamp.sec = 5
    return Published(res or result(), frame() if rgb is None else rgb, header, 0.0, 0.0, [])


@pytest.mark.parametrize('readers, sent', [
    ({}, set()), ({'mask': 1}, {'mask'}), ({'mask_compressed': 2}, {'mask_compressed'}),
    ({'mask': 1, 'mask_compressed': 1}, {'mask', 'mask_compressed'})])
def test_each_mask_topic_only_while_read_both_from_one_label_mask(monkeypatch, readers, sent):
    readers = dict(readers, state=1)
    out, pubs = outputs(readers)
    res = result()
    calls = []
    label = res.label_mask()
    monkeypatch.setattr(res, 'label_mask', lambda: calls.append(1) or label)
    out.publish(published(res=res))
    assert {n for n in ('mask', 'mask_compressed') if pubs[n].sent} == sent
    assert len(calls) == (1 if sent else 0)          # one label mask, none without a reader
    assert len(pubs['state'].sent) == 1
    if 'mask' in sent:
        m = pubs['mask'].sent[0]
        assert m.encoding == 'mono8' and m.header.frame_id == 'cam'
        np.testing.assert_array_equal(
            np.frombuffer(bytes(m.data), np.uint8).reshape(H, W), label)
    if 'mask_compressed' in sent:
        m = pubs['mask_compressed'].sent[0]
        assert 'png' in m.format and m.header.stamp.sec == 5
        np.testing.assert_array_equal(
            cv2.imdecode(np.frombuffer(bytes(m.data), np.uint8), cv2.IMREAD_UNCHANGED), label)
        assert label[5, 10] == 3


def test_overlay_goes_to_its_readers_raw_and_jpeg_rendered_once(monkeypatch):
    readers = {}
    out, pubs = outputs(readers)
    assert out.has_overlay and not out.wants_overlay()      # nobody reads either overlay
    readers['overlay_compressed'] = 1
    assert out.wants_overlay()
    rendered = []
    real = pubs_mod.render_overlay
    monkeypatch.setattr(pubs_mod, 'render_overlay',
                        lambda rgb, res: rendered.append(rgb) or real(rgb, res))
    p = published()
    out.publish_overlay(p)
    assert not pubs['overlay'].sent and len(pubs['overlay_compressed'].sent) == 1
    readers['overlay'] = 1
    out.publish_overlay(p)
    assert len(rendered) == 2 and len(pubs['overlay'].sent) == 1
    ref = render_overlay(p.rgb, p.result)
    raw = pubs['overlay'].sent[0]
    assert raw.encoding == 'rgb8'
    np.testing.assert_array_equal(np.frombuffer(bytes(raw.data), np.uint8).reshape(H, W, 3), ref)
    jpg = pubs['overlay_compressed'].sent[-1]
    assert jpg.format == 'rgb8; jpeg compressed bgr8' and jpg.header.frame_id == 'cam'
    # the JPEG of the same overlay pixels at quality 90 (cv2's encoder, BGR order)
    ok, want = cv2.imencode('.jpg', np.ascontiguousarray(ref[..., ::-1]),
                            [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok and bytes(jpg.data) == want.tobytes()
    back = cv2.imdecode(np.frombuffer(bytes(jpg.data), np.uint8), cv2.IMREAD_COLOR)
    assert back.shape == ref.shape


def test_serialized_mask_and_overlay_are_the_messages_rclpy_would_send():
    """publish_serialized_images: the raw mask and overlay go out as bytes (Publisher.publish
    takes them as a serialized message) that read back as the converted path's messages."""
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image

    readers = {'mask': 1, 'overlay': 1, 'state': 1}
    sent = {}
    for serialized in (False, True):
        out, pubs = outputs(readers, serialized=serialized)
        p = published()
        out.publish(p)
        out.publish_overlay(p)
        sent[serialized] = pubs
    for name in ('mask', 'overlay'):
        raw, msg = sent[True][name].sent[0], sent[False][name].sent[0]
        assert isinstance(raw, bytes) and isinstance(msg, Image)
        assert deserialize_message(raw, Image) == msg
    assert type(sent[True]['state'].sent[0]) is type(sent[False]['state'].sent[0])


def test_without_gil_the_serialized_images_go_through_rcl(monkeypatch):
    """publish_without_gil (with publish_serialized_images): the raw mask and overlay bytes
    go through rcl_publish's GIL-free send, the same bytes as rclpy's publish gets; the PNG
    mask and the state stay rclpy messages."""
    from sam2_ros.ros import rcl_publish

    through_rcl = []
    monkeypatch.setattr(rcl_publish, 'rcl_publish_function',
                        lambda path=None: lambda ptr, msg, alloc: through_rcl.append(
                            msg.contents.buffer_length) or 0)
    readers = {'mask': 1, 'mask_compressed': 1, 'overlay': 1, 'state': 1}
    sent = {}
    for without_gil in (False, True):
        out, pubs = outputs(readers, serialized=True, without_gil=without_gil)
        for pub in pubs.values():
            if pub is not None:
                pub.handle = contextlib.nullcontext(SimpleNamespace())
                pub.handle.pointer = 1                 # rclpy's handle: a context manager
        p = published()
        out.publish(p)
        out.publish_overlay(p)
        sent[without_gil] = {k: list(v.sent) for k, v in pubs.items() if v is not None}
    want = sent[False]
    assert sorted(through_rcl) == sorted(len(want[k][0]) for k in ('mask', 'overlay'))
    assert sent[True]['mask'] == [] and sent[True]['overlay'] == []     # not through rclpy
    assert len(sent[True]['mask_compressed']) == len(sent[True]['state']) == 1


def test_overlay_rendered_on_the_device_is_the_hosts_and_falls_back_once(monkeypatch):
    """overlay_on_gpu: the overlay is rendered by overlay_device (here on the CPU device; on
    the GPU in test/gpu/test_overlay_gpu.py) with the host renderer's pixels; a failure there
    is logged once and the host renders from then on."""
    from sam2_ros.overlay_device import DeviceOverlay

    readers = {'overlay': 1}
    out, pubs = outputs(readers, overlay_device='cpu')
    p = published()
    out.publish_overlay(p)
    want = render_overlay(p.rgb, p.result)
    got = np.frombuffer(bytes(pubs['overlay'].sent[0].data), np.uint8).reshape(H, W, 3)
    np.testing.assert_array_equal(got, want)
    calls = []

    def broken(self, rgb, res):
        calls.append(1)
        raise RuntimeError('CUDA error: out of memory')
    monkeypatch.setattr(DeviceOverlay, 'render', broken)
    WARNINGS.clear()
    for _ in range(2):
        out.publish_overlay(p)
    assert calls == [1] and len(WARNINGS) == 1 and 'out of memory' in WARNINGS[0]
    for msg in pubs['overlay'].sent[1:]:
        np.testing.assert_array_equal(
            np.frombuffer(bytes(msg.data), np.uint8).reshape(H, W, 3), want)


@pytest.mark.parametrize('on, device, where', [(True, 'cuda', 'cuda'), (True, 'cuda:1', 'cuda:1'),
                                               (False, 'cuda', None), (True, 'cpu', None)])
def test_the_overlay_goes_to_the_trackers_gpu_only_when_asked(on, device, where):
    assert pubs_mod.overlay_device_of(SimpleNamespace(overlay_on_gpu=on), device) == where


def test_a_tensor_frame_is_copied_to_the_host_only_for_the_overlay(monkeypatch):
    """A frame decoded on the GPU is a [H, W, 3] view of a [3, H, W] tensor (nvJPEG's layout;
    here on the CPU): masks and state never touch its pixels, the overlay gets them as a
    contiguous host array equal to the numpy frame's."""
    rgb = frame()
    tensor = torch.from_numpy(rgb).permute(2, 0, 1).contiguous().permute(1, 2, 0)
    assert not tensor.is_contiguous()
    to_host = []
    real = pubs_mod.to_host
    monkeypatch.setattr(pubs_mod, 'to_host', lambda f: to_host.append(f) or real(f))
    readers = {'mask': 1, 'mask_compressed': 1, 'state': 1, 'overlay': 1}
    out, pubs = outputs(readers)
    p = published(rgb=tensor)
    out.publish(p)
    assert to_host == []
    out.publish_overlay(p)
    assert len(to_host) == 1 and to_host[0] is tensor
    got = np.frombuffer(bytes(pubs['overlay'].sent[0].data), np.uint8).reshape(H, W, 3)
    np.testing.assert_array_equal(got, render_overlay(rgb, p.result))


def test_flush_waits_for_both_masks_never_for_an_overlay():
    readers = {name: 1 for name in ('mask', 'mask_compressed', 'overlay', 'overlay_compressed',
                                    'state')}
    out, pubs = outputs(readers)
    waited = []
    for name, pub in pubs.items():
        if pub is not None:
            pub.wait_for_all_acked = lambda timeout, name=name: waited.append(name) or True
    out.publish(published())
    out.publish_overlay(published())
    out.flush()
    assert sorted(waited) == ['mask', 'mask_compressed', 'state']


@pytest.mark.parametrize('overlay, compressed, made', [
    (True, True, {'~/mask', '~/mask/compressed', '~/overlay', '~/overlay/compressed'}),
    (True, False, {'~/mask', '~/mask/compressed', '~/overlay'}),
    (False, True, {'~/mask', '~/mask/compressed'})])
def test_configure_makes_the_compressed_overlay_only_for_a_compressed_input(overlay, compressed,
                                                                             made):
    require_messages()
    from sensor_msgs.msg import CompressedImage, Image

    created = []
    node = SimpleNamespace(create_lifecycle_publisher=lambda t, topic, qos: created.append(
        (t, topic)) or SimpleNamespace(topic=topic))
    out = Publishers.create(node, 'State', None, overlay, Totals(), lambda i: '', serial=False,
                            compressed_overlay=compressed)
    images = {topic for t, topic in created if t in (Image, CompressedImage)}
    assert images == made and ('State', '~/state') in created
    assert all(t is CompressedImage for t, topic in created if topic.endswith('/compressed'))
    assert out.has_overlay == overlay
    assert (out.pubs['overlay_compressed'] is not None) == (overlay and compressed)


def test_a_gpu_frame_for_the_host_overlay_is_copied_by_a_copier_of_its_device(monkeypatch):
    """overlay_on_gpu off, a frame on a GPU: host_frame copies it with a DeviceOverlay of the
    frame's device (its own stream and pinned buffer; on the GPU in test_overlay_gpu.py), made
    once; if that copy fails, the plain ``to_host`` copy is used, with a warning."""
    from sam2_ros.overlay_device import DeviceOverlay

    rgb = frame()
    gpu_frame = SimpleNamespace(is_cuda=True, device='cpu')   # stands in for a CUDA tensor
    made, plain = [], []
    monkeypatch.setattr(DeviceOverlay, 'to_host',
                        lambda self, f: made.append((self.device, f)) or rgb)
    monkeypatch.setattr(pubs_mod, 'to_host', lambda f: plain.append(f) or rgb)
    out, _ = outputs({'overlay': 1})
    assert out.host_frame(gpu_frame) is rgb and out.host_frame(gpu_frame) is rgb
    copier = out.host_copier
    assert [d for d, _ in made] == [torch.device('cpu')] * 2 and plain == []

    def broken(self, f):
        raise RuntimeError('CUDA error: an illegal memory access')
    monkeypatch.setattr(DeviceOverlay, 'to_host', broken)
    WARNINGS.clear()
    assert out.host_frame(gpu_frame) is rgb and plain == [gpu_frame]
    assert out.host_copier is copier and 'illegal memory access' in WARNINGS[0]


def test_a_configure_that_fails_leaves_no_publisher_behind(tmp_path):
    """A publisher that cannot be made (or a timing log that cannot be opened) fails the
    configure with nothing left over: the publishers already made are destroyed, the log
    closed; a timing log that is a folder is refused by the options first."""
    require_messages()
    import dataclasses

    from sam2_ros.ros.options import NodeOptions

    made, destroyed = [], []

    def make(t, topic, qos):
        if topic.endswith('/state'):
            raise RuntimeError('cannot create publisher (injected)')
        made.append(topic)
        return SimpleNamespace(topic=topic)
    node = SimpleNamespace(create_lifecycle_publisher=make,
                           destroy_lifecycle_publisher=lambda p: destroyed.append(p.topic))
    log = tmp_path / 'times.log'
    with pytest.raises(RuntimeError, match='injected'):
        Publishers.create(node, 'State', None, True, Totals(), lambda i: '', serial=False,
                          timing_log=str(log))
    assert made and sorted(destroyed) == sorted(made)
    with pytest.raises(ValueError, match='timing_log must be a file we can write'):
        dataclasses.replace(NodeOptions(), timing_log=str(tmp_path)).validate()
    assert dataclasses.replace(NodeOptions(), timing_log=str(log)).validate().timing_log
