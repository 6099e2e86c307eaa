"""sam2's ``LayerNorm2d`` (and the GELU after it) in one kernel.

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
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.channel_norm import layernorm2d_math
from sam2_ros.engine.cuda.kernels.dtypes import linear_input
from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne
from sam2_ros.engine.cuda.kernels.swap import with_children

_TILE = 4096


@jit
def _ln2d_kernel(x_ptr, x_sb, x_sc, w_ptr, b_ptr, y_ptr, C, HW, eps,
                 GELU: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    b = tl.program_id(1).to(tl.int64)
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.arange(0, BLOCK_C)
    pm = p < HW
    cm = c < C
    m2 = cm[:, None] & pm[None, :]
    c64 = c.to(tl.int64)
    p64 = p.to(tl.int64)
    dt = x_ptr.dtype.element_ty
    x = tl.load(x_ptr + b * x_sb + (c64 * x_sc)[:, None] + p64[None, :], mask=m2,
                other=0.0).to(tl.float32)
    y = layernorm2d_math(x, w_ptr, b_ptr, c, m2, cm, eps, C, 0, dt, True, GELU)
    tl.store(y_ptr + b * C * HW + (c64 * HW)[:, None] + p64[None, :],
             cast_rne(y, y_ptr.dtype.element_ty), mask=m2)


class FusedLayerNorm2d(torch.nn.Module):
    """Replaces a sam2 ``LayerNorm2d`` (its weights), optionally with the ``nn.GELU`` that
    follows it (which the caller replaces by an identity)."""

    def __init__(self, inner: torch.nn.Module, gelu: bool = False):
        super().__init__()
        self.inner = inner
        self.gelu = gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bsz, c, h, w = x.shape
        if x.stride(3) != 1 or x.stride(2) != w:
            x = x.contiguous()
        natural = torch.promote_types(x.dtype, self.inner.weight.dtype)
        y = torch.empty(bsz, c, h, w, device=x.device, dtype=linear_input(x, natural))
        block_c = next_pow2(c)
        block_p = max(16, min(_TILE // block_c, next_pow2(h * w)))
        grid = (triton.cdiv(h * w, block_p), bsz)
        _ln2d_kernel[grid](x, x.stride(0), x.stride(1), self.inner.weight, self.inner.bias, y,
                           c, h * w, float(self.inner.eps), GELU=self.gelu, BLOCK_C=block_c,
                           BLOCK_P=block_p, num_warps=4)
        return y


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
