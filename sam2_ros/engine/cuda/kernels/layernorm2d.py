"""sam2's ``LayerNorm2d`` (and the GELU after it, and the residual add before it) in one kernel.

``LayerNorm2d`` (sam2/modeling/sam2_utils.py) normalizes [B, C, H, W] over C with seven
tensor ops (mean, sub, pow, mean, add, sqrt, div) and an affine: nine kernels per call, seven
calls per tracked frame (mask downsampler, fuser, mask decoder). Under autocast its input is
a convolution's bf16 output and every one of those ops rounds to bf16; the affine with the
float32 parameters promotes to float32. The kernel does the same operations on one pixel's
channels in registers, rounding each intermediate to the input's dtype as torch does, then
the affine (and, where the module is followed by ``nn.GELU``, the exact erf GELU) in float32
(``channel_norm.layernorm2d_math``, shared with the convolution kernels),
and writes the dtype its consumer computes in: in SAM 2 every LayerNorm2d feeds a
convolution or Linear (through its GELU or not), which autocast would cast to bf16.

The mask decoder's output upscaling adds a high-resolution feature map before its norm and
after its second transposed convolution (``dc1(x) + feat_s1``, ``gelu(dc2(.) + feat_s0)``):
the first add is taken into the norm's kernel (``residual``), the second add and its GELU
are one kernel (``add_gelu``); each add rounds to the promoted dtype as torch's add does, so
the values are those of the separate ops (``mask_decoder.py`` calls them).
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.channel_norm import gelu_erf, layernorm2d_math
from sam2_ros.engine.cuda.kernels.dtypes import linear_input
from sam2_ros.engine.cuda.kernels.launch import dummy_like, jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne
from sam2_ros.engine.cuda.kernels.swap import with_children

_TILE = 4096


@jit
def _ln2d_kernel(x_ptr, x_sb, x_sc, r_ptr, r_sb, r_sc, r_sh, r_sw, w_ptr, b_ptr, y_ptr, C, HW,
                 W, eps, HAS_R: tl.constexpr, SUM_OF_R: tl.constexpr, GELU: tl.constexpr,
                 BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    b = tl.program_id(1).to(tl.int64)
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.arange(0, BLOCK_C)
    pm = p < HW
    cm = c < C
    m2 = cm[:, None] & pm[None, :]
    c64 = c.to(tl.int64)
    p64 = p.to(tl.int64)
    x = tl.load(x_ptr + b * x_sb + (c64 * x_sc)[:, None] + p64[None, :], mask=m2,
                other=0.0).to(tl.float32)
    dt = x_ptr.dtype.element_ty         # the norm's input dtype: x's, or the sum's
    if HAS_R:
        # the residual's pixel (h, w) by its own strides: a view of the encoder's [HW, B, C]
        r = tl.load(r_ptr + b * r_sb + (c64 * r_sc)[:, None] + (
            (p64 // W) * r_sh + (p64 % W) * r_sw)[None, :], mask=m2, other=0.0).to(tl.float32)
        if SUM_OF_R:        # r's dtype is the promoted one
            dt = r_ptr.dtype.element_ty
        x = cast_rne(x + r, dt).to(tl.float32)         # rounded as torch's add
    y = layernorm2d_math(x, w_ptr, b_ptr, c, m2, cm, eps, C, 0, dt, True, GELU)
    tl.store(y_ptr + b * C * HW + (c64 * HW)[:, None] + p64[None, :],
             cast_rne(y, y_ptr.dtype.element_ty), mask=m2)


@jit
def _add_gelu_kernel(x_ptr, x_sb, x_sc, x_sh, x_sw, r_ptr, r_sb, r_sc, r_sh, r_sw, y_ptr, C,
                     HW, W, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    b = tl.program_id(2).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    m2 = (c < C)[:, None] & (p < HW)[None, :]
    c64 = c.to(tl.int64)
    p64 = p.to(tl.int64)
    h = p64 // W
    w = p64 % W
    x = tl.load(x_ptr + b * x_sb + (c64 * x_sc)[:, None] + (h * x_sh + w * x_sw)[None, :],
                mask=m2, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + b * r_sb + (c64 * r_sc)[:, None] + (h * r_sh + w * r_sw)[None, :],
                mask=m2, other=0.0).to(tl.float32)
    dt = y_ptr.dtype.element_ty              # the promoted dtype: the add's and the GELU's
    s = cast_rne(x + r, dt).to(tl.float32)
    tl.store(y_ptr + b * C * HW + (c64 * HW)[:, None] + p64[None, :],
             cast_rne(gelu_erf(s), dt), mask=m2)


def _residual_as(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """r broadcast to x's shape (a view: stride 0 where it broadcasts); torch's add would
    broadcast x too, which the kernels do not."""
    assert torch.broadcast_shapes(x.shape, r.shape) == x.shape, (x.shape, r.shape)
    return r.expand(x.shape)


def add_gelu(x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """``nn.GELU()(x + r)`` (exact erf) for x [B, C, H, W] and r broadcastable to it (any
    strides), in one kernel: the sum rounded to torch.promote_types(x.dtype, r.dtype) as
    torch's add rounds it, the GELU in float32 rounded to that dtype as torch's GELU on it.
    Returns a contiguous [B, C, H, W] of that dtype."""
    bsz, c, h, w = x.shape
    r = _residual_as(x, r)
    y = torch.empty(bsz, c, h, w, device=x.device, dtype=torch.promote_types(x.dtype, r.dtype))
    block_p = min(next_pow2(h * w), 128)
    block_c = max(1, min(next_pow2(c), _TILE // block_p))
    grid = (triton.cdiv(h * w, block_p), triton.cdiv(c, block_c), bsz)
    _add_gelu_kernel[grid](x, *x.stride(), r, *r.stride(), y, c, h * w, w, BLOCK_C=block_c,
                           BLOCK_P=block_p, num_warps=4)
    return y


class FusedLayerNorm2d(torch.nn.Module):
    """Replaces a sam2 ``LayerNorm2d`` (its weights), optionally with the ``nn.GELU`` that
    follows it (which the caller replaces by an identity)."""

    def __init__(self, inner: torch.nn.Module, gelu: bool = False):
        super().__init__()
        self.inner = inner
        self.gelu = gelu

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The norm (and GELU) of x [B, C, H, W], or of ``x + residual`` (residual
        broadcastable to x, any strides) summed in the kernel as torch's add would."""
        bsz, c, h, w = x.shape
        if x.stride(3) != 1 or x.stride(2) != w:
            x = x.contiguous()
        sum_dtype = x.dtype
        if residual is not None:
            residual = _residual_as(x, residual)
            sum_dtype = torch.promote_types(x.dtype, residual.dtype)
            if sum_dtype not in (x.dtype, residual.dtype):      # bf16 + fp16: float32
                residual = residual.float()
        r = dummy_like(residual, x)
        natural = torch.promote_types(sum_dtype, self.inner.weight.dtype)
        y = torch.empty(bsz, c, h, w, device=x.device, dtype=linear_input(x, natural))
        block_c = next_pow2(c)
        block_p = max(16, min(_TILE // block_c, next_pow2(h * w)))
        grid = (triton.cdiv(h * w, block_p), bsz)
        _ln2d_kernel[grid](x, x.stride(0), x.stride(1), r, r.stride(0), r.stride(1),
                           r.stride(2), r.stride(3), self.inner.weight, self.inner.bias, y,
                           c, h * w, w, float(self.inner.eps), HAS_R=residual is not None,
                           SUM_OF_R=sum_dtype != x.dtype, GELU=self.gelu, BLOCK_C=block_c,
                           # eight warps from 64 channels: faster there, slower at 16
                           # (tools/probes/launch_probe.py; bitwise the same output)
                           BLOCK_P=block_p, num_warps=8 if block_c >= 64 else 4)
        return y


def fuses_upscaling(ln: torch.nn.Module, act1: torch.nn.Module, act2: torch.nn.Module) -> bool:
    """Whether the mask decoder's upscaling (dc1, ln, act1, dc2, act2) has this group's norm
    with its GELU taken in (act1 an identity) and an exact GELU last: then the norm takes the
    add before it and ``add_gelu`` the add before act2."""
    return isinstance(ln, FusedLayerNorm2d) and ln.gelu and isinstance(act1, torch.nn.Identity) \
        and type(act2) is torch.nn.GELU and act2.approximate == 'none'


def swap_layernorm2d(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` (a shallow copy where anything changes) with every ``LayerNorm2d`` below it
    fused; in a Sequential, one followed by an exact ``nn.GELU`` takes the GELU in."""
    from sam2.modeling.sam2_utils import LayerNorm2d
    names = list(module._modules)
    changed = {}
    for i, name in enumerate(names):
        child = module._modules[name]
        if child is None:
            continue
        if isinstance(child, LayerNorm2d):
            nxt = module._modules[names[i + 1]] if i + 1 < len(names) else None
            gelu = isinstance(module, torch.nn.Sequential) and isinstance(nxt, torch.nn.GELU) \
                and nxt.approximate == 'none'
            changed[name] = FusedLayerNorm2d(child, gelu=gelu)
            if gelu:
                changed[names[i + 1]] = torch.nn.Identity()
        elif name not in changed:
            new = swap_layernorm2d(child)
            if new is not child:
                changed[name] = new
    return with_children(module, **changed) if changed else module
