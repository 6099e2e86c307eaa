"""Message conversions without DDS: every accepted encoding decodes pixel-exactly to RGB, every
malformed image is a FrameError (never a crash inside cv_bridge), prompts map onto the core's
Prompt, results onto TrackingState. A cv_bridge that fails its self-test (the PyPI port under
OpenCV 5, simulated here on OpenCV 4) is replaced by numpy giving the very same arrays."""

import contextlib
import logging

import cv2
import numpy as np
import pytest

from ros_helpers import compressed_msg, image_msg, prompt_msg, require_messages

from sam2_ros.engine.errors import FrameError, PromptError
from sam2_ros.ros import images, inputs
from sam2_ros.ros import cv_bridge_compat as compat

cv_bridge = pytest.importorskip('cv_bridge')


@pytest.fixture(scope='module')
def bridge():
    return cv_bridge.CvBridge()


@pytest.fixture(scope='module')
def rgb():
    rng = np.random.default_rng(1)
    return rng.integers(0, 256, (7, 11, 3), dtype=np.uint8)  # odd sizes catch stride bugs


@pytest.mark.parametrize('encoding', ['rgb8', 'bgr8', 'rgba8', 'bgra8'])
def test_color_encodings_pixel_exact(bridge, rgb, encoding):
    out = images.image_to_rgb(image_msg(rgb, 1, encoding), bridge)
    assert out.dtype == np.uint8 and out.shape == rgb.shape and out.flags.c_contiguous
    np.testing.assert_array_equal(out, rgb)


def test_mono8_pixel_exact(bridge, rgb):
    gray = rgb[..., 0].copy()
    msg = image_msg(np.repeat(gray[..., None], 3, axis=2), 1, 'mono8')
    out = images.image_to_rgb(msg, bridge)
    np.testing.assert_array_equal(out, np.repeat(gray[..., None], 3, axis=2))


def test_padded_rows_and_bigendian_flag(bridge, rgb):
    """Drivers may pad rows (step > width*channels); cv_bridge ignores step, we must not."""
    h, w, _ = rgb.shape
    step = w * 3 + 5
    buf = np.full((h, step), 77, np.uint8)
    buf[:, :w * 3] = rgb.reshape(h, w * 3)
    msg = image_msg(rgb, 1, 'rgb8')
    msg.step, msg.data = step, buf.tobytes()
    msg.is_bigendian = 1  # meaningless for 8-bit data; must not reach numpy-2-broken code
    np.testing.assert_array_equal(images.image_to_rgb(msg, bridge), rgb)


def test_png_exact_and_jpeg_close(bridge, rgb):
    np.testing.assert_array_equal(images.compressed_to_rgb(compressed_msg(rgb, 1, 'png')),
                                  rgb)
    smooth = np.tile(np.linspace(0, 255, 32, dtype=np.uint8)[None, :, None], (24, 1, 3))
    out = images.compressed_to_rgb(compressed_msg(smooth, 1, 'jpeg'))
    assert out.shape == smooth.shape
    assert np.abs(out.astype(int) - smooth.astype(int)).mean() < 4


BAD_IMAGES = [
    (lambda m: setattr(m, 'encoding', '16UC1'), 'unsupported image encoding'),
    (lambda m: setattr(m, 'encoding', 'yuv422'), 'unsupported image encoding'),
    (lambda m: setattr(m, 'data', bytes(m.data)[:-1]), 'height\\*step'),
    (lambda m: (setattr(m, 'width', 0), setattr(m, 'step', 0)), 'zero-size'),
    (lambda m: setattr(m, 'height', 0), 'zero-size'),
    (lambda m: setattr(m, 'step', m.width * 3 - 1), 'step'),
]


@pytest.mark.parametrize('mutate, text', BAD_IMAGES)
def test_bad_images_are_frame_errors(bridge, rgb, mutate, text):
    msg = image_msg(rgb, 1, 'rgb8')
    mutate(msg)
    with pytest.raises(FrameError, match=text):
        images.image_to_rgb(msg, bridge)


# ------------------------------------------------- a broken cv_bridge: the numpy fallback

@contextlib.contextmanager
def opencv5_layout():
    """cv_bridge's type table as under OpenCV 5 (channels at bit 5, not OpenCV 4's bit 3).

    The port still decodes with OpenCV 4's CV_MAT_CN, so CV_8UC3 reads as 9 channels: the exact
    failure of our GPU machine ('buffer is too small for requested array'), on OpenCV 4.
    """
    boost = pytest.importorskip('cv_bridge.boost.cv_bridge_boost')
    cv4 = boost.getCvType
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(boost, 'getCvType', lambda enc: cv4(enc) & 7 | (cv4(enc) >> 3) << 5)
        yield


class WrongPixelsBridge:
    """A bridge that converts without error but returns wrong pixels (blank, right shape)."""

    def __init__(self):
        self.calls = 0

    def imgmsg_to_cv2(self, msg, desired_encoding='passthrough'):
        self.calls += 1
        shape = (msg.height, msg.width) + (() if desired_encoding == 'passthrough' else (3,))
        return np.zeros(shape, np.uint8)


def decode_broken(kind, fn, msg):
    """``fn(msg, bridge)`` with a fresh broken bridge of ``kind`` (probed on first use)."""
    if kind == 'wrong pixels':
        return fn(msg, WrongPixelsBridge())
    with opencv5_layout():
        return fn(msg, cv_bridge.CvBridge())


def raw_msg(encoding, h=7, w=11, pad=0, seed=2):
    """An Image of random bytes in every channel (alpha too) and ``pad`` garbage bytes per row."""
    channels = images.ENCODING_CHANNELS[encoding]
    buf = np.random.default_rng(seed).integers(0, 256, (h, w * channels + pad), dtype=np.uint8)
    msg = image_msg(np.zeros((h, w, 3), np.uint8), 1, 'rgb8')
    msg.encoding, msg.step, msg.data = encoding, w * channels + pad, buf.tobytes()
    return msg, buf[:, :w * channels].reshape(h, w, channels)


def expected_rgb(encoding, px):
    """The RGB that cv2.cvtColor (what cv_bridge calls) gives, spelled out in numpy."""
    if encoding == 'mono8':
        return np.repeat(px, 3, axis=2)
    return px[..., 2::-1] if encoding.startswith('bgr') else px[..., :3]


@pytest.mark.skipif(int(cv2.__version__.split('.')[0]) >= 5,
                    reason='the PyPI cv_bridge port decodes correctly only with OpenCV 4')
def test_working_bridge_is_used_without_warning(caplog):
    with caplog.at_level(logging.WARNING, logger=compat.__name__):
        assert compat.broken_calls(cv_bridge.CvBridge()) == frozenset()
    assert not caplog.records


def test_opencv5_failure_is_reproduced_and_decoded(bridge):
    """The GPU machine's case: 1280x720 rgb8, on which that cv_bridge raises, decodes."""
    msg, px = raw_msg('rgb8', 720, 1280)
    with opencv5_layout():
        broken = cv_bridge.CvBridge()
        with pytest.raises(TypeError, match='buffer is too small for requested array'):
            broken.imgmsg_to_cv2(msg, desired_encoding='rgb8')
        out = images.image_to_rgb(msg, broken)
        colour = ('rgb8', 'bgr8', 'rgba8', 'bgra8')
        assert compat.broken_calls(broken) == {(e, 'rgb8') for e in colour}
    np.testing.assert_array_equal(out, px)
    np.testing.assert_array_equal(out, images.image_to_rgb(msg, bridge))


@pytest.mark.parametrize('kind', ['opencv5', 'wrong pixels'])
@pytest.mark.parametrize('pad', [0, 5])
@pytest.mark.parametrize('encoding', list(images.ENCODING_CHANNELS))
def test_fallback_equals_cv_bridge(bridge, kind, pad, encoding):
    """Bit-exact with the working cv_bridge for every accepted encoding, padded rows too."""
    msg, px = raw_msg(encoding, pad=pad)
    want = images.image_to_rgb(msg, bridge)
    out = decode_broken(kind, images.image_to_rgb, msg)
    # rgb8 is a view of the message (no bridge), strided where rows are padded
    assert out.dtype == np.uint8 and out.shape == want.shape and (
        out.flags.c_contiguous or encoding == 'rgb8')
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(out, expected_rgb(encoding, px))


@pytest.mark.parametrize('kind', ['opencv5', 'wrong pixels'])
@pytest.mark.parametrize('pad', [0, 3])
def test_fallback_mask_equals_cv_bridge(bridge, kind, pad):
    msg, _ = raw_msg('mono8', pad=pad)
    buf = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.step).copy()
    buf[:, :4] = 0  # some background
    msg.data = buf.tobytes()
    want = images.mask_to_bool(msg, bridge)
    np.testing.assert_array_equal(decode_broken(kind, images.mask_to_bool, msg), want)
    np.testing.assert_array_equal(want, buf[:, :msg.width] > 0)


def test_fallback_probes_and_warns_once(caplog):
    wrong = WrongPixelsBridge()
    msg, px = raw_msg('bgra8')
    with caplog.at_level(logging.WARNING, logger=compat.__name__):
        for _ in range(3):
            np.testing.assert_array_equal(images.image_to_rgb(msg, wrong), px[..., 2::-1])
        images.mask_to_bool(raw_msg('mono8')[0], wrong)
    assert wrong.calls == len(compat.BRIDGE_CALLS)  # the probes; frames never reach it
    assert len(caplog.records) == 1
    text = caplog.records[0].getMessage()
    for part in ('self-test', f'OpenCV {cv2.__version__}', f'numpy {np.__version__}',
                 'bgra8->rgb8', 'mono8->passthrough', 'wrong pixels', 'opencv-python-headless<5'):
        assert part in text, (part, text)


@pytest.mark.parametrize('kind', ['opencv5', 'wrong pixels'])
@pytest.mark.parametrize('mutate, text', BAD_IMAGES)
def test_bad_images_are_frame_errors_with_fallback(rgb, kind, mutate, text):
    msg = image_msg(rgb, 1, 'rgb8')
    mutate(msg)
    with pytest.raises(FrameError, match=text):
        decode_broken(kind, images.image_to_rgb, msg)


def test_unknown_or_undecodable_compressed_image_is_a_frame_error(bridge, rgb):
    msg = compressed_msg(rgb, 1, 'png')
    msg.format = 'tiff'
    with pytest.raises(FrameError, match='unsupported compressed format'):
        images.compressed_to_rgb(msg)
    msg = compressed_msg(rgb, 1, 'png')
    msg.data = b'not a png at all'
    with pytest.raises(FrameError, match='decode'):
        images.compressed_to_rgb(msg)


def test_prompt_messages_map_to_add_remove_or_reset_prompts(bridge):
    """Points, labels and box carry over, points without labels are positive clicks, and
    action 1 is a remove of the id, action 2 a reset with no prompt."""
    require_messages()
    action, p = inputs.prompt_from_msg(prompt_msg(3, points=[(1, 2), (3, 4)], labels=[1, 0],
                                                box=(0, 1, 5, 6)), bridge)
    assert action == inputs.ACTION_ADD and p.obj_id == 3
    np.testing.assert_array_equal(p.points, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(p.labels, [1, 0])
    assert p.box == (0, 1, 5, 6) and p.mask is None
    _, p = inputs.prompt_from_msg(prompt_msg(2, points=[(5, 5)]), bridge)
    np.testing.assert_array_equal(p.labels, [1])  # no labels: positive
    assert inputs.prompt_from_msg(prompt_msg(0, action=2), bridge) == (inputs.ACTION_RESET, None)
    action, p = inputs.prompt_from_msg(prompt_msg(4, action=1), bridge)
    assert action == inputs.ACTION_REMOVE and p.obj_id == 4


def test_a_huge_click_is_out_of_frame_not_an_overflow():
    """A click's float64 coordinates stay finite: 1e300 is outside the frame, as 1e30 is."""
    import warnings
    from types import SimpleNamespace

    from sam2_ros.engine.prompts import prompt_points
    with warnings.catch_warnings():
        warnings.simplefilter('error')           # no overflow in a cast
        p = inputs.click_to_prompt(SimpleNamespace(x=1e300, y=1e300), 1)
    with pytest.raises(PromptError, match='outside'):
        prompt_points(p, 48, 64, 64, 'cpu')


def test_prompt_mask_uses_image_decode(bridge):
    require_messages()
    m = prompt_msg(1)
    mask = np.zeros((5, 6), np.uint8)
    mask[1:3, 2:5] = 255
    m.mask = image_msg(np.repeat(mask[..., None], 3, axis=2), 0, 'mono8')
    _, p = inputs.prompt_from_msg(m, bridge)
    np.testing.assert_array_equal(p.mask, mask > 0)
    m.mask = image_msg(np.zeros((5, 6, 3), np.uint8), 0, 'rgb8')
    with pytest.raises(PromptError, match='mono8'):
        inputs.prompt_from_msg(m, bridge)


@pytest.mark.parametrize('kwargs, text', [
    (dict(obj_id=0, points=[(1, 1)]), '1..255'),
    (dict(obj_id=256, points=[(1, 1)]), '1..255'),
    (dict(obj_id=1), 'no points, box or mask'),
    (dict(obj_id=1, points=[(1, 1)], labels=[1, 1]), 'labels'),
    (dict(obj_id=1, action=7, points=[(1, 1)]), 'unknown prompt action'),
])
def test_prompt_with_bad_id_labels_action_or_nothing_is_a_prompt_error(bridge, kwargs, text):
    require_messages()
    obj_id = kwargs.pop('obj_id')
    with pytest.raises(PromptError, match=text):
        inputs.prompt_from_msg(prompt_msg(obj_id, **kwargs), bridge)


# ------------------------------------------- the bridge's workarounds, each where it is needed

class StepBridge:
    """A bridge that reads rows ``step`` bytes apart, as a robot's ROS 2 cv_bridge does;
    ``whole_pixels`` rounds ``step`` down to whole pixels as that bridge does. Records the
    messages it is handed."""

    def __init__(self, whole_pixels=False):
        self.whole_pixels, self.seen = whole_pixels, []

    def imgmsg_to_cv2(self, msg, desired_encoding='passthrough'):
        self.seen.append(msg)
        ch = conv_channels(msg.encoding)
        step = msg.step // ch * ch if self.whole_pixels else msg.step
        px = np.ndarray((msg.height, msg.width, ch), np.uint8, bytes(msg.data),
                        strides=(step, ch, 1))
        return compat.numpy_decode(px, msg.encoding, desired_encoding).copy()


def conv_channels(encoding):
    return images.ENCODING_CHANNELS[encoding]


def test_a_bridge_that_honours_step_gets_the_message_itself():
    b = StepBridge()
    assert compat.report(b) == compat.BridgeReport(frozenset(), frozenset(), frozenset())
    msg, px = raw_msg('bgr8', pad=5)
    msg.is_bigendian = 1
    out = images.image_to_rgb(msg, b)
    assert b.seen[-1] is msg                       # no stand-in, no repacking
    np.testing.assert_array_equal(out, expected_rgb('bgr8', px))


def test_a_bridge_rounding_step_to_whole_pixels_gets_padded_rows_repacked():
    b = StepBridge(whole_pixels=True)
    assert compat.report(b).ignores_step == set(compat.BRIDGE_CALLS) - {('mono8', 'rgb8'),
                                                                        ('mono8', 'passthrough')}
    for pad in (0, 3, 4):                # 3 is whole pixels, but the probe tells no more
        msg, px = raw_msg('bgr8', pad=pad)                  # rgb8 needs no bridge
        np.testing.assert_array_equal(images.image_to_rgb(msg, b), px[..., ::-1])
        assert (b.seen[-1] is msg) == (pad == 0), pad


def test_the_pypi_port_gets_repacked_rows_and_a_cleared_byte_order_flag(bridge):
    """The port ignores step and calls ndarray.newbyteorder (gone in numpy 2) for is_bigendian;
    both are found by the probe and worked around; cv_bridge still decodes the frame."""
    found = compat.report(bridge)
    works = set(compat.BRIDGE_CALLS) - found.broken
    assert found.ignores_step == works
    if int(np.__version__.split('.')[0]) >= 2:
        assert found.byte_order_fails == works
    msg, px = raw_msg('mono8', pad=2)
    msg.is_bigendian = 1
    np.testing.assert_array_equal(images.mask_to_bool(msg, bridge), px[..., 0] > 0)


@pytest.mark.parametrize('pad', [0, 5])
def test_rgb8_frame_is_a_view_of_the_message_bytes(bridge, pad):
    """rgb8 reaches the tracker as a view of the message's bytes (no bridge, no copy; the
    tracker's copy into pinned memory is the frame's one host copy), read-only where the bytes
    are (a frame-ring slot, serialized bytes), honouring padded rows."""
    from types import SimpleNamespace
    rclpy_msg, px = raw_msg('rgb8', pad=pad)
    out = images.image_to_rgb(rclpy_msg, bridge)
    np.testing.assert_array_equal(out, px)
    assert np.shares_memory(out, np.frombuffer(rclpy_msg.data, np.uint8))
    # as a serialized message's fields read it (image_cdr): bytes, read-only
    msg = SimpleNamespace(**{k: getattr(rclpy_msg, k) for k in (
        'height', 'width', 'encoding', 'is_bigendian', 'step')}, data=bytes(rclpy_msg.data))
    out = images.image_to_rgb(msg, bridge)
    np.testing.assert_array_equal(out, px)
    assert np.shares_memory(out, np.frombuffer(msg.data, np.uint8))
    assert not out.flags.writeable


def test_raw_view_honours_step_without_copying():
    msg, px = raw_msg('rgba8', pad=7)
    view = images.raw_view(msg, 4)
    np.testing.assert_array_equal(view, px)
    assert view.strides == (msg.step, 4, 1) and np.shares_memory(view, np.frombuffer(msg.data,
                                                                                      np.uint8))


def test_corrupt_png_error_names_libpng_and_nothing_reaches_stderr(bridge, capfd):
    """libpng prints 'libpng error: ...' to fd 2 beside the node's own error (issue 32, 7):
    its text becomes the reason in the FrameError, and only other output reaches stderr."""
    import os

    from sam2_ros.ros import native_stderr

    ok, buf = cv2.imencode('.png', np.random.default_rng(0).integers(0, 255, (40, 50, 3),
                                                                     np.uint8))
    data = bytearray(buf.tobytes())
    data[data.index(b'IDAT') + 20] ^= 0xFF            # corrupt compressed data
    msg = compressed_msg(np.zeros((4, 4, 3), np.uint8), 1)
    msg.data = bytes(data)
    capfd.readouterr()
    with pytest.raises(FrameError, match=r'\(libpng error: '):
        images.compressed_to_rgb(msg)
    with native_stderr.captured() as said:
        os.write(2, b'another thread\n')
    assert said == []
    err = capfd.readouterr().err
    assert 'libpng' not in err and 'another thread' in err
