"""masks_out: per-object masks and stats at source size, exact and without large temporaries."""

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from sam2_ros.engine import masks_out


def _reference_stats(m: np.ndarray) -> np.ndarray:
    """area, x0, y0, x1, y1, cx, cy of one bool mask by numpy (-1 for empty masks)."""
    ys, xs = np.nonzero(m)
    if len(ys) == 0:
        return np.array([0, -1, -1, -1, -1, -1, -1], np.float64)
    return np.array([len(ys), xs.min(), ys.min(), xs.max(), ys.max(), xs.mean(), ys.mean()])


@pytest.mark.parametrize('b, h, w', [(1, 72, 128), (3, 37, 53), (2, 64, 64)])
def test_stats_equal_numpy_on_the_masks(b, h, w):
    torch.manual_seed(0)
    logits = torch.randn(b, 1, 16, 16) * 3
    logits[0] = -5.0                                  # an empty mask
    m, stats = masks_out.on_device(logits, h, w)
    ref = torch.nn.functional.interpolate(logits, size=(h, w), mode='bilinear',
                                          align_corners=False)[:, 0] > 0
    assert torch.equal(m, ref)
    for i in range(b):
        np.testing.assert_allclose(stats[i].numpy(), _reference_stats(m[i].numpy()),
                                   rtol=1e-12, atol=1e-9)


def test_no_temporaries_larger_than_the_upsampled_logits():
    """Image mode's peak memory at 8 boxes was three [B, H, W] int64 casts of the bool mask
    made by its reductions; the stats now come from the upsampled float tensor itself."""
    b, h, w = 8, 256, 256
    logits = torch.randn(b, 1, 64, 64)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        masks_out.on_device(logits, h, w)
    allocs = [e.cpu_memory_usage for e in prof.events()
              if e.name == 'aten::empty_strided' or e.name == 'aten::empty']
    upsampled = b * h * w * 4
    assert max(allocs) <= upsampled, (max(allocs), upsampled)
    assert sum(a for a in allocs if a > 0) <= upsampled // 2, sum(a for a in allocs if a > 0)
