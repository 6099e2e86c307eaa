"""Hiera's attention inside its windows, in Triton programs of our own (opt-in group
'window_attention': not bitwise sam2's).

Hiera attends within windows of 16 to 64 tokens in its first, second and last stages (8x8,
4x4 and 8x8 windows of Hiera-L at 1024 px; 8x8, 4x4 and 7x7 of Hiera-T at 512 px): a thousand
windows times a few heads, each a [16..64] x [16..64] score matrix; its third stage attends in
windows of 196 or 256 tokens (14x14 of Hiera-T, 16x16 of Hiera-L). The SDPA kernels
(FlashAttention, cuDNN, memory-efficient) tile queries by 64 or 128 rows and pad the
72-channel heads of Hiera-L to 96 or 128, so each of these thousands of tiny problems costs a
mostly empty tile, and the call takes many times its memory traffic
(``tools/probes/hiera_attention_probe.py`` times each shape under each backend). Here one
program loads a window's q, k and v for one head where the q/k/v projection wrote them (no
transpose copies), keeps the scores in registers and writes the output in the layout the
output projection reads ([B, L, heads, D]); a stage change's first block pools its queries in
the same program. Windows of more than 64 tokens take a program per 64 queries, which walks
the window's keys in tiles of 64 with the online softmax of flash attention.

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

# windows of at most this many tokens run in one program per window and head, the scores in
# registers; pooled queries only there
MAX_TOKENS = 64
# larger windows, up to this many tokens (Hiera-L's 16x16, Hiera-T's 14x14), run in a program
# per window, head and 64 queries over 64-key tiles (the online softmax of flash attention);
# larger ones (the global blocks) stay with SDPA, whose kernels fill their tiles there
MAX_WINDOW_TOKENS = 256
MAX_HEAD_DIM = 128
TILE = 64


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


@jit
def _window_flash_kernel(qkv_ptr, s_b, s_l, s_t, s_h, out_ptr, o_b, o_l, o_h, L, D, H, n_qt,
                         scale, N_KT: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, UPCAST: tl.constexpr,
                         PRECISION: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    bh, qt = pid // n_qt, pid % n_qt
    b, h = bh // H, bh % H
    rows = qt * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    base = qkv_ptr + b * s_b + h * s_h
    mq = (rows < L)[:, None] & (cols < D)[None, :]
    q = tl.load(base + (rows.to(tl.int64) * s_l)[:, None] + cols[None, :], mask=mq, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full((BLOCK_M,), float('-inf'), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    for t in range(0, N_KT):          # the window's key tiles (a constant per window size)
        keys = t * BLOCK_N + tl.arange(0, BLOCK_N)
        mk = (keys < L)[:, None] & (cols < D)[None, :]
        at = base + (keys.to(tl.int64) * s_l)[:, None] + cols[None, :]
        k = tl.load(at + s_t, mask=mk, other=0.0)
        v = tl.load(at + 2 * s_t, mask=mk, other=0.0)
        if UPCAST:
            k, v = k.to(tl.float32), v.to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale    # [BLOCK_M, BLOCK_N]
        s = tl.where((keys < L)[None, :], s, float('-inf'))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        p = p.to(out_ptr.dtype.element_ty)
        if UPCAST:
            p = p.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
        m_i = m_new
    o = acc / l_i[:, None]
    to = out_ptr + b * o_b + h * o_h + (rows.to(tl.int64) * o_l)[:, None] + cols[None, :]
    tl.store(to, o.to(out_ptr.dtype.element_ty), mask=mq)


def window_attention(qkv: torch.Tensor, num_warps: int = 4,
                     pool: Optional[Tuple[int, int, int]] = None) -> torch.Tensor:
    """qkv [B, L, 3, H, D] (the q/k/v projection's output viewed as sam2 does, D contiguous,
    bf16 or fp16, L <= MAX_WINDOW_TOKENS; <= MAX_TOKENS with ``pool``) -> softmax(q k^T /
    sqrt(D)) v as [B, Lq, H, D] contiguous:
    each of the B windows attends within itself, per head. ``pool`` (W, SH, SW): the queries
    are first max-pooled in SH x SW blocks of the window's rows of W tokens, as sam2's
    pooled-query attention pools them (Lq = L / (SH * SW)); None: Lq = L. ``num_warps``:
    Triton's, per program (``tools/probes/hiera_attention_probe.py`` times 2, 4 and 8)."""
    bsz, n, three, heads, d = qkv.shape
    assert three == 3 and qkv.stride(4) == 1 and d <= MAX_HEAD_DIM, (qkv.shape, qkv.stride())
    if n > MAX_TOKENS and pool is None:
        return _flash(qkv, num_warps)
    assert n <= MAX_TOKENS, qkv.shape
    w, sh, sw = pool if pool is not None else (n, 1, 1)
    assert n % w == 0 and w % sw == 0 and (n // w) % sh == 0, (n, pool)
    w2 = w // sw
    nq = (n // w // sh) * w2
    out = torch.empty(bsz, nq, heads, d, device=qkv.device, dtype=qkv.dtype)
    upcast = qkv.device.type != 'cuda'
    _window_attention_kernel[(bsz * heads,)](
        qkv, qkv.stride(0), qkv.stride(1), qkv.stride(2), qkv.stride(3), out, out.stride(0),
        out.stride(1), out.stride(2), n, nq, w, w2, d, heads, 1.0 / math.sqrt(d),
        BLOCK_L=max(16, next_pow2(n)), BLOCK_Q=max(16, next_pow2(nq)),
        BLOCK_D=max(16, next_pow2(d)), SH=sh, SW=sw, UPCAST=upcast,
        PRECISION='ieee' if upcast else 'tf32', num_warps=num_warps)
    return out


def _flash(qkv: torch.Tensor, num_warps: int) -> torch.Tensor:
    """``window_attention`` of windows of MAX_TOKENS to MAX_WINDOW_TOKENS tokens: a program per
    window, head and TILE queries, over TILE-key tiles."""
    bsz, n, _, heads, d = qkv.shape
    assert n <= MAX_WINDOW_TOKENS, qkv.shape
    out = torch.empty(bsz, n, heads, d, device=qkv.device, dtype=qkv.dtype)
    upcast = qkv.device.type != 'cuda'
    n_qt = -(-n // TILE)
    _window_flash_kernel[(bsz * heads * n_qt,)](
        qkv, qkv.stride(0), qkv.stride(1), qkv.stride(2), qkv.stride(3), out, out.stride(0),
        out.stride(1), out.stride(2), n, d, heads, n_qt, 1.0 / math.sqrt(d), N_KT=n_qt,
        BLOCK_M=TILE, BLOCK_N=TILE, BLOCK_D=max(16, next_pow2(d)), UPCAST=upcast,
        PRECISION='ieee' if upcast else 'tf32', num_warps=num_warps)
    return out


def takes(attn: torch.nn.Module, window: int) -> bool:
    """True for a sam2 ``MultiScaleAttention`` this module replaces: no query pooling (those
    blocks are ``q_pool.PooledQueryAttention``'s), windows of at most MAX_WINDOW_TOKENS."""
    return getattr(attn, 'q_pool', 1) is None and 0 < window * window <= MAX_WINDOW_TOKENS \
        and attn.dim_out // attn.num_heads <= MAX_HEAD_DIM


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

