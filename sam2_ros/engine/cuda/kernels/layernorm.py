"""Residual add + LayerNorm in one kernel, writing what its consumers read.

sam2's blocks compute ``x = a + b`` (a residual add: in bf16 or float32 by type promotion),
then ``LayerNorm(x)`` (float32 under autocast: layer_norm is on its float32 list), then the
next Linear casts the float32 result to bf16 (a cast kernel per call), often after a window
partition or a positional add. ``add_layernorm`` does all of it per row in one pass:

    s = round_to(promote(a, b), a + scale * b)      # the sum, rounded as torch's add rounds it
    y = LayerNorm(s) in float32, stored in y's dtype
    optional:  s stored (the residual stream), y + pe and y cast to other dtypes stored

Rows may be gathered: ``a_rows`` / ``b_rows`` map each output row to an input row (-1: a zero
row, a window's padding), which turns Hiera's window partition and unpartition copies into
the norm's own loads. Tensors are [B, L, C] with any strides; an index map applies to L.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.launch import dummy_like, jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne

# elements per program: rows x padded channels (a few rows of 1024 channels, many of 96)
_TILE = 4096


@jit
def _add_ln_kernel(
        a_ptr, a_idx_ptr, a_sb, a_sl, a_sc,
        b_ptr, b_idx_ptr, b_sb, b_sl, b_sc, b_scale,
        w_ptr, bias_ptr, eps,
        s_ptr, s_sb, s_sl,
        y_ptr, y_sb, y_sl, y_sc,
        pe_ptr, pe_sb, pe_sl, pe_sc, yp_ptr, yp_sb, yp_sl,
        yc_ptr, yc_sb, yc_sl,
        yg_ptr, yg_sb, yg_sl,
        n_rows, L, L_in, C,
        A_IDX: tl.constexpr, HAS_B: tl.constexpr, B_IDX: tl.constexpr,
        B_SCALE: tl.constexpr, SUM_BF16: tl.constexpr, STORE_S: tl.constexpr,
        HAS_PE: tl.constexpr, STORE_YC: tl.constexpr, STORE_YG: tl.constexpr,
        BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_C)
    rmask = rows < n_rows
    cmask = cols < C
    bi = (rows // L).to(tl.int64)
    li = (rows % L).to(tl.int64)
    la = li
    if A_IDX:
        la = tl.load(a_idx_ptr + li, mask=rmask, other=-1).to(tl.int64)
    valid = rmask & (la >= 0) & (la < L_in)
    m2 = valid[:, None] & cmask[None, :]
    c64 = cols.to(tl.int64)
    a = tl.load(a_ptr + (bi * a_sb + la * a_sl)[:, None] + (c64 * a_sc)[None, :], mask=m2,
                other=0.0).to(tl.float32)
    x = a
    if HAS_B:
        lb = la
        if B_IDX:
            lb = tl.load(b_idx_ptr + li, mask=rmask, other=0).to(tl.int64)
        b = tl.load(b_ptr + (bi * b_sb + lb * b_sl)[:, None] + (c64 * b_sc)[None, :], mask=m2,
                    other=0.0).to(tl.float32)
        if B_SCALE:     # torch rounds scale * b to b's dtype before the add
            b = cast_rne(b * b_scale, b_ptr.dtype.element_ty).to(tl.float32)
        x = a + b
        if SUM_BF16:    # both operands bf16: torch's add rounds the sum to bf16
            x = cast_rne(x, tl.bfloat16).to(tl.float32)
    if STORE_S:
        tl.store(s_ptr + (bi * s_sb + la * s_sl)[:, None] + c64[None, :],
                 cast_rne(x, s_ptr.dtype.element_ty), mask=m2)
    mean = tl.sum(x, axis=1) / C
    xc = tl.where(m2, x - mean[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / C
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    y = xc * rstd[:, None] * w[None, :] + bias[None, :]
    y = tl.where(m2, y, 0.0)            # a padding row (la < 0) is a zero row, as F.pad's
    om = rmask[:, None] & cmask[None, :]
    li_ = rows.to(tl.int64) % L
    tl.store(y_ptr + (bi * y_sb + li_ * y_sl)[:, None] + (c64 * y_sc)[None, :],
             cast_rne(y, y_ptr.dtype.element_ty), mask=om)
    if HAS_PE:          # y + pe in float32 (pe float32 or bf16), then cast to yp's dtype
        pe = tl.load(pe_ptr + (bi * pe_sb + li_ * pe_sl)[:, None] + (c64 * pe_sc)[None, :],
                     mask=om, other=0.0).to(tl.float32)
        y_ = cast_rne(y, y_ptr.dtype.element_ty).to(tl.float32)
        tl.store(yp_ptr + (bi * yp_sb + li_ * yp_sl)[:, None] + c64[None, :],
                 cast_rne(y_ + pe, yp_ptr.dtype.element_ty), mask=om)
    if STORE_YC:
        y_ = cast_rne(y, y_ptr.dtype.element_ty).to(tl.float32)
        tl.store(yc_ptr + (bi * yc_sb + li_ * yc_sl)[:, None] + c64[None, :],
                 cast_rne(y_, yc_ptr.dtype.element_ty), mask=om)
    if STORE_YG:        # y again at a's rows (a window partition's input layout)
        tl.store(yg_ptr + (bi * yg_sb + la * yg_sl)[:, None] + c64[None, :],
                 cast_rne(y, yg_ptr.dtype.element_ty), mask=m2)


@dataclass
class NormOut:
    """Outputs of ``add_layernorm``; absent ones are None."""

    y: torch.Tensor                       # [B, L, C] LayerNorm(s) in the requested dtype
    s: Optional[torch.Tensor] = None      # [B, L_in, C] the sum (rows of a's index map)
    yp: Optional[torch.Tensor] = None     # [B, L, C] y + pe
    yc: Optional[torch.Tensor] = None     # [B, L, C] y in another dtype
    yg: Optional[torch.Tensor] = None     # [B, L_in, C] y at a's rows (before the index map)


def _rows(t: torch.Tensor):
    """(stride of B, stride of L, stride of C) of a [B, L, C] tensor."""
    assert t.dim() == 3, f'expected [B, L, C], got {tuple(t.shape)}'
    return t.stride(0), t.stride(1), t.stride(2)


def add_layernorm(norm: torch.nn.LayerNorm, a: torch.Tensor, b: Optional[torch.Tensor] = None,
                  *, b_scale: Optional[float] = None, a_rows: Optional[torch.Tensor] = None,
                  b_rows: Optional[torch.Tensor] = None, out_len: Optional[int] = None,
                  y_dtype: torch.dtype = torch.float32, store_sum: bool = False,
                  y: Optional[torch.Tensor] = None, pe: Optional[torch.Tensor] = None,
                  pe_dtype: Optional[torch.dtype] = None,
                  yc_dtype: Optional[torch.dtype] = None,
                  y_at_a_rows: bool = False) -> NormOut:
    """``norm(a + b_scale * b)`` with sam2's dtype semantics, in one kernel.

    a [B, L_in, C], b [B, L_b, C] or None; a_rows [L] int32: output row l reads a's row
    a_rows[l] (-1: zero output row, nothing stored in s) and, unless b_rows [L] is given, b's
    same row. out_len: L (default a's L). y: a preallocated output [B, L, C] (any strides, e.g.
    a permuted view) instead of a new contiguous one. pe [B, L, C]: also return y + pe in
    pe_dtype. yc_dtype: also return y cast to that dtype. y_at_a_rows: also return y in a's
    row order ([B, L_in, C], y's dtype; with a_rows a window partition, y before it).
    """
    bsz, l_in, c = a.shape
    assert c == norm.normalized_shape[-1], (a.shape, norm.normalized_shape)
    length = out_len if out_len is not None else (a_rows.numel() if a_rows is not None else l_in)
    sum_dtype = a.dtype if b is None else torch.promote_types(a.dtype, b.dtype)
    assert sum_dtype in (torch.float32, torch.bfloat16), sum_dtype
    if y is None:
        y = torch.empty(bsz, length, c, device=a.device, dtype=y_dtype)
    assert a_rows is not None or length == l_in, (length, l_in)
    assert norm.weight is not None and norm.bias is not None, 'affine LayerNorm expected'
    # every row of a must be some output row's source when the sum is stored (true of a
    # window partition: padding adds rows, it drops none)
    s = torch.empty(bsz, l_in, c, device=a.device, dtype=sum_dtype) if store_sum else None
    yp = torch.empty(bsz, length, c, device=a.device, dtype=pe_dtype) if pe is not None else None
    yc = torch.empty(bsz, length, c, device=a.device, dtype=yc_dtype) if yc_dtype else None
    yg = torch.empty(bsz, l_in, c, device=a.device, dtype=y.dtype) if y_at_a_rows else None
    bb = dummy_like(b, a)
    ss, pp, ypp, ycc, ygg = (dummy_like(t, y) for t in (s, pe, yp, yc, yg))
    block_c = next_pow2(c)
    block_r = max(1, min(_TILE // block_c, next_pow2(bsz * length)))
    n_rows = bsz * length
    grid = (triton.cdiv(n_rows, block_r),)
    _add_ln_kernel[grid](
        a, dummy_like(a_rows, a), *_rows(a),
        bb, dummy_like(b_rows, a), *_rows(bb), 1.0 if b_scale is None else float(b_scale),
        norm.weight, norm.bias, float(norm.eps),
        ss, *(_rows(ss)[:2]),
        y, *_rows(y),
        pp, *_rows(pp), ypp, *(_rows(ypp)[:2]),
        ycc, *(_rows(ycc)[:2]),
        ygg, *(_rows(ygg)[:2]),
        n_rows, length, l_in, c,
        A_IDX=a_rows is not None, HAS_B=b is not None, B_IDX=b_rows is not None,
        B_SCALE=b_scale is not None, SUM_BF16=sum_dtype == torch.bfloat16,
        STORE_S=s is not None, HAS_PE=pe is not None, STORE_YC=yc is not None,
        STORE_YG=yg is not None, BLOCK_R=block_r, BLOCK_C=block_c, num_warps=4)
    return NormOut(y, s, yp, yc, yg)
