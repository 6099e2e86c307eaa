"""sam2's FPN neck with its top-down step in one kernel: the fused model copy's 'fpn' group.

``FpnNeck.forward`` (sam2/modeling/backbones/image_encoder.py) runs per level, coarsest first,
a 1x1 convolution (the lateral features) and, on the ``fpn_top_down_levels`` below the
coarsest, ``lateral + F.interpolate(prev.to(float32), scale_factor=2.0, mode='nearest')``:
three kernels under bf16 autocast (the cast of the bf16 convolution output, the upsampling,
the add), two in float32. Here those are one kernel (``top_down_add``) that reads ``prev`` at
(y // 2, x // 2) and adds it in float32: bitwise sam2's, as every step is exact but the one
float32 add (a bf16 -> float32 cast is exact, nearest upsampling by 2 copies pixel
(floor(y * 0.5), floor(x * 0.5)), and ``lateral + top`` promotes lateral to float32 exactly
before one rounded float32 add, here the same add). The output has the lateral features'
layout, as torch's add gives it (both inputs of the add have that layout).

Not fused, as nothing bitwise is left to gain there: the convolutions (cuDNN's GEMMs, with
their bias adds, stay sam2's modules) and the position encodings (sam2's per level; the
'constants' group already stores them, cast, per shape: no kernel per frame).

Per call, sam2's ops run instead where the kernel would not give torch's result: inputs
needing gradients, dtypes other than float32 / bf16 / float16, a lateral map that is not
twice ``prev``'s size, inputs of two layouts or of neither the contiguous nor the
channels-last one. A neck of another kind (not sam2's ``FpnNeck``, bilinear top-down or
``fuse_type='avg'``, which no SAM 2.1 config uses) stays sam2's module (``fused_fpn_neck``).
"""

from __future__ import annotations

from typing import List, Tuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.launch import jit

_BLOCK = 1024
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


@jit
def _top_down_kernel(lat_ptr, prev_ptr, out_ptr, n, S1, S2, S3,
                     l0, l1, l2, l3, p0, p1, p2, p3, o0, o1, o2, o3,
                     HALF0: tl.constexpr, HALF1: tl.constexpr, HALF2: tl.constexpr,
                     HALF3: tl.constexpr, BLOCK: tl.constexpr):
    # dims 0..3: the output's in memory order (outermost first), S_k their sizes; HALF_k:
    # prev is read at index // 2 along dim k (the two spatial dims)
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n
    i3 = idx % S3
    r = idx // S3
    i2 = r % S2
    r = r // S2
    i1 = r % S1
    i0 = r // S1
    lat = tl.load(lat_ptr + i0 * l0 + i1 * l1 + i2 * l2 + i3 * l3, mask=mask, other=0.0)
    j0 = i0 // 2 if HALF0 else i0
    j1 = i1 // 2 if HALF1 else i1
    j2 = i2 // 2 if HALF2 else i2
    j3 = i3 // 2 if HALF3 else i3
    prev = tl.load(prev_ptr + j0 * p0 + j1 * p1 + j2 * p2 + j3 * p3, mask=mask, other=0.0)
    out = lat.to(tl.float32) + prev.to(tl.float32)             # the one rounded op
    tl.store(out_ptr + i0 * o0 + i1 * o1 + i2 * o2 + i3 * o3, out, mask=mask)


def kernel_takes(lateral: torch.Tensor, prev: torch.Tensor) -> bool:
    """Whether ``top_down_add`` runs its kernel (else sam2's ops) for these inputs."""
    b, c, h, w = prev.shape
    grad = torch.is_grad_enabled() and (lateral.requires_grad or prev.requires_grad)
    return (not grad and lateral.dim() == 4 and tuple(lateral.shape) == (b, c, 2 * h, 2 * w)
            and lateral.dtype in _FLOATS and prev.dtype in _FLOATS
            and lateral.device == prev.device and lateral.numel() > 0
            and _layout(lateral) == _layout(prev) and any(_layout(lateral)))


def _layout(x: torch.Tensor) -> Tuple[bool, bool]:
    """(contiguous, channels-last contiguous): torch's add of two inputs of one such layout
    (the upsampling keeps prev's) writes that layout, as ``empty_like`` allocates it."""
    return x.is_contiguous(), x.is_contiguous(memory_format=torch.channels_last)


def reference_top_down_add(lateral: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """sam2's ops: lateral + nearest-upsampled float32 prev."""
    top = F.interpolate(prev.to(dtype=torch.float32), scale_factor=2.0, mode='nearest',
                        align_corners=None, antialias=False)
    return lateral + top


def top_down_add(lateral: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """lateral [B, C, 2H, 2W], prev [B, C, H, W] (any strides, float32 / bf16 / float16) ->
    lateral + nearest 2x upsampling of float32(prev), float32 [B, C, 2H, 2W] with lateral's
    layout, in one kernel; sam2's ops where ``kernel_takes`` says no."""
    if not kernel_takes(lateral, prev):
        return reference_top_down_add(lateral, prev)
    out = torch.empty_like(lateral, dtype=torch.float32)      # lateral's layout
    order = sorted(range(4), key=lambda d: -out.stride(d))      # memory order, stable on ties
    sizes = [out.shape[d] for d in order]
    _top_down_kernel[(triton.cdiv(out.numel(), _BLOCK),)](
        lateral, prev, out, out.numel(), *sizes[1:],
        *(lateral.stride(d) for d in order), *(prev.stride(d) for d in order),
        *(out.stride(d) for d in order),
        *(d >= 2 for d in order), BLOCK=_BLOCK, num_warps=4)
    return out


class FusedFpnNeck(torch.nn.Module):
    """Replaces ``image_encoder.neck`` (a sam2 ``FpnNeck``, nearest top-down, sum) in the fused
    model copy: the same (features, position encodings) lists from sam2's convolutions and
    position encoding (shared modules), the top-down step by ``top_down_add``."""

    def __init__(self, neck: torch.nn.Module):
        super().__init__()
        self.inner = neck
        # what sam2 reads of a neck besides forward
        self.backbone_channel_list = neck.backbone_channel_list
        self.d_model = neck.d_model
        self.top_down_levels = frozenset(neck.fpn_top_down_levels)

    def forward(self, xs: List[torch.Tensor]) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
        """xs: the trunk's [B, C_i, H_i, W_i] per level, finest first -> (features, positions),
        [B, d_model, H_i, W_i] each, as sam2's ``forward``."""
        convs, position_encoding = self.inner.convs, self.inner.position_encoding
        n = len(convs) - 1
        assert len(xs) == n + 1
        out, pos = [None] * (n + 1), [None] * (n + 1)
        prev = None
        for i in range(n, -1, -1):                # coarsest first, as sam2
            lateral = convs[n - i](xs[i])
            if i in self.top_down_levels and prev is not None:
                prev = top_down_add(lateral, prev)
            else:
                prev = lateral
            out[i] = prev
            pos[i] = position_encoding(prev).to(prev.dtype)
        return out, pos


def fused_fpn_neck(neck: torch.nn.Module) -> torch.nn.Module:
    """``FusedFpnNeck(neck)`` for a sam2 ``FpnNeck`` with nearest top-down and sum fusion (the
    SAM 2.1 configs'), else ``neck`` itself."""
    from sam2.modeling.backbones.image_encoder import FpnNeck
    if type(neck) is not FpnNeck or neck.fpn_interp_model != 'nearest' \
            or neck.fuse_type != 'sum':
        return neck
    return FusedFpnNeck(neck)
