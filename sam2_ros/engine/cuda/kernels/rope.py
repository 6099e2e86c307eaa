"""sam2's axial rotary encoding of queries and keys in one kernel.

sam2's ``apply_rotary_enc`` upcasts q and k to float32, views channel pairs as complex numbers,
multiplies them by the ``freqs_cis`` table (repeated along the keys for cross-attention to
memories: key j takes row j mod Lq), casts back, and the caller copies the rotated keys into a
slice of k, leaving the last ``num_k_exclude_rope`` keys (object pointers) unrotated: some
eight kernels per attention call. Here one kernel reads the projections where the Linear left
them ([B, L, H*D], any row stride: also column slices of one fused q/k/v projection), and
writes q and k as contiguous [B, H, L, D] in their dtype, the excluded keys copied unchanged.
The products are those of sam2's complex multiply, (xr*c - xi*s, xr*s + xi*c), in float32.
"""

from __future__ import annotations

from typing import Tuple

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne

_TILE = 4096


@triton.jit
def _rotate_rows(x_ptr, dst_ptr, rows, rm, n_rot, cos_ptr, sin_ptr, Lq, D2,
                 BLOCK_L: tl.constexpr, BLOCK_D2: tl.constexpr):
    """Rows of one (batch, head): x_ptr, dst_ptr [BLOCK_L] row starts; rows < n_rot rotated by
    table row (row mod Lq), the rest copied. Whole rows in one contiguous load (vectorised),
    split into the pairs' real and imaginary parts in registers: sam2's view_as_complex
    without strided loads."""
    cols = tl.arange(0, 2 * BLOCK_D2)
    mx = rm[:, None] & (cols < 2 * D2)[None, :]
    x = tl.load(x_ptr[:, None] + cols[None, :], mask=mx, other=0.0)
    xr, xi = tl.split(tl.reshape(x.to(tl.float32), (BLOCK_L, BLOCK_D2, 2)))
    j = tl.arange(0, BLOCK_D2)
    rot = (rows < n_rot)[:, None]
    mt = rm[:, None] & (j < D2)[None, :] & rot
    t = (rows.to(tl.int64) % Lq)[:, None] * D2 + j[None, :]
    c = tl.load(cos_ptr + t, mask=mt, other=1.0)
    s = tl.load(sin_ptr + t, mask=mt, other=0.0)
    yr = tl.where(rot, xr * c - xi * s, xr)
    yi = tl.where(rot, xr * s + xi * c, xi)
    y = tl.reshape(tl.join(yr, yi), (BLOCK_L, 2 * BLOCK_D2))
    tl.store(dst_ptr[:, None] + cols[None, :], cast_rne(y, dst_ptr.dtype.element_ty), mask=mx)


@jit
def _rope_kernel(q_ptr, q_sb, q_sl, k_ptr, k_sb, k_sl, cos_ptr, sin_ptr,
                 qo_ptr, ko_ptr, Lq, Lk, n_rope, H, D2, n_q_blocks,
                 BLOCK_L: tl.constexpr, BLOCK_D2: tl.constexpr):
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    if pid < n_q_blocks:            # queries: every row rotated, table row = query row
        rows = pid * BLOCK_L + tl.arange(0, BLOCK_L)
        r64 = rows.to(tl.int64)
        _rotate_rows(q_ptr + b * q_sb + r64 * q_sl + h * 2 * D2,
                     qo_ptr + (bh * Lq + r64) * 2 * D2, rows, rows < Lq, Lq,
                     cos_ptr, sin_ptr, Lq, D2, BLOCK_L, BLOCK_D2)
    else:                           # keys: rows < n_rope rotated by table row (row mod Lq)
        rows = (pid - n_q_blocks) * BLOCK_L + tl.arange(0, BLOCK_L)
        r64 = rows.to(tl.int64)
        _rotate_rows(k_ptr + b * k_sb + r64 * k_sl + h * 2 * D2,
                     ko_ptr + (bh * Lk + r64) * 2 * D2, rows, rows < Lk, n_rope,
                     cos_ptr, sin_ptr, Lq, D2, BLOCK_L, BLOCK_D2)


def rope_tables(freqs_cis: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """sam2's complex table [Lq, D/2] -> (cos, sin) float32 [Lq, D/2], contiguous."""
    return freqs_cis.real.float().contiguous(), freqs_cis.imag.float().contiguous()


def rotary_qk(q: torch.Tensor, k: torch.Tensor, heads: int, cos: torch.Tensor,
              sin: torch.Tensor, num_k_exclude_rope: int = 0,
              repeat_k: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """q [B, Lq, H*D], k [B, Lk, H*D] (channels contiguous) -> rotated q, k as contiguous
    [B, H, Lq, D], [B, H, Lk, D] in their own dtypes. The first Lk - num_k_exclude_rope keys
    are rotated (with table row j mod Lq when repeat_k, as sam2 repeats its table), the rest
    copied."""
    bsz, lq, hd = q.shape
    lk = k.shape[1]
    assert q.stride(2) == 1 and k.stride(2) == 1 and k.shape[0] == bsz and k.shape[2] == hd
    d2 = hd // heads // 2
    assert cos.shape == (lq, d2) and sin.shape == (lq, d2), (cos.shape, lq, d2)
    n_rope = lk - num_k_exclude_rope
    assert n_rope == lq or (repeat_k and n_rope % lq == 0), (lq, lk, num_k_exclude_rope)
    qo = torch.empty(bsz, heads, lq, 2 * d2, device=q.device, dtype=q.dtype)
    ko = torch.empty(bsz, heads, lk, 2 * d2, device=k.device, dtype=k.dtype)
    block_d2 = next_pow2(d2)
    block_l = max(1, _TILE // (2 * block_d2))
    n_q = triton.cdiv(lq, block_l)
    grid = (n_q + triton.cdiv(lk, block_l), bsz * heads)
    # eight warps a program where the keys make hundreds of programs (a cross-attention over
    # the memory): faster there, bitwise the same (tools/probes/launch_probe.py); smaller
    # calls were not timed apart and keep four
    warps = 8 if grid[0] * grid[1] >= 256 else 4
    _rope_kernel[grid](q, q.stride(0), q.stride(1), k, k.stride(0), k.stride(1), cos, sin,
                       qo, ko, lq, lk, n_rope, heads, d2, n_q,
                       BLOCK_L=block_l, BLOCK_D2=block_d2, num_warps=warps)
    return qo, ko
