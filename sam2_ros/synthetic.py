"""The synthetic camera: deterministic frames with known object masks, no ROS, no model.

One generator for the demo, the benchmarks and the tests: a textured background and a few
discs that move at constant speed and bounce off the frame's edges. Every object's true mask,
tight box and centre are known, so a caller can script prompts (a box around an object, a
click at its centre) and check outputs without a model. Frame ``i`` depends only on the
constructor's arguments and ``i`` (never on which frames were drawn before), so a replay, a
bag and a live stream of the same camera carry the same pixels.

Cheap per frame: the background is drawn once, and each disc is stamped only inside its
bounding box (a 1280x720 frame costs about a copy), so a benchmark can draw frames inside its
loop.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

Box = Tuple[float, float, float, float]


class SyntheticCamera:
    """Frames of ``objects`` moving discs (ids 1..objects) over a textured background.

    Args:
        w, h: frame size in pixels.
        objects: number of discs; object ``k`` (1-based) is drawn after ``k - 1``, so where
            two overlap the higher id is in front (and the lower id's mask loses those pixels).
        seed: background, colours, start positions and velocities.
        radius: disc radius in pixels; default a tenth of the short side (a sixteenth above
            three objects), at least 12 px and at most a quarter of the short side.
        starts: optional [objects, 2] start centres (x, y) in pixels instead of random ones.
        velocities: optional [objects, 2] pixels per frame instead of random ones (|v| <= 4).
        noise: standard deviation of per-frame Gaussian pixel noise (0: none), seeded by
            (seed, frame index).
        margins: optional [objects, 2] pixels (left, right) each disc keeps free beyond the
            usual border in x: the range it bounces in narrows by them. A second view of the
            scene whose disc ``k`` is ``d`` px further left (``sam2_ros.synthetic_stereo``)
            bounces with ``(0, d)`` where the first bounces with ``(d, 0)``.

    Discs bounce inside ``[radius + 1, size - radius - 2]`` (x narrowed by ``margins``), so
    every disc is whole in every frame and its mask is never empty (unless covered by a
    higher id).
    """

    def __init__(self, w: int, h: int, objects: int = 2, seed: int = 0,
                 radius: Optional[int] = None, starts: Optional[Sequence] = None,
                 velocities: Optional[Sequence] = None, noise: float = 0.0,
                 margins: Optional[Sequence] = None) -> None:
        if objects < 1:
            raise ValueError(f'objects must be >= 1, got {objects}')
        rng = np.random.default_rng(seed)
        self.w, self.h, self.objects, self.seed, self.noise = w, h, objects, seed, noise
        # coarse noise upsampled 8x: texture without w*h*3 random numbers per frame
        small = rng.integers(0, 255, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        self.background = np.ascontiguousarray(small.repeat(8, 0).repeat(8, 1)[:h, :w])
        short = min(h, w)
        default_r = max(12, short // (10 if objects <= 3 else 16))
        self.r = int(radius) if radius is not None else min(default_r, max(2, short // 4))
        if 2 * self.r + 4 > short:
            raise ValueError(f'radius {self.r} does not fit a {w}x{h} frame')
        c0 = np.stack([rng.uniform(0.15, 0.85, objects) * w,
                       rng.uniform(0.2, 0.8, objects) * h], 1)
        v = rng.uniform(-4, 4, (objects, 2))
        self.colors = rng.integers(0, 255, (objects, 3), dtype=np.uint8)   # [objects, 3] RGB
        self.c0 = c0 if starts is None else np.asarray(starts, np.float64).reshape(objects, 2)
        self.v = v if velocities is None else np.asarray(velocities,
                                                         np.float64).reshape(objects, 2)
        yy, xx = np.mgrid[-self.r:self.r + 1, -self.r:self.r + 1]
        self.disc = xx ** 2 + yy ** 2 <= self.r ** 2                       # [2r+1, 2r+1]
        free = np.zeros((objects, 2), int) if margins is None else \
            np.asarray(margins, int).reshape(objects, 2)
        if np.any(free < 0):
            raise ValueError(f'margins must be >= 0, got {free.tolist()}')
        # [objects, 2] (x, y) bounds of each disc's centre, whole pixels
        self.lo = np.stack([self.r + 1 + free[:, 0], np.full(objects, self.r + 1)], 1)
        self.hi = np.stack([self.w - self.r - 2 - free[:, 1],
                            np.full(objects, self.h - self.r - 2)], 1)
        if np.any(self.hi[:, 0] <= self.lo[:, 0]):
            raise ValueError(f'margins {free.tolist()} leave no room for discs of radius '
                             f'{self.r} in a frame {w} px wide')

    def centers(self, i: int) -> np.ndarray:
        """[objects, 2] integer disc centres (x, y) in frame ``i``."""
        span = self.hi - self.lo
        p = self.c0 - self.lo + self.v * i                   # bounce inside [lo, hi]
        p = np.abs((p + span) % (2 * span) - span)
        return (p + self.lo).astype(int)

    def frame(self, i: int) -> np.ndarray:
        """Frame ``i``: [h, w, 3] uint8 RGB."""
        fr = self.background.copy()
        r = self.r
        for (cx, cy), col in zip(self.centers(i), self.colors):
            fr[cy - r:cy + r + 1, cx - r:cx + r + 1][self.disc] = col
        if self.noise > 0:
            rng = np.random.default_rng((self.seed, i))
            fr = np.clip(fr + rng.normal(0, self.noise, fr.shape), 0, 255).astype(np.uint8)
        return fr

    def frames(self, n: int, start: int = 0) -> List[np.ndarray]:
        """Frames ``start .. start + n - 1``."""
        return [self.frame(i) for i in range(start, start + n)]

    def masks(self, i: int) -> Dict[int, np.ndarray]:
        """{object id: [h, w] bool} true visible pixels of each disc in frame ``i``."""
        out: Dict[int, np.ndarray] = {}
        r = self.r
        for k, (cx, cy) in enumerate(self.centers(i), start=1):
            m = np.zeros((self.h, self.w), bool)
            m[cy - r:cy + r + 1, cx - r:cx + r + 1] = self.disc
            for other in out.values():                      # the higher id is in front
                other &= ~m
            out[k] = m
        return out

    def boxes(self, i: int = 0, objects: Optional[int] = None) -> List[Box]:
        """Tight (x0, y0, x1, y1) boxes of the first ``objects`` discs (all by default) in
        frame ``i``, inclusive pixel bounds (x1 - x0 = 2 * radius)."""
        r = self.r
        return [(float(cx - r), float(cy - r), float(cx + r), float(cy + r))
                for cx, cy in self.centers(i)[:objects]]


def center(mask: np.ndarray) -> Tuple[float, float]:
    """(x, y) mean of a [h, w] bool mask's pixels: where to click on an object."""
    ys, xs = np.nonzero(mask)
    return float(xs.mean()), float(ys.mean())
