"""The node's decode routing (sam2_ros/ros/node_host.py, diagnostics.py), no DDS: a compressed
input is decoded by the FrameDecoder configure builds (nvJPEG for JPEG where it can, here the
stand-in for torchvision; PNG and a CPU device on the host), with the same checks and messages
as the host decoder; decode_on_gpu false keeps every frame on the host; diagnostics say whether
GPU decode is on, why not, and how many frames each decoder took. The worker hands a GPU frame
on as it came (no host copy)."""

from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch

import nvjpeg_stand_in
from ros_helpers import require_messages
from test_ros_worker import FakeTracker, frame, host, outputs

from sam2_ros.engine.errors import FrameError
from sam2_ros.ros import diagnostics, images
from sam2_ros.ros.mailbox import Mailbox
from sam2_ros.ros.node_host import NodeHost, frame_decoder
from sam2_ros.ros.options import NodeOptions
from sam2_ros.ros.worker import TrackingWorker


def rgb():
    return np.random.default_rng(4).integers(0, 256, (24, 32, 3), dtype=np.uint8)


def compressed(img, ext, fmt=None):
    require_messages()
    from sensor_msgs.msg import CompressedImage

    ok, buf = cv2.imencode(ext, img[..., ::-1])
    assert ok
    return CompressedImage(format=fmt if fmt is not None else ext[1:], data=buf.tobytes())


def node_host(device='cpu', **opts):
    o = NodeOptions(**dict({'input_type': 'compressed'}, **opts))
    cfg = SimpleNamespace(device=device)
    return NodeHost(None, None, cfg, o, None, None, lambda: (), frame_decoder(cfg, o))


def test_raw_input_has_no_frame_decoder():
    cfg = SimpleNamespace(device='cuda')
    assert frame_decoder(cfg, NodeOptions(input_type='raw')) is None
    assert diagnostics.decode_values(None) == {'gpu_decode': 'off: raw input (input_type raw)'}


def test_jpeg_on_the_gpu_png_on_the_host(monkeypatch):
    fake = nvjpeg_stand_in.install(monkeypatch)
    h = node_host('cuda:0')
    assert h.decoder.on_gpu and h.decoder.device == torch.device('cuda:0')
    img = rgb()
    jpg = compressed(img, '.jpg', 'rgb8; jpeg compressed bgr8')
    out = h.decode(jpg)
    assert isinstance(out, torch.Tensor) and out.shape == (24, 32, 3)
    np.testing.assert_array_equal(out.numpy(), images.compressed_to_rgb(jpg))
    assert fake.calls[-1][1] == 'cuda:0'
    png = compressed(img, '.png')
    out = h.decode(png)
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, img)                          # lossless
    fake.fail = True                    # nvJPEG refuses a frame: the host decodes it
    np.testing.assert_array_equal(h.decode(jpg), images.compressed_to_rgb(jpg))
    values = diagnostics.decode_values(h.decoder)
    assert values == {'gpu_decode': 'on (nvJPEG)', 'decoded_on_gpu': 1, 'decoded_on_host': 2,
                      'gpu_decode_failures': 1,
                      'last_gpu_decode_error': 'RuntimeError: Error while decoding JPEG '
                                               'images: nvjpeg status 7'}


def test_decode_on_gpu_false_is_the_host_decoder(monkeypatch):
    fake = nvjpeg_stand_in.install(monkeypatch)
    h = node_host('cuda', decode_on_gpu=False)
    jpg = compressed(rgb(), '.jpg')
    out = h.decode(jpg)
    assert isinstance(out, np.ndarray) and fake.calls == []       # not even the probe
    np.testing.assert_array_equal(out, images.compressed_to_rgb(jpg))
    assert diagnostics.decode_values(h.decoder)['gpu_decode'] == 'off: switched off'


def test_a_cpu_tracker_decodes_on_the_host_and_says_why():
    h = node_host('cpu')
    values = diagnostics.decode_values(h.decoder)
    assert values['gpu_decode'] == 'off: device cpu is not CUDA'
    jpg = compressed(rgb(), '.jpg')
    np.testing.assert_array_equal(h.decode(jpg), images.compressed_to_rgb(jpg))
    assert diagnostics.decode_values(h.decoder)['decoded_on_host'] == 1


@pytest.mark.parametrize('change, text', [
    (lambda m: setattr(m, 'format', ''), 'unsupported compressed format'),
    (lambda m: setattr(m, 'format', 'tiff'), 'unsupported compressed format'),
    (lambda m: setattr(m, 'data', bytes(m.data)[:len(m.data) // 2]), 'truncated'),
    (lambda m: setattr(m, 'data', b''), 'no data'),
    (lambda m: setattr(m, 'data', b'GIF89a' + bytes(40)), 'no PNG or JPEG header'),
])
def test_bad_frames_are_the_same_frame_errors_on_either_path(monkeypatch, change, text):
    fake = nvjpeg_stand_in.install(monkeypatch)
    for h in (node_host('cuda'), node_host('cpu')):
        m = compressed(rgb(), '.jpg')
        change(m)
        with pytest.raises(FrameError, match=text):
            h.decode(m)
        with pytest.raises(FrameError, match=text):
            images.compressed_to_rgb(m)
    assert len(fake.calls) == 1          # the probe: nothing bad reached nvJPEG


def test_the_pixel_limit_is_max_image_pixels(monkeypatch):
    nvjpeg_stand_in.install(monkeypatch)
    with pytest.raises(FrameError, match='more than max_image_pixels 700'):
        node_host('cuda', max_image_pixels=700).decode(compressed(rgb(), '.jpg'))


def test_diagnostics_report_the_decode_values():
    snap = diagnostics.Snapshot(
        now=1.0, last_recv_t=1.0, stale_timeout_s=2.0, fallbacks=0, fallbacks_seen=0,
        fallback_reasons={}, errors=0, last_error='', consecutive_failures=0, worker_alive=True,
        counts={'received': 1, 'processed': 1, 'dropped': 0, 'frame_errors': 0,
                'prompt_errors': 0},
        latency={}, objects=0, waiting_frames=0, waiting_prompts=0, graph_steps=0,
        eager_steps=1, pipeline=True, publish_waiting=0, overlays_published=0,
        overlays_dropped=0, model='m', random_weights=True, gc_full_collections=0,
        gc_max_pause_ms=0.0, decode=diagnostics.decode_values(node_host('cpu').decoder))
    values = diagnostics.report(snap).values
    assert values['gpu_decode'] == 'off: device cpu is not CUDA'
    assert values['decoded_on_gpu'] == 0 and values['gpu_decode_failures'] == 0


def test_the_worker_hands_a_gpu_frame_on_as_it_came():
    """The decoded tensor goes to the tracker and to the output stage as it is (the overlay
    copies it to the host if someone reads it; nothing else does)."""
    tensor = torch.full((2, 2, 3), 9, dtype=torch.uint8)
    tracked, published = [], []
    tr = FakeTracker()
    real = tr.track
    tr.track = lambda f: tracked.append(f) or real(f)
    w = TrackingWorker(tr, Mailbox(True, 4, 8), host(decode=lambda m: tensor),
                       outputs(published.append))
    w.handle_frame(frame(0, 100))
    assert tracked[0] is tensor and published[0].rgb is tensor


def test_a_corrupt_png_names_libpng_and_keeps_it_off_stderr(capfd):
    """The node's host decoder captures what libpng prints (sam2_ros/ros/native_stderr.py):
    the frame error's reason, not a stray stderr line."""
    data = bytearray(cv2.imencode('.png', rgb())[1].tobytes())
    data[data.index(b'IDAT') + 20] ^= 0xFF            # corrupt compressed data
    m = compressed(rgb(), '.png')
    m.data = bytes(data)
    capfd.readouterr()
    with pytest.raises(FrameError, match=r'could not decode png .*\(libpng error: '):
        node_host('cpu').decode(m)
    assert 'libpng' not in capfd.readouterr().err
