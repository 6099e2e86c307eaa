"""Hiera's attention inside small windows, one program per window and head (opt-in group
'window_attention': not bitwise sam2's).

Hiera attends within windows of 16 to 64 tokens in its first, second and last stages (8x8,
4x4 and 8x8 windows of Hiera-L at 1024 px; 8x8, 4x4 and 7x7 of Hiera-T at 512 px): a thousand
windows times a few heads, each a [16..64] x [16..64] score matrix. The SDPA kernels
(FlashAttention, cuDNN, memory-efficient) tile queries by 64 or 128 rows and pad the
72-channel heads of Hiera-L to 96 or 128, so each of these thousands of tiny problems costs a
mostly empty tile, and the call takes many times its memory traffic
(``tools/probes/hiera_attention_probe.py`` times each shape under each backend). Here one
program loads a window's q, k and v for one head where the q/k/v projection wrote them (no
transpose copies), keeps the scores in registers and writes the output in the layout the
output projection reads ([B, L, heads, D]).

Numerics: the scores and the softmax in float32, the probabilities rounded to the operands'
dtype before the product with v and the row sums divided out at the end, as the flash kernels
do; the sums run in another order than any SDPA backend's, so the output is within a few
bf16 ulps of theirs, not bitwise (float32 stays on sam2's call). The GPU test bounds the
difference from sam2's module (test/gpu/test_window_attention_gpu.py).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import triton.language as tl

from sam2_ros.engine.cuda.kernels.dtypes import linear_input
from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2

# windows of at most this many tokens run here: the scores of a window stay in registers
MAX_TOKENS = 64
MAX_HEAD_DIM = 128


@jit
def _window_attention_kernel(qkv_ptr, s_b, s_l, s_t, s_h, out_ptr, o_b, o_l, o_h, L, LQ, W, W2,
                             D, H, scale, BLOCK_L: tl.constexpr, BLOCK_Q: tl.constexpr,
                             BLOCK_D: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                             UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    b, h = pid // H, pid % H
    rows = tl.arange(0, BLOCK_L)
    qrows = tl.arange(0, BLOCK_Q)
    cols = tl.arange(0, BLOCK_D)
    m = (rows < L)[:, None] & (cols < D)[None, :]
    mq = (qrows < LQ)[:, None] & (cols < D)[None, :]
    base = qkv_ptr + b * s_b + h * s_h
    at = base + (rows.to(tl.int64) * s_l)[:, None] + cols[None, :]
    if SH * SW == 1:
        q = tl.load(base + (qrows.to(tl.int64) * s_l)[:, None] + cols[None, :], mask=mq,
                    other=0.0)
    else:   # the queries max-pooled within the window (W x . tokens, SH x SW blocks): exact
        oh, ow = qrows // W2, qrows % W2
        qf = tl.full((BLOCK_Q, BLOCK_D), float('-inf'), tl.float32)
        for dy in tl.static_range(SH):
            for dx in tl.static_range(SW):
                r = ((oh * SH + dy) * W + ow * SW + dx).to(tl.int64)
                qf = tl.maximum(qf, tl.load(base + (r * s_l)[:, None] + cols[None, :],
                                            mask=mq, other=0.0).to(tl.float32),
                                propagate_nan=tl.PropagateNan.ALL)
        q = qf.to(qkv_ptr.dtype.element_ty)      # a maximum of bf16 values: exact
    k = tl.load(at + s_t, mask=m, other=0.0)
    v = tl.load(at + 2 * s_t, mask=m, other=0.0)
    if UPCAST:      # the interpreter's tl.dot takes bf16 operands as bit patterns (mlp_heads)
        q, k, v = q.to(tl.float32), k.to(tl.float32), v.to(tl.float32)
    s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale     # [BLOCK_Q, BLOCK_L]
    s = tl.where((rows < L)[None, :], s, float('-inf'))
    p = tl.exp(s - tl.max(s, 1)[:, None])
    den = tl.sum(p, 1)
    p = p.to(out_ptr.dtype.element_ty)
    if UPCAST:
        p = p.to(tl.float32)
    o = tl.dot(p, v, input_precision=PRECISION) / den[:, None]        # [BLOCK_Q, BLOCK_D]
    to = out_ptr + b * o_b + h * o_h + (qrows.to(tl.int64) * o_l)[:, None] + cols[None, :]
    tl.store(to, o.to(out_ptr.dtype.element_ty), mask=mq)


def window_attention(qkv: torch.Tensor, num_warps: Optional[int] = None,
                     pool: Optional[Tuple[int, int, int]] = None) -> torch.Tensor:
    """qkv [B, L, 3, H, D] (the q/k/v projection's output viewed as sam2 does, D contiguous,
    bf16 or fp16, L <= MAX_TOKENS) -> softmax(q k^T / sqrt(D)) v as [B, Lq, H, D] contiguous:
    each of the B windows attends within itself, per head. ``pool`` (W, SH, SW): the queries
    are first max-pooled in SH x SW blocks of the window's rows of W tokens, as sam2's
    pooled-query attention pools them (Lq = L / (SH * SW)); None: Lq = L. ``num_warps``:
    Triton's, per program (None: ``warps_for``)."""
    bsz, n, three, heads, d = qkv.shape
    assert three == 3 and qkv.stride(4) == 1 and fits(n, d), (qkv.shape, qkv.stride())
    w, sh, sw = pool if pool is not None else (n, 1, 1)
    assert n % w == 0 and w % sw == 0 and (n // w) % sh == 0, (n, pool)
    w2 = w // sw
    nq = (n // w // sh) * w2
    out = torch.empty(bsz, nq, heads, d, device=qkv.device, dtype=qkv.dtype)
    upcast = qkv.device.type != 'cuda'
    block_l, block_q = max(16, next_pow2(n)), max(16, next_pow2(nq))
    if num_warps is None:
        num_warps = warps_for(block_l, pool is not None)
    _window_attention_kernel[(bsz * heads,)](
        qkv, qkv.stride(0), qkv.stride(1), qkv.stride(2), qkv.stride(3), out, out.stride(0),
        out.stride(1), out.stride(2), n, nq, w, w2, d, heads, 1.0 / math.sqrt(d),
        BLOCK_L=block_l, BLOCK_Q=block_q, BLOCK_D=max(16, next_pow2(d)), SH=sh, SW=sw,
        UPCAST=upcast, PRECISION='ieee' if upcast else 'tf32', num_warps=num_warps)
    return out


def warps_for(block_l: int, pooled: bool) -> int:
    """Warps per program: 2 for unpooled windows of 64 keys (their 64 x 64 tiles do better with
    the registers of fewer threads) and for pooled queries over 16 keys, 4 otherwise: the
    fastest of 2, 4 and 8 for each Hiera-L shape in the probe's timings (h200_extra.json,
    probes ``hiera_attention_probe_2e690e2@h100``)."""
    if pooled:
        return 2 if block_l == 16 else 4
    return 2 if block_l == 64 else 4


def fits(tokens: int, head_dim: int) -> bool:
    """Whether windows of ``tokens`` tokens and heads of ``head_dim`` channels run here."""
    return 0 < tokens <= MAX_TOKENS and head_dim <= MAX_HEAD_DIM


def takes(attn: torch.nn.Module, window: int) -> bool:
    """True for a sam2 ``MultiScaleAttention`` this module replaces: no query pooling (those
    blocks are ``q_pool.PooledQueryAttention``'s), windows that ``fit``."""
    return getattr(attn, 'q_pool', 1) is None and fits(window * window,
                                                       attn.dim_out // attn.num_heads)


class WindowAttention(torch.nn.Module):
    """Replaces a small-window ``MultiScaleAttention`` (its weights) in the fused trunk: sam2's
    projections, the attention by ``window_attention`` on 16-bit inputs (float32: sam2's)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.inner
        if linear_input(x, torch.promote_types(x.dtype, a.qkv.weight.dtype)) not in (
                torch.bfloat16, torch.float16):
            return a(x)                                             # float32: sam2's own
        bsz, h, w, _ = x.shape                                       # [B * windows, ws, ws, C]
        qkv = a.qkv(x).reshape(bsz, h * w, 3, a.num_heads, -1)      # [B, L, 3, nH, D]
        out = window_attention(qkv)                                 # [B, L, nH, D]
        return a.proj(out.reshape(bsz, h, w, -1))

