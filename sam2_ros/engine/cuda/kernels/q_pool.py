"""Hiera's pooled-query attention with its query pooling in one kernel.

At each stage change, sam2's ``MultiScaleAttention`` (sam2/modeling/backbones/hieradet.py)
max-pools the queries: q is a strided slice of the q/k/v projection, ``do_pool`` permutes it to
[B, C, H, W] for ``nn.MaxPool2d`` and back, and the reshape to heads copies the permuted result
(a copy kernel beside the pooling one, per call). Here one kernel reads q where the projection
wrote it and stores the pooled queries contiguous, [B, H'*W', C]; the maximum is exact, so the
result is bitwise sam2's (NaN propagates, as torch's max pooling). The projections, attention
and output projection are sam2's modules and call as in its ``forward``. With the opt-in
'window_attention', windows of up to 64 tokens pool and attend in the window kernel instead
(``window_attention.py``: not bitwise, the pooled queries are).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from sam2.modeling.backbones.hieradet import do_pool

from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne
from sam2_ros.engine.cuda.kernels.window_attention import fits, window_attention

_TILE = 4096


@jit
def _q_pool_kernel(x_ptr, x_sb, x_sr, y_ptr, W, H2, W2, C,
                   SH: tl.constexpr, SW: tl.constexpr, BLOCK_P: tl.constexpr,
                   BLOCK_C: tl.constexpr):
    b = tl.program_id(1).to(tl.int64)
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)        # output pixel
    c = tl.arange(0, BLOCK_C)
    m2 = (p < H2 * W2)[:, None] & (c < C)[None, :]
    oh = (p // W2).to(tl.int64)
    ow = (p % W2).to(tl.int64)
    c64 = c.to(tl.int64)
    # float32 holds every bf16 value exactly, so the maximum and the store are exact
    acc = tl.full((BLOCK_P, BLOCK_C), float('-inf'), tl.float32)
    for dy in tl.static_range(SH):
        for dx in tl.static_range(SW):
            r = (oh * SH + dy) * W + ow * SW + dx                      # input pixel
            v = tl.load(x_ptr + b * x_sb + (r * x_sr)[:, None] + c64[None, :], mask=m2,
                        other=float('-inf')).to(tl.float32)
            acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
    tl.store(y_ptr + (b * H2 * W2 + p.to(tl.int64))[:, None] * C + c64[None, :],
             cast_rne(acc, y_ptr.dtype.element_ty), mask=m2)


def max_pool_rows(q: torch.Tensor, h: int, w: int, stride: Tuple[int, int]) -> torch.Tensor:
    """q [B, H*W, C] (channels contiguous, any row stride) -> [B, H'*W', C] contiguous: the
    max over each stride[0] x stride[1] block (H' = H // stride[0], W' = W // stride[1], as
    ``nn.MaxPool2d(stride, stride, ceil_mode=False)``)."""
    bsz, hw, c = q.shape
    assert hw == h * w and q.stride(2) == 1, (q.shape, h, w, q.stride())
    sh, sw = stride
    h2, w2 = h // sh, w // sw
    y = torch.empty(bsz, h2 * w2, c, device=q.device, dtype=q.dtype)
    block_c = next_pow2(c)
    block_p = max(1, min(_TILE // block_c, next_pow2(h2 * w2)))
    grid = (triton.cdiv(h2 * w2, block_p), bsz)
    _q_pool_kernel[grid](q, q.stride(0), q.stride(1), y, w, h2, w2, c, SH=sh, SW=sw,
                         BLOCK_P=block_p, BLOCK_C=block_c, num_warps=4)
    return y


def pool_stride(attn: torch.nn.Module) -> Optional[tuple]:
    """(sh, sw) when ``attn`` pools its queries with a plain max pooling (kernel = stride, no
    padding or dilation, floor mode), else None (sam2's own forward then runs)."""
    return plain_stride(getattr(attn, 'q_pool', None))


def plain_stride(pool: Optional[torch.nn.Module]) -> Optional[tuple]:
    """(sh, sw) when ``pool`` is a plain max pooling (kernel = stride, no padding or
    dilation, floor mode), else None."""
    if not isinstance(pool, torch.nn.MaxPool2d):
        return None
    pair = (lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v, v))
    k, s = pair(pool.kernel_size), pair(pool.stride if pool.stride is not None else k)
    if k != s or pair(pool.padding) != (0, 0) or pair(pool.dilation) != (1, 1) \
            or pool.ceil_mode or pool.return_indices:
        return None
    return s


def pool_grid(x: torch.Tensor, pool: Optional[torch.nn.Module]) -> torch.Tensor:
    """sam2's ``do_pool(x, pool)`` (x [B, H, W, C] -> [B, H', W', C]; a stage change's
    shortcut): by the kernel where ``pool`` is a plain max pooling and x's rows are
    contiguous channels on a mergeable grid (the projection's output), bitwise the same
    maximum as sam2's pooling; else sam2's ``do_pool``."""
    stride = plain_stride(pool)
    bsz, h, w, c = x.shape
    if stride is None or x.stride(3) != 1 or x.stride(1) != w * x.stride(2):
        return do_pool(x, pool)
    return max_pool_rows(x.view(bsz, h * w, c), h, w, stride).view(
        bsz, h // stride[0], w // stride[1], c)


class PooledQueryAttention(torch.nn.Module):
    """Replaces a pooled-query ``MultiScaleAttention`` (its weights) in the fused trunk.
    ``window_kernel`` (the opt-in 'window_attention'): windows that ``window_attention.fits``
    attend in one program per window and head that pools their queries itself
    (``window_attention.window_attention``; 16-bit inputs only, float32 keeps this path)."""

    def __init__(self, inner: torch.nn.Module, stride: tuple, window_kernel: bool = False):
        super().__init__()
        self.inner = inner
        self.stride = stride
        self.window_kernel = window_kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.inner
        bsz, h, w, _ = x.shape
        qkv = a.qkv(x).reshape(bsz, h * w, 3, a.num_heads, -1)     # [B, HW, 3, nH, D]
        h2, w2 = h // self.stride[0], w // self.stride[1]
        if self.in_window_kernel(qkv, h, w):
            out = window_attention(qkv, pool=(w, *self.stride))       # [B, H'W', nH, D]
            return a.proj(out.reshape(bsz, h2, w2, -1))
        q, k, v = torch.unbind(qkv, 2)                               # [B, HW, nH, D] each
        q = max_pool_rows(q.flatten(2), h, w, self.stride)          # [B, H'W', nH*D]
        q = q.view(bsz, h2 * w2, a.num_heads, -1)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2))     # [B, nH, H'W', D]
        return a.proj(out.transpose(1, 2).reshape(bsz, h2, w2, -1))

    def in_window_kernel(self, qkv: torch.Tensor, h: int, w: int) -> bool:
        """Whether the opt-in window kernel takes this call: windows that fit it
        (``window_attention.fits``) and the stride divides, 16-bit q/k/v."""
        sh, sw = self.stride
        return (self.window_kernel and fits(h * w, qkv.shape[-1]) and h % sh == 0
                and w % sw == 0 and qkv.dtype in (torch.bfloat16, torch.float16))
