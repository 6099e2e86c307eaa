"""The keys' and values' inputs of attention over a fixed sequence, cast once.

sam2 computes ``memory + pos`` and autocast casts it and ``memory`` to bf16 in every
attention layer that reads them (the memory attention's four layers read the same memory,
the mask decoder's cross-attentions the same image embedding): here both are made once per
call, in one kernel. ``k = round_to(promote(m, p), m + p)`` then cast, as torch's add and
autocast's cast round. The mask decoder's keys are themselves a sum (the image embedding plus
the dense prompt embedding): ``sum_key_value_inputs`` does that add in the same kernel and
also stores the sum, which the two-way transformer keeps as its keys' residual.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne

_TILE = 4096


@triton.jit
def _load_rows(ptr, sb, sl, sc, b, l, c64, mask):
    """[BLOCK_R, BLOCK_C] float32 of a [B, L, C] tensor at any strides: rows (b, l), cols c."""
    return tl.load(ptr + (b * sb + l * sl)[:, None] + (c64 * sc)[None, :], mask=mask,
                   other=0.0).to(tl.float32)


@jit
def _add_cast_kernel(m_ptr, m_sb, m_sl, m_sc, p_ptr, p_sb, p_sl, p_sc, a_ptr, a_sb, a_sl, a_sc,
                     s_ptr, k_ptr, v_ptr, n_rows, L, C, HAS_P: tl.constexpr,
                     SUM_BF16: tl.constexpr, HAS_A: tl.constexpr, A_SUM_BF16: tl.constexpr,
                     BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_C)
    mask = (rows < n_rows)[:, None] & (cols < C)[None, :]
    b = (rows // L).to(tl.int64)
    l = (rows % L).to(tl.int64)
    c64 = cols.to(tl.int64)
    m = _load_rows(m_ptr, m_sb, m_sl, m_sc, b, l, c64, mask)
    out = (rows.to(tl.int64) * C)[:, None] + c64[None, :]
    if HAS_A:           # m = m + a first, rounded as torch's add rounds it, and kept
        m = m + _load_rows(a_ptr, a_sb, a_sl, a_sc, b, l, c64, mask)
        if A_SUM_BF16:
            m = cast_rne(m, tl.bfloat16).to(tl.float32)
        tl.store(s_ptr + out, cast_rne(m, s_ptr.dtype.element_ty), mask=mask)
    tl.store(v_ptr + out, cast_rne(m, v_ptr.dtype.element_ty), mask=mask)
    if HAS_P:
        k = m + _load_rows(p_ptr, p_sb, p_sl, p_sc, b, l, c64, mask)
        if SUM_BF16:
            k = cast_rne(k, tl.bfloat16).to(tl.float32)
        tl.store(k_ptr + out, cast_rne(k, k_ptr.dtype.element_ty), mask=mask)


def key_value_inputs(memory: torch.Tensor, pos: Optional[torch.Tensor],
                     dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """memory, pos [B, L, C] (any strides) -> (dtype(memory + pos), dtype(memory)) as
    contiguous [B, L, C]; with pos None the first is the second."""
    _, k, v = _launch(memory, None, pos, dtype)
    return k, v


def sum_key_value_inputs(x: torch.Tensor, addend: torch.Tensor, pos: torch.Tensor,
                         dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x, addend, pos [B, L, C] (any strides, stride 0 where they broadcast) -> (m, dtype(m +
    pos), dtype(m)) with m = x + addend in their promoted dtype, as torch's add: each
    contiguous [B, L, C]."""
    return _launch(x, addend, pos, dtype)


def _launch(memory: torch.Tensor, addend: Optional[torch.Tensor], pos: Optional[torch.Tensor],
            dtype: torch.dtype) -> Tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
    bsz, length, c = memory.shape
    assert pos is None or pos.shape == memory.shape, (memory.shape, pos.shape)
    assert addend is None or addend.shape == memory.shape, (memory.shape, addend.shape)
    m_dtype = memory.dtype if addend is None else torch.promote_types(memory.dtype, addend.dtype)
    assert addend is None or m_dtype in (torch.float32, torch.bfloat16), m_dtype
    s = None if addend is None else torch.empty(bsz, length, c, device=memory.device,
                                                dtype=m_dtype)
    v = torch.empty(bsz, length, c, device=memory.device, dtype=dtype)
    k = v if pos is None else torch.empty_like(v)
    p = memory if pos is None else pos
    a = memory if addend is None else addend
    sum_dtype = m_dtype if pos is None else torch.promote_types(m_dtype, pos.dtype)
    block_c = next_pow2(c)
    block_r = max(1, min(_TILE // block_c, next_pow2(bsz * length)))
    n_rows = bsz * length
    _add_cast_kernel[(triton.cdiv(n_rows, block_r),)](
        memory, *memory.stride(), p, *p.stride(), a, *a.stride(), v if s is None else s, k, v,
        n_rows, length, c, HAS_P=pos is not None, SUM_BF16=sum_dtype == torch.bfloat16,
        HAS_A=addend is not None, A_SUM_BF16=m_dtype == torch.bfloat16,
        BLOCK_R=block_r, BLOCK_C=block_c, num_warps=4)
    return s, k, v
