"""Frames and results for the overlay tests (test/cli/test_overlay_device.py on the CPU,
test/gpu/test_overlay_gpu.py on the GPU)."""

import numpy as np

from sam2_ros.engine.types import OCCLUDED, TRACKING, FrameResult, ObjectResult


def scene(h, w, seed=0):
    """A textured frame and a label mask of touching, overlapping and border-crossing objects
    (ids up to 200, so the palette's far rows are read too)."""
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    label = np.zeros((h, w), np.uint8)
    yy, xx = np.mgrid[:h, :w]
    for obj_id, (cy, cx, r) in zip((1, 2, 7, 200), ((0.3, 0.3, 0.2), (0.35, 0.55, 0.15),
                                                     (0.9, 0.95, 0.25), (0.6, 0.2, 0.1))):
        label[(yy - cy * h) ** 2 + (xx - cx * w) ** 2 <= (r * min(h, w)) ** 2] = obj_id
    label[h // 2:h // 2 + 3, :] = 2                      # a thin band: outline everywhere
    return rgb, label


def result(label):
    h, w = label.shape
    objs = []
    for obj_id in (int(i) for i in np.unique(label) if i):
        m = label == obj_id
        ys, xs = np.nonzero(m)
        objs.append(ObjectResult(obj_id, m, 1.0, TRACKING if obj_id != 7 else OCCLUDED,
                                 (xs.min(), ys.min(), xs.max(), ys.max()), int(m.sum()),
                                 (float(xs.mean()), float(ys.mean())), 0, None))
    res = FrameResult(3, h, w, objs)
    res.set_label(label, [o.obj_id for o in objs])
    return res
