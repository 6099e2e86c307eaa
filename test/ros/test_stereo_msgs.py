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


def test_refused():
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
    """Diagnostics list every object's last validity: one the other camera does not track
    is 'not visible' there, not left out."""
    from sam2_ros.ros.positions import triangulate_objects

    found = triangulate_objects(sc.rectified_pair(), {1: (80.0, 60.0), 2: (30.0, 40.0)},
                                {1: (77.0, 60.0)}, rectified=True)
    assert sorted(found) == [1, 2] and found[1].valid
    assert not found[2].valid and found[2].reason == stereo.NOT_VISIBLE_RIGHT


def test_validity_bounds_are_the_limits_given():
    """A far object (disparity 0.5 px) is refused under the default 1 px and valid under a
    0.25 px bound; rows 3 px apart pass the default 4 px and fail a 2 px bound."""
    from sam2_ros.ros.positions import triangulate_objects

    calib = sc.rectified_pair()
    far = ({1: (80.0, 60.0)}, {1: (79.5, 60.0)})
    assert not triangulate_objects(calib, *far, rectified=True)[1].valid
    assert triangulate_objects(calib, *far, True, stereo.Limits(min_disparity_px=0.25))[1].valid
    rows = ({1: (80.0, 60.0)}, {1: (70.0, 63.0)})
    assert triangulate_objects(calib, *rows, rectified=True)[1].valid
    found = triangulate_objects(calib, *rows, True, stereo.Limits(max_row_error_px=2.0))[1]
    assert not found.valid and found.reason == stereo.ROW_ERROR


def test_the_tracker_nodes_positions_use_its_limits_parameters():
    """Positions takes the node's positions_* bounds (NodeOptions.positions_limits)."""
    import dataclasses
    from types import SimpleNamespace

    from sam2_ros.ros.options import NodeOptions
    from sam2_ros.ros.positions import Positions

    opts = dataclasses.replace(NodeOptions(), positions_min_disparity_px=0.25)
    pos = Positions.create(SimpleNamespace(opts=opts), ['left'])
    assert pos.off == 'one camera' and pos.limits == stereo.Limits(min_disparity_px=0.25)
