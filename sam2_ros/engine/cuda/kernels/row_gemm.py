"""A pointwise layer over rows (a Linear, or a 1x1 convolution on channels-last pixels) with
its epilogue, in one kernel: the memory encoder's ``pwconv1`` + GELU, ``pwconv2`` + layer scale
+ residual, and ``out_proj`` (``cx_block.py``, ``memory_encoder.py``).

y = epilogue(a [M, K] @ W[N, K]^T + bias), tiles of [BLOCK_M, BLOCK_N] per program, float32
accumulation; the operands in the compute dtype (autocast's bf16 casts of a and of the weights
done on load, rounding as autocast does). Epilogues, as sam2's ops round under autocast:

* GELU: a Linear's output (one rounding of acc + bias, the cuBLAS epilogue), exact GELU of it;
* RESIDUAL: a Linear's output times the float32 ``gamma`` plus the residual, float32 (torch
  promotes the bf16 output with the float32 parameter);
* CONV: a convolution's output (on the GPU rounded, then its bias added in bf16: torch's cuDNN
  path; on the CPU one rounding of acc + bias: oneDNN's), written
  at the output strides given per (batch, pixel, channel): NCHW for ``out_proj``; with
  ``no_object`` = (object score logits [B, 1], embedding [N]) plus sam2's no-object embedding
  (``_encode_new_memory``: ``features += (1 - (score > 0)) * embedding``, float32, added to the
  output as written in its dtype, then rounded to it again, as the in-place add does).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.launch import jit
from sam2_ros.engine.cuda.kernels.rounding import cast_rne, dot_operand, rne_as

GELU, RESIDUAL, CONV = 0, 1, 2
_PROGRAMS = 128      # enough programs for most of the GPU's 132 SMs at one object


@jit
def _gemm_kernel(a_ptr, a_sm, w_ptr, b_ptr, r_ptr, g_ptr, y_ptr, M, N, HW, y_sb, y_sp, y_sn,
                 s_ptr, s_sb, e_ptr, K: tl.constexpr, EPI: tl.constexpr,
                 HAS_GAMMA: tl.constexpr, NO_OBJ: tl.constexpr, BF16: tl.constexpr,
                 ROUND2: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mm = rm < M
    nm = rn < N
    m64 = rm.to(tl.int64)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + tl.arange(0, BLOCK_K)
        km = kk < K
        a = tl.load(a_ptr + (m64 * a_sm)[:, None] + kk[None, :], mask=mm[:, None] & km[None, :],
                    other=0.0)
        w = tl.load(w_ptr + (rn.to(tl.int64) * K)[None, :] + kk[:, None],
                    mask=km[:, None] & nm[None, :], other=0.0)                # [BK, BN]
        acc = tl.dot(dot_operand(a, BF16, UPCAST), dot_operand(w, BF16, UPCAST), acc,
                     input_precision=PRECISION)
    bias = rne_as(tl.load(b_ptr + rn, mask=nm, other=0.0).to(tl.float32), BF16)
    if EPI == 2:
        y = rne_as(rne_as(acc, ROUND2) + bias[None, :], BF16)
        if NO_OBJ:        # y as written (compute dtype = output dtype), + the float32 term
            score = tl.load(s_ptr + (m64 // HW) * s_sb, mask=mm, other=1.0).to(tl.float32)
            emb = tl.load(e_ptr + rn, mask=nm, other=0.0).to(tl.float32)
            y = y + (1.0 - (score > 0).to(tl.float32))[:, None] * emb[None, :]
    else:
        y = rne_as(acc + bias[None, :], BF16)
    if EPI == 0:
        y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    mask = mm[:, None] & nm[None, :]
    if EPI == 1:
        if HAS_GAMMA:
            y = tl.load(g_ptr + rn, mask=nm, other=0.0).to(tl.float32)[None, :] * y
        res = tl.load(r_ptr + (m64 * N)[:, None] + rn[None, :], mask=mask, other=0.0)
        y = res.to(tl.float32) + y
    out = (m64 // HW * y_sb + m64 % HW * y_sp)[:, None] + (rn.to(tl.int64) * y_sn)[None, :]
    tl.store(y_ptr + out, cast_rne(y, y_ptr.dtype.element_ty), mask=mask)


def _blocks(m: int, n: int, spread: bool):
    """(BLOCK_M, BLOCK_N): enough programs for the GPU; few for the interpreter."""
    block_n = min(128 if n >= 1024 or not spread else 64, max(16, triton.next_power_of_2(n)))
    block_m = 64
    while spread and block_m > 16 and \
            triton.cdiv(m, block_m) * triton.cdiv(n, block_n) < _PROGRAMS:
        block_m //= 2
    return block_m, block_n


def row_gemm(a: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, epilogue: int,
             compute: torch.dtype, out: torch.Tensor, residual: Optional[torch.Tensor] = None,
             gamma: Optional[torch.Tensor] = None, hw: Optional[int] = None,
             out_strides: Optional[tuple] = None,
             no_object: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
    """a [M, K] (rows contiguous), weight [N, K] (or [N, K, 1, 1]) contiguous -> ``out`` with
    the epilogue's values; ``compute`` the dtype the layer computes in (bf16 or float32).
    RESIDUAL reads ``residual`` [M, N] contiguous (and ``gamma`` [N] or None); the output goes
    to row m = b * hw + p, column n at out + b * s_b + p * s_p + n * s_n for ``out_strides`` =
    (s_b, s_p, s_n) (default: ``out`` is [M, N] contiguous). CONV only: ``no_object`` =
    (score [B, 1] logits, embedding [N]) adds the no-object embedding to batch b's rows where
    score[b] <= 0 (B = M / hw)."""
    m, k = a.shape
    n = weight.shape[0]
    hw = m if hw is None else hw
    strides = (0, n, 1) if out_strides is None else out_strides
    upcast = a.device.type != 'cuda'
    bf16 = compute == torch.bfloat16
    block_m, block_n = _blocks(m, n, spread=not upcast)
    assert no_object is None or epilogue == CONV
    score, emb = (bias, bias) if no_object is None else no_object
    _gemm_kernel[(triton.cdiv(m, block_m), triton.cdiv(n, block_n))](
        a, a.stride(0), weight, bias, a if residual is None else residual,
        bias if gamma is None else gamma, out, m, n, hw, *strides, score,
        score.stride(0) if no_object is not None else 0, emb, K=k, EPI=epilogue,
        HAS_GAMMA=gamma is not None, NO_OBJ=no_object is not None, BF16=bf16,
        ROUND2=bf16 and not upcast, UPCAST=upcast,
        PRECISION='ieee' if not bf16 or upcast else 'tf32', BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_K=min(256 if upcast else 64, max(32, triton.next_power_of_2(k))), num_warps=4)
    return out
