"""Raw images read from their serialized form (sam2_ros/ros/image_cdr.py, the node's
take_serialized_images): every field as rclpy's own deserialization gives it, the pixels a
view of the buffer, and a clear error for what is not an Image."""

import numpy as np
import pytest

from sam2_ros.ros.image_cdr import image_from_cdr


def serialized(frame_id='cam', h=3, w=5, encoding='rgb8', step_pad=0, big=0, sec=7, nsec=11):
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image

    m = Image()
    m.header.stamp.sec, m.header.stamp.nanosec, m.header.frame_id = sec, nsec, frame_id
    ch = 1 if encoding == 'mono8' else 3
    m.height, m.width, m.encoding, m.is_bigendian = h, w, encoding, big
    m.step = w * ch + step_pad
    m.data = bytes((np.arange(h * m.step) % 251).astype(np.uint8))
    return m, serialize_message(m)


@pytest.mark.parametrize('frame_id', ['', 'c', 'ca', 'cam', 'left_optical_frame'])
@pytest.mark.parametrize('encoding,step_pad,big', [('rgb8', 0, 0), ('bgr8', 3, 1),
                                                   ('mono8', 1, 0), ('bgra8', 0, 0)])
def test_fields_equal_rclpys_deserialization(frame_id, encoding, step_pad, big):
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image

    m, raw = serialized(frame_id, encoding=encoding, step_pad=step_pad, big=big)
    want = deserialize_message(raw, Image)
    got = image_from_cdr(raw)
    assert got.header == want.header == m.header
    assert (got.height, got.width, got.encoding, got.is_bigendian, got.step) == \
        (want.height, want.width, want.encoding, want.is_bigendian, want.step)
    assert bytes(got.data) == bytes(want.data)
    assert isinstance(got.data, memoryview)          # a view of the buffer, not a copy


def test_the_node_reads_a_serialized_frame_as_it_reads_a_message():
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image

    from cv_bridge import CvBridge

    from sam2_ros.ros.images import image_to_rgb
    bridge = CvBridge()
    for enc, pad in (('rgb8', 0), ('bgr8', 6), ('mono8', 0)):
        _, raw = serialized(h=4, w=6, encoding=enc, step_pad=pad)
        np.testing.assert_array_equal(image_to_rgb(image_from_cdr(raw), bridge),
                                      image_to_rgb(deserialize_message(raw, Image), bridge))


def test_what_is_not_a_little_endian_image_is_refused():
    _, raw = serialized()
    for bad, what in [(raw[:30], 'truncated'), (raw[:-1], 'truncated'),
                      (b'\x00\x00' + raw[2:], 'little-endian'), (b'', 'little-endian')]:
        with pytest.raises(ValueError, match=what):
            image_from_cdr(bad)


@pytest.mark.parametrize('frame_id', ['', 'c', 'ca', 'cam', 'left_optical_frame'])
@pytest.mark.parametrize('encoding,shape', [('mono8', (3, 5)), ('rgb8', (4, 7, 3)),
                                            ('mono8', (720, 1280))])
def test_written_image_reads_back_as_rclpys_message(frame_id, encoding, shape):
    """image_to_cdr (what the node publishes as bytes) deserializes to the message rclpy would
    have serialized, of the same length (only padding bytes may differ: Fast CDR leaves
    them unset)."""
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import Image

    from sam2_ros.ros.image_cdr import image_to_cdr, ros_header
    from sam2_ros.ros.images import image_msg

    img = (np.arange(int(np.prod(shape))) % 253).astype(np.uint8).reshape(shape)
    header = ros_header(1_700_000_123, 999_999_999, frame_id)
    want = image_msg(img, encoding, header)
    raw = image_to_cdr(img, encoding, header)
    assert isinstance(raw, bytes)                     # what Publisher.publish takes as raw
    assert len(raw) == len(serialize_message(want))
    assert deserialize_message(raw, Image) == want
    back = image_from_cdr(raw)
    assert np.array_equal(np.frombuffer(back.data, np.uint8).reshape(shape), img)


def test_written_image_refuses_what_is_not_an_image():
    from sam2_ros.ros.image_cdr import image_to_cdr, ros_header

    with pytest.raises(ValueError, match='image'):
        image_to_cdr(np.zeros((2, 3, 4, 5), np.uint8), 'rgb8', ros_header(0, 0, ''))
