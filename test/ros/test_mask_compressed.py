"""~/mask/compressed's encoding (sam2_ros/ros/mask_compressed.py): a lossless PNG of the label
mask, a small fraction of the raw message, in image_transport's format, header kept."""

import cv2
import numpy as np
import pytest

from sam2_ros.engine import decode
from sam2_ros.ros import mask_compressed as mc


def discs(h, w, n):
    lab = np.zeros((h, w), np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    for k in range(n):
        cx, cy, r = w * (k + 1) / (n + 1), h / 2 + (k % 3 - 1) * h / 5, min(h, w) / (3 + n)
        lab[(xx - cx) ** 2 + (yy - cy) ** 2 < r * r] = k + 1
    return lab


@pytest.mark.parametrize('label', [
    discs(720, 1280, 8), discs(31, 17, 2), np.zeros((48, 64), np.uint8),
    np.full((48, 64), 255, np.uint8),
    np.random.default_rng(0).integers(0, 256, (37, 53), dtype=np.uint8),  # worst case
], ids=['720p_8_objects', 'odd_size', 'empty', 'full', 'noise'])
def test_png_is_lossless(label):
    buf = mc.encode_label_png(label)
    assert buf.dtype == np.uint8 and buf.ndim == 1
    head = decode.check_compressed(buf, mc.MASK_FORMAT)
    assert (head.kind, head.width, head.height, head.bits) == \
        ('png', label.shape[1], label.shape[0], 8)
    out = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    assert out.dtype == np.uint8 and out.shape == label.shape
    np.testing.assert_array_equal(out, label)


def test_720p_mask_is_a_small_fraction_of_the_raw_message():
    label = discs(720, 1280, 8)
    assert len(mc.encode_label_png(label)) < label.size // 50      # raw: 0.9 MB


def test_message_keeps_the_header_and_says_png():
    from std_msgs.msg import Header

    label = discs(48, 64, 2)
    header = Header(frame_id='camera')
    header.stamp.sec, header.stamp.nanosec = 12, 345
    msg = mc.mask_msg(label, header)
    assert msg.header.frame_id == 'camera' and msg.header.stamp.nanosec == 345
    assert msg.format == 'mono8; png compressed ' and 'png' in msg.format
    out = cv2.imdecode(np.frombuffer(msg.data, np.uint8), cv2.IMREAD_UNCHANGED)
    np.testing.assert_array_equal(out, label)


def test_not_a_label_mask_is_refused():
    for bad in (np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4), np.uint16), np.zeros(4, np.uint8)):
        with pytest.raises(ValueError, match=r'\[H, W\] uint8'):
            mc.encode_label_png(bad)
