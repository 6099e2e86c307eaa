"""The generated messages (msg/*.msg): import, constants, fields, CDR round trip; and the light
top-level package (sam2_ros.engine.config must not drag in rclpy or torch)."""

import os
import subprocess
import sys


from rclpy.serialization import deserialize_message, serialize_message

from sam2_ros.ros import inputs
from sam2_ros.msg import ObjectState, Prompt, TrackingState


def fields(cls):
    return dict(cls.get_fields_and_field_types())


def test_prompt_constants_and_fields():
    assert (Prompt.ACTION_ADD, Prompt.ACTION_REMOVE, Prompt.ACTION_RESET) == (0, 1, 2)
    assert (inputs.ACTION_ADD, inputs.ACTION_REMOVE, inputs.ACTION_RESET) == (0, 1, 2)
    assert fields(Prompt) == {
        'header': 'std_msgs/Header',
        'object_id': 'uint16',
        'action': 'uint8',
        'points': 'sequence<geometry_msgs/Point32>',
        'labels': 'sequence<int8>',
        'has_box': 'boolean',
        'box': 'float[4]',
        'mask': 'sensor_msgs/Image',
    }


def test_object_state_constants_and_fields():
    states = (ObjectState.STATE_TRACKING, ObjectState.STATE_OCCLUDED, ObjectState.STATE_LOST)
    assert states == (0, 1, 2)
    assert fields(ObjectState) == {
        'object_id': 'uint16',
        'state': 'uint8',
        'score': 'float',
        'box': 'sensor_msgs/RegionOfInterest',
        'centroid': 'geometry_msgs/Point',
        'area': 'uint32',
        'frames_since_prompt': 'uint32',
    }


def test_tracking_state_fields():
    assert fields(TrackingState) == {
        'header': 'std_msgs/Header',
        'height': 'uint32',
        'width': 'uint32',
        'frame_index': 'uint64',
        'objects': 'sequence<sam2_ros/ObjectState>',
        'decode_ms': 'float',
        'engine_ms': 'float',
        'publish_ms': 'float',
        'engine_mode': 'string',
        'dropped_frames': 'uint64',
        'processed_frames': 'uint64',
        'errors': 'sequence<string>',
    }


def roundtrip(m):
    data = serialize_message(m)
    assert isinstance(data, bytes) and data
    return deserialize_message(data, type(m))


def test_prompt_message_serializes_and_deserializes_unchanged():
    from geometry_msgs.msg import Point32

    p = Prompt(object_id=7, action=Prompt.ACTION_ADD, has_box=True)
    p.header.stamp.sec, p.header.stamp.nanosec, p.header.frame_id = 12, 345, 'cam'
    p.points = [Point32(x=10.5, y=20.0), Point32(x=3.0, y=4.0)]
    p.labels = [1, 0]
    p.box = [1.0, 2.0, 30.0, 40.0]
    p.mask.height, p.mask.width, p.mask.step, p.mask.encoding = 2, 3, 3, 'mono8'
    p.mask.data = bytes([0, 255, 0, 255, 255, 0])
    q = roundtrip(p)
    assert q == p
    assert [(pt.x, pt.y) for pt in q.points] == [(10.5, 20.0), (3.0, 4.0)]
    assert list(q.labels) == [1, 0] and list(q.box) == [1.0, 2.0, 30.0, 40.0]
    assert bytes(q.mask.data) == bytes([0, 255, 0, 255, 255, 0])


def test_empty_prompt_defaults():
    p = Prompt()
    assert p.action == Prompt.ACTION_ADD and p.object_id == 0 and not p.has_box
    assert len(p.points) == 0 and len(p.labels) == 0 and p.mask.width == 0
    assert roundtrip(p) == p
    r = Prompt(action=Prompt.ACTION_RESET)
    assert roundtrip(r).action == Prompt.ACTION_RESET


def test_tracking_state_roundtrip():
    o = ObjectState(object_id=3, state=ObjectState.STATE_OCCLUDED, score=-1.25, area=1234,
                    frames_since_prompt=17)
    o.box.x_offset, o.box.y_offset, o.box.width, o.box.height = 5, 6, 70, 80
    o.centroid.x, o.centroid.y = 40.0, 46.0
    s = TrackingState(height=720, width=1280, frame_index=2**40,
                      objects=[o, ObjectState(object_id=255)], decode_ms=1.5, engine_ms=20.25,
                      publish_ms=0.5, engine_mode='graph', dropped_frames=3,
                      processed_frames=2**40 + 1, errors=['bad prompt: object_id 0'])
    s.header.frame_id = 'cam'
    t = roundtrip(s)
    assert t == s
    assert [x.object_id for x in t.objects] == [3, 255]
    assert t.objects[0].state == ObjectState.STATE_OCCLUDED and t.objects[0].box.width == 70
    assert t.engine_mode == 'graph' and list(t.errors) == ['bad prompt: object_id 0']
    assert (t.width, t.height) == (1280, 720)


def test_config_import_is_light():
    code = ('import sys, sam2_ros, sam2_ros.engine.config\n'
            'heavy = sorted(m for m in ("rclpy", "torch", "sam2", "sam2_ros.msg")\n'
            '               if m in sys.modules)\n'
            'print(",".join(heavy))\n')
    out = subprocess.run([sys.executable, '-c', code], cwd='/', capture_output=True, text=True,
                         env=dict(os.environ), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == '', 'sam2_ros.engine.config imported: ' + out.stdout


def test_msg_resolves_from_anywhere():
    code = ('import sam2_ros.engine.config, sam2_ros.msg; '
            'from sam2_ros.msg import Prompt, TrackingState')
    out = subprocess.run([sys.executable, '-c', code], cwd='/', capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
