"""One node, two cameras (parameter cameras: left, right) over DDS: every camera's state equals
an in-process MultiStreamTracker stepped on the same groups of frames (paired frames in one
step, an unpaired frame alone, a bad frame of one camera failing for it only), and the 3D
positions of objects tracked in both cameras are the triangulation of the reference's mask
centroids with the synthetic rectified pair's camera_info.

camera_period_ms is long (60 s): a lone frame leaves because its partner camera moved past it,
never by a timeout, so which frames form a group does not depend on the machine's speed."""

import threading

import numpy as np
import pytest
import torch

from ros_helpers import (NODE_THREADS, TEST_PARAMS, DomainLease, frames, image_msg, info_msg,
                         prompt_msg, require_messages, stamp, stamp_of, start_node, wait_until)

from sam2_ros import stereo
from sam2_ros.engine.types import Prompt
from sam2_ros.ros.node_client import NodeClient
import stereo_scenes as sc

pytestmark = pytest.mark.slow
NAMES = ('left', 'right')
CODES = {'tracking': 0, 'occluded': 1, 'lost': 2}
F, CX, CY, BASELINE = 100.0, 79.5, 59.5, 0.06


def pair() -> stereo.Calibration:
    """A rectified pair at the test frames' size (160x120), right camera 6 cm to the right."""
    k = sc.intrinsics(F, CX, CY)
    left = stereo.Camera(k, np.hstack([k, np.zeros((3, 1))]), np.eye(3), 160, 120, 'left_opt')
    right = stereo.Camera(k, np.hstack([k, [[-F * BASELINE], [0], [0]]]), np.eye(3), 160, 120,
                          'right_opt')
    return stereo.Calibration(left, right)


class StereoClient(NodeClient):
    """Both cameras' links, camera_info publishers (on ``info_topics``), ~/positions and
    /diagnostics."""

    def __init__(self, lease, info_topics):
        self.positions, self.diags, self.lock = [], [], threading.Lock()
        self.info_topics = info_topics
        super().__init__('sam2_stereo_client', [(f'/sam2_tracker/{n}', f'/{n}/image_raw')
                                                for n in NAMES],
                         domain_id=lease.domain_id, subscribe=('mask', 'state'), depth=50,
                         image_depth=50)

    def add_entities(self):
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import CameraInfo
        from vision_msgs.msg import Detection3DArray

        self.node.create_subscription(Detection3DArray, '/sam2_tracker/positions',
                                      self._keep(self.positions), self.qos)
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._keep(self.diags),
                                      self.qos)
        # best effort, as many drivers publish it (sensor-data QoS): the node subscribed it
        # reliable, never connected, and published no position
        self.pub_info = [self.node.create_publisher(CameraInfo, t, qos_profile_sensor_data)
                         for t in self.info_topics]

    def _keep(self, store):
        def cb(msg):
            with self.lock:
                store.append(msg)
        return cb

    def values(self, camera: str):
        """The newest /diagnostics values of one camera's status ({} before any)."""
        with self.lock:
            diags = list(self.diags)
        for d in reversed(diags):
            for st in d.status:
                if st.name.endswith(f'/{camera}: tracker'):
                    return {kv.key: kv.value for kv in st.values}
        return {}


def reference():
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.multistream import MultiStreamTracker

    torch.set_num_threads(NODE_THREADS)
    keys = ('model_size', 'image_size', 'random_weights', 'seed', 'device', 'precision',
            'use_cuda_graphs', 'extra_hydra_overrides', 'max_objects')
    return MultiStreamTracker(TrackerConfig(**{k: TEST_PARAMS[k] for k in keys}), cameras=2)


def state_of(link, stamp_ns):
    with link.lock:
        got = [s for s in link.states if stamp_of(s.header) == stamp_ns]
    return got[-1] if got else None


def assert_state(state, ref):
    got = [(o.object_id, o.state, o.area, o.frames_since_prompt) for o in state.objects]
    assert got == [(o.obj_id, CODES[o.state], o.area, o.frames_since_prompt)
                   for o in ref.objects]
    for o, r in zip(state.objects, ref.objects):
        assert o.score == pytest.approx(r.score, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize('receivers', [False, True], ids=['in_node', 'receiver_processes'])
def test_two_cameras_pairing_failure_and_positions(tmp_path, receivers):
    """Also with a receiving process per camera (image_receiver_process): the same results;
    there camera_info comes on topics of camera_info_topics, as where a driver publishes it
    elsewhere than <ns>/camera_info (the node waited on <ns>/camera_info: no position)."""
    require_messages()
    # ~/positions is a vision_msgs type, not on PyPI: installed from ../shared/ros_cli
    pytest.importorskip('vision_msgs.msg', reason='vision_msgs is not installed')
    lease = DomainLease()
    infos = (['/stereo/left/camera_info', '/calib/right_info'] if receivers else
             [f'/{n}/camera_info' for n in NAMES])
    given = {'camera_info_topics': infos} if receivers else {}
    # random weights' masks reach the image border: allowed, or no position would be valid
    proc = start_node(lease, tmp_path, 'stereo', cameras=list(NAMES), camera_period_ms=60000.0,
                      image_receiver_process=receivers, positions_allow_clipped=True, **given)
    try:
        proc.wait_log(r'\]: active: 2 cameras', 90)
        c = StereoClient(lease, infos)
        try:
            run(c, proc)
            # each camera's status says how its frames are received (and counts them)
            want = 'on (pid' if receivers else 'off'
            for cam in NAMES:
                wait_until(lambda cam=cam: str(c.values(cam).get('receiver_process', ''))
                           .startswith(want), 30, f'diagnostics: {cam} receiving process')
            if receivers:
                assert all(int(c.values(cam)['receiver_frames']) > 0 for cam in NAMES)
        finally:
            c.close()
    finally:
        proc.stop()
        lease.release()


def run(c, proc):
    c.wait_connected(60, proc)
    calib = pair()
    wait_until(lambda: all(p.get_subscription_count() for p in c.pub_info), 30,
               'the node to subscribe camera_info')

    def calibrated():
        """Sent again and again, as a driver does: best effort may lose one."""
        for pub, cam in zip(c.pub_info, (calib.left, calib.right)):
            pub.publish(info_msg(cam))
        return 'positions_valid' in c.values('left') and 'positions' not in c.values('left')
    # the pair's calibration is built before the first frame (no position may be missed)
    wait_until(calibrated, 30, 'diagnostics: camera_info of both', poll=0.1)
    left, right = c.links
    fl, fr = frames(8, seed=1), frames(8, seed=2)
    ref = reference()
    prompts = [(0, Prompt(obj_id=1, box=(10, 20, 60, 70))),
               (1, Prompt(obj_id=1, box=(4, 20, 54, 70))),
               (1, Prompt(obj_id=2, points=[(120, 60)], labels=[1]))]
    for cam, p in prompts:
        msg = (prompt_msg(p.obj_id, stamp(0), box=p.box) if p.box is not None else
               prompt_msg(p.obj_id, stamp(0), points=p.points, labels=p.labels))
        c.links[cam].pub_prompt.publish(msg)
        ref.stream(cam).queue_prompt(p)
    # held for stamp 0 before any frame comes (prompts and images are different topics)
    wait_until(lambda: int(c.values('left').get('waiting_prompts', 0)) == 1
               and int(c.values('right').get('waiting_prompts', 0)) == 2, 30,
               'diagnostics: the prompts held')
    steps = {}

    def send(i, l_frame, r_frame):
        """Publish stamp i's frames (None: none for that camera); wait for their states."""
        for link, f in ((left, l_frame), (right, r_frame)):
            if f is not None:
                link.pub_image.publish(image_msg(f, stamp(i)))
        steps[i] = ref.track([l_frame, r_frame])

    # paired frames 0-2, left's 3 alone (right's 4 moves past it), paired 4, a left frame of
    # another size at 5 (its error, right tracked), paired 6
    for i in range(3):
        send(i, fl[i], fr[i])
    send(3, fl[3], None)
    send(4, fl[4], fr[4])
    bad = np.zeros((60, 80, 3), np.uint8)
    send(5, bad, fr[5])
    send(6, fl[6], fr[6])
    wait_until(lambda: state_of(left, stamp(6)) and state_of(right, stamp(6)), 120,
               'both cameras tracking stamp 6')
    for i, out in steps.items():
        for cam, link in enumerate((left, right)):
            res, err = out.results[cam], out.errors[cam]
            got = state_of(link, stamp(i))
            if res is None:
                assert got is None, (i, cam)
                continue
            assert got is not None, (i, cam)
            assert_state(got, res)
    assert steps[5].errors[0] is not None and steps[3].results[1] is None
    assert 'FrameError' in ' '.join(state_of(left, stamp(6)).errors)
    check_positions(c, calib, steps)


def check_positions(c, calib, steps):
    """~/positions of every group with both cameras: the valid triangulations of the
    reference's centroids (objects tracked in both; masks at the border taken, as the node
    runs with positions_allow_clipped)."""
    from sam2_ros.ros.positions import result_views, triangulate_objects

    want, clipped = {}, 0
    for i, out in steps.items():
        if out.results[0] is None or out.results[1] is None:
            continue
        views = result_views(out.results[0]), result_views(out.results[1])
        tri = triangulate_objects(calib, *views, rectified=False, allow_clipped=True)
        want[stamp(i)] = {k: t.point for k, t in tri.items() if t.valid}
        clipped += sum(v.clipped and k in want[stamp(i)] for side in views
                       for k, v in side.items())
    wait_until(lambda: {stamp_of(m.header) for m in list(c.positions)} >= set(want), 60,
               'positions of every paired group')
    for m in list(c.positions):
        s = stamp_of(m.header)
        if s not in want:
            continue
        assert m.header.frame_id == 'left_opt'
        got = {int(d.id): np.array([d.bbox.center.position.x, d.bbox.center.position.y,
                                    d.bbox.center.position.z]) for d in m.detections}
        assert sorted(got) == sorted(want[s])
        for k in got:
            np.testing.assert_allclose(got[k], want[s][k], rtol=1e-9, atol=1e-12)
    assert any(want.values()), 'no valid position: the scene tests nothing'
    assert clipped, 'no position of a clipped mask: positions_allow_clipped tested on nothing'
    # the last group's validity per object, and the counts, on the left camera's status
    last = steps[max(steps)]
    wait_until(lambda: int(c.values('left').get('positions_valid', 0)) == sum(
        len(v) for v in want.values()), 30, 'diagnostics: the positions counted')
    values = c.values('left')
    tri = triangulate_objects(calib, result_views(last.results[0]),
                              result_views(last.results[1]), rectified=False, allow_clipped=True)
    for k, t in tri.items():
        assert values[f'position_{k}'] == ('valid' if t.valid else f'invalid: {t.reason}')
