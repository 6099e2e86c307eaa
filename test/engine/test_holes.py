"""Hole filling (engine/holes.py) equals sam2's: its own ``fill_holes_in_mask_scores`` with
the CUDA extension's labelling computed on the host (``reference.connected_components_like_C``,
OpenCV), bitwise, on random and adversarial masks, several per batch, and the rule restated
with scipy's labelling. The stand-in itself is checked against scipy here and against the
real extension on the GPU (test_fidelity_gpu.py).
"""

import numpy as np
import pytest
import torch
from scipy import ndimage

from hole_cases import adversarial, logits_of
from reference import connected_components_like_C, emulate_sam2_C
from sam2_ros.engine.holes import fill_holes

EIGHT = np.ones((3, 3), int)


@pytest.fixture
def official(monkeypatch):
    """sam2's fill_holes_in_mask_scores, labelling by the CPU stand-in of sam2._C."""
    import sam2.utils.misc as misc
    emulate_sam2_C(monkeypatch)
    return misc.fill_holes_in_mask_scores


def scipy_fill(x: torch.Tensor, max_area: int) -> torch.Tensor:
    """The rule stated independently: 8-connected components of x <= 0, area <= max_area -> 0.1."""
    out = x.clone()
    for b in range(x.shape[0]):
        lab, _ = ndimage.label((x[b, 0] <= 0).numpy(), structure=EIGHT)
        area = np.bincount(lab.ravel())
        hole = (lab > 0) & (area[lab] <= max_area)
        out[b, 0][torch.from_numpy(hole)] = 0.1
    return out


@pytest.mark.parametrize('max_area', [1, 2, 8, 9])
def test_adversarial_masks_equal_sam2(official, max_area):
    bg = adversarial()
    x = logits_of(bg)
    ours = fill_holes(x, max_area)
    assert torch.equal(ours, official(x, max_area))
    assert torch.equal(ours, scipy_fill(x, max_area))
    if max_area == 8:
        filled = (ours == 0.1) & (x <= 0)
        f = filled[:, 0].numpy()
        assert f[0, 0:2, 0:2].all() and f[0, 0, 5:8].all() and f[0, 14, 0]   # at the border
        assert f[0, 5:13, 15].all() and not f[0, 15, 6:15].any()          # border 8 / 9
        assert not f[1, 2, 2:7].any() and f[1, 8, 8] and f[1, 11, 11]    # diagonals join
        assert f[2, 1:3, 1:5].all() and not f[2, 5:8, 5:8].any()          # 8 filled, 9 kept
        assert f[2, 10, 0:8].all() and not f[2, 13, 2:11].any()           # lines 8 / 9
        assert not f[3].any() and not f[4].any() and not f[5].any()       # thin, spiral, comb
        assert not f[6].any() and not f[7].any()


def test_border_component_of_exactly_max_area(official):
    """A column of 8 background pixels on the right border is a hole at 8, not at 7."""
    bg = np.zeros((2, 16, 16), bool)
    bg[:, 5:13, 15] = True
    bg[1, 5, 14] = True                                   # second entry: 9 pixels
    x = logits_of(bg, seed=1)
    for area, expect in ((8, [True, False]), (7, [False, False])):
        ours = fill_holes(x, area)
        assert torch.equal(ours, official(x, area))
        assert [bool((ours[b] == 0.1).any()) for b in range(2)] == expect


@pytest.mark.parametrize('seed', range(4))
def test_random_masks_equal_sam2(official, seed):
    """Random logits of varied background density, sizes and batch, even sides (sam2's
    kernel needs them): sam2's fill and ours agree bit for bit."""
    rng = np.random.default_rng(seed)
    for _ in range(25):
        b, h, w = int(rng.integers(1, 5)), int(rng.integers(1, 13)) * 2, \
            int(rng.integers(1, 13)) * 2
        bg = rng.random((b, h, w)) < rng.uniform(0.05, 0.6)
        x = logits_of(bg, seed=int(rng.integers(1 << 30)))
        area = int(rng.integers(1, 12))
        ours = fill_holes(x, area)
        assert torch.equal(ours, official(x, area)), (b, h, w, area)


def test_odd_sizes_and_realistic_logits():
    """Odd sides (sam2's kernel refuses them; the rule is still scipy's) and a 64x64 batch of
    smooth random logits like a decoder's, where most holes are single specks."""
    rng = np.random.default_rng(7)
    for h, w in ((1, 1), (1, 9), (7, 5), (15, 33)):
        x = logits_of(rng.random((3, h, w)) < 0.4)
        assert torch.equal(fill_holes(x, 8), scipy_fill(x, 8)), (h, w)
    g = torch.Generator().manual_seed(7)       # the bound below depends on the data
    smooth = torch.nn.functional.interpolate(
        torch.randn(3, 1, 16, 16, generator=g), size=(64, 64), mode='bilinear') \
        + 0.3 * torch.randn(3, 1, 64, 64, generator=g)
    ours = fill_holes(smooth, 8)
    assert torch.equal(ours, scipy_fill(smooth, 8))
    assert 0 < int((ours != smooth).sum()) < smooth.numel() // 4    # specks filled, not all


def test_off_nan_and_dtype():
    x = logits_of(adversarial())
    assert fill_holes(x, 0) is x                          # 0: off, the very tensor
    x[0, 0, 0, 0] = float('nan')                          # NaN is not background (sam2: <= 0)
    out = fill_holes(x, 8)
    assert torch.isnan(out[0, 0, 0, 0]) and out.dtype == x.dtype and out.shape == x.shape
    assert torch.equal(out[1:], scipy_fill(x[1:], 8))


def test_stand_in_returns_what_the_kernel_returns():
    """connected_components_like_C: labels > 0 exactly on the mask, one label per 8-connected
    component (1 + the smallest 2x2-block corner index in it), counts = component areas."""
    rng = np.random.default_rng(3)
    m = rng.random((2, 1, 12, 10)) < 0.45
    labels, counts = connected_components_like_C(torch.from_numpy(m).to(torch.uint8))
    assert labels.dtype == counts.dtype == torch.int32 and labels.shape == (2, 1, 12, 10)
    for b in range(2):
        lab, k = ndimage.label(m[b, 0], structure=EIGHT)
        assert ((labels[b, 0] > 0).numpy() == m[b, 0]).all()
        area = np.bincount(lab.ravel())
        assert (counts[b, 0].numpy() == np.where(lab > 0, area[lab], 0)).all()
        for c in range(1, k + 1):          # same partition as scipy's
            got = np.unique(labels[b, 0].numpy()[lab == c])
            assert len(got) == 1
            ys, xs = np.nonzero(lab == c)
            assert got[0] == 1 + min((y // 2 * 2) * 10 + x // 2 * 2 for y, x in zip(ys, xs))
