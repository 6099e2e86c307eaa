"""sam2's hole filling (``engine/holes.py``) in one kernel, for the captured graphs.

Why: ``holes.fill_holes`` decides the rule with fixed tensor ops (nine 3x3 max-pools, wheres,
two scatter-adds and gathers): 52 kernels on every tracked frame. Here each pixel decides for
itself, in registers, from its own neighbourhood, in one kernel that also writes the output.

The rule (``holes.py``): a pixel is filled (0.1) iff it is background (``logit <= 0``; NaN is
not) and its 8-connected background component C has ``|C| <= A`` (A = max_area); pixels outside
the image are not background. Every other logit is copied.

Per pixel p: a flood fill from p over the background, A steps of 8-neighbour growth,
``S_0 = {p}``, ``S_(k+1) = (S_k grown by its 8-neighbours) & background``, inside the
(2R+1) x (2R+1) window around p (R = 8), held as 17 int32 row masks (bit j: column p + j - 8).
p is filled iff p is background and ``|S_A| <= A``.

Proof, for p background and 1 <= A <= R (p not background: never filled, in both):
(1) By induction ``S_k`` = the pixels of C within 8-path distance k of p along C (paths through
    background). Those lie within Chebyshev distance k <= A <= R of p, inside the window, so
    the window cuts nothing off for k <= A (a bit shifted out of it is a pixel farther than R).
(2) While ``S_k != C``, some pixel of C outside ``S_k`` has an 8-neighbour in ``S_k`` (C is
    connected), so ``|S_(k+1)| > |S_k|``: ``|S_k| >= min(|C|, k + 1)``.
(3) ``|C| <= A``: every pixel of C is within 8-path distance ``|C| - 1 <= A - 1`` of p along
    C, so ``S_A = C`` and ``|S_A| = |C| <= A``: filled. ``|C| > A``: by (2)
    ``|S_A| >= A + 1``: kept. That is the rule.

Counting: ``|S_A|`` is the sum of the rows' bit counts, by the SWAR steps (Triton has no
popcount that also runs in the interpreter): per row the bytes of its count (each <= 8), summed
over the 17 rows (<= 136, no byte overflows), then the three bytes added.
max_area > R, another dtype or shape: ``holes.fill_holes`` (the reference) runs instead.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sam2_ros.engine import holes
from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2

RADIUS = 8          # the window's radius: max_area up to 8 (sam2's value) runs the kernel
# the fill value as each dtype holds it (as torch.where's scalar becomes): exact in the dtype,
# so the kernel's conversion of it rounds nothing, on the GPU and in the interpreter alike
FILL = {dt: float(torch.tensor(holes.FILL_VALUE, dtype=dt))
        for dt in (torch.float32, torch.bfloat16, torch.float16)}


@triton.jit
def _row_bits(x_ptr, base, ys, valid, xs, H, W, sh, sw, DY: tl.constexpr):
    """[BH, BW] int32: bit j = the pixel (ys + DY, xs + j - 8) of the row's image is
    background (in the image, logit <= 0; NaN compares false). ``base`` [BH, 1] int64: each
    row's image offset; columns -8..7 in one [BH, BW, 16] load, +8 in a second."""
    yy = ys + DY
    inside = valid & (yy >= 0) & (yy < H)                              # [BH, 1]
    row = x_ptr + base + yy.to(tl.int64) * sh                          # [BH, 1]
    j = tl.arange(0, 16)[None, None, :]                                 # [1, 1, 16]
    xx = xs[:, :, None] + (j - 8)                                       # [1, BW, 16]
    m = inside[:, :, None] & (xx >= 0) & (xx < W)
    v = tl.load(row[:, :, None] + xx.to(tl.int64) * sw, mask=m, other=1.0)
    bits = tl.sum((v <= 0).to(tl.int32) << j, axis=2)   # distinct bits: the sum is their OR
    xe = xs + 8
    ve = tl.load(row + xe.to(tl.int64) * sw, mask=inside & (xe < W), other=1.0)
    return bits | ((ve <= 0).to(tl.int32) << 16)


@triton.jit
def _spread(s):
    """A row mask grown by one column either way (bits leaving the window: masked later)."""
    return s | (s << 1) | (s >> 1)


@triton.jit
def _byte_counts(v):
    """The bit count of each byte of v (>= 0), in that byte."""
    v = v - ((v >> 1) & 0x55555555)
    v = (v & 0x33333333) + ((v >> 2) & 0x33333333)
    return (v + (v >> 4)) & 0x0F0F0F0F


@jit
def _fill_holes_kernel(x_ptr, x_sb, x_sh, x_sw, y_ptr, y_sb, y_sh, y_sw, NR, H, W, fill,
                       MAX_AREA: tl.constexpr, BH: tl.constexpr, BW: tl.constexpr):
    # the B images' rows stacked (NR = B * H), a tile of BH of them x BW columns; a tile may
    # span two images: each row knows its own
    r = (tl.program_id(1) * BH + tl.arange(0, BH))[:, None]             # [BH, 1]
    valid = r < NR
    b = (r // H).to(tl.int64)
    ys = r % H
    xs = (tl.program_id(0) * BW + tl.arange(0, BW))[None, :]            # [1, BW]
    xb = b * x_sb                                                        # [BH, 1]
    # background rows of the window, g{i}: row p.y + i - 8                [BH, BW] each
    g0 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, -8)
    g1 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, -7)
    g2 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, -6)
    g3 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, -5)
    g4 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, -4)
    g5 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, -3)
    g6 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, -2)
    g7 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, -1)
    g8 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, 0)
    g9 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, 1)
    g10 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, 2)
    g11 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, 3)
    g12 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, 4)
    g13 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, 5)
    g14 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, 6)
    g15 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, 7)
    g16 = _row_bits(x_ptr, xb, ys, valid, xs, H, W, x_sh, x_sw, 8)
    # S_0 = {p} where p is background; rows s{i} as g{i}. The steps are unrolled, so the
    # compiler drops the rows a step cannot reach yet (still constant zeros).
    zero = tl.zeros([BH, BW], dtype=tl.int32)
    s0, s1, s2, s3, s4, s5, s6, s7 = zero, zero, zero, zero, zero, zero, zero, zero
    s9, s10, s11, s12, s13, s14, s15, s16 = zero, zero, zero, zero, zero, zero, zero, zero
    s8 = g8 & (1 << 8)
    for _ in tl.static_range(MAX_AREA):
        h0, h1, h2, h3 = _spread(s0), _spread(s1), _spread(s2), _spread(s3)
        h4, h5, h6, h7 = _spread(s4), _spread(s5), _spread(s6), _spread(s7)
        h8, h9, h10, h11 = _spread(s8), _spread(s9), _spread(s10), _spread(s11)
        h12, h13, h14, h15 = _spread(s12), _spread(s13), _spread(s14), _spread(s15)
        h16 = _spread(s16)
        s0 = (h0 | h1) & g0
        s1 = (h0 | h1 | h2) & g1
        s2 = (h1 | h2 | h3) & g2
        s3 = (h2 | h3 | h4) & g3
        s4 = (h3 | h4 | h5) & g4
        s5 = (h4 | h5 | h6) & g5
        s6 = (h5 | h6 | h7) & g6
        s7 = (h6 | h7 | h8) & g7
        s8 = (h7 | h8 | h9) & g8
        s9 = (h8 | h9 | h10) & g9
        s10 = (h9 | h10 | h11) & g10
        s11 = (h10 | h11 | h12) & g11
        s12 = (h11 | h12 | h13) & g12
        s13 = (h12 | h13 | h14) & g13
        s14 = (h13 | h14 | h15) & g14
        s15 = (h14 | h15 | h16) & g15
        s16 = (h15 | h16) & g16
    c = _byte_counts(s0) + _byte_counts(s1) + _byte_counts(s2) + _byte_counts(s3)
    c += _byte_counts(s4) + _byte_counts(s5) + _byte_counts(s6) + _byte_counts(s7)
    c += _byte_counts(s8) + _byte_counts(s9) + _byte_counts(s10) + _byte_counts(s11)
    c += _byte_counts(s12) + _byte_counts(s13) + _byte_counts(s14) + _byte_counts(s15)
    c += _byte_counts(s16)
    area = (c & 0xFF) + ((c >> 8) & 0xFF) + ((c >> 16) & 0xFF)       # |S_A|  [BH, BW]
    hole = ((g8 & (1 << 8)) != 0) & (area <= MAX_AREA)
    m = valid & (xs < W)
    x = tl.load(x_ptr + xb + ys.to(tl.int64) * x_sh + xs.to(tl.int64) * x_sw, mask=m)
    # in x's dtype (fill is exact in it): a NaN or any other logit is copied bit for bit
    out = tl.where(hole, (tl.zeros([BH, BW], dtype=tl.float32) + fill).to(x.dtype), x)
    tl.store(y_ptr + b * y_sb + ys.to(tl.int64) * y_sh + xs.to(tl.int64) * y_sw, out, mask=m)


def fill_holes_fused(logits: torch.Tensor, max_area: int) -> torch.Tensor:
    """``holes.fill_holes(logits, max_area)``, bitwise, in one kernel: logits [B, 1, H, W]
    (float32, bf16 or fp16, any strides) -> a new tensor laid out as ``empty_like`` lays it
    out (as torch.where's output); ``max_area`` <= 0: ``logits`` itself; other cases
    (max_area > RADIUS, other dtypes or channel counts): the reference ops."""
    if max_area <= 0:
        return logits
    if max_area > RADIUS or logits.dtype not in FILL or logits.dim() != 4 \
            or logits.shape[1] != 1:
        return holes.fill_holes(logits, max_area)
    batch, _, h, w = logits.shape
    out = torch.empty_like(logits)
    if logits.device.type == 'cuda':
        # 128 programs at 128 x 128, two pixels per thread: two warps a program beat four
        # (launch_probe.py; bitwise the same output)
        bh, bw, warps = 4, 32, 2
    else:                                 # the interpreter: few, large programs
        bh, bw, warps = min(128, next_pow2(batch * h)), min(64, next_pow2(w)), 4
    grid = (triton.cdiv(w, bw), triton.cdiv(batch * h, bh))
    _fill_holes_kernel[grid](logits, logits.stride(0), logits.stride(2), logits.stride(3),
                             out, out.stride(0), out.stride(2), out.stride(3), batch * h, h, w,
                             FILL[logits.dtype], MAX_AREA=int(max_area), BH=bh, BW=bw,
                             num_warps=warps)
    return out
