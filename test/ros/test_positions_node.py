"""positions_node: 3D positions for a rig run as one tracker node per camera. The pairing of
the two trackers' states by stamp (pure Python), and the node over DDS as a user runs it: two
trackers' TrackingState messages and a rectified pair's camera_info in, the triangulated
centroid of every object visible in both out on ~/positions, counts on /diagnostics."""

import sys
import types

import numpy as np
import pytest

from ros_helpers import DomainLease, Proc, header, info_msg, require_messages, wait_until

import stereo_scenes as sc
from sam2_ros.ros.positions_node import StatePairs, centroids


WAIT = 1_000       # ns of receipt time a state waits for its partner


def test_states_pair_by_equal_stamps_whichever_camera_comes_first():
    p = StatePairs(WAIT)
    assert p.put(0, 100, 'L100', 0) == []
    assert p.put(1, 100, 'R100', 1) == [('L100', 'R100')]
    assert p.put(1, 200, 'R200', 2) == []
    assert p.put(0, 200, 'L200', 3) == [('L200', 'R200')]
    assert (p.paired, p.dropped) == (2, 0)


def test_a_state_without_partner_is_dropped_when_its_partner_came_later():
    p = StatePairs(WAIT)
    p.put(0, 100, 'L100', 0)                # right lost frame 100
    p.put(0, 200, 'L200', 1)
    assert p.put(1, 200, 'R200', 2) == [('L200', 'R200')]
    assert p.dropped == 1 and not p.pairer.pending(0)


def test_tolerance_pairs_close_stamps_and_depth_bounds_what_waits():
    p = StatePairs(WAIT, tolerance_ns=10, depth=2)
    p.put(0, 100, 'L100', 0)
    assert p.put(1, 106, 'R106', 1) == [('L100', 'R106')]
    for t in (300, 400, 500):                               # the right camera stopped
        p.put(0, t, f'L{t}', 2)
    assert p.pairer.pending(0) == 2 and p.dropped == 1
    p.put(0, 600, 'L600', WAIT + 10)                        # those two waited too long
    assert p.pairer.pending(0) == 1 and p.dropped == 3      # L600 itself still waits
    with pytest.raises(ValueError):
        StatePairs(WAIT, tolerance_ns=-1)


def test_a_stamp_going_back_resets_the_pairing():
    p = StatePairs(WAIT)
    p.put(0, 500, 'L500', 0)
    assert p.put(0, 100, 'L100', 1) == []                   # a bag restarted
    assert p.put(1, 100, 'R100', 2) == [('L100', 'R100')]
    assert p.dropped == 1


def test_centroids_hide_objects_not_visible():
    obj = lambda i, x, score, area: types.SimpleNamespace(  # noqa: E731
        object_id=i, score=score, area=area, centroid=types.SimpleNamespace(x=x, y=2.0))
    state = types.SimpleNamespace(objects=[obj(1, 5.0, 3.0, 10), obj(2, 6.0, -1.0, 10),
                                           obj(3, 7.0, 2.0, 0)])
    assert centroids(state) == {1: (5.0, 2.0), 2: None, 3: None}


def state_msg(stamp_ns, objects):
    """A TrackingState stamped ``stamp_ns`` with (id, centroid x, y, score) objects."""
    from sam2_ros.ros import messages

    m = messages.interfaces()
    msg = m.TrackingState(header=header(stamp_ns))
    for i, x, y, score in objects:
        o = m.ObjectState(object_id=i, score=score, area=100)
        o.centroid.x, o.centroid.y = float(x), float(y)
        msg.objects.append(o)
    return msg


def test_positions_node_triangulates_objects_seen_by_both_trackers(tmp_path):
    require_messages()
    pytest.importorskip('vision_msgs.msg', reason='vision_msgs is not installed')
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import CameraInfo
    from vision_msgs.msg import Detection3DArray

    from sam2_ros.ros import messages
    from sam2_ros.ros.publishers import OUTPUT_QOS
    calib = sc.rectified_pair(baseline=0.06)
    point = np.array([0.02, -0.01, 0.5])                # metres, the left camera's frame
    ul = calib.left.P @ np.append(point, 1.0)
    ur = calib.right.P @ np.append(point, 1.0)
    (xl, yl), (xr, yr) = ul[:2] / ul[2], ur[:2] / ur[2]
    lease = DomainLease()
    proc = Proc([sys.executable, '-m', 'sam2_ros.ros.positions_node', '--ros-args', '-p',
                 'rectified:=true', '-p', 'diagnostics_period_s:=0.2'], lease.env(),
                tmp_path / 'positions.log')
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=lease.domain_id)
    node = rclpy.create_node('positions_test_client', context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    got, diags = [], []
    try:
        state_t = messages.interfaces().TrackingState
        pubs = [node.create_publisher(state_t, f'/{n}/sam2_tracker/state', OUTPUT_QOS)
                for n in ('left', 'right')]
        infos = [node.create_publisher(CameraInfo, f'/{n}/camera_info', 100)
                 for n in ('left', 'right')]
        node.create_subscription(Detection3DArray, '/sam2_positions/positions', got.append,
                                 OUTPUT_QOS)
        node.create_subscription(DiagnosticArray, '/diagnostics', diags.append, 10)

        def spin_until(pred, what, timeout=60.0):
            def step():
                ex.spin_once(timeout_sec=0.05)
                return pred()
            return wait_until(step, timeout, what)
        spin_until(lambda: all(p.get_subscription_count() for p in pubs + infos),
                   'the positions node to subscribe')
        pubs[0].publish(state_msg(1_000, [(1, xl, yl, 2.0)]))     # before camera_info:
        pubs[1].publish(state_msg(1_000, [(1, xr, yr, 2.0)]))     # paired, not published
        # camera_info only once the node has the pair: topics are not ordered among each
        # other, and a state re-sent after late discovery could otherwise arrive after it
        spin_until(lambda: any(kv.key == 'pairs_before_camera_info' and kv.value == '1'
                               for d in diags for s in d.status for kv in s.values),
                   'diagnostics: the pair before camera_info')
        for pub, cam in zip(infos, (calib.left, calib.right)):
            pub.publish(info_msg(cam))
        # and the next states only once it is calibrated (its diagnostics say 'ok')
        spin_until(lambda: any(s.message == 'ok' for d in diags for s in d.status),
                   'diagnostics: the pair calibrated')
        # frame 2000: object 1 in both, 2 only on the left, 3 hidden on the right
        pubs[1].publish(state_msg(2_000, [(1, xr, yr, 2.0), (3, xr, yr, -4.0)]))
        pubs[0].publish(state_msg(2_000, [(1, xl, yl, 2.0), (2, 30.0, 40.0, 1.0),
                                          (3, xl, yl, 1.0)]))
        spin_until(lambda: got, 'a positions message')
        msg = got[0]
        assert msg.header.stamp.nanosec == 2_000 and msg.header.frame_id == 'left_optical'
        assert [d.id for d in msg.detections] == ['1']
        p = msg.detections[0].bbox.center.position
        np.testing.assert_allclose([p.x, p.y, p.z], point, atol=1e-6)
    finally:
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        proc.stop()
        lease.release()
