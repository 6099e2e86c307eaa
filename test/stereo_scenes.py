"""Synthetic stereo scenes with known geometry: spheres and boxes ray-cast into the images of a
camera pair, so a mask's pixels are exactly the pixels whose ray hits the object.

World coordinates are the left camera's rectified frame (x right, y down, z forward, metres).
A pixel (u, v) is the ray through the pixel centre at (u, v) (OpenCV's convention, which
``ObjectResult.centroid`` uses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from sam2_ros import stereo

W, H = 640, 480
F = 500.0


def intrinsics(f: float = F, cx: float = (W - 1) / 2, cy: float = (H - 1) / 2) -> np.ndarray:
    return np.array([[f, 0, cx], [0, f, cy], [0, 0, 1.0]])


def rotation(rx: float = 0.0, ry: float = 0.0, rz: float = 0.0) -> np.ndarray:
    """R = Rz Ry Rx of angles in radians."""
    cx, sx, cy, sy, cz, sz = (np.cos(rx), np.sin(rx), np.cos(ry), np.sin(ry), np.cos(rz),
                              np.sin(rz))
    rxm = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    rym = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rzm = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return rzm @ rym @ rxm


@dataclass
class View:
    """How one camera sees the world: its optical centre and the world direction of the ray
    of each pixel (homogeneous pixels [..., 3] -> directions [..., 3])."""

    origin: np.ndarray
    rays: Callable[[np.ndarray], np.ndarray]
    width: int = W
    height: int = H

    def directions(self) -> np.ndarray:
        v, u = np.mgrid[0:self.height, 0:self.width].astype(np.float64)
        return self.rays(np.stack([u, v, np.ones_like(u)], axis=-1))


def pinhole_view(P: np.ndarray) -> View:
    """The view of an ideal camera P = K [R | t] (no distortion)."""
    m_inv = np.linalg.inv(P[:, :3])
    return View(stereo.centre(P), lambda px: px @ m_inv.T)


def raw_view(cam: stereo.Camera, origin: np.ndarray) -> View:
    """The view of a camera's raw image: pixels undistorted with K, D, rotated by R into the
    rectified frame (parallel to the world for a rectified pair), from ``origin``."""
    k_inv = np.linalg.inv(cam.K)

    def rays(px: np.ndarray) -> np.ndarray:
        n = px @ k_inv.T
        xy = stereo.undistort(n[..., :2] / n[..., 2:], cam.D)
        return np.concatenate([xy, np.ones_like(xy[..., :1])], axis=-1) @ cam.R.T
    return View(np.asarray(origin, np.float64), rays)


@dataclass
class Sphere:
    centre: np.ndarray
    radius: float

    def hit(self, origin: np.ndarray, dirs: np.ndarray) -> np.ndarray:
        """[H, W] bool: the ray hits the sphere in front of the camera."""
        oc = origin - self.centre
        a = (dirs * dirs).sum(-1)
        b = 2 * (dirs @ oc)
        c = oc @ oc - self.radius ** 2
        disc = b * b - 4 * a * c
        t_far = (-b + np.sqrt(np.maximum(disc, 0))) / (2 * a)
        return (disc >= 0) & (t_far > 0)

    def visible_centroid(self, camera: np.ndarray) -> np.ndarray:
        """Area centroid of the cap visible from ``camera``: cos(cap) = r / D, the centroid
        at r (1 + r / D) / 2 from the centre towards the camera."""
        to_cam = camera - self.centre
        dist = np.linalg.norm(to_cam)
        return self.centre + to_cam / dist * self.radius * (1 + self.radius / dist) / 2


@dataclass
class Box:
    centre: np.ndarray
    half: np.ndarray                     # half extents along the box's axes
    rot: np.ndarray = field(default_factory=lambda: np.eye(3))   # box axes in the world

    def hit(self, origin: np.ndarray, dirs: np.ndarray) -> np.ndarray:
        """[H, W] bool by the slab method in the box's frame."""
        o = (origin - self.centre) @ self.rot
        d = dirs @ self.rot
        with np.errstate(divide='ignore', invalid='ignore'):
            t1 = (-self.half - o) / d
            t2 = (self.half - o) / d
        t_near = np.nanmax(np.minimum(t1, t2), axis=-1)
        t_far = np.nanmin(np.maximum(t1, t2), axis=-1)
        return (t_near <= t_far) & (t_far > 0)

    def visible_centroid(self, camera: np.ndarray) -> np.ndarray:
        """Area centroid of the faces facing ``camera`` (a convex box hides none of them)."""
        local = (camera - self.centre) @ self.rot
        centres, areas = [], []
        for axis in range(3):
            others = [i for i in range(3) if i != axis]
            for sign in (-1, 1):
                if sign * local[axis] > self.half[axis]:
                    c = np.zeros(3)
                    c[axis] = sign * self.half[axis]
                    centres.append(c)
                    areas.append(4 * self.half[others[0]] * self.half[others[1]])
        mean = np.average(np.array(centres), axis=0, weights=np.array(areas))
        return self.centre + self.rot @ mean


def rectified_pair(baseline: float = 0.06, f: float = F, cx_right: Optional[float] = None,
                   frame_id: str = 'left_optical') -> stereo.Calibration:
    """A rectified pair as a stereo calibration's CameraInfo: the right camera ``baseline``
    to the right, ``P_r[0, 3] = -f * baseline``."""
    k = intrinsics(f)
    kr = intrinsics(f, cx=k[0, 2] if cx_right is None else cx_right)
    left = stereo.Camera(k, np.hstack([k, np.zeros((3, 1))]), np.eye(3), W, H, frame_id)
    right = stereo.Camera(kr, np.hstack([kr, [[-f * baseline], [0], [0]]]), np.eye(3), W, H,
                          'right_optical')
    return stereo.Calibration(left, right)


def render(shape, view: View) -> np.ndarray:
    return shape.hit(view.origin, view.directions())


def centroids(shape, left: View, right: View):
    """The mask centroids (x, y) of ``shape`` rendered in both views (None: not seen)."""
    return (stereo.mask_centroid(render(shape, left)),
            stereo.mask_centroid(render(shape, right)))


QUANT_PX = 0.1      # disparity (px) a mask centroid's quantisation by the pixel grid may cost


def quantisation(cal: stereo.Calibration, depth: float) -> float:
    """The depth error (m) of QUANT_PX of disparity at ``depth``."""
    fb = cal.left.P[0, 0] * cal.baseline
    return depth ** 2 / fb * QUANT_PX


def model_point(cal: stereo.Calibration, sphere: Sphere, method: str = 'auto') -> np.ndarray:
    """The point triangulated from the exact silhouette centroids of ``sphere``."""
    return stereo.triangulate(cal, sphere_silhouette_centroid(cal.left.P, sphere),
                              sphere_silhouette_centroid(cal.right.P, sphere),
                              method=method).point


def converging_pair():
    """Two cameras toed in towards each other, P = K [R | t] (``projection``): (P left,
    P right, their Calibration)."""
    k = intrinsics()
    pl = stereo.projection(k, rotation(ry=0.1), [0, 0, 0])
    rr = rotation(ry=-0.15)
    pr = stereo.projection(k, rr, -rr @ np.array([0.2, 0.0, 0.0]))
    return pl, pr, stereo.Calibration(
        stereo.Camera(k, pl, width=W, height=H, frame_id='a'),
        stereo.Camera(k, pr, width=W, height=H, frame_id='b'))


def raw_pair(d: np.ndarray) -> stereo.Calibration:
    """A rectified pair's P with raw images of lens ``d`` (R = I), 1920x1080, f = 1000, 4.5 mm
    apart (an endoscope, in metres)."""
    k = np.array([[1000.0, 0, 959.5], [0, 1000.0, 539.5], [0, 0, 1]])
    cams = [stereo.Camera(k, np.hstack([k, [[tx], [0], [0]]]), width=1920, height=1080,
                          frame_id=name, D=d) for tx, name in ((0, 'l'), (-4.5, 'r'))]
    return stereo.Calibration(*cams)


def sphere_silhouette_centroid(P: np.ndarray, sphere: Sphere) -> np.ndarray:
    """The exact centroid [2] of a sphere's silhouette in camera P = K [R | t] (square pixels,
    no skew): an ellipse whose major axis points away from the principal point, spanning the
    angles theta - alpha .. theta + alpha from the optical axis (theta: the centre's angle,
    sin alpha = r / distance); its centre, the midpoint of that span, lies outward of the
    centre's image by f (tan(theta + alpha) + tan(theta - alpha)) / 2 - f tan(theta)."""
    kmat, rot = _rq(P[:, :3])
    cam = rot @ (sphere.centre - stereo.centre(P))
    theta = np.arctan2(np.hypot(cam[0], cam[1]), cam[2])
    alpha = np.arcsin(sphere.radius / np.linalg.norm(cam))
    pp = kmat[:2, 2]
    image = stereo.project(P, sphere.centre)
    rho = np.linalg.norm(image - pp)
    if rho == 0:
        return image
    f = kmat[0, 0]
    rho_c = f * (np.tan(theta + alpha) + np.tan(theta - alpha)) / 2
    return pp + (image - pp) * rho_c / rho


def _rq(m: np.ndarray):
    """m = K R with K upper triangular (positive diagonal) and R a rotation."""
    q, r = np.linalg.qr(np.flipud(m).T)
    k = np.flipud(np.fliplr(r.T))
    rot = np.flipud(q.T)
    signs = np.diag(np.sign(np.diag(k)))
    k, rot = k @ signs, signs @ rot
    return k / k[2, 2], rot


def jittered(uv, rng: np.random.Generator, px: float = 1.0) -> np.ndarray:
    """A centroid [2] moved by up to ``px`` in x and in y (uniform): two masks of one object
    from two trackers do not agree to the pixel."""
    return np.asarray(uv, np.float64) + rng.uniform(-px, px, 2)
