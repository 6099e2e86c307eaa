"""CameraInfo messages -> the stereo core's Calibration (sam2_ros/ros/stereo_msgs.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sensor_msgs.msg import CameraInfo

from sam2_ros import stereo
from sam2_ros.ros.stereo_msgs import calibration_from_msgs, camera_from_msg
import stereo_scenes as sc


def info(cam: stereo.Camera) -> CameraInfo:
    msg = CameraInfo()
    msg.header.frame_id = cam.frame_id
    msg.width, msg.height = cam.width, cam.height
    msg.distortion_model = cam.distortion_model
    msg.d = [float(v) for v in cam.D]
    msg.k = [float(v) for v in cam.K.ravel()]
    msg.r = [float(v) for v in cam.R.ravel()]
    msg.p = [float(v) for v in cam.P.ravel()]
    return msg


def test_round_trip_and_triangulation():
    cal = sc.rectified_pair()
    left = info(cal.left)
    left.d = [-0.2, 0.05, 0.0, 0.0, 0.0]
    got = calibration_from_msgs(left, info(cal.right))
    assert got.left.frame_id == 'left_optical' and got.right.frame_id == 'right_optical'
    assert (got.left.width, got.left.height) == (sc.W, sc.H)
    for a, b in ((got.left.P, cal.left.P), (got.right.P, cal.right.P),
                 (got.left.K, cal.left.K), (got.left.R, np.eye(3))):
        assert np.array_equal(a, b)
    assert np.array_equal(got.left.D, [-0.2, 0.05, 0, 0, 0])
    assert got.is_rectified() and abs(got.baseline - 0.06) < 1e-12
    tr = stereo.triangulate(got, (349.5, 239.5), (319.5, 239.5))
    assert tr.valid and np.allclose(tr.point, [0.06, 0, 1.0])


def test_camera_info_the_core_cannot_use_is_refused_with_the_reason():
    """Uncalibrated, binned, cropped (ROI) or, for raw images, equidistant CameraInfo and a pair
    without Tx raise ValueError; a whole-image ROI and rectified images' raw K and D do not."""
    cal = sc.rectified_pair()
    uncalibrated = CameraInfo()
    uncalibrated.header.frame_id = 'cam'
    with pytest.raises(ValueError, match="'cam'.*not calibrated"):
        camera_from_msg(uncalibrated)
    binned = info(cal.left)
    binned.binning_x = 2
    with pytest.raises(ValueError, match='binning'):
        camera_from_msg(binned)
    roi = info(cal.left)
    roi.roi.x_offset, roi.roi.width, roi.roi.height = 10, 100, 100
    with pytest.raises(ValueError, match='region of interest'):
        camera_from_msg(roi)
    full = info(cal.left)          # a ROI of the whole image is no ROI
    full.roi.width, full.roi.height = sc.W, sc.H
    assert camera_from_msg(full).width == sc.W
    fisheye = info(cal.left)
    fisheye.distortion_model, fisheye.d = 'equidistant', [0.1, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match='equidistant'):
        camera_from_msg(fisheye)
    # rectified images: their intrinsics are P's, the raw K and D are not used nor checked
    rect = camera_from_msg(fisheye, rectified=True)
    assert np.array_equal(rect.K, cal.left.P[:, :3]) and rect.D.size == 0
    no_k = info(cal.left)
    no_k.k = [0.0] * 9
    assert np.array_equal(camera_from_msg(no_k, rectified=True).K, cal.left.P[:, :3])
    # two cameras calibrated apart (no Tx): not a stereo pair, said so
    with pytest.raises(ValueError, match='not a stereo calibration'):
        calibration_from_msgs(info(cal.left), info(cal.left))


def test_rectified_looking_images_without_positions_rectified_are_warned_of():
    from sam2_ros.ros.positions import rectified_mismatch
    assert 'positions_rectified: true' in rectified_mismatch('image_rect_color', False)
    assert rectified_mismatch('image_rect', True) == ''
    assert rectified_mismatch('image_raw', False) == ''
    assert rectified_mismatch('rect_cams/image_raw', False) == ''    # the topic's last part


def test_camera_info_of_another_image_size_turns_positions_off():
    """camera_info calibrated for other images than those tracked would triangulate wrong
    positions: the in-node positions say why and publish none (0x0 says nothing: taken)."""
    from types import SimpleNamespace

    from sam2_ros.engine.types import FrameResult
    from sam2_ros.ros.positions import Positions, size_mismatch

    calib = sc.rectified_pair()
    same = FrameResult(0, sc.H, sc.W)
    assert size_mismatch(calib, same, same) == ''
    other = FrameResult(0, 1080, 1920)
    assert size_mismatch(calib, same, other) == (
        f'the right camera_info is for {sc.W}x{sc.H} images, the images are 1920x1080')
    import dataclasses
    unsized = stereo.Calibration(dataclasses.replace(calib.left, width=0, height=0),
                                 calib.right)
    assert size_mismatch(unsized, other, same) == ''

    sent = []
    pos = Positions(None, SimpleNamespace(publish=sent.append), None, rectified=True)
    pos.calibration = lambda: sc.rectified_pair()
    pos.on_group(None, [other, other])
    assert sent == [] and 'the left camera_info is for' in pos.values(0)['positions']


def test_an_image_of_unknown_size_is_taken_as_the_camera_info_says():
    """A TrackingState carries its image's size, 0x0 where its tracker did not fill it: such
    an image is not checked (positions_node keeps triangulating it), a sized one is."""
    from types import SimpleNamespace

    from sam2_ros.ros.positions import size_mismatch

    calib = sc.rectified_pair()
    unknown = SimpleNamespace(width=0, height=0)
    same = SimpleNamespace(width=sc.W, height=sc.H)
    other = SimpleNamespace(width=sc.W * 2, height=sc.H)
    assert size_mismatch(calib, unknown, unknown) == ''
    assert size_mismatch(calib, unknown, same) == ''
    assert size_mismatch(calib, unknown, other) == (
        f'the right camera_info is for {sc.W}x{sc.H} images, the images are {sc.W * 2}x{sc.H}')


def test_an_object_tracked_in_one_camera_gets_an_invalid_position_with_the_reason():
    """Diagnostics list every object's last validity: an id the other camera does not track
    at all says so ('not tracked', prompt it there with the same id), apart from one it
    tracks but does not see ('not visible'); neither is left out."""
    from sam2_ros.ros.positions import (NOT_TRACKED_LEFT, NOT_TRACKED_RIGHT, View,
                                        triangulate_objects)

    found = triangulate_objects(
        sc.rectified_pair(), {1: View((80.0, 60.0)), 2: View((30.0, 40.0)), 3: View((9.0, 9.0))},
        {1: View((77.0, 60.0)), 3: View(None), 4: View((5.0, 5.0))}, rectified=True)
    assert sorted(found) == [1, 2, 3, 4] and found[1].valid
    assert [(found[i].valid, found[i].reason) for i in (2, 3, 4)] == [
        (False, NOT_TRACKED_RIGHT), (False, stereo.NOT_VISIBLE_RIGHT), (False, NOT_TRACKED_LEFT)]
    assert 'not tracked in the right camera' in NOT_TRACKED_RIGHT


def test_validity_bounds_are_the_limits_given():
    """A far object (disparity 0.5 px) is refused under the default 1 px and valid under a
    0.25 px bound; rows 3 px apart pass the default 4 px and fail a 2 px bound."""
    from sam2_ros.ros.positions import View, triangulate_objects

    calib = sc.rectified_pair()
    far = ({1: View((80.0, 60.0))}, {1: View((79.5, 60.0))})
    assert not triangulate_objects(calib, *far, rectified=True)[1].valid
    assert triangulate_objects(calib, *far, True, stereo.Limits(min_disparity_px=0.25))[1].valid
    rows = ({1: View((80.0, 60.0))}, {1: View((70.0, 63.0))})
    assert triangulate_objects(calib, *rows, rectified=True)[1].valid
    found = triangulate_objects(calib, *rows, True, stereo.Limits(max_row_error_px=2.0))[1]
    assert not found.valid and found.reason == stereo.ROW_ERROR


def object_result(obj_id, mask, score=5.0):
    """An ObjectResult of a rendered mask, as the tracker builds it (box inclusive)."""
    from sam2_ros.engine.types import ObjectResult

    ys, xs = np.nonzero(mask)
    return ObjectResult(obj_id, mask, score, 'tracking',
                        (int(xs.min()), int(ys.min()), int(xs.max()), int(ys.max())),
                        int(mask.sum()), stereo.mask_centroid(mask), 0)


def shaft_scene():
    """An endoscope-like pair (B 4.5 mm, f 500 px, 640x480) and the frames of two shafts
    5 mm thick at Z 60 mm: 1 enters from the left border (30 cm long, cut off by it in both
    images, differently by the disparity), 2 is short and whole (12 mm)."""
    from sam2_ros.engine.types import FrameResult

    calib = sc.rectified_pair(baseline=0.0045)
    views = sc.pinhole_view(calib.left.P), sc.pinhole_view(calib.right.P)

    def shaft(tip_x, length, y):
        half = np.array([length / 2, 0.0025, 0.0025])
        return sc.Box(np.array([tip_x - length / 2, y, 0.06]), half)
    shafts = {1: shaft(-0.005, 0.3, -0.01), 2: shaft(0.02, 0.012, 0.012)}
    frames = [FrameResult(0, sc.H, sc.W, [object_result(i, sc.render(s, v))
                                          for i, s in shafts.items()]) for v in views]
    return calib, frames


def test_a_mask_cut_off_by_the_image_border_gives_no_position():
    """A shaft entering from the left border: its two masks are cut at other points of it (by
    the disparity), the centroids are not of one 3D point and its depth came out twice the
    true 60 mm, valid. Invalid now, with the reason (the point kept for inspection); a whole
    object beside it stays valid; positions_allow_clipped takes the clipped one."""
    pytest.importorskip('vision_msgs.msg', reason='vision_msgs is not installed')
    from types import SimpleNamespace

    from sam2_ros.ros.positions import CLIPPED_LEFT, Positions

    calib, frames = shaft_scene()
    assert frames[0].objects[0].box[0] == 0 and frames[1].objects[0].box[0] == 0
    assert stereo.triangulate(calib, frames[0].objects[0].centroid,
                              frames[1].objects[0].centroid).point[2] > 0.1   # the defect
    group = SimpleNamespace(frames=[SimpleNamespace(item=SimpleNamespace(
        header=SimpleNamespace(stamp=SimpleNamespace(sec=1, nanosec=0))))])
    for allow, want in ((False, ['2']), (True, ['1', '2'])):
        sent = []
        pos = Positions(None, SimpleNamespace(publish=sent.append), None, rectified=True,
                        allow_clipped=allow)
        pos.calibration = lambda: calib
        pos.on_group(group, frames)
        assert [d.id for d in sent[0].detections] == want
        whole = sent[0].detections[-1].bbox.center.position
        assert abs(whole.z - 0.06) < 0.005                    # the whole one: about right
        values = pos.values(0)
        assert values['position_2'] == 'valid'
        assert values['position_1'] == ('valid' if allow else f'invalid: {CLIPPED_LEFT}')
        assert pos.last[1].point is not None                  # kept for inspection


def test_a_box_touches_the_border_at_either_edge_of_the_inclusive_box():
    from sam2_ros.ros.positions import touches_border

    w, h = sc.W, sc.H
    assert not touches_border((1, 1, w - 2, h - 2), w, h)
    for box in ((0, 5, 9, 9), (5, 0, 9, 9), (5, 5, w - 1, 9), (5, 5, 9, h - 1)):
        assert touches_border(box, w, h), box
    assert not touches_border((5, 5, w - 1, h - 1), 0, 0)     # size unknown: not judged
    # the positions_node path: ObjectState's (x_offset, y_offset, width, height) box
    from types import SimpleNamespace as NS

    from sam2_ros.ros.positions_node import views

    def state(x, y, bw, bh, size=(w, h)):
        o = NS(object_id=1, score=2.0, area=bw * bh, centroid=NS(x=x + bw / 2, y=y + bh / 2),
               box=NS(x_offset=x, y_offset=y, width=bw, height=bh))
        return NS(objects=[o], width=size[0], height=size[1])
    assert not views(state(1, 1, w - 2, h - 2))[1].clipped
    assert views(state(1, 1, w - 1, 5))[1].clipped                  # x1 = w - 1
    assert views(state(1, 1, 5, h - 1))[1].clipped                  # y1 = h - 1
    assert views(state(1, 1, w - 1, 5), (0, 0))[1].box == (1, 1, w - 1, 5)
    assert views(state(1, 1, w - 1, 5, (0, 0)), (w, h))[1].clipped  # camera_info's size
    assert not views(state(1, 1, w - 1, 5, (0, 0)))[1].clipped      # no size at all


def test_every_detection3d_has_a_result_and_a_size_for_rviz():
    """RViz's vision_msgs plugin reads results[0] unchecked (an empty list crashed it) and a
    zero bbox draws nothing: each Detection3D has results[0] (class_id the object id, score
    the sigmoid of the less sure camera's logit, pose the point) and the left mask box's
    extent at the point's depth (a nominal size where no box is known)."""
    pytest.importorskip('vision_msgs.msg', reason='vision_msgs is not installed')
    from types import SimpleNamespace

    from sam2_ros.ros.messages import sigmoid
    from sam2_ros.ros.positions import (NOMINAL_SIZE, View, detections, result_views,
                                        triangulate_objects)

    calib, frames = shaft_scene()
    left, right = result_views(frames[0]), result_views(frames[1])
    left[3], right[3] = View((100.0, 60.0), 1.0), View((80.0, 60.0), 3.0)     # no box known
    found = triangulate_objects(calib, left, right, True, allow_clipped=True)
    header = SimpleNamespace(stamp=SimpleNamespace(sec=1, nanosec=0))
    msg = detections(header, calib, found, left, right)
    assert [d.id for d in msg.detections] == ['1', '2', '3']
    for d in msg.detections:
        assert len(d.results) >= 1 and d.results[0].hypothesis.class_id == d.id
        assert 0 < d.results[0].hypothesis.score < 1
        assert d.bbox.size.x > 0 and d.bbox.size.y > 0 and d.bbox.size.z > 0
        c, p = d.bbox.center.position, d.results[0].pose.pose.position
        assert (p.x, p.y, p.z) == (c.x, c.y, c.z)
        assert d.results[0].pose.pose.orientation.w == 1
    assert msg.detections[2].results[0].hypothesis.score == sigmoid(1.0)
    size = msg.detections[2].bbox.size
    assert (size.x, size.y, size.z) == (NOMINAL_SIZE,) * 3
    x0, y0, x1, y1 = left[2].box          # the whole shaft: 12 x 5 mm, seen a little from below
    d = msg.detections[1]
    assert d.bbox.size.x == pytest.approx((x1 - x0 + 1) * d.bbox.center.position.z / sc.F)
    assert d.bbox.size.x == pytest.approx(0.012, rel=0.1)
    assert d.bbox.size.y == pytest.approx(0.005, rel=0.25)


def test_the_tracker_nodes_positions_use_its_limits_parameters():
    """Positions takes the node's positions_* bounds (NodeOptions.positions_limits) and
    positions_allow_clipped."""
    import dataclasses
    from types import SimpleNamespace

    from sam2_ros.ros.options import NodeOptions
    from sam2_ros.ros.positions import Positions

    warned = []
    log = SimpleNamespace(warning=warned.append)

    def node(opts):
        return SimpleNamespace(opts=opts, get_logger=lambda: log)
    opts = dataclasses.replace(NodeOptions(), positions_min_disparity_px=0.25)
    pos = Positions.create(node(opts), ['left'])
    assert pos.off == 'one camera' and pos.limits == stereo.Limits(min_disparity_px=0.25)
    assert not pos.allow_clipped            # positions_allow_clipped, false by default
    assert pos.pair.warn == warned.append   # the calibration's warnings go to the node's log
    opts = dataclasses.replace(NodeOptions(), positions_allow_clipped=True)
    assert Positions.create(node(opts), ['left']).allow_clipped


def test_a_calibration_in_millimetres_is_logged_once_per_pair_built():
    """A right P with Tx = -fx * 4.5 (a 4.5 mm endoscope baseline written in millimetres)
    gives positions in millimetres: the node's log says so when the pair is built, once."""
    from sam2_ros.ros.positions import PairCalibration

    cal = sc.rectified_pair()
    right = info(cal.right)
    fx = right.p[0]
    right.p[3] = -fx * 4.5
    warned = []
    pair = PairCalibration(rectified=True, warn=warned.append)
    pair.on_camera_info(0)(info(cal.left))
    pair.on_camera_info(1)(right)
    assert pair.calibration() is not None and pair.calibration() is not None
    assert len(warned) == 1 and 'millimetres' in warned[0]
    pair.on_camera_info(1)(info(cal.right))          # metres again: nothing to say
    assert pair.calibration() is not None and len(warned) == 1
