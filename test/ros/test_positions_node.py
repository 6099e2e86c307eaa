"""positions_node: 3D positions for a rig run as one tracker node per camera. The pairing of
the two trackers' states by stamp (pure Python), and the node over DDS as a user runs it: two
trackers' TrackingState messages and a rectified pair's camera_info in, the triangulated
centroid of every object visible in both out on ~/positions, counts on /diagnostics."""

import contextlib
import sys
import types

import numpy as np
import pytest

from ros_helpers import DomainLease, Proc, header, info_msg, require_messages, wait_until

import stereo_scenes as sc
from sam2_ros import stereo
from sam2_ros.ros.positions import PairCalibration
from sam2_ros.ros.positions_node import StatePairs, StatePositions, views


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


def test_views_hide_objects_not_visible_and_mark_those_at_the_border():
    ns = types.SimpleNamespace

    def obj(i, x, score, area, box=(3, 1, 5, 3)):
        return ns(object_id=i, score=score, area=area, centroid=ns(x=x, y=2.0), box=ns(
            x_offset=box[0], y_offset=box[1], width=box[2], height=box[3]))
    state = ns(width=20, height=10, objects=[
        obj(1, 5.0, 3.0, 10), obj(2, 6.0, -1.0, 10), obj(3, 7.0, 2.0, 0, (0, 0, 0, 0)),
        obj(4, 2.0, 2.0, 10, (0, 1, 5, 3)), obj(5, 17.0, 2.0, 10, (15, 1, 5, 3))])
    got = {i: (v.centroid, v.score, v.box, v.clipped) for i, v in views(state).items()}
    assert got == {1: ((5.0, 2.0), 3.0, (3, 1, 7, 3), False), 2: (None, -1.0, (3, 1, 7, 3), False),
                   3: (None, 2.0, None, False), 4: ((2.0, 2.0), 2.0, (0, 1, 4, 3), True),
                   5: ((17.0, 2.0), 2.0, (15, 1, 19, 3), True)}


def positions_core(calib, logged):
    opts = types.SimpleNamespace(wait_ns=WAIT, tolerance_ns=0, pair_depth=30, rectified=True,
                                 limits=stereo.Limits(), allow_clipped=False)
    return StatePositions(opts, calib, lambda t: logged.append(('warn', t)),
                          lambda t: logged.append(('info', t)),
                          lambda t: logged.append(('error', t)))


def bare_state(stamp_ns):
    ns = types.SimpleNamespace
    return ns(header=ns(stamp=ns(sec=0, nanosec=stamp_ns)), width=0, height=0, objects=[])


def test_pairs_before_camera_info_are_counted_and_the_status_waits_for_it():
    logged = []
    core = positions_core(PairCalibration(rectified=True), logged)
    assert core.take(0, bare_state(100), 0) == []
    assert core.take(1, bare_state(100), 1) == []           # paired, but no calibration yet
    ok, message, values = core.status()
    assert (ok, message) == (False, 'waiting for camera_info of both')
    assert dict(values)['pairs_before_camera_info'] == '1' and dict(values)['pairs'] == '1'
    assert logged == []


def test_a_pair_that_fails_is_counted_logged_and_the_next_pair_still_runs():
    class Flaky:
        """A calibration whose first read fails (a corrupt camera_info, say)."""
        error = ''

        def __init__(self):
            self.reads = 0

        def calibration(self):
            self.reads += 1
            if self.reads == 1:
                raise RuntimeError('broken calibration')
            return None
    logged = []
    core = positions_core(Flaky(), logged)
    core.take(0, bare_state(100), 0)
    assert core.take(1, bare_state(100), 1) == []
    assert core.failed == 1
    assert logged == [('error', "positions of a pair failed: RuntimeError('broken "
                                "calibration')")]
    core.take(0, bare_state(200), 2)
    core.take(1, bare_state(200), 3)
    assert (core.failed, core.waiting) == (1, 1)


def state_msg(stamp_ns, objects, size=(sc.W, sc.H)):
    """A TrackingState stamped ``stamp_ns`` of a ``size`` (width, height) image with (id,
    centroid x, y, score[, box x_offset]) objects: a 10x10 box around the centroid, or from
    x_offset (0: at the left border) to it."""
    from sam2_ros.ros import messages

    m = messages.interfaces()
    msg = m.TrackingState(header=header(stamp_ns), width=size[0], height=size[1])
    for i, x, y, score, *x0 in objects:
        o = m.ObjectState(object_id=i, score=score, area=100)
        o.centroid.x, o.centroid.y = float(x), float(y)
        left = x0[0] if x0 else int(x) - 5
        o.box.x_offset, o.box.y_offset = left, int(y) - 5
        o.box.width, o.box.height = int(x) + 5 - left, 10
        msg.objects.append(o)
    return msg


POINT = np.array([0.02, -0.01, 0.5])                # metres, the left camera's frame
CAMERA_INFO = ('/left/camera_info', '/right/camera_info')   # the node's defaults


@pytest.fixture
def rig(tmp_path):
    with positions_rig(tmp_path) as r:
        yield r


@contextlib.contextmanager
def positions_rig(tmp_path, params=(), camera_info=CAMERA_INFO):
    """positions_node (rectified, and ``params``: 'name:=value') and a client with the two
    trackers' state publishers (``pubs``), camera_info publishers on ``camera_info``
    (``infos``), what arrives on ~/positions (``got``) and /diagnostics (``diags``),
    ``spin_until`` and the calibration's pixels of POINT (``left``, ``right``)."""
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
    ul = calib.left.P @ np.append(POINT, 1.0)
    ur = calib.right.P @ np.append(POINT, 1.0)
    lease = DomainLease()
    # pair_wait_ms as the docs write it, an integer for a float parameter (it crashed the node)
    given = [a for p in ('rectified:=true', 'diagnostics_period_s:=0.2', 'pair_wait_ms:=300',
                         *params) for a in ('-p', p)]
    proc = Proc([sys.executable, '-m', 'sam2_ros.ros.positions_node', '--ros-args', *given],
                lease.env(), tmp_path / 'positions.log')
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
        infos = [node.create_publisher(CameraInfo, t, 100) for t in camera_info]
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
        yield types.SimpleNamespace(
            node=node, calib=calib, proc=proc, pubs=pubs, infos=infos, got=got, diags=diags,
            spin_until=spin_until, left=tuple(ul[:2] / ul[2]), right=tuple(ur[:2] / ur[2]))
    finally:
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        proc.stop()
        lease.release()


def diag_value(diags, key):
    """Every value of ``key`` in the diagnostics received so far."""
    return [kv.value for d in diags for s in d.status for kv in s.values if kv.key == key]


def calibrate(rig):
    """Send both camera_info until the node is calibrated (its diagnostics: 'ok'): again and
    again as a driver does, as the node takes them best effort."""
    def sent():
        for pub, cam in zip(rig.infos, (rig.calib.left, rig.calib.right)):
            pub.publish(info_msg(cam))
        return any(s.message == 'ok' for d in rig.diags for s in d.status)
    rig.spin_until(sent, 'diagnostics: the pair calibrated')


def test_positions_node_triangulates_objects_seen_by_both_trackers(rig):
    (xl, yl), (xr, yr) = rig.left, rig.right
    rig.pubs[0].publish(state_msg(1_000, [(1, xl, yl, 2.0)]))     # before camera_info:
    rig.pubs[1].publish(state_msg(1_000, [(1, xr, yr, 2.0)]))     # paired, not published
    # camera_info only once the node has the pair: topics are not ordered among each
    # other, and a state re-sent after late discovery could otherwise arrive after it
    rig.spin_until(lambda: '1' in diag_value(rig.diags, 'pairs_before_camera_info'),
                   'diagnostics: the pair before camera_info')
    # and the next states only once it is calibrated
    calibrate(rig)
    # frame 2000: object 1 in both, 2 only on the left, 3 hidden on the right, 4 as 1 but its
    # left mask reaching the left border (cut off)
    rig.pubs[1].publish(state_msg(2_000, [(1, xr, yr, 2.0), (3, xr, yr, -4.0),
                                          (4, xr, yr, 2.0)]))
    rig.pubs[0].publish(state_msg(2_000, [(1, xl, yl, 2.0), (2, 30.0, 40.0, 1.0),
                                          (3, xl, yl, 1.0), (4, xl, yl, 2.0, 0)]))
    rig.spin_until(lambda: rig.got, 'a positions message')
    msg = rig.got[0]
    assert msg.header.stamp.nanosec == 2_000 and msg.header.frame_id == 'left_optical'
    assert [d.id for d in msg.detections] == ['1']
    d = msg.detections[0]
    p = d.bbox.center.position
    np.testing.assert_allclose([p.x, p.y, p.z], POINT, atol=1e-6)
    # what RViz's plugin reads: results[0], and a box of the mask's 10 px at the point's depth
    assert [r.hypothesis.class_id for r in d.results] == ['1']
    np.testing.assert_allclose([d.bbox.size.x, d.bbox.size.y], 10 * POINT[2] / sc.F)
    from sam2_ros.ros.positions import CLIPPED_LEFT, NOT_TRACKED_RIGHT
    want = {'position_1': 'valid', 'position_2': f'invalid: {NOT_TRACKED_RIGHT}',
            'position_3': f'invalid: {stereo.NOT_VISIBLE_RIGHT}',
            'position_4': f'invalid: {CLIPPED_LEFT}'}
    rig.spin_until(lambda: all(v in diag_value(rig.diags, k) for k, v in want.items()),
                   'diagnostics: the reasons of the invalid positions')


def test_camera_info_published_best_effort_calibrates_the_node(rig):
    """A driver publishing camera_info with the sensor-data QoS (best effort, common): the
    node subscribed it reliable, never connected to it, and published no position at all."""
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo

    rig.infos = [rig.node.create_publisher(CameraInfo, f'/{n}/camera_info',
                                           qos_profile_sensor_data) for n in ('left', 'right')]
    rig.spin_until(lambda: all(p.get_subscription_count() for p in rig.infos),
                   'the node to subscribe the best-effort camera_info')
    calibrate(rig)
    (xl, yl), (xr, yr) = rig.left, rig.right
    rig.pubs[0].publish(state_msg(2_000, [(1, xl, yl, 2.0)]))
    rig.pubs[1].publish(state_msg(2_000, [(1, xr, yr, 2.0)]))
    rig.spin_until(lambda: rig.got, 'a positions message')
    assert [d.id for d in rig.got[0].detections] == ['1']


def test_positions_node_publishes_nothing_for_images_of_another_size_than_camera_info(rig):
    """A state carries its image's size: camera_info calibrated for other images would give
    wrong positions, so that pair gets none and the diagnostics say why (as a tracker node
    serving both cameras does); a matching size, or 0 (a tracker that does not fill it), is
    triangulated."""
    (xl, yl), (xr, yr) = rig.left, rig.right
    calibrate(rig)
    wide = (sc.W * 2, sc.H)
    for stamp in (2_000, 2_500):
        rig.pubs[0].publish(state_msg(stamp, [(1, xl, yl, 2.0)], size=wide))
        rig.pubs[1].publish(state_msg(stamp, [(1, xr, yr, 2.0)]))
    reason = (f'off (camera_info: the left camera_info is for {sc.W}x{sc.H} images, the '
              f'images are {sc.W * 2}x{sc.H})')
    rig.spin_until(lambda: '2' in diag_value(rig.diags, 'pairs_size_mismatch'),
                   'diagnostics: both pairs refused')
    refused = [s for d in rig.diags for s in d.status if s.message == reason]
    assert refused and refused[-1].level == refused[-1].WARN
    rig.proc.wait_log(r'positions off: the left camera_info is for', 30)
    for stamp, size in ((3_000, (sc.W, sc.H)), (4_000, (0, 0))):
        rig.pubs[0].publish(state_msg(stamp, [(1, xl, yl, 2.0)], size=size))
        rig.pubs[1].publish(state_msg(stamp, [(1, xr, yr, 2.0)], size=size))
    rig.spin_until(lambda: len(rig.got) >= 2, 'the positions of the next two pairs')
    # one publisher, reliable and in order: a position of a refused pair would have come first
    assert [m.header.stamp.nanosec for m in rig.got] == [3_000, 4_000]
    for msg in rig.got:
        assert [d.id for d in msg.detections] == ['1']
        p = msg.detections[0].bbox.center.position
        np.testing.assert_allclose([p.x, p.y, p.z], POINT, atol=1e-6)
    rig.spin_until(lambda: rig.diags[-1].status[0].message == 'ok', 'diagnostics: ok again')
    assert diag_value(rig.diags, 'pairs_size_mismatch')[-1] == '2'
    assert rig.proc.log().count(']: positions off:') == 1      # once per change, not per pair


def test_camera_info_of_configured_topics_and_one_id_on_two_objects_out_of_depth(tmp_path):
    """A driver publishing camera_info elsewhere than /<ns>/camera_info (its stereo namespace,
    or a calibration topic of its own): left_camera_info and right_camera_info (the node waited
    on /left/camera_info forever). With the scene's depth range, one id on two objects at one
    height (same row: the row check passes) is invalid, saying why; the right pairing stays."""
    topics = ('/stereo/left/camera_info', '/calib/right_info')
    params = (f'left_camera_info:={topics[0]}', f'right_camera_info:={topics[1]}',
              'min_depth:=0.3', 'max_depth:=2.0')
    with positions_rig(tmp_path, params, topics) as rig:
        rig.proc.wait_log(r'calibrated by /stereo/left/camera_info and /calib/right_info', 30)
        calibrate(rig)
        (xl, yl), (xr, yr) = rig.left, rig.right
        # another object on POINT's row, whose right centroid gives POINT's left one a
        # disparity of 150 px: 0.2 m away, nearer than min_depth
        other = rig.calib.right.P @ np.array([-0.096, -0.012, 0.6, 1.0])
        xo, yo = other[:2] / other[2]
        assert abs(yo - yr) < 1e-9 and abs((xl - xo) - 150) < 1e-6
        rig.pubs[0].publish(state_msg(2_000, [(1, xl, yl, 2.0), (2, xl, yl, 2.0)]))
        rig.pubs[1].publish(state_msg(2_000, [(1, xr, yr, 2.0), (2, xo, yo, 2.0)]))
        rig.spin_until(lambda: rig.got, 'a positions message')
        assert [d.id for d in rig.got[0].detections] == ['1']
        p = rig.got[0].detections[0].bbox.center.position
        np.testing.assert_allclose([p.x, p.y, p.z], POINT, atol=1e-6)
        want = {'position_1': 'valid', 'position_2': f'invalid: {stereo.TOO_NEAR}'}
        rig.spin_until(lambda: all(v in diag_value(rig.diags, k) for k, v in want.items()),
                       'diagnostics: object 2 too near')


def test_diagnostics_keep_coming_under_sim_time_while_clock_stands_still():
    """/diagnostics on a steady clock, as the tracker node's: under use_sim_time with no
    /clock (a bag paused or ended, a player holding) the node's ROS clock stands still, and a
    timer on it never fired, so a monitor saw silence (docs: the period is wall clock)."""
    require_messages()
    pytest.importorskip('vision_msgs.msg', reason='vision_msgs is not installed')
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.clock import ClockType
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from sam2_ros.ros.positions_node import make_node
    lease = DomainLease()
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=lease.domain_id)
    ex = SingleThreadedExecutor(context=ctx)
    try:
        node = make_node(context=ctx, parameter_overrides=[
            Parameter('use_sim_time', Parameter.Type.BOOL, True),
            Parameter('diagnostics_period_s', Parameter.Type.DOUBLE, 0.05)])
        assert node.get_clock().ros_time_is_active          # sim time, and nobody sends /clock
        assert node.timer.clock.clock_type == ClockType.STEADY_TIME
        client = rclpy.create_node('positions_sim_time_client', context=ctx)
        diags = []
        client.create_subscription(DiagnosticArray, '/diagnostics', diags.append, 10)
        ex.add_node(node)
        ex.add_node(client)

        def step():
            ex.spin_once(timeout_sec=0.05)
            return len(diags) >= 3
        # the bound only ends a broken run: a steady 50 ms timer publishes within it
        wait_until(step, 60.0, 'three diagnostics under use_sim_time without /clock')
        assert all(d.status[0].name == 'sam2_positions: positions' for d in diags)
    finally:
        ex.shutdown()
        rclpy.try_shutdown(context=ctx)
        lease.release()
