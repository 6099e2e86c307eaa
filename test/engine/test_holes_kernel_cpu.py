"""The one-kernel hole filling (engine/cuda/kernels/holes.py, fused group 'holes') equals the
reference ``holes.fill_holes`` bit for bit, on the CPU (Triton's interpreter): adversarial and
random masks full of components of max_area and max_area + 1 pixels, lines and diagonals, at
the border, NaNs, max_area 1, 2 and 8, batches of 1..3, odd sizes, bf16/fp16, strided inputs;
and the switch: only the fused model copy carries it, and a tracker whose eager runner runs
that copy gives the same logits, bitwise, as one on the model.
"""

import numpy as np
import pytest
import torch
from scipy import ndimage

pytest.importorskip('triton')

from conftest import LEAN, make_tracker, shared_model  # noqa: E402
from hole_cases import adversarial, logits_of  # noqa: E402
from sam2_ros.engine import holes  # noqa: E402
from sam2_ros.engine.config import FUSED_GROUPS  # noqa: E402
from sam2_ros.engine.cuda.kernels import fused  # noqa: E402
from sam2_ros.engine.cuda.kernels.holes import RADIUS, fill_holes_fused  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')
EIGHT = np.ones((3, 3), int)
BITS = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def assert_bitwise(x: torch.Tensor, max_area: int) -> torch.Tensor:
    """fill_holes_fused(x) == fill_holes(x): dtype, shape, strides and every bit (NaNs too)."""
    out, ref = fill_holes_fused(x, max_area), holes.fill_holes(x, max_area)
    assert out.dtype == ref.dtype and out.shape == ref.shape and out.stride() == ref.stride()
    assert torch.equal(out.contiguous().view(BITS[x.dtype]), ref.contiguous().view(BITS[x.dtype]))
    return out


def areas(bg: np.ndarray) -> np.ndarray:
    """The sizes of the 8-connected components of each [H, W] mask of bg [B, H, W]."""
    out = []
    for m in bg:
        lab, _ = ndimage.label(m, structure=EIGHT)
        out.append(np.bincount(lab.ravel())[1:])
    return np.concatenate(out) if out else np.zeros(0, int)


def random_bg(batch: int, h: int, w: int, seed: int) -> np.ndarray:
    """[B, H, W] background masks near the 8-connected percolation density (0.3..0.45): many
    components of every size from 1 to well past 9, plus a few thin lines."""
    rng = np.random.default_rng(seed)
    bg = rng.random((batch, h, w)) < rng.uniform(0.3, 0.45, (batch, 1, 1))
    for b in range(batch):
        r, c = rng.integers(0, h), rng.integers(0, w)
        bg[b, r, :] = bg[b, :, c] = False
        bg[b, r, c:c + 9] = True                              # a line running off the border
    return bg


def with_nans(x: torch.Tensor, seed: int, p: float = 0.03) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    x = x.clone()
    x[torch.from_numpy(rng.random(x.shape) < p)] = float('nan')
    return x


@pytest.mark.parametrize('max_area', [1, 2, 8])
def test_adversarial_masks_fill_bitwise_as_the_reference(max_area):
    """hole_cases' masks (border, diagonal joins, areas 8 and 9, lines, spiral, comb)."""
    out = assert_bitwise(logits_of(adversarial()), max_area)
    assert (out == holes.FILL_VALUE).sum() == {1: 0, 2: 0, 8: 38}[max_area]


@pytest.mark.parametrize('shape,seed', [((1, 16, 16), 0), ((2, 23, 31), 1), ((3, 40, 37), 2),
                                        ((3, 17, 64), 3)])
def test_random_masks_with_nans_every_area(shape, seed):
    bg = random_bg(*shape, seed)
    x = with_nans(logits_of(bg, seed), seed)
    sizes = areas(bg & ~torch.isnan(x[:, 0]).numpy())
    for a in (1, 2, 8):
        assert_bitwise(x, a)
    # single specks and one-too-large components everywhere; every size near 8 in the
    # larger cases
    want = {1, 9} if np.prod(shape) < 700 else {1, 2, 3, 8, 9}
    assert want.issubset(set(sizes.tolist())), sizes


def paths(max_area: int, h: int, w: int) -> np.ndarray:
    """[1, H, W]: lines, diagonals, a staircase and an L of max_area and max_area + 1 pixels,
    at the border, in the corners and inside; everything else foreground."""
    a = max_area
    m = np.zeros((h, w), bool)
    m[0, :a] = True                                    # a row of a from the top-left corner
    m[h - 1, w - a - 1:] = True                        # a + 1 into the bottom-right corner
    m[2:2 + a, w - 1] = True                           # a column of a on the right border
    m[h - a - 1:, 0] = True                            # a + 1 on the left border
    for i in range(a):                                 # diagonal of a (diameter a - 1)
        m[3 + i, 3 + i] = True
    for i in range(a + 1):                             # anti-diagonal of a + 1
        m[3 + i, w - 4 - i] = True
    y, x = h // 2, 2                                   # staircase of a: right, down, ...
    for i in range(a):
        m[y + i // 2, x + (i + 1) // 2] = True
    y, x = h // 2, w // 2                              # an L of a + 1
    for i in range(a + 1):
        m[y + min(i, a // 2), x + max(0, i - a // 2)] = True
    return m[None]


@pytest.mark.parametrize('max_area', [1, 2, 8])
def test_components_of_max_area_and_one_more(max_area):
    bg = paths(max_area, 40, 37)
    sizes = areas(bg)
    assert max_area in sizes and max_area + 1 in sizes, sizes
    x = logits_of(bg, seed=max_area)
    out = assert_bitwise(x, max_area)
    lab, _ = ndimage.label(bg[0], structure=EIGHT)
    count = np.bincount(lab.ravel())
    filled = (out[0, 0] == holes.FILL_VALUE).numpy() & bg[0]
    assert np.array_equal(filled, (lab > 0) & (count[lab] <= max_area))


def test_nan_splits_a_component_and_is_kept():
    """A line of 9 with a NaN in its middle: two components of 4, both filled; the NaN stays."""
    x = torch.full((1, 1, 16, 16), 2.0)
    x[0, 0, 7, 3:12] = -1.0
    x[0, 0, 7, 7] = float('nan')
    out = assert_bitwise(x, 8)
    assert (out[0, 0, 7, 3:7] == holes.FILL_VALUE).all() and torch.isnan(out[0, 0, 7, 7])
    assert (assert_bitwise(x.nan_to_num(nan=-1.0), 8) == x.nan_to_num(nan=-1.0)).all()


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_bf16_and_fp16_logits_fill_bitwise_as_the_reference(dtype):
    """Half-precision logits with NaNs and a -0.0 (background) fill bitwise as the reference,
    and some holes are filled."""
    bg = random_bg(2, 24, 20, seed=5)
    x = with_nans(logits_of(bg, 5), 5).to(dtype)
    x[0, 0, 0, 0] = -0.0                                # -0.0 <= 0: background
    out = assert_bitwise(x, 8)
    assert (out == torch.tensor(holes.FILL_VALUE, dtype=dtype)).any()


def test_strided_inputs_and_the_fallbacks():
    base = logits_of(random_bg(2, 20, 36, seed=6), 6)
    assert_bitwise(base[..., ::2], 8)                              # column stride 2
    assert_bitwise(base.transpose(2, 3), 8)                        # transposed: strides swapped
    x = base[:, :, :16, :16]
    assert fill_holes_fused(x, 0) is x                             # off: the very tensor
    assert_bitwise(x, RADIUS + 1)                                  # beyond the window: reference
    assert torch.equal(fill_holes_fused(x.double(), 8), holes.fill_holes(x.double(), 8))


def test_only_the_fused_copy_carries_the_kernel():
    model = shared_model(64, overrides=LEAN)
    twin = fused.fused_model(model, ('holes',))
    assert holes.filler(model) is holes.fill_holes              # the eager reference
    assert holes.filler(twin) is fill_holes_fused and twin is not model
    assert holes.filler(fused.fused_model(model, FUSED_GROUPS)) is fill_holes_fused
    rest = tuple(g for g in FUSED_GROUPS if g != 'holes')
    assert holes.filler(fused.fused_model(model, rest)) is holes.fill_holes
    assert holes.filler(model) is holes.fill_holes              # the copies left it alone


def test_tracker_on_the_fused_copy_is_bitwise_the_reference():
    """fp32, eager runner: the model against its copy with the 'holes' group only, over a
    stream with a click, a box, a mask, a correction and a removal: every logit equal; the
    kernel ran and filled holes."""
    from scenarios import schedule, stream_logits, synthetic_frames
    h, w, n = 48, 64, 6
    events = schedule(h, w, add2=2, add3=3, fix=4, remove=5)
    runs, filled = [], []

    def counting(x, area):
        out = fill_holes_fused(x, area)
        filled.append(int(((out == holes.FILL_VALUE) & (x <= 0)).sum()))
        return out
    for fuse in (False, True):
        tr = make_tracker(image_size=64, max_objects=3, extra_hydra_overrides=list(LEAN))
        if fuse:
            twin = fused.fused_model(tr.runner.model, ('holes',))
            setattr(twin, holes.FILLER, counting)
            tr.runner.model = twin
        runs.append(stream_logits(tr, synthetic_frames(n, h, w), events))
    for ref, out in zip(*runs):
        assert ref.keys() == out.keys()
        assert all(torch.equal(out[k], ref[k]) for k in ref)
    assert len(filled) >= n and sum(filled) > 0, filled
