"""Masks out (group 'io'): masks, label image and per-object stats in two kernels.

The reference (``masks_out.on_device`` + ``label_on_device``) launches about 48 kernels per
frame: the bilinear upsampling, the threshold, a dozen reductions and index ops for area, box
and centroid, the stack/where/cat of the stats and the label's cast, multiply and max.

* ``_masks_kernel``, one program per tile of source pixels: each object's logit at the pixel
  by bilinear interpolation (align_corners=False) as CUDA's ``upsample_bilinear2d`` computes
  it (float32 source coordinate ``scale * (i + 0.5) - 0.5`` clamped at 0, its integer part
  and fraction, and the two-level weighted sum, with the fused multiply-adds nvcc is expected
  to make of those expressions: fma(w0, a, w1 * b), as LLVM contracts a * b + c * d; torch's
  CPU build rounds that way too), thresholded at > 0 into the bool mask; the label (the
  highest id whose mask is set, 0 for none) kept in registers over the objects; and per
  object the tile's integer partial stats (area, box, coordinate sums) into a small
  [B, tiles, 8] buffer.
* ``_stats_kernel``, one program per object: the partials reduced (integers: exact in any
  order) and the stats row written as the reference's float64 values (area, x0, y0, x1, y1,
  cx, cy: the centroid is the exact integer coordinate sum over the area in float64; -1 for
  box and centroid of an empty mask), with the extra column (scores) appended.

Masks equal the reference's except where a logit lands within float32 rounding of 0 (the
reference's kernel and ours may round one product differently; the GPU test measures it);
the stats and label are exact functions of the masks, equal to the reference's on the same
masks. On the CPU (Triton's interpreter, which has no fused multiply-add) the products of the
fused ops are formed in float64 and rounded once, so the CPU tests check the same rounding.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.launch import dummy_like, jit

_BLOCK_Y, _BLOCK_X = 8, 128       # source pixels per program of the mask kernel
_BLOCK_T = 1024                   # tiles per step of the stats reduction
_NO_PIXEL = tl.constexpr(1 << 30)  # box minimum of a tile without mask pixels


@triton.jit
def _fma(a, b, c, EMULATE: tl.constexpr):
    """a * b + c rounded once, float32 tensors of one shape; EMULATE: through float64 (the
    interpreter has no fused multiply-add; a product of two float32 values is exact in
    float64)."""
    if EMULATE:
        return (a.to(tl.float64) * b.to(tl.float64) + c.to(tl.float64)).to(tl.float32)
    return tl.fma(a, b, c)


@triton.jit
def _source(i, scale, n_in, EMULATE: tl.constexpr):
    """Output positions i -> (first source index, second, weight of the first, of the second),
    as ``area_pixel_compute_source_index`` and upsample_bilinear2d_out_frame compute them."""
    half = i.to(tl.float32) + 0.5
    r = _fma(half, half * 0.0 + scale, half * 0.0 - 0.5, EMULATE)
    r = tl.where(r < 0.0, 0.0, r)
    i0 = r.to(tl.int32)
    i1 = tl.where(i0 < n_in - 1, i0 + 1, i0)
    w1 = r - i0.to(tl.float32)
    return i0, i1, 1.0 - w1, w1


@jit
def _masks_kernel(lo_ptr, l_sb, l_sy, l_sx, ids_ptr, SH, SW, H, W, scale_y, scale_x, m_ptr,
                  label_ptr, part_ptr, B: tl.constexpr, EMULATE: tl.constexpr,
                  BLOCK_Y: tl.constexpr, BLOCK_X: tl.constexpr):
    tiles = tl.num_programs(0) * tl.num_programs(1)
    tile = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    y = tl.program_id(1) * BLOCK_Y + tl.arange(0, BLOCK_Y)                   # [BY]
    x = tl.program_id(0) * BLOCK_X + tl.arange(0, BLOCK_X)                   # [BX]
    y0, y1, h0, h1 = _source(y, scale_y, SH, EMULATE)
    x0, x1, w0, w1 = _source(x, scale_x, SW, EMULATE)
    inside = (y < H)[:, None] & (x < W)[None, :]                             # [BY, BX]
    r0 = (y0.to(tl.int64) * l_sy)[:, None]
    r1 = (y1.to(tl.int64) * l_sy)[:, None]
    c0 = (x0.to(tl.int64) * l_sx)[None, :]
    c1 = (x1.to(tl.int64) * l_sx)[None, :]
    w0b = tl.broadcast_to(w0[None, :], (BLOCK_Y, BLOCK_X))
    w1b = tl.broadcast_to(w1[None, :], (BLOCK_Y, BLOCK_X))
    h0b = tl.broadcast_to(h0[:, None], (BLOCK_Y, BLOCK_X))
    h1b = tl.broadcast_to(h1[:, None], (BLOCK_Y, BLOCK_X))
    yy = y[:, None] + x[None, :] * 0                                          # [BY, BX]
    xx = x[None, :] + y[:, None] * 0
    pix = yy.to(tl.int64) * W + xx
    plane = pix * 0 + H * W                  # int64: B * H * W may pass 2**31
    label = yy * 0
    for b in range(0, B):
        base = lo_ptr + b * l_sb
        a = tl.load(base + r0 + c0, mask=inside, other=0.0).to(tl.float32)
        c = tl.load(base + r0 + c1, mask=inside, other=0.0).to(tl.float32)
        d = tl.load(base + r1 + c0, mask=inside, other=0.0).to(tl.float32)
        e = tl.load(base + r1 + c1, mask=inside, other=0.0).to(tl.float32)
        top = _fma(w0b, a, w1b * c, EMULATE)
        bottom = _fma(w0b, d, w1b * e, EMULATE)
        on = (_fma(h0b, top, h1b * bottom, EMULATE) > 0.0) & inside
        tl.store(m_ptr + b * plane + pix, on.to(tl.uint8), mask=inside)
        label = tl.maximum(label, tl.where(on, tl.load(ids_ptr + b).to(tl.int32), 0))
        p = part_ptr + (b * tiles + tile) * 8
        tl.store(p, tl.sum(on.to(tl.int32)))
        tl.store(p + 1, tl.min(tl.where(on, xx, _NO_PIXEL)))
        tl.store(p + 2, tl.min(tl.where(on, yy, _NO_PIXEL)))
        tl.store(p + 3, tl.max(tl.where(on, xx, -1)))
        tl.store(p + 4, tl.max(tl.where(on, yy, -1)))
        tl.store(p + 5, tl.sum(tl.where(on, xx, 0)))
        tl.store(p + 6, tl.sum(tl.where(on, yy, 0)))
    tl.store(label_ptr + pix, label.to(tl.uint8), mask=inside)


@jit
def _stats_kernel(part_ptr, tiles, extra_ptr, stats_ptr, HAS_EXTRA: tl.constexpr,
                  NCOL: tl.constexpr, N_STEPS: tl.constexpr, BLOCK_T: tl.constexpr):
    b = tl.program_id(0)
    t = tl.arange(0, BLOCK_T)
    area = tl.zeros([BLOCK_T], dtype=tl.int64)
    sx = tl.zeros([BLOCK_T], dtype=tl.int64)
    sy = tl.zeros([BLOCK_T], dtype=tl.int64)
    bx0 = tl.full([BLOCK_T], _NO_PIXEL, tl.int32)
    by0 = tl.full([BLOCK_T], _NO_PIXEL, tl.int32)
    bx1 = tl.full([BLOCK_T], -1, tl.int32)
    by1 = tl.full([BLOCK_T], -1, tl.int32)
    for step in range(0, N_STEPS):
        tt = step * BLOCK_T + t
        tm = tt < tiles
        p = part_ptr + (b * tiles + tt) * 8
        area += tl.load(p, mask=tm, other=0).to(tl.int64)
        bx0 = tl.minimum(bx0, tl.load(p + 1, mask=tm, other=_NO_PIXEL))
        by0 = tl.minimum(by0, tl.load(p + 2, mask=tm, other=_NO_PIXEL))
        bx1 = tl.maximum(bx1, tl.load(p + 3, mask=tm, other=-1))
        by1 = tl.maximum(by1, tl.load(p + 4, mask=tm, other=-1))
        sx += tl.load(p + 5, mask=tm, other=0).to(tl.int64)
        sy += tl.load(p + 6, mask=tm, other=0).to(tl.int64)
    n = tl.sum(area)
    nf = n.to(tl.float64)
    safe = tl.maximum(nf, 1.0)
    empty = n == 0
    out = stats_ptr + b * NCOL
    tl.store(out, nf)
    tl.store(out + 1, tl.where(empty, -1.0, tl.min(bx0).to(tl.float64)))
    tl.store(out + 2, tl.where(empty, -1.0, tl.min(by0).to(tl.float64)))
    tl.store(out + 3, tl.where(empty, -1.0, tl.max(bx1).to(tl.float64)))
    tl.store(out + 4, tl.where(empty, -1.0, tl.max(by1).to(tl.float64)))
    tl.store(out + 5, tl.where(empty, -1.0, tl.sum(sx).to(tl.float64) / safe))
    tl.store(out + 6, tl.where(empty, -1.0, tl.sum(sy).to(tl.float64) / safe))
    if HAS_EXTRA:
        tl.store(out + 7, tl.load(extra_ptr + b).to(tl.float64))


def masks_label_stats(logits: torch.Tensor, h: int, w: int, ids: torch.Tensor,
                      extra: Optional[torch.Tensor] = None
                      ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits [B, 1, s, s'] (any float dtype and strides), ids [B] uint8 (0: a padding row),
    extra [B] or None -> masks [B, H, W] bool, stats [B, 7 or 8] float64 and label [H, W]
    uint8, as ``masks_out.on_device(logits, h, w, extra)`` and
    ``masks_out.label_on_device(masks, ids)``. Two launches; no host sync (capturable)."""
    bsz, _, sh, sw = logits.shape
    dev = logits.device
    ncol = 7 if extra is None else 8
    masks = torch.empty(bsz, h, w, dtype=torch.bool, device=dev)
    stats = torch.empty(bsz, ncol, dtype=torch.float64, device=dev)
    label = torch.empty(h, w, dtype=torch.uint8, device=dev)
    if bsz == 0:
        return masks, stats, label.zero_()
    grid = (triton.cdiv(w, _BLOCK_X), triton.cdiv(h, _BLOCK_Y))
    tiles = grid[0] * grid[1]
    part = torch.empty(bsz, tiles, 8, dtype=torch.int32, device=dev)
    # the scales as upsample_bilinear2d computes them on the host: float32 in / out
    scale_y, scale_x = (float(np.float32(n_in) / np.float32(n_out))
                        for n_in, n_out in ((sh, h), (sw, w)))
    emulate = dev.type != 'cuda'
    _masks_kernel[grid](logits, logits.stride(0), logits.stride(2), logits.stride(3), ids, sh,
                        sw, h, w, scale_y, scale_x, masks.view(torch.uint8), label, part,
                        B=bsz, EMULATE=emulate, BLOCK_Y=_BLOCK_Y, BLOCK_X=_BLOCK_X,
                        num_warps=2)      # two warps beat four (launch_probe.py; bitwise)
    _stats_kernel[(bsz,)](part, tiles, dummy_like(extra, stats), stats,
                          HAS_EXTRA=extra is not None, NCOL=ncol,
                          N_STEPS=triton.cdiv(tiles, _BLOCK_T), BLOCK_T=_BLOCK_T, num_warps=4)
    return masks, stats, label
