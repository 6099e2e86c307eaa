"""sam2_ros/ros/rcl_publish.py: serialized messages published through rcl with the GIL
released arrive as the same bytes rclpy's publish sends; an inactive lifecycle publisher, a
message object, or a process without librcl goes through rclpy; a failed rcl call raises."""

import time
import numpy as np
import pytest

from ros_helpers import require_messages

from sam2_ros.ros import rcl_publish


class Handle:
    pointer = 1234                 # the rcl_publisher_t* rclpy's handle names

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FakePub:
    def __init__(self, activated=True):
        self.is_activated = activated
        self.sent = []
        self.topic_name = '/fake'
        self.handle = Handle()

    def publish(self, msg):
        self.sent.append(msg)


def test_librcl_is_found_once_rclpy_is_loaded():
    import rclpy  # noqa: F401 - loads librcl

    path = rcl_publish.librcl_path()
    assert path is not None and 'librcl.so' in path
    assert rcl_publish.rcl_publish_function(path) is not None


def test_bytes_arrive_unchanged_through_rcl():
    require_messages()
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        node = rclpy.create_node('rcl_publish_test', context=ctx)
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        pub = node.create_publisher(Image, '/rcl_publish_test', qos)
        got = []
        node.create_subscription(Image, '/rcl_publish_test', got.append, qos, raw=True)
        msg = Image(height=48, width=64, encoding='mono8', step=64)
        msg.data = np.random.default_rng(0).integers(0, 255, 48 * 64, np.uint8).tobytes()
        raw = serialize_message(msg)
        gil_free = rcl_publish.GilFreePublish()
        assert gil_free.available
        from rclpy.executors import SingleThreadedExecutor

        ex = SingleThreadedExecutor(context=ctx)
        ex.add_node(node)
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:     # until discovery has matched
            gil_free.send(pub, raw)
            ex.spin_once(timeout_sec=0.1)
        assert got and got[0] == raw and gil_free.calls >= 1
        ex.shutdown()
        node.destroy_node()
    finally:
        rclpy.shutdown(context=ctx)


def test_inactive_publisher_objects_and_no_librcl_go_through_rclpy():
    calls = []
    gil_free = rcl_publish.GilFreePublish(fn=lambda *a: calls.append(a) or 0)
    inactive = FakePub(activated=False)
    gil_free.send(inactive, b'abc')
    assert inactive.sent == [b'abc'] and calls == []      # rclpy's publish decides (drops)
    active = FakePub()
    msg = object()
    gil_free.send(active, msg)                              # a message, not bytes
    assert active.sent == [msg] and calls == []
    gil_free.send(active, b'abcd')
    assert len(calls) == 1 and calls[0][0] == 1234 and gil_free.calls == 1
    assert active.sent == [msg]
    none = rcl_publish.GilFreePublish()
    none.fn = None                                          # no librcl in this process
    pub = FakePub()
    none.send(pub, b'x')
    assert pub.sent == [b'x']


def test_a_failed_rcl_call_raises_naming_the_topic():
    pub = FakePub()
    gil_free = rcl_publish.GilFreePublish(fn=lambda *a: 1)
    with pytest.raises(RuntimeError, match='/fake'):
        gil_free.send(pub, b'abc')


def test_sender_is_rclpys_when_off_or_unavailable(monkeypatch):
    pub = FakePub()
    rcl_publish.sender(False)(pub, b'a')
    monkeypatch.setattr(rcl_publish, 'rcl_publish_function', lambda path=None: None)
    rcl_publish.sender(True)(pub, b'b')
    assert pub.sent == [b'a', b'b']
