"""synthetic_camera: a camera without hardware. Its stereo geometry on the rendered arrays (the
right view's discs shifted left by their documented disparity; their triangulated centroids at
the documented depths), the node over DDS as a user runs it (frames and camera_info on the
topics the tracker launch files read, stamps of a pair equal, the node clock under
use_sim_time), its installation, and the bag_replay example's --save-bag."""

from __future__ import annotations

import contextlib
import re
import sys
import types

import numpy as np
import pytest

from ros_helpers import ROOT, DomainLease, Proc, require_messages, wait_until

from sam2_ros import stereo
from sam2_ros.ros import synthetic_camera as sc
from sam2_ros.synthetic import SyntheticCamera, center
from sam2_ros.synthetic_stereo import SyntheticStereo

W, H = 160, 120
COUNT = 10                     # messages each topic must deliver
TIMEOUT = 120.0                # generous: a loaded 2-core machine


def test_right_view_shows_each_disc_shifted_left_by_its_disparity():
    s = SyntheticStereo(640, 480)                  # the node's defaults
    # documented: fx = width, baseline 0.1 m, object 1 at 2 m, object 2 at 1 m: d = fx B / Z
    assert s.disparities.tolist() == [32, 64]
    np.testing.assert_allclose(s.depths, [2.0, 1.0])
    shift = np.array([[32, 0], [64, 0]])
    apart = 0
    for i in range(0, 600, 7):
        np.testing.assert_array_equal(s.right.centers(i), s.left.centers(i) - shift)
        left, right = s.pair(i)
        lm, rm = s.left.masks(i), s.right.masks(i)
        for k, d in zip((1, 2), s.disparities):
            assert not rm[k][:, -d:].any()                          # whole: never clipped
            assert (right[rm[k]] == s.left.colors[k - 1]).all()    # the same disc
        if all(m.sum() == s.left.disc.sum() for m in [*lm.values(), *rm.values()]):
            apart += 1                              # no disc covers another in either view
            for k, d in zip((1, 2), s.disparities):
                np.testing.assert_array_equal(rm[k][:, :-d], lm[k][:, d:])
        # the background is infinitely far: the same pixels where no disc is in either view
        free = ~np.logical_or.reduce([*lm.values(), *rm.values()])
        np.testing.assert_array_equal(right[free], left[free])
    assert apart > 50


def test_margins_narrow_where_a_disc_bounces_and_refuse_what_does_not_fit():
    free = SyntheticCamera(W, H, objects=1, starts=[(80, 60)], velocities=[(1, 0)],
                           margins=[(40, 0)])
    xs = [free.centers(i)[0, 0] for i in range(300)]
    assert min(xs) == free.r + 1 + 40 and max(xs) == W - free.r - 2
    with pytest.raises(ValueError, match='no room'):
        SyntheticCamera(W, H, objects=1, margins=[(W, 0)])
    with pytest.raises(ValueError, match='too far'):
        SyntheticStereo(W, H, depth_far=100.0)     # disparity under 1 px


def test_camera_info_pair_triangulates_the_discs_at_their_documented_depths():
    require_messages()
    from builtin_interfaces.msg import Time

    from sam2_ros.ros.stereo_msgs import calibration_from_msgs

    o = sc.build({'stereo': True, 'width': 320, 'height': 240, 'objects': 3})
    views = sc.Views(o)
    infos = [sc.camera_info(o, f, p, Time(sec=7)) for f, p in
             zip(views.frame_ids, views.projections)]
    calib = calibration_from_msgs(*infos)
    assert calib.is_rectified() and calib.baseline == pytest.approx(0.1)
    assert infos[1].p[3] == pytest.approx(-320 * 0.1)          # Tx = -fx * baseline
    assert [i.header.frame_id for i in infos] == ['left_camera_optical_frame',
                                                  'right_camera_optical_frame']
    s = views.scene
    np.testing.assert_allclose(s.depths, 32 / np.rint(32 / np.array([2.0, 1.5, 1.0])))
    for i in (0, 17, 40):
        lm, rm = s.left.masks(i), s.right.masks(i)
        for k in (1, 2, 3):
            if lm[k].sum() != s.left.disc.sum() or rm[k].sum() != s.left.disc.sum():
                continue                            # partly covered: centroid not the centre
            t = stereo.triangulate(calib, center(lm[k]), center(rm[k]))
            assert t.valid, t.reason
            np.testing.assert_allclose(t.point, s.points(i)[k - 1], atol=1e-9)
            assert t.point[2] == pytest.approx(s.depths[k - 1])


def test_bad_parameters_are_refused_with_their_name():
    for values, name in (({'rate': 0.0}, 'rate'), ({'objects': 0}, 'objects'),
                         ({'width': 'wide'}, 'width'), ({'stereo': 1}, 'stereo'),
                         ({'stereo': True, 'depth_near': 3.0}, 'depth_near'),
                         ({'width': 5}, 'scene')):
        with pytest.raises(sc.ParameterError, match=name):
            sc.build(values)
    assert sc.build({'rate': 15}).rate == 15.0      # an integer is a float's value


def test_synthetic_camera_is_installed_for_ros2_run_and_as_a_console_script():
    assert '"synthetic_camera=sam2_ros.ros.synthetic_camera"' in \
        (ROOT / 'CMakeLists.txt').read_text()
    assert "'sam2-ros-synthetic-camera=sam2_ros.ros.synthetic_camera:main'" in \
        (ROOT / 'setup.py').read_text()


# ----------------------------------------------------------------------------- over DDS

@contextlib.contextmanager
def listening(tmp_path, topics, cameras=((),)):
    """Synthetic camera processes (one per entry of ``cameras``: its extra arguments, after
    ``--ros-args``, at W x H and 20 Hz) and a client keeping every message of ``topics``
    ({topic: type}) in ``got[topic]``; ``spin_until`` and the client ``node``."""
    require_messages()
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    lease = DomainLease()
    procs = [Proc([sys.executable, '-m', 'sam2_ros.ros.synthetic_camera', '--ros-args',
                   '-p', f'width:={W}', '-p', f'height:={H}', '-p', 'rate:=20', *extra],
                  lease.env(), tmp_path / f'camera{n}.log') for n, extra in enumerate(cameras)]
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=lease.domain_id)
    node = rclpy.create_node('synthetic_camera_test_client', context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    got = {t: [] for t in topics}
    try:
        for topic, msg_type in topics.items():
            node.create_subscription(msg_type, topic, got[topic].append, 50)

        def spin_until(pred, what, timeout=TIMEOUT):
            def step():
                ex.spin_once(timeout_sec=0.05)
                return pred()
            return wait_until(step, timeout, what)
        yield types.SimpleNamespace(got=got, spin_until=spin_until, node=node, procs=procs)
    finally:
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        for p in procs:
            p.stop()
        lease.release()


def stamp(msg) -> int:
    return msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec


def rgb(msg) -> np.ndarray:
    assert (msg.encoding, msg.step) == ('rgb8', msg.width * 3)
    return np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3)


def frame_indices(images, frame, search=5000):
    """The index of each image's frame (``frame(i)`` the rendered frame i), in order."""
    out, i = [], 0
    for m in images:
        a = rgb(m)
        while not np.array_equal(a, frame(i)):
            i += 1
            assert i < search, 'an image that is no frame of the synthetic camera'
        out.append(i)
    return out


def test_camera_publishes_frames_and_camera_info_where_the_tracker_reads_them(tmp_path):
    require_messages()
    from sensor_msgs.msg import CameraInfo, Image

    topics = {'/camera/image_raw': Image, '/camera/camera_info': CameraInfo,
              '/cam0/image_raw': Image}
    # no namespace: /camera/ (tracker.launch.py's image_topic); a namespace: under it
    with listening(tmp_path, topics, cameras=((), ('-r', '__ns:=/cam0'))) as c:
        # a frame and its camera_info (one stamp): the two topics match the client apart, so
        # the first frames may come on one of them only
        def both():
            return {stamp(m) for m in c.got['/camera/image_raw']} & \
                {stamp(m) for m in c.got['/camera/camera_info']}
        c.spin_until(lambda: len(both()) >= COUNT and len(c.got['/cam0/image_raw']) >= COUNT,
                     f'{COUNT} frames with their camera_info, and {COUNT} under /cam0')
        images, infos = list(c.got['/camera/image_raw']), list(c.got['/camera/camera_info'])
    cam = SyntheticCamera(W, H, objects=2)
    idx = frame_indices(images, cam.frame)
    assert idx == sorted(set(idx))                  # each frame once, in order
    assert [stamp(m) for m in images] == sorted({stamp(m) for m in images})
    info = infos[-1]
    assert (info.width, info.height, info.header.frame_id) == (W, H, 'camera_optical_frame')
    assert info.k[0] == info.k[4] == W and info.p[3] == 0.0     # fx: the width, no baseline
    assert images[-1].header.frame_id == 'camera_optical_frame'


def test_stereo_pairs_are_stamped_alike_under_the_stereo_launch_namespace(tmp_path):
    require_messages()
    from sensor_msgs.msg import CameraInfo, Image

    from sam2_ros.ros.stereo_msgs import calibration_from_msgs

    topics = {f'/stereo/{side}/{what}': kind for side in ('left', 'right')
              for what, kind in (('image_raw', Image), ('camera_info', CameraInfo))}

    def stamps(topic):
        return {stamp(m) for m in c.got[topic]}

    def common():
        return set.intersection(*(stamps(t) for t in topics))
    with listening(tmp_path, topics, cameras=(('-p', 'stereo:=true'),)) as c:
        c.spin_until(lambda: len(common()) >= COUNT, f'{COUNT} stamps on all of {list(topics)}')
        got = {t: list(v) for t, v in c.got.items()}
    left = {stamp(m): m for m in got['/stereo/left/image_raw']}
    right = {stamp(m): m for m in got['/stereo/right/image_raw']}
    s = SyntheticStereo(W, H)
    pairs = sorted(common())
    # both images of a stamp are one rendered pair: frame j of each view, the same j
    li = frame_indices([left[t] for t in pairs], s.left.frame)
    ri = frame_indices([right[t] for t in pairs], s.right.frame)
    assert li == ri and li == sorted(set(li))
    infos = [next(m for m in got[f'/stereo/{side}/camera_info'] if stamp(m) == pairs[-1])
             for side in ('left', 'right')]
    calib = calibration_from_msgs(*infos)
    assert calib.is_rectified() and calib.baseline == pytest.approx(0.1)   # documented
    assert infos[1].p[3] == pytest.approx(-W * 0.1)
    assert [m.header.frame_id for m in infos] == ['left_camera_optical_frame',
                                                  'right_camera_optical_frame']


def test_stamps_and_rate_follow_the_clock_topic_with_use_sim_time(tmp_path):
    require_messages()
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import Image

    t0 = 5_000 * 10**9
    with listening(tmp_path, {'/camera/image_raw': Image},
                   cameras=(('-p', 'use_sim_time:=true'),)) as c:
        pub = c.node.create_publisher(Clock, '/clock', 10)
        now = [t0]

        def tick():
            now[0] += 10_000_000                    # 10 ms of sim time per spin
            msg = Clock()
            msg.clock.sec, msg.clock.nanosec = divmod(now[0], 10**9)
            pub.publish(msg)
            return len(c.got['/camera/image_raw']) >= COUNT
        c.spin_until(tick, f'{COUNT} images under /clock')
        images = list(c.got['/camera/image_raw'])
    assert all(t0 <= stamp(m) <= now[0] for m in images)   # sim time, not the wall clock
    # the timer runs on /clock too: at 20 Hz at most a frame per 50 ms of sim time, however
    # fast the wall clock (a timer fires once per period it finds due, on the clock it ticks)
    stamps = [stamp(m) for m in images]
    assert all((t - t0) % 10_000_000 == 0 for t in stamps)    # a /clock value each
    assert stamps[-1] - stamps[0] >= (len(stamps) - 2) * 50_000_000


def test_a_bad_parameter_stops_the_node_with_its_name(tmp_path):
    require_messages()
    lease = DomainLease()
    proc = Proc([sys.executable, '-m', 'sam2_ros.ros.synthetic_camera', '--ros-args', '-p',
                 'objects:=0'], lease.env(), tmp_path / 'bad.log')
    try:
        wait_until(lambda: not proc.alive(), 60, 'the camera to exit')
        assert proc.p.returncode == 1
        assert re.search(r'FATAL.*objects must be in 1\.\.255', proc.log()), proc.log_tail()
    finally:
        proc.stop()
        lease.release()


# ----------------------------------------------------------------------------- bag example

def test_bag_replay_save_bag_keeps_a_readable_bag_with_the_images_and_the_prompt(tmp_path):
    require_messages()
    import importlib.util

    from rclpy.serialization import deserialize_message
    from rosbags.rosbag2 import Reader
    from sensor_msgs.msg import Image

    from sam2_ros.msg import Prompt

    spec = importlib.util.spec_from_file_location('bag_replay', ROOT / 'examples' /
                                                  'bag_replay.py')
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    bag = tmp_path / 'synthetic_bag'
    assert ex.main(['--save-bag', str(bag), '--frames', '3']) == 0     # no node: only records
    with Reader(bag) as r:
        by_topic = {}
        for conn, _, raw in r.messages():
            by_topic.setdefault(conn.topic, []).append(raw)
    assert sorted(by_topic) == [ex.IMAGE_TOPIC, ex.PROMPT_TOPIC]
    cam = SyntheticCamera(320, 240, objects=2)
    images = [deserialize_message(bytes(raw), Image) for raw in by_topic[ex.IMAGE_TOPIC]]
    for i, m in enumerate(images):
        np.testing.assert_array_equal(rgb(m), cam.frame(i))
    (raw,) = by_topic[ex.PROMPT_TOPIC]
    prompt = deserialize_message(bytes(raw), Prompt)
    assert (prompt.object_id, prompt.action, prompt.has_box) == (1, Prompt.ACTION_ADD, True)
    np.testing.assert_allclose(prompt.box, cam.boxes(0)[0])
    assert stamp(prompt) == stamp(images[0])
    with pytest.raises(SystemExit):                 # never over an existing bag
        ex.parse_args(['--save-bag', str(bag)])
