"""The merge of split-KV attention (``attention.split_attention``) in one kernel.

Split-KV attends over S chunks of the keys as S extra heads and merges the chunk outputs by
the softmax of their log-sum-exps: in PyTorch a softmax, an upcast, a product, a sum and a
cast (five kernels per attention call). Here one kernel computes, per query, in float32,
w_s = exp(lse_s - max) / sum_j exp(lse_j - max) and out = sum_s w_s * out_s, cast to the
output dtype. The same kernel merges the chunks of padded memories
(``attention.varlen_split_attention``), where a chunk without keys has no share.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.launch import dummy_like, jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne

_TILE = 4096


@triton.jit
def _chunk_lse(lse_ptr, rm, full_ptr, HAS_FULL: tl.constexpr):
    """One chunk's log-sum-exps of a block of queries; -inf for an empty chunk (no share)."""
    lse = tl.load(lse_ptr, mask=rm, other=0.0).to(tl.float32)
    if HAS_FULL:
        lse = tl.where(tl.load(full_ptr) != 0, lse, float('-inf'))
    return lse


@jit
def _merge_kernel(o_ptr, o_sb, o_ss, o_sl, o_sh, lse_ptr, l_sb, l_ss, l_sl, l_sh, full_ptr,
                  y_ptr, y_sb, y_sl, y_sh, H, Lq, D, SPLITS: tl.constexpr,
                  HAS_FULL: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_D: tl.constexpr):
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_L + tl.arange(0, BLOCK_L)
    rm = rows < Lq
    r64 = rows.to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    m2 = rm[:, None] & (cols < D)[None, :]
    lse_row = lse_ptr + b * l_sb + h * l_sh + r64 * l_sl                 # split s: + s * l_ss
    full_row = full_ptr + b * SPLITS                                     # split s: + s
    m = tl.full([BLOCK_L], float('-inf'), tl.float32)
    for s in tl.static_range(SPLITS):
        m = tl.maximum(m, _chunk_lse(lse_row + s * l_ss, rm, full_row + s, HAS_FULL))
    total = tl.zeros([BLOCK_L], tl.float32)
    for s in tl.static_range(SPLITS):
        total += tl.exp(_chunk_lse(lse_row + s * l_ss, rm, full_row + s, HAS_FULL) - m)
    acc = tl.zeros([BLOCK_L, BLOCK_D], tl.float32)
    for s in tl.static_range(SPLITS):
        w = tl.exp(_chunk_lse(lse_row + s * l_ss, rm, full_row + s, HAS_FULL) - m) / total
        o = tl.load(o_ptr + (b * o_sb + s * o_ss + r64 * o_sl + h * o_sh)[:, None]
                    + cols[None, :], mask=m2, other=0.0).to(tl.float32)
        if HAS_FULL:         # an empty chunk's output is whatever the attention kernel wrote
            o = tl.where(tl.load(full_row + s) != 0, o, 0.0)
        acc += o * w[:, None]
    tl.store(y_ptr + (b * y_sb + r64 * y_sl + h * y_sh)[:, None] + cols[None, :],
             cast_rne(acc, y_ptr.dtype.element_ty), mask=m2)


# warps per program: eight beat four at the memory attention's shapes (launch_probe.py; the
# same output bitwise)
_WARPS = 8


def _merge(out: torch.Tensor, lse: torch.Tensor, full, y: torch.Tensor) -> torch.Tensor:
    """out [B, S, Lq, H, D] and lse [B, S, Lq, H] as strided views, full [B, S] bool or None
    (every chunk holds keys), y [B, Lq, H, D] view of the output -> y's storage written."""
    bsz, splits, lq, heads, d = out.shape
    assert out.stride(4) == 1 and lse.shape == (bsz, splits, lq, heads), (out.shape, lse.shape)
    block_d = next_pow2(d)
    block_l = max(1, min(_TILE // block_d, next_pow2(lq)))
    grid = (triton.cdiv(lq, block_l), bsz * heads)
    flags = dummy_like(None if full is None else full.contiguous(), lse)   # bool: Triton's int1
    _merge_kernel[grid](out, *out.stride()[:4], lse, *lse.stride(), flags, y,
                        *y.stride()[:3], heads, lq, d, SPLITS=splits, HAS_FULL=full is not None,
                        BLOCK_L=block_l, BLOCK_D=block_d, num_warps=_WARPS)
    return y


def merge_splits(out: torch.Tensor, lse: torch.Tensor, heads: int, splits: int,
                 dtype: torch.dtype) -> torch.Tensor:
    """out [B, H*S, Lq, D] (head dim contiguous), lse [B, H*S, >= Lq] float32 (any strides)
    -> the merged attention [B, H, Lq, D] (contiguous) in dtype."""
    bsz, hs, lq, d = out.shape
    assert hs == heads * splits and out.stride(3) == 1, (out.shape, out.stride())
    y = torch.empty(bsz, heads, lq, d, device=out.device, dtype=dtype)
    # head h's chunk s is row h * S + s: views [B, S, Lq, H, (D)] of the same storage
    ob, oh, ol, _ = out.stride()
    lb, lh, ll = lse.stride()
    _merge(out.as_strided((bsz, splits, lq, heads, d), (ob, oh, ol, splits * oh, 1)),
           lse.as_strided((bsz, splits, lq, heads), (lb, lh, ll, splits * lh)), None,
           y.transpose(1, 2))
    return y


def merge_varlen(out: torch.Tensor, lse: torch.Tensor, full: torch.Tensor,
                 dtype: torch.dtype) -> torch.Tensor:
    """The merge of ``attention.varlen_split_attention`` in one kernel: out [B, S, Lq, H, D]
    (head dim contiguous), lse [B, S, Lq, H] float32 (any strides), full [B, S] bool (chunk s
    of row b holds keys; an empty one has no share) -> [B, Lq, H, D] contiguous in dtype."""
    bsz, splits, lq, heads, d = out.shape
    y = torch.empty(bsz, lq, heads, d, device=out.device, dtype=dtype)
    return _merge(out, lse, full, y)
