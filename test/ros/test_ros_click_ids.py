"""click_mode new hands out the lowest id no object uses now (issue 32, defect 1): ids of
removed objects, of a reset and of a released tracker (cleanup, configure) are free again; a
click refused for capacity takes no id and leaves click_object_id on an existing object."""

from __future__ import annotations

import pytest

from ros_helpers import Client, Lifecycle, frames, image_msg, prompt_msg, stamp, start_node

from sam2_ros.engine.errors import CapacityError
from sam2_ros.ros.click_ids import new_object_id
from sam2_ros.ros.inputs import ACTION_REMOVE, ACTION_RESET


def test_new_object_id_is_the_lowest_unused_and_refuses_at_capacity():
    assert new_object_id([], 4) == 1
    assert new_object_id([1, 2, 4], 8) == 3
    assert new_object_id([2, 3], 8) == 1          # a removed id 1 is free again
    with pytest.raises(CapacityError, match='max_objects=2'):
        new_object_id([1, 7], 2)
    with pytest.raises(CapacityError, match='all object ids'):
        new_object_id(range(1, 256), 256)


def test_held_add_prompts_are_in_use():
    """Ids of add prompts held for a future frame count as used; removes and detections not."""
    from sam2_ros.engine.types import Prompt
    from sam2_ros.ros.hold import DETECTIONS, Held, StampHold
    from sam2_ros.ros.inputs import ACTION_ADD
    from sam2_ros.ros.mailbox import PromptItem

    hold = StampHold(8)
    hold.hold(Held(PromptItem(None, 'click', 5), 'click', ACTION_ADD, Prompt(3)))
    hold.hold(Held(PromptItem(None, 'prompt', 5), 'prompt', ACTION_REMOVE, Prompt(4)))
    hold.hold(Held(PromptItem(None, DETECTIONS, 5), 'detections'))
    assert hold.object_ids() == [3]
    assert new_object_id(hold.object_ids(), 8) == 1
    assert new_object_id([1] + hold.object_ids(), 8) == 2


def get_param(c: Client, name: str):
    from rcl_interfaces.srv import GetParameters
    from rclpy.parameter import parameter_value_to_python

    from ros_helpers import wait_until

    cli = c.node.create_client(GetParameters, '/sam2_tracker/get_parameters')
    assert cli.wait_for_service(timeout_sec=30)
    fut = cli.call_async(GetParameters.Request(names=[name]))
    wait_until(fut.done, 30, f'get_parameters {name}')
    return parameter_value_to_python(fut.result().values[0])


def test_new_clicks_reuse_ids_after_remove_reset_and_reconfigure(tmp_path, lease):
    from geometry_msgs.msg import Point
    from lifecycle_msgs.msg import Transition
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from test_ros_clicks_and_reactivation import set_param
    from ros_helpers import wait_until

    proc = start_node(lease, tmp_path, 'click_ids', max_objects=2)
    c = Client(lease)
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    rqt = c.node.create_publisher(Point, '/sam2_tracker/overlay_mouse_left', qos)
    fr = frames(4)

    def ids(st):
        return [o.object_id for o in st.objects]

    def click(x, y, frame, count):
        """A Point click on the frame on screen; its re-published state (the count-th)."""
        rqt.publish(Point(x=float(x), y=float(y), z=0.0))
        return c.wait_state(stamp(frame), 60, count=count)

    try:
        c.wait_connected(120)
        wait_until(lambda: rqt.get_subscription_count() > 0, 30, 'Point click subscription')
        assert set_param(c, 'click_mode', 'new').successful
        c.pub_image.publish(image_msg(fr[0], stamp(0)))
        c.wait_state(stamp(0), 60)
        assert ids(click(30, 40, 0, 2)) == [1]
        assert ids(click(120, 60, 0, 3)) == [1, 2]
        # max_objects 2 reached: refused, no id taken, click_object_id stays on object 2
        rqt.publish(Point(x=80.0, y=20.0, z=0.0))
        proc.wait_log(r'click_mode new: 2 objects are tracked or starting, max_objects=2', 60)
        assert get_param(c, 'click_object_id') == 2
        # object 1 removed (held for frame 1): the next new click gets 1 again, not 3
        c.send_prompts(prompt_msg(1, stamp(1), action=ACTION_REMOVE))
        c.pub_image.publish(image_msg(fr[1], stamp(1)))
        assert ids(c.wait_state(stamp(1), 60)) == [2]
        assert ids(click(30, 40, 1, 2)) == [1, 2]
        assert get_param(c, 'click_object_id') == 1
        # after a reset the next new click gets the lowest id, 1
        c.send_prompts(prompt_msg(0, stamp(2), action=ACTION_RESET))
        c.pub_image.publish(image_msg(fr[2], stamp(2)))
        assert ids(c.wait_state(stamp(2), 60)) == []
        assert ids(click(120, 60, 2, 2)) == [1]
        # deactivate, cleanup, configure, activate: a new tracker, every id free
        lc = Lifecycle(c)
        for t in (Transition.TRANSITION_DEACTIVATE, Transition.TRANSITION_CLEANUP,
                  Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            assert lc.transition(t), t
        c.wait_connected(60)
        c.pub_image.publish(image_msg(fr[3], stamp(3)))
        assert ids(c.wait_state(stamp(3), 60)) == []
        assert ids(click(30, 40, 3, 2)) == [1]
        assert ids(click(120, 60, 3, 3)) == [1, 2]
    finally:
        c.close()
        proc.stop()
