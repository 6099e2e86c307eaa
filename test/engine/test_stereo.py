"""3D centroids from a calibrated pair (sam2_ros/stereo.py) on rendered scenes of known geometry.

What the mask centroids measure, and so what the tolerances say:
  * a sphere (centre c, radius r, distance D): its silhouette is an ellipse whose centre lies
    outward (from the principal point) of c's image by a term of second order in r / D
    (``stereo_scenes.sphere_silhouette_centroid``, exact). Triangulated, these two
    centroids give the "model point"; the estimate from the rendered masks equals it up to
    the centroids' quantisation by the pixel grid (0.1 px of disparity, generous at these
    sizes). For a rectified pair the model point lies at most 1.3 D (r / D)^2 from c,
    towards the cameras; for cameras converging on the object the two outward shifts add
    up in disparity (a few mm at 1 m below);
  * the visible surface's centroid lies r (1 + r / D) / 2 in front of c: the estimate is that
    far behind it, along the line of sight;
  * a box: the silhouettes of a box seen from two places are not images of one 3D region, so
    the error is a larger fraction of its size; tested against measured bounds that hold for
    compact boxes, and the worst case (a bar slanted in depth along the baseline) stated.
"""

from __future__ import annotations

import numpy as np
import pytest

from sam2_ros import stereo
import stereo_scenes as sc

SPHERES = [((0.05, -0.02, 1.0), 0.05), ((0.0, 0.0, 0.5), 0.05), ((-0.2, 0.1, 0.8), 0.08),
           ((0.1, 0.05, 2.0), 0.1), ((0.3, -0.2, 1.2), 0.04)]


@pytest.mark.parametrize('c, r', SPHERES)
def test_rectified_sphere_centre_and_visible_surface(c, r):
    cal = sc.rectified_pair()
    c = np.array(c)
    sphere = sc.Sphere(c, r)
    ul, ur = sc.centroids(sphere, sc.pinhole_view(cal.left.P), sc.pinhole_view(cal.right.P))
    tr = stereo.triangulate(cal, ul, ur)
    assert tr.valid and tr.reason == '' and tr.method == 'rectified', tr
    assert tr.frame_id == 'left_optical'
    dist, quant = np.linalg.norm(c), sc.quantisation(cal, c[2])
    model = sc.model_point(cal, sphere)
    assert np.linalg.norm(tr.point - model) <= quant, tr.point - model
    assert np.linalg.norm(model - c) <= 1.3 * dist * (r / dist) ** 2
    assert (model - c) @ c < 0                                # towards the cameras
    assert tr.row_error < 0.05 and tr.disparity > 10
    # the visible surface's centroid is in front of the estimate by r (1 + r / D) / 2
    vis = sphere.visible_centroid(np.zeros(3))
    offset = (r / 2) * (1 + r / dist)
    assert abs(np.linalg.norm(tr.point - vis) - offset) <= 1.3 * dist * (r / dist) ** 2 + quant
    sight = c / np.linalg.norm(c)
    along = (tr.point - vis) @ sight
    assert along > 0.9 * np.linalg.norm(tr.point - vis)     # behind it along the line of sight
    # DLT on the same rectified pair: the same point
    dlt = stereo.triangulate(cal, ul, ur, method='dlt')
    assert dlt.valid and np.abs(dlt.point - tr.point).max() < 1e-5


def test_cx_differs_between_the_images():
    """A rectified pair whose right principal point differs (ROS calibrations allow it): the
    disparity is measured after the cx difference."""
    cal = sc.rectified_pair(cx_right=300.0)
    sphere = sc.Sphere(np.array([0.02, 0.01, 0.9]), 0.05)
    ul, ur = sc.centroids(sphere, sc.pinhole_view(cal.left.P), sc.pinhole_view(cal.right.P))
    tr = stereo.triangulate(cal, ul, ur)
    assert tr.valid and tr.method == 'rectified'
    assert np.linalg.norm(tr.point - sc.model_point(cal, sphere)) <= sc.quantisation(cal, 0.9)
    assert np.linalg.norm(tr.point - sphere.centre) < 0.005


def test_box_centre_within_a_tenth_of_its_size_unless_slanted_in_depth():
    """A compact box's estimate lies within a tenth of its half diagonal of its centre; a bar
    slanted in depth along the baseline reads 2 to 5 cm too far."""
    cal = sc.rectified_pair()
    lv, rv = sc.pinhole_view(cal.left.P), sc.pinhole_view(cal.right.P)
    compact = [((0.05, -0.02, 1.0), (0.04, 0.03, 0.05), sc.rotation(0.3, 0.5, 0.1)),
               ((0.2, 0.1, 0.7), (0.05, 0.05, 0.05), np.eye(3)),
               ((-0.15, 0.05, 1.3), (0.03, 0.05, 0.04), sc.rotation(0.2, -0.4, 0.6))]
    for c, half, rot in compact:
        box = sc.Box(np.array(c), np.array(half), rot)
        tr = stereo.triangulate(cal, *sc.centroids(box, lv, rv))
        assert tr.valid, tr
        # within 10% of the half diagonal of the box centre: a compact box is nearly a sphere
        assert np.linalg.norm(tr.point - c) <= 0.1 * np.linalg.norm(half), (c, tr.point - c)
    # the worst case: a 20 cm bar slanted 46 degrees in depth, along the baseline; each
    # image's centroid is the image of another point of the bar, so depth is off by a quarter
    # of the bar's depth extent (its ends are 14 cm apart in depth)
    bar = sc.Box(np.array([-0.1, 0.0, 1.5]), np.array([0.1, 0.05, 0.02]), sc.rotation(0, 0.8, 0))
    tr = stereo.triangulate(cal, *sc.centroids(bar, lv, rv))
    err = tr.point - bar.centre
    assert tr.valid and 0.02 < err[2] < 0.05 and abs(err[0]) < 0.005


def test_dlt_converging_cameras():
    """Two cameras toed in towards each other (not a rectified pair): linear triangulation."""
    pl, pr, cal = sc.converging_pair()
    assert not cal.is_rectified() and abs(cal.baseline - 0.2) < 1e-12
    sphere = sc.Sphere(np.array([0.1, 0.03, 1.0]), 0.05)
    tr = stereo.triangulate(cal, *sc.centroids(sphere, sc.pinhole_view(pl), sc.pinhole_view(pr)))
    assert tr.valid and tr.method == 'dlt' and tr.reprojection < 0.1, tr
    # P_left = K [R_left | 0]: the left camera's frame is the reference frame turned by R_left
    model = sc.model_point(cal, sphere)
    assert np.linalg.norm(tr.point - model) <= sc.quantisation(cal, 1.0)
    # the object lies on opposite sides of the two optical axes: both centroids shift
    # outward, 0.6 px more disparity in all, 6 mm nearer than the centre
    centre = sc.rotation(ry=0.1) @ sphere.centre
    assert 0.004 < np.linalg.norm(model - centre) < 0.007
    with pytest.raises(ValueError, match='not a rectified pair'):
        stereo.triangulate(cal, (1, 2), (3, 4), method='rectified')


def test_dlt_converging_cameras_from_raw_centroids():
    """P = K [R | t] as ``projection`` gives (cameras calibrated apart), R = I, D = 0: the raw
    centroids are the rectified ones, so the same point (P[:, :3] = K R turned each ray by
    the extrinsic R a second time: up to 113 mm off at 5 degrees of toe-in, yet valid)."""
    pl, pr, cal = sc.converging_pair()
    for x in ([0.1, 0.03, 1.0], [-0.2, 0.1, 0.7], [0.3, -0.2, 1.5]):
        ul, ur = stereo.project(pl, np.array(x)), stereo.project(pr, np.array(x))
        rect = stereo.triangulate(cal, ul, ur)
        raw = stereo.triangulate(cal, ul, ur, rectified=False)
        assert np.allclose(raw.point, rect.point, atol=1e-9, rtol=0), raw.point - rect.point
        assert rect.valid and raw.valid and raw.method == 'dlt', raw
    k = sc.intrinsics()
    assert np.allclose(cal.left.intrinsic, k, atol=1e-9) and \
        np.allclose(cal.right.intrinsic, k, atol=1e-9)


def test_rectified_p_is_its_own_intrinsic_factor():
    """CameraInfo's P[:, :3] is already upper triangular: the raw path projects with it as
    given (bitwise), with or without a rectification rotation R and lens distortion."""
    rect = sc.rectified_pair()
    k = sc.intrinsics(480.0, 322.0, 236.0)
    p = rect.right.P.copy()
    p[0, 1] = 0.3                                           # skew: still triangular
    cam = stereo.Camera(k, p, sc.rotation(0.01, -0.02, 0.005), sc.W, sc.H, 'r',
                        np.array([-0.25, 0.08, 0.001, -0.0005, 0.0]))
    assert cam.intrinsic is cam.P[:, :3] or np.array_equal(cam.intrinsic, cam.P[:, :3])
    for uv in ([10.0, 20.0], [320.0, 240.0], [600.5, 470.25]):
        x = np.linalg.solve(k, np.array([uv[0], uv[1], 1.0]))
        xy = stereo.undistort(x[:2] / x[2], cam.D)
        q = cam.P[:, :3] @ (cam.R @ np.array([xy[0], xy[1], 1.0]))
        assert np.array_equal(cam.rectify(uv), q[:2] / q[2])


def test_raw_distorted_images_with_rectification_rotation():
    """Centroids of raw images (lens distortion, rectification rotations R): mapped into the
    rectified images first; the point is reported in the left camera's (unrectified) frame."""
    rect = sc.rectified_pair()
    d = np.array([-0.25, 0.08, 0.001, -0.0005, 0.0])
    rl, rr = sc.rotation(0.01, -0.02, 0.005), sc.rotation(-0.01, 0.015, 0.0)
    k = sc.intrinsics(480.0, 322.0, 236.0)
    left = stereo.Camera(k, rect.left.P, rl, sc.W, sc.H, 'left_optical', d)
    right = stereo.Camera(k, rect.right.P, rr, sc.W, sc.H, 'right_optical', d)
    cal = stereo.Calibration(left, right)
    c, r = np.array([0.08, -0.05, 0.9]), 0.05      # in the left rectified frame
    lv, rv = sc.raw_view(left, np.zeros(3)), sc.raw_view(right, np.array([0.06, 0, 0]))
    ul, ur = sc.centroids(sc.Sphere(c, r), lv, rv)
    raw_rows = abs(ul[1] - ur[1])
    tr = stereo.triangulate(cal, ul, ur, rectified=False)
    assert tr.valid and tr.row_error < raw_rows and tr.row_error < 0.2, (tr, raw_rows)
    # the distorted silhouette's centroid is not the undistorted one's: a few mm here
    assert np.linalg.norm(tr.point_rect - c) < 0.006
    assert np.allclose(tr.point, rl.T @ tr.point_rect)


def test_rectify_inverts_the_lens_model():
    k = sc.intrinsics()
    d = np.array([-0.3, 0.1, 0.002, 0.001, -0.02, 0.01, 0.0, 0.001])
    cam = stereo.Camera(k, np.hstack([k, np.zeros((3, 1))]), D=d,
                        distortion_model='rational_polynomial')
    for x, y in [(0.0, 0.0), (0.3, -0.2), (-0.5, 0.35)]:
        raw = k @ np.append(stereo.distort(np.array([x, y]), d), 1.0)
        assert np.allclose(cam.rectify(raw[:2]), (k @ [x, y, 1.0])[:2], atol=1e-6)


def test_rectify_inverts_an_endoscope_lens_at_the_image_corner():
    """A strong barrel lens (k1 = -0.4) at the corner of a 1920x1080 image: 20 fixed-point
    steps stopped 6.5 px short there ((2055.1, 1154.2)); the ray found must distort back onto
    the pixel within 1e-6 px."""
    k = np.array([[1000.0, 0, 959.5], [0, 1000.0, 539.5], [0, 0, 1]])
    d = np.array([-0.4, 0.2, 0, 0, 0])
    cam = stereo.Camera(k, np.hstack([k, np.zeros((3, 1))]), D=d)
    corner = np.array([1918.5, 1077.5])
    rect = cam.rectify(corner)
    back = k @ np.append(stereo.distort(np.linalg.solve(k, np.append(rect, 1.0))[:2], d), 1.0)
    assert np.linalg.norm(back[:2] - corner) < 1e-6, back[:2] - corner
    assert np.allclose(rect, [2060.8, 1157.4], atol=0.05), rect
    assert np.linalg.norm(cam.unrectify(rect) - corner) < 1e-6
    # and the other way: a ray past the corner, distorted, comes back
    for x, y in [(1.2, 0.7), (-1.25, -0.6), (0.9, -0.8)]:
        raw = k @ np.append(stereo.distort(np.array([x, y]), d), 1.0)
        assert np.linalg.norm(cam.rectify(raw[:2]) - (k @ [x, y, 1.0])[:2]) < 1e-6


def test_raw_centroid_that_no_ray_images_onto_is_refused():
    """An absurd lens (k1 = -5: radii fold back beyond 0.26 f): a centroid 500 px from the
    principal point is imaged by no ray; 20 fixed-point steps gave some ray, silently."""
    cal = sc.raw_pair(np.array([-5.0, 0, 0, 0, 0]))
    tr = stereo.triangulate(cal, (1459.5, 539.5), (1449.5, 539.5), rectified=False)
    assert tr.point is None, tr
    assert not tr.valid and tr.reason == stereo.NOT_UNDISTORTED, tr
    near = stereo.triangulate(cal, (1009.5, 539.5), (999.5, 539.5), rectified=False)
    assert near.valid, near                          # near the centre the lens is invertible


def test_raw_centroid_at_the_fold_of_the_lens_model_is_refused():
    """k3 < 0 (endoscopes): r (1 + k1 r^2 + k2 r^4 + k3 r^6) peaks at r = 1.538; around it
    two rays image onto one pixel (a ray past the peak came back 34 mm off, valid): refused;
    the converged rays inside are exact."""
    d = np.array([-0.38, 0.16, 0, 0, -0.03])
    r = np.linspace(1.3, 1.7, 400001)
    r_fold = r[np.argmax(r * (1 + r ** 2 * (d[0] + r ** 2 * (d[1] + r ** 2 * d[4]))))]
    assert 1.53 < r_fold < 1.545
    for radius in (r_fold - 0.002, r_fold, r_fold + 0.002):
        xy = np.array([0.6, 0.8]) * radius
        assert np.all(np.isnan(stereo.undistort(stereo.distort(xy, d), d))), radius
    xy = np.array([0.6, 0.8]) * 1.45
    assert np.abs(stereo.undistort(stereo.distort(xy, d), d) - xy).max() < 1e-9
    cal = sc.raw_pair(d)
    raw = cal.left.K @ np.append(stereo.distort(np.array([0.6, 0.8]) * r_fold, d), 1.0)
    tr = stereo.triangulate(cal, raw[:2], raw[:2] - [10, 0], rectified=False)
    assert not tr.valid and tr.reason == stereo.NOT_UNDISTORTED, tr


@pytest.mark.parametrize('left, right, reason', [
    (None, (300.0, 240.0), stereo.NOT_VISIBLE_LEFT),
    ((300.0, 240.0), None, stereo.NOT_VISIBLE_RIGHT),
    ((float('nan'), 240.0), (300.0, 240.0), stereo.NOT_FINITE),
    ((300.0, 240.0), (300.0, float('inf')), stereo.NOT_FINITE),
    ((300.0, 240.0), (300.0, 240.0), stereo.SMALL_DISPARITY),     # zero disparity
    ((300.5, 240.0), (300.0, 240.0), stereo.SMALL_DISPARITY),     # below 1 px
    ((290.0, 240.0), (300.0, 240.0), stereo.NEGATIVE_DISPARITY),  # swapped, or a bad Tx
    ((330.0, 240.0), (300.0, 250.0), stereo.ROW_ERROR),           # not the same object
])
def test_bad_centroid_pair_gives_an_invalid_estimate_with_the_reason(left, right, reason):
    """A centroid missing or not finite, a disparity too small or negative, or rows apart: no
    valid estimate, the reason said; a row error keeps its point for inspection."""
    tr = stereo.triangulate(sc.rectified_pair(), left, right)
    assert not tr.valid and tr.reason == reason
    if reason == stereo.ROW_ERROR:
        assert tr.point is not None and tr.row_error == 10.0   # kept for inspection


def test_object_seen_by_one_camera_only():
    """A sphere outside the right camera's field of view: empty mask, no estimate."""
    cal = sc.rectified_pair()
    sphere = sc.Sphere(np.array([-0.31, 0.0, 0.5]), 0.01)
    ul, ur = sc.centroids(sphere, sc.pinhole_view(cal.left.P), sc.pinhole_view(cal.right.P))
    assert ul is not None and ur is None
    tr = stereo.triangulate(cal, ul, ur)
    assert not tr.valid and tr.reason == stereo.NOT_VISIBLE_RIGHT and tr.point is None


def test_dlt_refuses_a_point_behind_at_infinity_or_with_a_large_reprojection():
    cal = sc.rectified_pair()
    behind = stereo.triangulate(cal, (290.0, 240.0), (300.0, 240.0), method='dlt')
    assert not behind.valid and behind.reason == stereo.BEHIND
    far = stereo.triangulate(cal, (300.0, 240.0), (300.0, 240.0), method='dlt')
    assert not far.valid and far.reason == stereo.AT_INFINITY and far.point is None
    skew = stereo.triangulate(cal, (330.0, 240.0), (300.0, 260.0), method='dlt')
    assert not skew.valid and skew.reason == stereo.REPROJECTION and skew.reprojection > 4


def test_bad_calibration_is_refused():
    k = sc.intrinsics()
    p = np.hstack([k, np.zeros((3, 1))])
    with pytest.raises(ValueError, match='not calibrated'):
        stereo.Camera(np.zeros((3, 3)), np.zeros((3, 4)))
    with pytest.raises(ValueError, match='3x4'):
        stereo.Camera(k, np.zeros(9))
    with pytest.raises(ValueError, match='NaN'):
        stereo.Camera(k, np.where(p == 0, np.nan, p))
    with pytest.raises(ValueError, match='rotation'):
        stereo.Camera(k, p, R=2 * np.eye(3))
    with pytest.raises(ValueError, match='equidistant'):
        stereo.Camera(k, p, D=[0.1, 0, 0, 0], distortion_model='equidistant')
    with pytest.raises(ValueError, match='min_disparity_px'):
        stereo.Limits(min_disparity_px=-1)
    stereo.Limits(min_disparity_px=0)              # 0 is a bound: infinity is still refused
    for name in ('max_row_error_px', 'max_reprojection_px'):   # 0 would refuse every position
        with pytest.raises(ValueError, match=f'{name} must be finite and > 0, got 0'):
            stereo.Limits(**{name: 0.0})
    with pytest.raises(ValueError, match='method'):
        stereo.triangulate(sc.rectified_pair(), (1, 2), (3, 4), method='sgbm')


def _pair(pl: np.ndarray, pr: np.ndarray) -> stereo.Calibration:
    k = pl[:, :3]
    return stereo.Calibration(stereo.Camera(k, pl, width=sc.W, height=sc.H, frame_id='first'),
                              stereo.Camera(pr[:, :3], pr, width=sc.W, height=sc.H,
                                            frame_id='second'))


def test_projected_points_come_back_exactly_with_fx_fy_and_cx_apart():
    """Known points projected into a rectified pair whose fx != fy and whose right cx differs
    (stereo_image_proc's convention): the disparity's cx correction and fy for Y, exactly."""
    kl = np.array([[800.0, 0, 640.3], [0, 760.0, 360.2], [0, 0, 1]])
    kr = kl.copy()
    kr[0, 2] = 655.9
    b = 0.004
    cal = _pair(np.hstack([kl, np.zeros((3, 1))]), np.hstack([kr, [[-800.0 * b], [0], [0]]]))
    g = np.random.default_rng(3)
    for x in g.uniform([-0.02, -0.02, 0.03], [0.02, 0.02, 0.2], size=(20, 3)):
        ul, ur = stereo.project(cal.left.P, x), stereo.project(cal.right.P, x)
        tr = stereo.triangulate(cal, ul, ur)
        assert tr.valid and tr.method == 'rectified'
        assert np.allclose(tr.point, x, atol=1e-9, rtol=0)


def test_cameras_given_right_first_report_in_the_first_cameras_frame():
    """The first camera's P carries Tx (cameras: [right, left] of a driver that rectifies to
    the left camera): the point is in the first camera's frame, not the reference frame."""
    k = sc.intrinsics()
    b = 0.06
    right_p = np.hstack([k, [[-k[0, 0] * b], [0], [0]]])      # the first camera given
    left_p = np.hstack([k, np.zeros((3, 1))])
    cal = _pair(right_p, left_p)
    x = np.array([0.05, -0.02, 0.8])                            # in the reference frame
    tr = stereo.triangulate(cal, stereo.project(right_p, x), stereo.project(left_p, x))
    assert tr.valid
    assert np.allclose(tr.point, x - [b, 0, 0], atol=1e-9, rtol=0)   # the first camera's


def test_a_baseline_above_one_unit_warns_of_millimetres():
    """P's units are the positions' units (metres for ROS): a 4.5 mm endoscope calibrated in
    millimetres (Tx = -fx * 4.5) is kept, in millimetres, with a warning."""
    assert sc.rectified_pair().warnings == () and sc.rectified_pair(0.0045).warnings == ()
    assert sc.rectified_pair(1.0).warnings == ()
    mm = sc.rectified_pair(4.5)
    assert abs(mm.baseline - 4.5) < 1e-12 and len(mm.warnings) == 1
    assert 'baseline 4.5 ' in mm.warnings[0] and 'millimetres?' in mm.warnings[0]
    x = np.array([5.0, -2.0, 60.0])                                 # mm
    tr = stereo.triangulate(mm, stereo.project(mm.left.P, x), stereo.project(mm.right.P, x))
    assert tr.valid and np.allclose(tr.point, x, atol=1e-9, rtol=0)


def test_a_pair_without_a_baseline_or_a_singular_camera_is_refused():
    k = sc.intrinsics()
    p = np.hstack([k, np.zeros((3, 1))])
    with pytest.raises(ValueError, match='not a stereo calibration'):
        _pair(p, p.copy())                                   # two cameras calibrated apart
    with pytest.raises(ValueError, match='K is singular'):
        stereo.Camera(np.array([[0, 0, 320.0], [0, 0, 240.0], [0, 0, 1]]), p)
