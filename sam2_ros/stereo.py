"""3D centroids of tracked objects from a calibrated camera pair (numpy only, no ROS).

Given the mask centroid of one object in the left and in the right image, ``triangulate``
returns the 3D point where the two centroid rays meet, in the left camera's frame, with its
validity and, when invalid, the reason.

Calibration follows ``sensor_msgs/CameraInfo`` (``sam2_ros/ros/stereo_msgs.py`` converts the
messages): per camera the intrinsics K, the distortion D, the rectification rotation R and
the projection P of the *rectified* image. For a stereo pair calibrated together (ROS'
``camera_calibration``, a stereo camera's driver) both P project points given in the left
camera's rectified frame; the right P carries ``Tx = -fx * baseline`` in P[0, 3].

Two methods:
  * ``'rectified'``: both images are row-aligned (P equal up to cx and Tx): depth from the
    disparity ``Z = (Tx_l - Tx_r) / (u_l - u_r - (cx_l - cx_r))``, the row taken as the
    mean of the two rows; validity: disparity >= ``min_disparity_px``, row (epipolar) error
    ``|v_l - v_r|`` <= ``max_row_error_px``;
  * ``'dlt'``: any two P of one frame (e.g. ``projection(K, R, t)`` from extrinsics): linear
    triangulation (the homogeneous least-squares solution of the four projection
    equations); validity: positive depth in both cameras, reprojection error <=
    ``max_reprojection_px``.
``'auto'`` takes the closed form when the pair is rectified, else the DLT. Points come out in
P's units: metres for ROS (Tx = -fx * baseline in metres); ``Calibration.warnings`` says
when the baseline is above ``MAX_BASELINE`` (1, a calibration in millimetres?).

Both checks are epipolar: a centroid off the other's epipolar line by e px is e rows off in a
row-aligned pair, and reprojects about e / 2 px from both centroids in the DLT. They refuse
two centroids that are not of one point, such as one id given to two objects; two objects on
one epipolar line pass them, and only the depth range (``min_depth``, ``max_depth``: the
point's z in the left camera's frame, P's units) can refuse those.

What a mask centroid measures: the centroid of an object's silhouette, not the image of any
particular 3D point. For a convex object the two centroid rays pass near its centre, so the
triangulated point lies near the centre of the object (for a sphere, at its centre up to a
second-order term in radius / distance), not on its visible surface: it lies about half
the object's depth behind the centroid of the visible surface (for a sphere of radius r,
r / 2). test/engine/test_stereo.py measures both on rendered scenes.

Pixel coordinates are OpenCV's and ROS' (the centre of the top-left pixel is (0, 0)), as
``ObjectResult.centroid``. Centroids of raw (distorted, unrectified) images are mapped into
the rectified images first (``rectified=False``): the centroid of the distorted silhouette,
undistorted, is not exactly the centroid of the undistorted silhouette, so tracking the
rectified images (``image_rect``) is the more exact choice. Undistortion takes Newton steps
on the lens model; a centroid that the ray found does not map back onto within
``UNDISTORT_TOL_PX``, or one at a fold of the lens model (``sam2_ros.lens``), is invalid
(``NOT_UNDISTORTED``).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

# Camera, projection and the lens model are read here too (stereo.Camera, stereo.undistort)
from sam2_ros.lens import distort, undistort  # noqa: F401
from sam2_ros.stereo_camera import DISTORTION_MODELS, Camera, projection, rq  # noqa: F401

# Reasons an estimate is invalid (Triangulation.reason); '' when valid.
NOT_VISIBLE_LEFT = 'not visible in the left image'
NOT_VISIBLE_RIGHT = 'not visible in the right image'
NOT_FINITE = 'centroid not finite'
SMALL_DISPARITY = 'disparity below min_disparity_px'
NEGATIVE_DISPARITY = ('negative disparity: the right centroid is on the wrong side (left and '
                      'right images swapped, a Tx of the wrong sign, or one id on two objects?)')
# the same object in both images gives two centroids of one point: these say it was not
PAIRING = 'the centroids are not of one point (one id on two objects?)'
ROW_ERROR = f'row (epipolar) error above max_row_error_px: {PAIRING}'
BEHIND = 'behind a camera'
REPROJECTION = f'reprojection error above max_reprojection_px: {PAIRING}'
TOO_NEAR = 'depth below min_depth (one id on two objects?)'
TOO_FAR = 'depth above max_depth (one id on two objects?)'
AT_INFINITY = 'rays parallel (point at infinity)'
NOT_UNDISTORTED = ('undistortion did not converge: no single ray of the lens model (K, D) '
                   'images onto the raw centroid (at or past the fold of its periphery?)')
METHODS = ('auto', 'rectified', 'dlt')
UNDISTORT_TOL_PX = 0.01     # the ray found, distorted again: farther from the raw pixel, invalid
MAX_BASELINE = 1.0          # P's units: above, Calibration.warnings (millimetres for metres?)


@dataclass(frozen=True)
class Calibration:
    """A camera pair; points are reported in the left camera's frame."""

    left: Camera
    right: Camera

    def __post_init__(self) -> None:
        if self.baseline <= 1e-12 * max(1.0, abs(self.left.P).max()):
            raise ValueError('not a stereo calibration: both cameras have the same optical '
                             'centre (the right P has no Tx = -fx * baseline: calibrated '
                             'apart? calibrate the pair together)')

    def is_rectified(self, rtol: float = 1e-9) -> bool:
        """Both P equal up to cx and the x translation (row-aligned rectified images)."""
        pl, pr = self.left.P, self.right.P
        scale = max(abs(pl[0, 0]), abs(pl[1, 1]))
        same = np.ones((3, 4), bool)
        same[0, 2] = same[0, 3] = False
        return bool(np.allclose(pl[same], pr[same], atol=rtol * scale, rtol=0)
                    and np.allclose(pl[1:, 3], 0, atol=rtol * scale)
                    and np.allclose(pl[2, :3], [0, 0, 1], atol=rtol)
                    and pl[0, 1] == 0 and pl[0, 3] != pr[0, 3])

    @functools.cached_property
    def left_rect(self) -> Tuple[np.ndarray, np.ndarray]:
        """(Q [3, 3], o [3]): a point x of the frame both P project from is Q x + o in the left
        rectified frame. P_left = K' [Q | K'^-1 p4] (RQ of its 3x3 part): Q = I and o = minus
        the left centre for a rectified pair's P (o = 0 unless its Tx is not, e.g. cameras
        given right first). Once per calibration, not per point."""
        p = self.left.P
        k, q = rq(p[:, :3])
        return q, np.linalg.solve(k, p[:, 3])

    @property
    def baseline(self) -> float:
        """Distance between the two optical centres (m, P's units)."""
        return float(np.linalg.norm(centre(self.left.P) - centre(self.right.P)))

    @property
    def warnings(self) -> Tuple[str, ...]:
        """What looks wrong in a usable calibration, for the nodes to log (empty: none): a baseline
        above ``MAX_BASELINE`` (P's units) is a calibration in millimetres, most likely, and
        its 3D positions would be in millimetres too."""
        if self.baseline <= MAX_BASELINE:
            return ()
        return (f'stereo baseline {self.baseline:g} (from the right P\'s Tx = -fx * baseline) '
                f'is above {MAX_BASELINE:g}: over 1 m if in metres, as ROS expects; calibrated '
                f'in millimetres? 3D positions come out in the calibration\'s units',)


def centre(P: np.ndarray) -> np.ndarray:
    """The optical centre [3] of a finite camera P (its right null vector)."""
    return -np.linalg.solve(P[:, :3], P[:, 3])


# What each bound of Limits means: the nodes' parameters of the same names take these docs
LIMIT_DOCS = {
    'min_disparity_px': 'a row-aligned pair (two rectified P) gives a valid 3D position only '
                        'with a disparity of at least this many rectified pixels (smaller: too '
                        'far to tell; 0 still refuses infinity)',
    'max_row_error_px': 'a row-aligned pair (two rectified P, as stereo drivers publish) gives '
                        "a valid 3D position only when the object's two centroids lie at most "
                        'this many rectified rows apart',
    'max_reprojection_px': 'a pair that is not row-aligned (DLT) gives a valid 3D position only '
                           'when it reprojects within this many pixels of both centroids (a '
                           'centroid e px off the epipolar line reprojects about e/2 px off)',
    'min_depth': "a 3D position nearer than this (its z in the left camera's frame, in "
                 "camera_info P's units: metres) is invalid, as one id on two objects can "
                 'give; 0: only a point behind a camera (negative disparity) is refused',
    'max_depth': 'a 3D position farther than this (z, metres) is invalid, as one id on two '
                 'objects can give; 0: no bound (min_disparity_px bounds a row-aligned pair '
                 'at fx * baseline / min_disparity_px)',
}


@dataclass(frozen=True)
class Limits:
    """When an estimate counts as valid (pixels of the rectified images, depths in P's units;
    ``LIMIT_DOCS``)."""

    min_disparity_px: float = 1.0      # smaller: too far to tell (and zero: infinity)
    max_row_error_px: float = 4.0      # rectified rows of one object's two centroids
    max_reprojection_px: float = 4.0   # DLT: the point reprojected against the centroids
    # the scene's depth range: a property of the scene, not of the camera, so off by default
    min_depth: float = 0.0             # z in the left camera's frame; 0: in front is enough
    max_depth: float = 0.0             # 0: no bound

    def __post_init__(self) -> None:
        if not np.isfinite(self.min_disparity_px) or self.min_disparity_px < 0:
            raise ValueError(f'min_disparity_px must be finite and >= 0, got '
                             f'{self.min_disparity_px!r}')
        # an error of exactly 0 px never happens with measured centroids: every position
        # would be refused
        for name in ('max_row_error_px', 'max_reprojection_px'):
            value = getattr(self, name)
            if not np.isfinite(value) or value <= 0:
                raise ValueError(f'{name} must be finite and > 0, got {value!r}')
        for name in ('min_depth', 'max_depth'):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f'{name} must be finite and >= 0, got {value!r}')
        if 0 < self.max_depth <= self.min_depth:    # every position would be refused
            raise ValueError(f'max_depth must be 0 (no bound) or above min_depth '
                             f'({self.min_depth!r}), got {self.max_depth!r}')


@dataclass(frozen=True)
class Triangulation:
    """One object's 3D centroid from a pair of mask centroids.

    point: [3] in the left camera's frame (``frame_id``; metres when P is), None when there
    is no estimate (not visible, not finite, not undistorted, parallel rays); point_rect: the
    same in the left *rectified* frame (P's frame; equal when R_left is the identity). An invalid
    estimate keeps the point it computed, for inspection. disparity (rectified, px, after
    the cx difference), row_error (rectified, px) and reprojection (px, the larger of the
    two cameras) are NaN where not computed.
    """

    valid: bool
    reason: str
    method: str
    frame_id: str
    point: Optional[np.ndarray] = None
    point_rect: Optional[np.ndarray] = None
    disparity: float = float('nan')
    row_error: float = float('nan')
    reprojection: float = float('nan')


def triangulate(calib: Calibration, left: Optional[Sequence[float]],
                right: Optional[Sequence[float]], limits: Limits = Limits(),
                method: str = 'auto', rectified: bool = True) -> Triangulation:
    """The 3D centroid of one object from its mask centroids (x, y) in both images.

    Args:
        calib: the pair.
        left, right: the centroid in each image, None where the object is not visible there
            (empty mask, or object score <= 0).
        limits: validity bounds.
        method: 'auto', 'rectified' (ValueError unless the pair is) or 'dlt'.
        rectified: the centroids are pixels of the rectified images (False: of the raw
            images, mapped with each camera's K, D, R, P first).
    """
    if method not in METHODS:
        raise ValueError(f'method must be one of {METHODS}, got {method!r}')
    row_aligned = calib.is_rectified()
    if method == 'rectified' and not row_aligned:
        raise ValueError('method rectified: the two P are not a rectified pair')
    method = method if method != 'auto' else ('rectified' if row_aligned else 'dlt')
    fid = calib.left.frame_id
    for uv, reason in ((left, NOT_VISIBLE_LEFT), (right, NOT_VISIBLE_RIGHT)):
        if uv is None:
            return Triangulation(False, reason, method, fid)
    if not np.all(np.isfinite(np.asarray(left, np.float64))) or \
            not np.all(np.isfinite(np.asarray(right, np.float64))):
        return Triangulation(False, NOT_FINITE, method, fid)
    ul, ur = np.asarray(left, np.float64)[:2], np.asarray(right, np.float64)[:2]
    if not rectified:
        raw = ((calib.left, ul), (calib.right, ur))
        ul, ur = calib.left.rectify(ul), calib.right.rectify(ur)
        for (cam, uv), rect in zip(raw, (ul, ur)):
            # the ray found must image onto the centroid: a stalled solver (past a fold of the
            # lens model, an absurd D) gives a wrong ray, which would give a wrong position
            if not np.linalg.norm(cam.unrectify(rect) - uv) <= UNDISTORT_TOL_PX:   # NaN too
                return Triangulation(False, NOT_UNDISTORTED, method, fid)
    if method == 'rectified':
        return in_depth_range(_from_disparity(calib, ul, ur, limits), limits)
    return in_depth_range(_from_dlt(calib, ul, ur, limits), limits)


def in_depth_range(t: Triangulation, limits: Limits) -> Triangulation:
    """``t``, invalid (``TOO_NEAR``, ``TOO_FAR``) where its point's z in the left camera's frame
    is outside ``limits``' depth range; an invalid one as it is (its first reason stays)."""
    if not t.valid:
        return t
    z = float(t.point[2])
    if z < limits.min_depth:
        return dataclasses.replace(t, valid=False, reason=TOO_NEAR)
    if limits.max_depth > 0 and z > limits.max_depth:
        return dataclasses.replace(t, valid=False, reason=TOO_FAR)
    return t


def _from_disparity(calib: Calibration, ul: np.ndarray, ur: np.ndarray,
                    limits: Limits) -> Triangulation:
    pl, pr = calib.left.P, calib.right.P
    fx, fy, cy = pl[0, 0], pl[1, 1], pl[1, 2]
    b = pl[0, 3] - pr[0, 3]                       # fx * baseline (sign: which side right is)
    disparity = float(np.sign(b) * ((ul[0] - ur[0]) - (pl[0, 2] - pr[0, 2])))
    row_error = float(abs(ul[1] - ur[1]))
    base = dict(method='rectified', frame_id=calib.left.frame_id, disparity=disparity,
                row_error=row_error)
    if disparity <= -max(limits.min_disparity_px, np.finfo(float).tiny):
        return Triangulation(False, NEGATIVE_DISPARITY, **base)
    if disparity < max(limits.min_disparity_px, np.finfo(float).tiny):
        return Triangulation(False, SMALL_DISPARITY, **base)
    z = abs(b) / disparity
    v = 0.5 * (ul[1] + ur[1])
    x = np.array([((ul[0] - pl[0, 2]) * z - pl[0, 3]) / fx, (v - cy) * z / fy, z])
    reproj = _reprojection(calib, x, ul, ur)
    ok, reason = (False, ROW_ERROR) if row_error > limits.max_row_error_px else (True, '')
    point, rect = in_left(calib, x)
    return Triangulation(ok, reason, point=point, point_rect=rect, reprojection=reproj,
                         **base)


def _from_dlt(calib: Calibration, ul: np.ndarray, ur: np.ndarray,
              limits: Limits) -> Triangulation:
    pl, pr = calib.left.P, calib.right.P
    a = np.stack([ul[0] * pl[2] - pl[0], ul[1] * pl[2] - pl[1],
                  ur[0] * pr[2] - pr[0], ur[1] * pr[2] - pr[1]])
    a /= np.linalg.norm(a, axis=1, keepdims=True)      # each equation weighs the same
    x = np.linalg.svd(a)[2][-1]                        # [4] homogeneous, unit norm
    base = dict(method='dlt', frame_id=calib.left.frame_id)
    if abs(x[3]) < 1e-12 * np.linalg.norm(x[:3]):
        return Triangulation(False, AT_INFINITY, **base)
    world = x[:3] / x[3]
    reproj = _reprojection(calib, world, ul, ur)
    point, rect = in_left(calib, world)
    out = dict(point=point, point_rect=rect, reprojection=reproj, **base)
    if min(depth(pl, world), depth(pr, world)) <= 0:
        return Triangulation(False, BEHIND, **out)
    if reproj > limits.max_reprojection_px:
        return Triangulation(False, REPROJECTION, **out)
    return Triangulation(True, '', **out)


def in_left(calib: Calibration, x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """A point [3] of the frame both P project from -> (the left camera's frame, the left
    rectified frame: ``Calibration.left_rect``, then R_left^T into the camera's own frame)."""
    q, o = calib.left_rect
    rect = q @ x + o
    return calib.left.R.T @ rect, rect


def depth(P: np.ndarray, point: np.ndarray) -> float:
    """Signed depth of ``point`` [3] in front of camera P (positive: in front)."""
    m = P[:, :3]
    w = P[2] @ np.append(point, 1.0)
    return float(np.sign(np.linalg.det(m)) * w / np.linalg.norm(m[2]))


def project(P: np.ndarray, point: np.ndarray) -> np.ndarray:
    """Pixel [2] of ``point`` [3] in camera P."""
    p = P @ np.append(point, 1.0)
    return p[:2] / p[2]


def _reprojection(calib: Calibration, rect: np.ndarray, ul: np.ndarray,
                  ur: np.ndarray) -> float:
    return float(max(np.linalg.norm(project(calib.left.P, rect) - ul),
                     np.linalg.norm(project(calib.right.P, rect) - ur)))


def mask_centroid(mask: np.ndarray) -> Optional[Tuple[float, float]]:
    """(x, y) mean pixel of a [H, W] bool mask, None if empty (as ``ObjectResult.centroid``)."""
    ys, xs = np.nonzero(mask)
    if xs.size == 0:
        return None
    return float(xs.mean()), float(ys.mean())
