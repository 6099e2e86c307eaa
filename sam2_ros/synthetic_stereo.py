"""The synthetic camera's scene seen by a rectified stereo pair (numpy only, no ROS).

The geometry, kept simple so that what a tracker triangulates can be checked by hand:

* Both cameras have the same intrinsics ``K`` (focal length ``focal_px`` in x and y, principal
  point at the image centre) and no lens distortion; the right camera sits ``baseline`` to the
  right of the left one, axes parallel (a rectified pair: ``R`` the identity, the right
  projection ``P = K [I | (-baseline, 0, 0)]``, i.e. ``Tx = -fx * baseline`` in ``P[0, 3]``).
* Disc ``k`` (ids 1..objects) is a flat disc facing the cameras at depth ``Z_k``: object 1 at
  ``depth_far``, the last object at ``depth_near``, evenly spaced between (one object:
  ``depth_far``). A point at depth ``Z`` is ``d = fx * baseline / Z`` px further left in the
  right image, on the same row. Discs are drawn at whole pixels, so ``d`` is rounded to a whole
  pixel and the disc is at depth ``fx * baseline / d`` exactly (:attr:`SyntheticStereo.depths`,
  within about half a pixel's disparity of the depth asked for).
* The textured background is infinitely far: disparity 0, the same pixels in both images.
* Both views draw the higher id in front. With depths that fall as the id rises (the defaults)
  a nearer disc covers a farther one in both views, as it would.

Each disc moves as in :class:`~sam2_ros.synthetic.SyntheticCamera` (the left view is one) and
bounces where it stays whole in both views, so a mask never touches the border of either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from sam2_ros.synthetic import SyntheticCamera


@dataclass(frozen=True)
class StereoGeometry:
    """A rectified pair of ``width`` x ``height`` cameras, ``baseline`` apart (metres)."""

    width: int
    height: int
    focal_px: float
    baseline: float

    def __post_init__(self) -> None:
        if not self.focal_px > 0 or not self.baseline > 0:
            raise ValueError(f'focal_px and baseline must be > 0, got {self.focal_px!r} and '
                             f'{self.baseline!r}')

    @property
    def K(self) -> np.ndarray:
        """[3, 3] intrinsics of both cameras."""
        return intrinsics(self.width, self.height, self.focal_px)

    @property
    def P_left(self) -> np.ndarray:
        """[3, 4] projection of the left camera: K [I | 0]."""
        return projection(self.width, self.height, self.focal_px)

    @property
    def P_right(self) -> np.ndarray:
        """[3, 4] projection of the right camera: K [I | (-baseline, 0, 0)], points in the
        left camera's frame."""
        p = self.P_left
        p[0, 3] = -self.focal_px * self.baseline         # Tx
        return p

    def disparity(self, depth: float) -> float:
        """Pixels a point at ``depth`` is further left in the right image."""
        return self.focal_px * self.baseline / depth


def intrinsics(width: int, height: int, focal_px: float) -> np.ndarray:
    """[3, 3] K of a ``width`` x ``height`` camera: ``focal_px`` in x and y, the principal
    point at the image centre."""
    f = float(focal_px)
    return np.array([[f, 0.0, width / 2], [0.0, f, height / 2], [0.0, 0.0, 1.0]])


def projection(width: int, height: int, focal_px: float) -> np.ndarray:
    """[3, 4] P = K [I | 0] of one camera (the left one of a pair)."""
    return np.hstack([intrinsics(width, height, focal_px), np.zeros((3, 1))])


def object_depths(objects: int, depth_far: float, depth_near: float) -> np.ndarray:
    """[objects] depths asked for: object 1 at ``depth_far``, the last at ``depth_near``."""
    if not 0 < depth_near <= depth_far:
        raise ValueError(f'depths must satisfy 0 < depth_near <= depth_far, got depth_near '
                         f'{depth_near!r} and depth_far {depth_far!r}')
    if objects == 1:
        return np.array([float(depth_far)])
    return np.linspace(depth_far, depth_near, objects)


class SyntheticStereo:
    """Left and right frames of ``objects`` discs (:class:`SyntheticCamera`'s, same seed,
    noise and size) at the depths of the module's geometry.

    Args:
        w, h: frame size of each camera in pixels.
        objects, seed, noise: as SyntheticCamera's.
        focal_px: focal length in pixels; None: ``w`` (a 53 degree horizontal field of view).
        baseline: distance between the cameras (metres for ROS).
        depth_far, depth_near: depths of object 1 and of the last object (baseline's units).

    ValueError where a disc does not fit: a disparity below 1 px (too far to tell from the
    background) or one so large that the disc cannot be whole in both views.
    """

    def __init__(self, w: int, h: int, objects: int = 2, seed: int = 0,
                 focal_px: Optional[float] = None, baseline: float = 0.1,
                 depth_far: float = 2.0, depth_near: float = 1.0, noise: float = 0.0) -> None:
        self.geometry = StereoGeometry(w, h, float(w if focal_px is None else focal_px),
                                       float(baseline))
        asked = object_depths(objects, depth_far, depth_near)
        # [objects] whole pixels: the discs are drawn at whole pixels
        self.disparities = np.rint([self.geometry.disparity(z) for z in asked]).astype(int)
        if np.any(self.disparities < 1):
            raise ValueError(f'depth {asked.max():g} is too far: its disparity '
                             f'{self.geometry.disparity(asked.max()):.2f} px is under 1 px '
                             f'(nearer depths, a longer baseline or focal length)')
        self.depths = self.geometry.focal_px * self.geometry.baseline / self.disparities
        shift = np.stack([self.disparities, np.zeros(objects, int)], 1)   # [objects, 2]
        self.left = SyntheticCamera(w, h, objects, seed, noise=noise, margins=shift)
        # the same discs d px further left: same background, colours and velocities (the seed),
        # starts moved, the bounce range moved with them
        self.right = SyntheticCamera(w, h, objects, seed, noise=noise,
                                     starts=self.left.c0 - shift, velocities=self.left.v,
                                     margins=shift[:, ::-1])

    def pair(self, i: int) -> Tuple[np.ndarray, np.ndarray]:
        """Frame ``i`` of the left and of the right camera: [h, w, 3] uint8 RGB each."""
        return self.left.frame(i), self.right.frame(i)

    def points(self, i: int) -> np.ndarray:
        """[objects, 3] disc centres in frame ``i`` in the left camera's frame (x right, y
        down, z forward; baseline's units): what triangulating the two views should give."""
        g = self.geometry
        c = self.left.centers(i).astype(np.float64)
        z = self.depths
        return np.stack([(c[:, 0] - g.width / 2) * z / g.focal_px,
                         (c[:, 1] - g.height / 2) * z / g.focal_px, z], 1)
