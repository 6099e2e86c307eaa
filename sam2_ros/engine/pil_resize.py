"""PIL's bicubic resize of 8-bit images, bit for bit, in torch integer arithmetic.

The official video predictor loads each frame with ``Image.resize((S, S))`` (bicubic for RGB).
For 8-bit images Pillow does not resample in floating point: each output pixel of a pass is a
sum of integer pixel values times integer coefficients (the bicubic weights, computed in
double, normalised to sum 1 and scaled by 2**PRECISION_BITS), plus half a unit, shifted back
and clipped to 0..255. It runs a horizontal and a vertical pass with that rounding between
them (a pass is skipped when its side does not change). Pillow 13 runs the vertical pass
first when the height shrinks clearly more than the width (``vertical_first_rule``), older
versions always start horizontally; the order in use is read off the installed Pillow once.

Here the same sums run on the device as integer gathers and multiply-adds: coefficients and
source indices are computed once per (source side, output side) on the host with the same
double arithmetic, uploaded once per device, and every frame then runs a fixed sequence of
kernels of fixed shapes, which CUDA graphs capture (``cuda/io_graphs.py``). Integer sums are exact,
so the result does not depend on the device or on the order of the additions.
"""

from __future__ import annotations

import collections
import functools
from typing import List, Tuple

import numpy as np
import torch

PRECISION_BITS = 32 - 8 - 2          # Pillow's fixed point for 8-bit passes
BICUBIC_A = -0.5                     # Pillow's bicubic kernel parameter
BICUBIC_SUPPORT = 2.0

# The uploaded tables of the most recently used (source side, output side, device) keys: a
# stream of ever new resolutions must not grow device memory. A captured graph keeps its own
# references (``tables_of``), so evicting a key never frees tables a graph reads.
MAX_TABLES = 16
TABLES: 'collections.OrderedDict[tuple, Tuple[torch.Tensor, torch.Tensor]]' = \
    collections.OrderedDict()


def _bicubic(x: np.ndarray) -> np.ndarray:
    """Pillow's bicubic kernel, term for term in float64 (same operations, same order)."""
    a = BICUBIC_A
    x = np.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


@functools.lru_cache(maxsize=64)
def coefficients(n_in: int, n_out: int) -> Tuple[np.ndarray, np.ndarray]:
    """Source indices [n_out, K] int64 and fixed-point weights [n_out, K] int32 of one pass
    from ``n_in`` to ``n_out`` pixels, as Pillow's ``precompute_coeffs`` and
    ``normalize_coeffs_8bpc`` compute them. Taps past an output's window get weight 0 and a
    valid index (so a gather never reads out of bounds)."""
    scale = float(n_in) / n_out
    filterscale = max(scale, 1.0)
    support = BICUBIC_SUPPORT * filterscale
    ksize = int(np.ceil(support)) * 2 + 1
    center = (np.arange(n_out, dtype=np.float64) + 0.5) * scale                 # [n_out]
    # C truncates toward zero; negative starts are clamped to 0 right after
    xmin = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    xmax = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), n_in) - xmin
    taps = np.arange(ksize)
    inside = taps[None, :] < xmax[:, None]                                     # [n_out, K]
    pos = (taps[None, :] + xmin[:, None]).astype(np.float64)
    w = np.where(inside, _bicubic((pos - center[:, None] + 0.5) * (1.0 / filterscale)), 0.0)
    total = np.zeros(n_out)
    for j in range(ksize):             # left to right, as the C loop adds them (not pairwise)
        total = total + w[:, j]
    w = np.where(total[:, None] != 0.0, w / np.where(total == 0.0, 1.0, total)[:, None], w)
    unit = float(1 << PRECISION_BITS)
    fixed = np.where(w < 0, np.trunc(-0.5 + w * unit), np.trunc(0.5 + w * unit))
    idx = np.minimum(taps[None, :] + xmin[:, None], n_in - 1)
    return idx.astype(np.int64), fixed.astype(np.int32)


def tables(n_in: int, n_out: int, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """The pass's tables on ``device`` (indices int64 and weights int32, both [K, n_out]),
    uploaded once (an upload per frame would synchronize the stream and could not be
    captured). The first call for a size must not be inside a graph capture: the graph
    runner's warm-up iterations make it."""
    key = (n_in, n_out, device)
    if key in TABLES:
        TABLES.move_to_end(key)
        return TABLES[key]
    idx, w = coefficients(n_in, n_out)
    # [K, n_out], tap-major: each tap's indices and weights are one contiguous row
    TABLES[key] = (torch.from_numpy(idx.T.copy()).to(device),
                   torch.from_numpy(w.T.copy()).to(device))
    while len(TABLES) > MAX_TABLES:
        TABLES.popitem(last=False)
    return TABLES[key]


def tables_of(h: int, w: int, size: int, device: torch.device) -> List[tuple]:
    """The tables a resize of an [h, w] image to [size, size] reads (its graph keeps them)."""
    return [tables(n, size, device) for n in (h, w) if n != size]


def _pass(x: torch.Tensor, n_out: int) -> torch.Tensor:
    """One fixed-point pass along the rows of x [C, N, M] int32 in 0..255 (N -> n_out) ->
    [C, n_out, M] int32 in 0..255. Each tap gathers whole rows (contiguous copies, much faster
    than gathering along the last axis). Sums stay below 2**31 (255 * sum|w| < 1.3 * 255 *
    2**22), as in Pillow's int accumulators."""
    idx, w = tables(x.shape[-2], n_out, x.device)
    acc = torch.full((x.shape[0], n_out, x.shape[-1]), 1 << (PRECISION_BITS - 1),
                     dtype=torch.int32, device=x.device)
    for j in range(idx.shape[0]):       # K taps: gather one source row per output row, add
        acc.addcmul_(x.index_select(-2, idx[j]), w[j].view(n_out, 1))
    return (acc >> PRECISION_BITS).clamp_(0, 255)


def vertical_first_rule(h: int, w: int, size: int) -> bool:
    """Pillow 13's order for an [h, w] -> [size, size] resize: the vertical pass first when the
    height shrinks by more than twice as many pixels as the width (established on Pillow
    13.0 by comparing both orders against it on 600+ random shapes; see
    test/engine/test_preprocess.py)."""
    return h > size and h - size > 2 * (w - size)


@functools.lru_cache(maxsize=1)
def pillow_reorders() -> bool:
    """Whether the installed Pillow runs the vertical pass first where ``vertical_first_rule``
    says (Pillow 13) or always horizontally first (older). Read off one small resize whose
    result differs between the orders; sam2 depends on Pillow, so it is installed."""
    from PIL import Image
    img = np.random.default_rng(0).integers(0, 256, (48, 20, 3), dtype=np.uint8)
    ref = torch.from_numpy(np.array(Image.fromarray(img).resize((32, 32)))).permute(2, 0, 1)
    x = torch.from_numpy(img).permute(2, 0, 1).int()
    return torch.equal(resize_passes(x, 32, vertical_first=True), ref.int())


def resize_u8(x: torch.Tensor, size: int) -> torch.Tensor:
    """x [C, H, W] uint8 (any device) -> [C, S, S] int32 in 0..255, equal to PIL's
    ``Image.resize((S, S))`` of the same image (bicubic, 8-bit). No host sync once the
    tables of this source size exist, so it can be captured in a CUDA graph."""
    h, w = x.shape[-2:]
    return resize_passes(x.int(), size, first_pass_vertical(h, w, size))


def first_pass_vertical(h: int, w: int, size: int) -> bool:
    """Whether the installed Pillow resizes [h, w] -> [size, size] vertically first (the fused
    frame-in kernels, ``cuda/kernels/io_frame.py``, follow the same order)."""
    return pillow_reorders() and vertical_first_rule(h, w, size)


def resize_passes(x: torch.Tensor, size: int, vertical_first: bool) -> torch.Tensor:
    """x [C, H, W] int32 -> [C, S, S] int32: the two passes in the given order, each skipped
    when its side already has ``size`` pixels. A pass runs along rows, so a horizontal one
    works on the transposed image (one copy before, one after)."""
    h, w = x.shape[-2:]
    t = lambda y: y.transpose(-1, -2).contiguous()        # noqa: E731 - [C, A, B] -> [C, B, A]
    if vertical_first:
        x = _pass(x, size) if h != size else x
        return t(_pass(t(x), size)) if w != size else x
    x = t(_pass(t(x), size)) if w != size else x
    return _pass(x, size) if h != size else x
