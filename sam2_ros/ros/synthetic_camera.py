"""The demo's synthetic camera: deterministic frames with known object masks, no ROS.

Two moving objects (a red rounded rectangle, a green ellipse) and a static distractor on a
textured background with per-frame noise; the true masks let the demo script its prompts
(a box, points at an object's centre) without a model.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np


class SyntheticCamera:
    """Deterministic frames: two moving objects and a distractor on a textured background.

    ``frame(i)`` returns (rgb, {1: mask, 2: mask}), the masks being the true object pixels.
    """

    def __init__(self, w: int, h: int, n: int, seed: int = 0) -> None:
        import cv2

        self.w, self.h, self.n = w, h, n
        rng = np.random.default_rng(seed)
        yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
        base = 90 + 25 * np.sin(xx / 23.0) * np.cos(yy / 31.0) + 15 * np.sin((xx + yy) / 9.0)
        tex = np.stack([base + 10, base, base - 15], axis=2)
        blobs = cv2.GaussianBlur(rng.normal(0, 40, (h, w, 3)).astype(np.float32), (0, 0), 6)
        self.background = np.clip(tex + blobs, 0, 255).astype(np.uint8)
        self.rng = rng

    def frame(self, i: int) -> Tuple[np.ndarray, Dict[int, np.ndarray]]:
        import cv2

        w, h, t = self.w, self.h, i / max(1, self.n - 1)
        img = self.background.copy()
        # distractor: a static blue triangle
        tri = np.array([[w * 0.78, h * 0.15], [w * 0.92, h * 0.38], [w * 0.64, h * 0.38]],
                       np.int32)
        cv2.fillPoly(img, [tri], (50, 70, 200))
        masks = {}
        # object 1: red rounded rectangle moving left to right with a gentle wave
        cx, cy = int(w * (0.15 + 0.6 * t)), int(h * (0.62 + 0.08 * np.sin(6.28 * t)))
        m1 = np.zeros((h, w), np.uint8)
        rw, rh = w // 9, h // 8
        cv2.rectangle(m1, (cx - rw, cy - rh + 8), (cx + rw, cy + rh - 8), 1, -1)
        cv2.rectangle(m1, (cx - rw + 8, cy - rh), (cx + rw - 8, cy + rh), 1, -1)
        for dx in (-rw + 8, rw - 8):
            for dy in (-rh + 8, rh - 8):
                cv2.circle(m1, (cx + dx, cy + dy), 8, 1, -1)
        # object 2: green ellipse circling in the upper left
        ex = int(w * (0.35 + 0.12 * np.cos(6.28 * t)))
        ey = int(h * (0.3 + 0.1 * np.sin(6.28 * t)))
        m2 = np.zeros((h, w), np.uint8)
        cv2.ellipse(m2, (ex, ey), (w // 14, h // 10), 30 * t, 0, 360, 1, -1)
        img[m1 > 0] = (215, 45, 40)
        img[m2 > 0] = (40, 190, 70)
        masks[1], masks[2] = m1 > 0, (m2 > 0) & ~(m1 > 0)
        noise = self.rng.normal(0, 4, img.shape)
        return np.clip(img + noise, 0, 255).astype(np.uint8), masks


def center(mask: np.ndarray) -> Tuple[float, float]:
    ys, xs = np.nonzero(mask)
    return float(xs.mean()), float(ys.mean())
