"""One camera as ``sensor_msgs/CameraInfo`` describes it (numpy only, no ROS): its raw image's
intrinsics K and lens D, its rectification rotation R and the projection P of its rectified
image, and the mapping of pixels between its raw and rectified images (``sam2_ros.lens``).
:mod:`sam2_ros.stereo` pairs two of them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Sequence, Tuple

import numpy as np

from sam2_ros.lens import distort, undistort

DISTORTION_MODELS = ('plumb_bob', 'rational_polynomial')


@dataclass(frozen=True)
class Camera:
    """One camera as ``sensor_msgs/CameraInfo`` describes it (arrays, not the message).

    K [3, 3] intrinsics of the raw image; D distortion coefficients (``distortion_model``
    plumb_bob: k1 k2 p1 p2 k3; rational_polynomial: k1 k2 p1 p2 k3 k4 k5 k6; empty or
    all zero: none); R [3, 3] rotation from the camera frame into the rectified frame;
    P [3, 4] projection of the rectified image; width, height in pixels; frame_id of the
    camera's optical frame.
    """

    K: np.ndarray
    P: np.ndarray
    R: np.ndarray = field(default_factory=lambda: np.eye(3))
    width: int = 0
    height: int = 0
    frame_id: str = ''
    D: np.ndarray = field(default_factory=lambda: np.zeros(0))
    distortion_model: str = 'plumb_bob'

    def __post_init__(self) -> None:
        for name, shape in (('K', (3, 3)), ('P', (3, 4)), ('R', (3, 3))):
            value = np.asarray(getattr(self, name), np.float64)
            if value.size != shape[0] * shape[1]:
                raise ValueError(f'{name} must have {shape[0]}x{shape[1]} values, '
                                 f'got {value.size}')
            if not np.all(np.isfinite(value)):
                raise ValueError(f'{name} has NaN or inf values')
            object.__setattr__(self, name, value.reshape(shape))
        d = np.asarray(self.D, np.float64).ravel()
        if not np.all(np.isfinite(d)):
            raise ValueError('D has NaN or inf values')
        object.__setattr__(self, 'D', d)
        if self.K[2, 2] == 0 or self.P[2, 2] == 0 or self.P[0, 0] == 0 or self.P[1, 1] == 0:
            raise ValueError('K or P is zero: the camera is not calibrated')
        for name, m in (('K', self.K), ('P[:, :3]', self.P[:, :3])):
            if abs(np.linalg.det(m)) <= 1e-12 * np.abs(m).max() ** 3:
                raise ValueError(f'{name} is singular: the camera is not calibrated')
        if not np.allclose(self.R @ self.R.T, np.eye(3), atol=1e-6) or \
                np.linalg.det(self.R) < 0:
            raise ValueError('R is not a rotation matrix')
        if int(self.width) < 0 or int(self.height) < 0:
            raise ValueError(f'width and height must be >= 0, got {self.width}x{self.height}')
        if np.any(d != 0):
            if self.distortion_model not in DISTORTION_MODELS:
                raise ValueError(f'distortion_model {self.distortion_model!r} is not supported '
                                 f'(supported: {DISTORTION_MODELS}); track the rectified '
                                 f'images instead')
            if d.size > (5 if self.distortion_model == 'plumb_bob' else 8):
                raise ValueError(f'{d.size} coefficients for {self.distortion_model}')

    @functools.cached_property
    def intrinsic(self) -> np.ndarray:
        """K' [3, 3], the upper-triangular factor of P[:, :3] = K' Q, which projects rays of
        the camera's rectified frame: P[:, :3] itself for CameraInfo's P = K' [I | t]; K for
        P = K [R | t] (``projection``), where P[:, :3] = K R would turn a ray that R (the
        camera's rectification rotation) already turned a second time."""
        m = self.P[:, :3]
        if m[1, 0] == 0 and m[2, 0] == 0 and m[2, 1] == 0:
            return m                  # already triangular: exactly as given, no rounding
        return rq(m)[0]

    def rectify(self, uv: Sequence[float]) -> np.ndarray:
        """A pixel of the raw image -> the same ray's pixel in the rectified image [2]
        (undistort with K, D; rotate with R; project with ``intrinsic``, as ROS'
        image_geometry ``rectifyPoint``); NaN where ``undistort`` is. Not checked:
        ``unrectify`` of the result is ``uv`` only where the undistortion converged."""
        x = np.linalg.solve(self.K, np.array([uv[0], uv[1], 1.0]))
        xy = undistort(x[:2] / x[2], self.D)
        p = self.intrinsic @ (self.R @ np.array([xy[0], xy[1], 1.0]))
        return p[:2] / p[2]

    def unrectify(self, uv: Sequence[float]) -> np.ndarray:
        """A pixel of the rectified image -> the raw image's pixel of the same ray [2] (the
        lens model forward: what ``rectify`` inverts)."""
        ray = self.R.T @ np.linalg.solve(self.intrinsic, np.array([uv[0], uv[1], 1.0]))
        xy = distort(ray[:2] / ray[2], self.D)
        p = self.K @ np.array([xy[0], xy[1], 1.0])
        return p[:2] / p[2]


def projection(K: np.ndarray, R: np.ndarray, t: np.ndarray) -> np.ndarray:
    """P = K [R | t] [3, 4] of a camera whose frame is x_cam = R x + t in the reference frame
    (for two cameras calibrated apart, with their extrinsics from tf; the camera's own R
    stays the identity: ``Camera.intrinsic`` takes K out of such a P for raw centroids)."""
    return np.asarray(K, np.float64) @ np.hstack([np.asarray(R, np.float64),
                                                  np.asarray(t, np.float64).reshape(3, 1)])


def rq(m: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """m [3, 3] = K Q: K upper triangular with a positive diagonal, Q orthonormal."""
    flip = np.eye(3)[::-1]
    q, r = np.linalg.qr((flip @ m).T)
    k, q = flip @ r.T @ flip, flip @ q.T
    s = np.diag(np.sign(np.diag(k)))
    return k @ s, s @ q
