"""The lens models of ``sensor_msgs/CameraInfo`` (plumb_bob, rational_polynomial) on
normalised image coordinates: ``distort`` and its inverse ``undistort`` (numpy only).

Undistortion takes Newton steps on the model with its Jacobian: the fixed-point iteration of
OpenCV's ``undistortPoints`` (20 steps) stops 5-30 px short at the periphery of endoscope
lenses (k1 ~ -0.4, sometimes k3 < 0), where Newton converges quadratically.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

UNDISTORT_MAX_STEPS = 50
UNDISTORT_STEP = 1e-12      # normalised coordinates (~1e-9 px): converged
# Near a fold of the model (barrel lenses with k3 < 0 at the periphery) the lens compresses the
# image so much that two rays image onto about one pixel and a 0.1 px centroid error turns the
# ray by several px: below this singular value of the Jacobian there is no trustworthy ray.
UNDISTORT_MIN_SLOPE = 0.02


def undistort(xy_d: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Normalized distorted coordinates [..., 2] -> undistorted [..., 2] (plumb_bob or
    rational_polynomial coefficients ``d``): Newton steps on ``distort`` from ``xy_d``, each
    halved until it brings the distortion nearer to ``xy_d``. NaN where the solution lies at
    or past a fold of the lens model (the Jacobian's determinant <= 0, or its smaller
    singular value below ``UNDISTORT_MIN_SLOPE``) or on the far side of the centre (radial
    factor <= 0); elsewhere the last iterate, whether converged or not (an ``xy_d`` beyond
    the fold has no solution): ``distort`` it to check."""
    xy_d = np.asarray(xy_d, np.float64)
    d = np.asarray(d, np.float64).ravel()
    if d.size == 0 or not np.any(d):
        return xy_d
    xy = xy_d.copy()
    err = distort(xy, d) - xy_d
    live = np.ones(xy.shape[:-1], bool)
    with np.errstate(all='ignore'):       # a singular Jacobian: a NaN step ends that point
        for _ in range(UNDISTORT_MAX_STEPS):
            (a, b), (c, e) = _distortion_jacobian(xy, d)
            det = a * e - b * c
            step = np.stack([e * err[..., 0] - b * err[..., 1],
                             a * err[..., 1] - c * err[..., 0]], axis=-1) / det[..., None]
            live &= np.linalg.norm(step, axis=-1) > UNDISTORT_STEP     # NaN: False
            norm, t = np.linalg.norm(err, axis=-1), np.ones(live.shape)
            for _ in range(60):
                cand = xy - t[..., None] * step
                cand_err = distort(cand, d) - xy_d
                better = np.linalg.norm(cand_err, axis=-1) < norm
                if not np.any(live & ~better):
                    break
                t = np.where(better, t, t / 2)
            # a point that cannot come nearer is done (converged to rounding, or stuck)
            live &= better
            if not live.any():
                break
            xy = np.where(live[..., None], cand, xy)
            err = np.where(live[..., None], cand_err, err)
        (a, b), (c, e) = _distortion_jacobian(xy, d)
        jac = np.stack([np.stack([a, b], -1), np.stack([c, e], -1)], -2)
        unique = (a * e - b * c > 0) & (_distortion_terms(xy, d)[0] > 0) & \
            (np.linalg.svd(jac, compute_uv=False)[..., -1] >= UNDISTORT_MIN_SLOPE)
        return np.where(unique[..., None], xy, np.nan)


def distort(xy: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Normalized undistorted coordinates [..., 2] -> distorted [..., 2]: the lens model that
    ``undistort`` inverts (it renders the raw test images)."""
    xy = np.asarray(xy, np.float64)
    radial, tangential = _distortion_terms(xy, np.asarray(d, np.float64))
    return xy * radial[..., None] + tangential


def _radial(xy: np.ndarray, d: np.ndarray
            ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The coefficients padded to the rational model's 8 [8], x, y, r2 and the radial
    factor's numerator and denominator at ``xy`` (the parts the model and its Jacobian share)."""
    k = np.zeros(8)
    k[:d.size] = d
    x, y = xy[..., 0], xy[..., 1]
    r2 = x * x + y * y
    return (k, x, y, r2, 1 + r2 * (k[0] + r2 * (k[1] + r2 * k[4])),
            1 + r2 * (k[5] + r2 * (k[6] + r2 * k[7])))


def _distortion_terms(xy: np.ndarray, d: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The radial factor [...] and tangential offset [..., 2] of the lens model at ``xy``."""
    k, x, y, r2, num, den = _radial(xy, d)
    tangential = np.stack([2 * k[2] * x * y + k[3] * (r2 + 2 * x * x),
                           k[2] * (r2 + 2 * y * y) + 2 * k[3] * x * y], axis=-1)
    return num / den, tangential


def _distortion_jacobian(xy: np.ndarray, d: np.ndarray
                         ) -> Tuple[Tuple[np.ndarray, np.ndarray], Tuple[np.ndarray, np.ndarray]]:
    """((dxd/dx, dxd/dy), (dyd/dx, dyd/dy)) of ``distort`` at ``xy`` [..., 2]."""
    k, x, y, r2, num, den = _radial(xy, d)
    dnum, dden = k[0] + r2 * (2 * k[1] + 3 * r2 * k[4]), k[5] + r2 * (2 * k[6] + 3 * r2 * k[7])
    radial, dradial = num / den, (dnum * den - num * dden) / (den * den)    # d radial / d r2
    cross = 2 * x * y * dradial + 2 * k[2] * x + 2 * k[3] * y
    return ((radial + 2 * x * x * dradial + 2 * k[2] * y + 6 * k[3] * x, cross),
            (cross, radial + 2 * y * y * dradial + 6 * k[2] * y + 2 * k[3] * x))
