"""Frame in (group 'io'): PIL's bicubic resize and the normalization in two kernels.

The reference (``frame_in.normalize``: ``pil_resize.resize_u8``, then a table of v / 255 and
the mean/std ops) launches about 50 kernels per frame: a permute copy, one gather and one
multiply-add per filter tap and pass, two transposes, the clamps, the lookup and the
normalization. Here each pass is one kernel over the same tables (``pil_resize.tables``:
Pillow's fixed-point weights and source indices): it sums the taps of all three channels in
int32, shifts and clips as Pillow does, and either stores the 8-bit intermediate or, in the
second pass, looks the level up in ``frame_in.level_table`` (the normalized float32 value of
each level per channel) and writes the [1, 3, S, S] layout directly into the encoder's input.

Bitwise the reference: the sums are exact integers (no overflow, any order), the intermediate
is the same 0..255 value, and the table holds the reference's own float32 results. Passes run
in the installed Pillow's order (``pil_resize.first_pass_vertical``); a side that already has
S pixels is not filtered, so such a frame takes one kernel (both sides: one kernel with a
one-tap identity pass).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
import triton
import triton.language as tl

from sam2_ros.engine import frame_in, pil_resize
from sam2_ros.engine.cuda.kernels.launch import jit

_FAST, _SLOW = 64, 16           # tile: 64 along the axis contiguous in memory, 16 across
_IDENTITY: Dict[tuple, Tuple[torch.Tensor, torch.Tensor]] = {}


@jit
def _pass_kernel(src_ptr, s_o, s_j, s_c, idx_ptr, w_ptr, dst_ptr, d_o, d_j, d_c, table_ptr,
                 N_OUT, N_J, N_IN, K: tl.constexpr, O_FAST: tl.constexpr,
                 NORMALIZE: tl.constexpr, BLOCK_O: tl.constexpr, BLOCK_J: tl.constexpr,
                 TAPS_FROM_FIRST: tl.constexpr):
    # o: output position along the filtered axis, j: along the other one; the tile's second
    # (contiguous) dimension is the axis whose pixels are adjacent in memory
    ro = tl.program_id(0) * BLOCK_O + tl.arange(0, BLOCK_O)
    rj = tl.program_id(1) * BLOCK_J + tl.arange(0, BLOCK_J)
    if O_FAST:
        o = ro[None, :]
        j = rj[:, None]
    else:
        o = ro[:, None]
        j = rj[None, :]
    om = o < N_OUT
    m = om & (j < N_J)
    # Pillow adds half a unit before the shift: 1 << (PRECISION_BITS - 1)
    acc0 = (o + j) * 0 + (1 << 21)
    acc1 = acc0
    acc2 = acc0
    src = src_ptr + j.to(tl.int64) * s_j
    # TAPS_FROM_FIRST: tap k's source pixel is min(first + k, N_IN - 1) (pil_resize's tables
    # are built so), computed instead of loaded: no load waits on another inside the loop
    first = tl.load(idx_ptr + o, mask=om, other=0)
    for k in range(0, K):
        if TAPS_FROM_FIRST:
            i = tl.minimum(first + k, N_IN - 1)
        else:
            i = tl.load(idx_ptr + k * N_OUT + o, mask=om, other=0)
        wk = tl.load(w_ptr + k * N_OUT + o, mask=om, other=0)
        p = src + i.to(tl.int64) * s_o
        acc0 += wk * tl.load(p, mask=m, other=0).to(tl.int32)
        acc1 += wk * tl.load(p + s_c, mask=m, other=0).to(tl.int32)
        acc2 += wk * tl.load(p + 2 * s_c, mask=m, other=0).to(tl.int32)
    v0 = tl.minimum(tl.maximum(acc0 >> 22, 0), 255)
    v1 = tl.minimum(tl.maximum(acc1 >> 22, 0), 255)
    v2 = tl.minimum(tl.maximum(acc2 >> 22, 0), 255)
    out = dst_ptr + o.to(tl.int64) * d_o + j.to(tl.int64) * d_j
    if NORMALIZE:
        tl.store(out, tl.load(table_ptr + v0, mask=m, other=0.0), mask=m)
        tl.store(out + d_c, tl.load(table_ptr + 256 + v1, mask=m, other=0.0), mask=m)
        tl.store(out + 2 * d_c, tl.load(table_ptr + 512 + v2, mask=m, other=0.0), mask=m)
    else:
        tl.store(out, v0.to(tl.uint8), mask=m)
        tl.store(out + d_c, v1.to(tl.uint8), mask=m)
        tl.store(out + 2 * d_c, v2.to(tl.uint8), mask=m)


def _identity(n: int, device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """One-tap tables that copy n pixels (weight one unit), uploaded once per (n, device)."""
    key = (n, device)
    if key not in _IDENTITY:
        _IDENTITY[key] = (torch.arange(n, dtype=torch.int64).view(1, n).to(device),
                          torch.full((1, n), 1 << pil_resize.PRECISION_BITS,
                                     dtype=torch.int32).to(device))
    return _IDENTITY[key]


def _launch(src: torch.Tensor, src_strides: Tuple[int, int, int], n_in: int, n_j: int,
            size: int, dst: torch.Tensor, dst_strides: Tuple[int, int, int], normalize: bool,
            horizontal: bool, table: torch.Tensor) -> None:
    """One pass: ``src`` filtered along one axis (``src_strides``: that axis, the other
    spatial axis, the channel) from ``n_in`` to ``size`` pixels, ``n_j`` pixels across, into
    ``dst`` (strides likewise); ``horizontal``: the filtered axis is the image's x."""
    idx, w = pil_resize.tables(n_in, size, src.device) if n_in != size else \
        _identity(size, src.device)
    block_o, block_j = (_FAST, _SLOW) if horizontal else (_SLOW, _FAST)
    grid = (triton.cdiv(size, block_o), triton.cdiv(n_j, block_j))
    _pass_kernel[grid](src, *src_strides, idx, w, dst, *dst_strides, table, size, n_j, n_in,
                       K=idx.shape[0], O_FAST=horizontal, NORMALIZE=normalize, BLOCK_O=block_o,
                       BLOCK_J=block_j, TAPS_FROM_FIRST=True, num_warps=4)


def frame_to_input(x: torch.Tensor, size: int,
                   out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x [H, W, 3] uint8 (any strides) -> out [1, 3, S, S] float32, bitwise
    ``frame_in.normalize(x, size)``; written into ``out`` when given (any strides, e.g. a
    camera's row of the encoder graph's input). Two launches, one where a side is S already.
    No host sync once this source size's tables exist, so it can be captured."""
    h, w = int(x.shape[0]), int(x.shape[1])
    if out is None:
        out = torch.empty(1, 3, size, size, dtype=torch.float32, device=x.device)
    table = frame_in.level_table(x.device)                  # [3, 256] float32
    sh, sw, sc = x.stride()
    oc, oy, ox = out.stride()[1:]
    if h != size and w != size:
        if pil_resize.first_pass_vertical(h, w, size):      # [H, W] -> [S, W] -> [S, S]
            mid = torch.empty(size, w, 3, dtype=torch.uint8, device=x.device)
            _launch(x, (sh, sw, sc), h, w, size, mid, (3 * w, 3, 1), False, False, table)
            _launch(mid, (3, 3 * w, 1), w, size, size, out, (ox, oy, oc), True, True, table)
        else:                                               # [H, W] -> [H, S] -> [S, S]
            mid = torch.empty(h, size, 3, dtype=torch.uint8, device=x.device)
            _launch(x, (sw, sh, sc), w, h, size, mid, (3, 3 * size, 1), False, True, table)
            _launch(mid, (3 * size, 3, 1), h, size, size, out, (oy, ox, oc), True, False,
                    table)
    elif w != size:                      # only the width changes
        _launch(x, (sw, sh, sc), w, size, size, out, (ox, oy, oc), True, True, table)
    else:                                # only the height (or nothing: identity taps)
        _launch(x, (sh, sw, sc), h, size, size, out, (oy, ox, oc), True, False, table)
    return out
