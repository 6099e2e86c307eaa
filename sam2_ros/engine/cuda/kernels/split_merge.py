"""The merge of split-KV attention (``attention.split_attention``) in one kernel.

Split-KV attends over S chunks of the keys as S extra heads and merges the chunk outputs by
the softmax of their log-sum-exps: in PyTorch a softmax, an upcast, a product, a sum and a
cast (five kernels per attention call). Here one kernel computes, per query, in float32,
w_s = exp(lse_s - max) / sum_j exp(lse_j - max) and out = sum_s w_s * out_s, cast to the
output dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne

_TILE = 4096


@jit
def _merge_kernel(o_ptr, o_sb, o_sh, o_sl, lse_ptr, l_sb, l_sh, l_sl, y_ptr, H, Lq, D,
                  SPLITS: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    rm = rows < Lq
    r64 = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    m2 = rm[:, None] & (cols < D)[None, :]
    lse_row = lse_ptr + b * l_sb + h * SPLITS * l_sh + r64 * l_sl       # split s: + s * l_sh
    m = tl.full([BLOCK_L], float('-inf'), tl.float32)
    for s in tl.static_range(SPLITS):
        m = tl.maximum(m, tl.load(lse_row + s * l_sh, mask=rm, other=0.0))
    total = tl.zeros([BLOCK_L], tl.float32)
    for s in tl.static_range(SPLITS):
        total += tl.exp(tl.load(lse_row + s * l_sh, mask=rm, other=0.0) - m)
    acc = tl.zeros([BLOCK_L, BLOCK_D], tl.float32)
    for s in tl.static_range(SPLITS):
        w = tl.exp(tl.load(lse_row + s * l_sh, mask=rm, other=0.0) - m) / total
        o = tl.load(o_ptr + (b * o_sb + (h * SPLITS + s) * o_sh + r64 * o_sl)[:, None]
                    + cols[None, :], mask=m2, other=0.0).to(tl.float32)
        acc += o * w[:, None]
    tl.store(y_ptr + ((bh * Lq + r64) * D)[:, None] + cols[None, :],
             cast_rne(acc, y_ptr.dtype.element_ty), mask=m2)


def merge_splits(out: torch.Tensor, lse: torch.Tensor, heads: int, splits: int,
                 dtype: torch.dtype) -> torch.Tensor:
    """out [B, H*S, Lq, D] (head dim contiguous), lse [B, H*S, >= Lq] float32 (any strides)
    -> the merged attention [B, H, Lq, D] (contiguous) in dtype."""
    bsz, hs, lq, d = out.shape
    assert hs == heads * splits and out.stride(3) == 1, (out.shape, out.stride())
    y = torch.empty(bsz, heads, lq, d, device=out.device, dtype=dtype)
    block_d = next_pow2(d)
    block_l = max(1, min(_TILE // block_d, next_pow2(lq)))
    grid = (triton.cdiv(lq, block_l), bsz * heads)
    _merge_kernel[grid](out, out.stride(0), out.stride(1), out.stride(2), lse, *lse.stride(), y,
                        heads, lq, d, SPLITS=splits, BLOCK_L=block_l, BLOCK_D=block_d,
                        num_warps=4)
    return y


@jit
def _merge_varlen_kernel(o_ptr, o_sb, o_ss, o_sl, o_sh, lse_ptr, l_sb, l_ss, l_sl, l_sh,
                         full_ptr, y_ptr, H, Lq, D, SPLITS: tl.constexpr,
                         BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    rm = rows < Lq
    r64 = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    m2 = rm[:, None] & (cols < D)[None, :]
    lse_row = lse_ptr + b * l_sb + h * l_sh + r64 * l_sl                 # split s: + s * l_ss
    # an empty chunk (a row with fewer keys than chunks) has no share: its lse counts as -inf
    m = tl.full([BLOCK_L], float('-inf'), tl.float32)
    for s in tl.static_range(SPLITS):
        full = tl.load(full_ptr + b * SPLITS + s) != 0
        lse = tl.load(lse_row + s * l_ss, mask=rm, other=0.0).to(tl.float32)
        m = tl.maximum(m, tl.where(full, lse, float('-inf')))
    total = tl.zeros([BLOCK_L], tl.float32)
    for s in tl.static_range(SPLITS):
        full = tl.load(full_ptr + b * SPLITS + s) != 0
        lse = tl.load(lse_row + s * l_ss, mask=rm, other=0.0).to(tl.float32)
        total += tl.exp(tl.where(full, lse, float('-inf')) - m)
    acc = tl.zeros([BLOCK_L, BLOCK_D], tl.float32)
    for s in tl.static_range(SPLITS):
        full = tl.load(full_ptr + b * SPLITS + s) != 0
        lse = tl.load(lse_row + s * l_ss, mask=rm, other=0.0).to(tl.float32)
        w = tl.exp(tl.where(full, lse, float('-inf')) - m) / total
        o = tl.load(o_ptr + (b * o_sb + s * o_ss + r64 * o_sl + h * o_sh)[:, None]
                    + cols[None, :], mask=m2, other=0.0).to(tl.float32)
        acc += tl.where(full, o, 0.0) * w[:, None]
    tl.store(y_ptr + (((b * Lq + r64) * H + h) * D)[:, None] + cols[None, :],
             cast_rne(acc, y_ptr.dtype.element_ty), mask=m2)


def merge_varlen(out: torch.Tensor, lse: torch.Tensor, full: torch.Tensor,
                 dtype: torch.dtype) -> torch.Tensor:
    """The merge of ``attention.varlen_split_attention`` in one kernel: out [B, S, Lq, H, D]
    (head dim contiguous), lse [B, S, Lq, H] float32 (any strides), full [B, S] bool (chunk s
    of row b holds keys; an empty one has no share) -> [B, Lq, H, D] contiguous in dtype."""
    bsz, splits, lq, heads, d = out.shape
    assert out.stride(4) == 1 and lse.shape == (bsz, splits, lq, heads), (out.shape, lse.shape)
    y = torch.empty(bsz, lq, heads, d, device=out.device, dtype=dtype)
    flags = full.contiguous()                  # bool: read as Triton's int1
    block_d = next_pow2(d)
    block_l = max(1, min(_TILE // block_d, next_pow2(lq)))
    grid = (triton.cdiv(lq, block_l), bsz * heads)
    _merge_varlen_kernel[grid](out, *out.stride()[:4], lse, *lse.stride(), flags, y, heads, lq,
                               d, SPLITS=splits, BLOCK_L=block_l, BLOCK_D=block_d,
                               num_warps=4)
    return y
