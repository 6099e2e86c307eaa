"""Outgoing messages without DDS: results onto TrackingState, the label mask onto a mono8
image, and images built with one copy of their pixels."""

import numpy as np

from ros_helpers import require_messages

from sam2_ros.ros import images, messages
from sam2_ros.engine.types import LOST, OCCLUDED, TRACKING, FrameResult, ObjectResult


def _result():
    m1 = np.zeros((4, 5), bool)
    m1[1:3, 1:4] = True
    m2 = np.zeros((4, 5), bool)
    m2[2:4, 3:5] = True
    objs = [ObjectResult(2, m2, 1.5, TRACKING, (3, 2, 4, 3), 4, (3.5, 2.5), 3),
            ObjectResult(1, m1, -0.5, OCCLUDED, (1, 1, 3, 2), 6, (2.0, 1.5), 0),
            ObjectResult(7, np.zeros((4, 5), bool), -3.0, LOST, None, 0, None, 40)]
    return FrameResult(5, 4, 5, objs, mode='eager', engine_ms=12.5)


def test_tracking_state_msg():
    require_messages()
    from std_msgs.msg import Header

    h = Header(frame_id='cam')
    h.stamp.sec, h.stamp.nanosec = 12, 34
    msg = messages.tracking_state_msg(_result(), h, decode_ms=1.0, publish_ms=2.0, dropped=3,
                                  processed=9, errors=['e1'])
    assert msg.header.frame_id == 'cam' and (msg.header.stamp.sec, msg.header.stamp.nanosec) \
        == (12, 34)
    assert msg.frame_index == 5 and msg.engine_mode == 'eager' and msg.engine_ms == 12.5
    assert (msg.dropped_frames, msg.processed_frames, list(msg.errors)) == (3, 9, ['e1'])
    o1, o2, o7 = msg.objects
    assert [o.object_id for o in msg.objects] == [1, 2, 7]
    assert (o1.state, o2.state, o7.state) == (1, 0, 2)
    assert (o1.box.x_offset, o1.box.y_offset, o1.box.width, o1.box.height) == (1, 1, 3, 2)
    assert (o1.area, o1.frames_since_prompt, o1.centroid.x, o1.centroid.y) == (6, 0, 2.0, 1.5)
    assert (o7.area, o7.box.width, o7.centroid.x) == (0, 0, 0.0)


def test_tracking_state_carries_the_size_of_its_image():
    """The state says which image its boxes and centroids are in (positions_node checks a
    camera_info against it); a result without a frame (size 0x0) says 0: unknown."""
    require_messages()
    from std_msgs.msg import Header

    msg = messages.tracking_state_msg(_result(), Header(), decode_ms=0.0, publish_ms=0.0,
                                      dropped=0, processed=1, errors=[])
    assert (msg.width, msg.height) == (5, 4)
    no_frame = messages.tracking_state_msg(FrameResult(-1, 0, 0), Header(), decode_ms=0.0,
                                           publish_ms=0.0, dropped=0, processed=0, errors=[])
    assert (no_frame.width, no_frame.height, no_frame.frame_index) == (0, 0, 0)


def test_label_image_is_mono8_with_the_higher_id_on_overlaps():
    from std_msgs.msg import Header

    res = _result()
    h = Header(frame_id='cam')
    mask = images.image_msg(res.label_mask(), 'mono8', h)
    assert (mask.encoding, mask.step, mask.header.frame_id) == ('mono8', 5, 'cam')
    arr = np.frombuffer(bytes(mask.data), np.uint8).reshape(4, 5)
    assert set(np.unique(arr)) == {0, 1, 2} and arr[2, 3] == 2  # overlap: higher id wins


def test_image_msg_keeps_one_copy_of_the_pixels():
    """The message's data is the array.array built from the image (rclpy's setter keeps an
    array.array('B') as is); its bytes are the image's, row-major; a strided view is packed."""
    import array

    from std_msgs.msg import Header

    from sam2_ros.ros.images import image_data, image_msg

    img = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    data = image_data(img)
    assert isinstance(data, array.array) and data.typecode == 'B'
    assert bytes(data) == img.tobytes()
    msg = image_msg(img[:, ::2], 'rgb8', Header())      # not contiguous: packed first
    assert msg.step == 9 and bytes(msg.data) == np.ascontiguousarray(img[:, ::2]).tobytes()
    m = image_msg(img, 'rgb8', Header())
    d = m.data
    assert m.data is d and isinstance(d, array.array)   # no conversion on later reads
