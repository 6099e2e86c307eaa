"""One object id given to two objects (one object clicked in the left image, another in the
right): the plausibility checks of sam2_ros/stereo.py on rendered scenes of known geometry.

The epipolar checks (rows apart, reprojection; test_stereo.py's
test_bad_centroid_pair_gives_an_invalid_estimate_with_the_reason) refuse two centroids off
each other's epipolar line; two objects at one height lie on one row of a rectified pair and
pass them, so the scene's depth range (Limits.min_depth, max_depth) is what refuses those, on
every path (disparity, DLT, raw centroids). The same objects paired rightly, their centroids
a pixel off as two trackers' masks are, stay valid.
"""

from __future__ import annotations

import numpy as np
import pytest

from sam2_ros import stereo
import stereo_scenes as sc


# three spheres at one height (one row in both images): one id on two of them passes the row
# (epipolar) check, whatever the pairing
ONE_ROW = {'a': ((0.0, 0.02, 0.5), 0.04), 'b': ((-0.1, 0.024, 0.6), 0.04),
           'c': ((0.05, 0.028, 0.7), 0.04)}


def test_one_id_on_two_objects_at_one_height_is_refused_by_the_depth_range():
    """Sphere a clicked in the left image and b (or c) in the right with one id: the centroids
    lie on one row, so only the scene's depth range tells the pairing is wrong (without it,
    a at 0.5 m and b at 0.6 m came out as one valid point 0.22 m away). The same objects
    paired rightly, their centroids a pixel off, stay valid."""
    workspace = stereo.Limits(min_depth=0.4, max_depth=1.0)
    cal = sc.rectified_pair()
    lv, rv = sc.pinhole_view(cal.left.P), sc.pinhole_view(cal.right.P)
    spheres = {k: sc.Sphere(np.array(c), r) for k, (c, r) in ONE_ROW.items()}
    seen = {k: sc.centroids(s, lv, rv) for k, s in spheres.items()}
    wrong = {(k, j): stereo.triangulate(cal, seen[k][0], seen[j][1], workspace)
             for k in seen for j in seen if k != j}
    assert stereo.triangulate(cal, seen['a'][0], seen['b'][1]).valid   # no range: accepted
    for pair, t in wrong.items():
        assert not t.valid and 'one id on two objects?' in t.reason, (pair, t)
        assert t.row_error < 0.1, (pair, t)              # on one row: the epipolar check passes
    assert {p: t.reason for p, t in wrong.items() if t.point is not None} == {
        ('a', 'b'): stereo.TOO_NEAR, ('a', 'c'): stereo.TOO_FAR, ('c', 'a'): stereo.TOO_NEAR,
        ('c', 'b'): stereo.TOO_NEAR}
    assert wrong['b', 'a'].reason == stereo.NEGATIVE_DISPARITY      # and the others: swapped
    rng = np.random.default_rng(7)
    for k, (ul, ur) in seen.items():
        model = sc.model_point(cal, spheres[k])
        for _ in range(20):
            tr = stereo.triangulate(cal, sc.jittered(ul, rng), sc.jittered(ur, rng), workspace)
            assert tr.valid, (k, tr)
            # 2 px of disparity at most (1 px in each image)
            assert np.linalg.norm(tr.point - model) <= 20 * sc.quantisation(cal, model[2]), k


def distorted_rotated_pair() -> tuple:
    """Raw images of a lens with distortion and rectification rotations (as
    test_stereo.py's raw test): (Calibration, left view, right view)."""
    rect = sc.rectified_pair()
    d = np.array([-0.25, 0.08, 0.001, -0.0005, 0.0])
    k = sc.intrinsics(480.0, 322.0, 236.0)
    left = stereo.Camera(k, rect.left.P, sc.rotation(0.01, -0.02, 0.005), sc.W, sc.H, 'l', d)
    right = stereo.Camera(k, rect.right.P, sc.rotation(-0.01, 0.015, 0.0), sc.W, sc.H, 'r', d)
    return (stereo.Calibration(left, right), sc.raw_view(left, np.zeros(3)),
            sc.raw_view(right, np.array([0.06, 0, 0])))


def test_one_id_on_two_objects_at_two_heights_is_refused_by_the_epipolar_check():
    """Objects at other heights: their centroids are not on one epipolar line, whichever path
    measures it (rows of a rectified pair, of raw images rectified first; the DLT's
    reprojection for cameras toed in), and the reason says what it means; each object with
    itself, a pixel off, passes."""
    # both pairings with a positive disparity, 60 rows apart
    a, b = (sc.Sphere(np.array([0.0, -0.03, 0.6]), 0.04),
            sc.Sphere(np.array([0.01, 0.05, 0.7]), 0.04))
    rect = sc.rectified_pair()
    pl, pr, toed = sc.converging_pair()
    raw, raw_l, raw_r = distorted_rotated_pair()
    rng = np.random.default_rng(11)
    for cal, lv, rv, rectified, reason in (
            (rect, sc.pinhole_view(rect.left.P), sc.pinhole_view(rect.right.P), True,
             stereo.ROW_ERROR),
            (raw, raw_l, raw_r, False, stereo.ROW_ERROR),
            (toed, sc.pinhole_view(pl), sc.pinhole_view(pr), True, stereo.REPROJECTION)):
        (al, ar), (bl, br) = sc.centroids(a, lv, rv), sc.centroids(b, lv, rv)
        for ul, ur in ((al, br), (bl, ar)):
            t = stereo.triangulate(cal, ul, ur, rectified=rectified)
            assert not t.valid and t.reason == reason, t
            assert 'the centroids are not of one point (one id on two objects?)' in t.reason
        for ul, ur in ((al, ar), (bl, br)):
            for _ in range(10):
                t = stereo.triangulate(cal, sc.jittered(ul, rng), sc.jittered(ur, rng),
                                       rectified=rectified)
                assert t.valid, t


def test_the_depth_range_holds_for_the_dlt_and_raw_centroids():
    """The range bounds the reported point's z (the left camera's frame) on every path: DLT of
    cameras toed in, raw centroids of a distorted endoscope pair (4.5 mm baseline, metres)."""
    pl, pr, cal = sc.converging_pair()
    limits = stereo.Limits(min_depth=0.5, max_depth=2.0)
    for z, reason in ((0.3, stereo.TOO_NEAR), (1.0, ''), (3.0, stereo.TOO_FAR)):
        x = np.array([0.1, 0.03, z])
        tr = stereo.triangulate(cal, stereo.project(pl, x), stereo.project(pr, x), limits)
        assert tr.method == 'dlt' and tr.reason == reason and tr.valid == (not reason), tr
        assert stereo.triangulate(cal, stereo.project(pl, x), stereo.project(pr, x)).valid
    d = np.array([-0.25, 0.08, 0, 0, 0])
    cal = sc.raw_pair(d)
    limits = stereo.Limits(min_depth=0.02, max_depth=0.2)
    for z, reason in ((0.01, stereo.TOO_NEAR), (0.05, ''), (0.5, stereo.TOO_FAR)):
        x = np.array([0.002, -0.001, z])
        raw = [cam.K @ np.append(stereo.distort((x - [b, 0, 0])[:2] / z, d), 1.0)
               for cam, b in ((cal.left, 0.0), (cal.right, 0.0045))]
        tr = stereo.triangulate(cal, raw[0][:2], raw[1][:2], limits, rectified=False)
        assert tr.reason == reason and tr.valid == (not reason), (z, tr)
        assert abs(tr.point[2] - z) < 1e-6 * z


def test_depth_range_bounds_are_checked():
    stereo.Limits(min_depth=0.5)                    # max_depth 0: no upper bound
    for kw, message in (({'min_depth': -0.1}, 'min_depth must be finite and >= 0'),
                        ({'max_depth': float('nan')}, 'max_depth must be finite and >= 0'),
                        ({'min_depth': 0.5, 'max_depth': 0.5},
                         r'max_depth must be 0 \(no bound\) or above min_depth \(0.5\)')):
        with pytest.raises(ValueError, match=message):
            stereo.Limits(**kw)
