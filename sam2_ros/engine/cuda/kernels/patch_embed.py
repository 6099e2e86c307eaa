"""Hiera's patch embedding as one implicit-GEMM kernel writing channels-last tokens (the fused
group 'patch_embed').

Why: sam2's ``PatchEmbed`` is a Conv2d over the 3-channel image (7x7, stride 4, padding 3 in
Hiera) followed by a permute to [B, H, W, C]. Three input channels are too few for cuDNN's
tensor-core kernels, so it runs an implicit SGEMM without them (about 0.16 ms of 2.8 GFLOP at
large@1024), after autocast's cast of the image and before a bias add, and the trunk copies
the permuted view. Here each program gathers its output pixels' receptive fields (C x KH x KW
values each) straight from the image, multiplies them with the weight on tensor cores and
writes the [B, Ho, Wo, N] tokens: one kernel instead of cast, convolution, bias add and copy.
Operands are rounded as autocast rounds them, products accumulate in float32, the sum is
rounded to the output dtype and the bias added and rounded again, as sam2's convolution and
its separate bias add do: sam2's values up to the summation order. Float32 multiplies in
IEEE float32 (no TF32).
"""

from __future__ import annotations

from typing import Dict, Tuple

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.dtypes import linear_input
from sam2_ros.engine.cuda.kernels.launch import jit
from sam2_ros.engine.cuda.kernels.rounding import cast_rne, dot_operand, rne_as

BLOCK_M = 64          # output pixels per program
BLOCK_K = 32          # receptive-field values per step (C x KH x KW = 147 in Hiera: 5 steps)


@jit
def _patch_embed_kernel(x_ptr, x_sb, x_sc, x_sh, x_sw, w_ptr, b_ptr, y_ptr, n_pix, Ho, Wo,
                        H, W, N, K: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                        S: tl.constexpr, P: tl.constexpr, K_BLOCKS: tl.constexpr,
                        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                        BF16: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    """Output pixels [pid * BM, +BM) of the flattened [B, Ho, Wo] grid, every channel: x
    [B, C, H, W] at any strides, w [K_BLOCKS * BK, N] (row (c * KH + dy) * KW + dx, rows past
    K zero), b [N] -> y [B * Ho * Wo, N]."""
    pix = tl.program_id(0) * BM + tl.arange(0, BM)
    pm = pix < n_pix
    b = pix // (Ho * Wo)
    q = pix % (Ho * Wo)
    oy = q // Wo
    ox = q % Wo
    row = b.to(tl.int64) * x_sb
    n = tl.arange(0, BN)
    nm = n < N
    acc = tl.zeros([BM, BN], tl.float32)
    for kb in range(0, K_BLOCKS):
        k = kb * BK + tl.arange(0, BK)
        c = k // (KH * KW)
        dy = (k % (KH * KW)) // KW
        dx = k % KW
        iy = oy[:, None] * S - P + dy[None, :]                              # [BM, BK]
        ix = ox[:, None] * S - P + dx[None, :]
        m = pm[:, None] & (k < K)[None, :] & (iy >= 0) & (iy < H) & (ix >= 0) & (ix < W)
        xt = tl.load(x_ptr + row[:, None] + c.to(tl.int64)[None, :] * x_sc + iy * x_sh
                     + ix * x_sw, mask=m, other=0.0)
        wt = tl.load(w_ptr + k[:, None] * N + n[None, :], mask=nm[None, :], other=0.0)
        acc += tl.dot(dot_operand(xt, BF16, UPCAST), dot_operand(wt, BF16, UPCAST),
                      input_precision=PRECISION)
    bias = tl.load(b_ptr + n, mask=nm, other=0.0).to(tl.float32)
    y = rne_as(rne_as(acc, BF16) + bias[None, :], BF16)     # conv rounded, then + bias
    tl.store(y_ptr + pix.to(tl.int64)[:, None] * N + n[None, :],
             cast_rne(y, y_ptr.dtype.element_ty), mask=pm[:, None] & nm[None, :])


def patch_embed(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                kernel: Tuple[int, int], stride: int, padding: int) -> torch.Tensor:
    """x [B, C, H, W] (any strides, any float dtype), weight [K_pad, N] and bias [N] in the
    compute dtype (``pack``) -> [B, Ho, Wo, N] in that dtype: conv2d(x, w, b) channels last."""
    bsz, c, h, w = x.shape
    kh, kw = kernel
    k_pad, n = weight.shape
    ho, wo = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
    out = torch.empty(bsz, ho, wo, n, device=x.device, dtype=weight.dtype)
    bf16 = weight.dtype == torch.bfloat16
    upcast = bf16 and not x.is_cuda
    bn = max(16, triton.next_power_of_2(n))        # tl.dot's smallest tile
    n_pix = bsz * ho * wo
    _patch_embed_kernel[(triton.cdiv(n_pix, BLOCK_M),)](
        x, *x.stride(), weight, bias, out, n_pix, ho, wo, h, w, n, K=c * kh * kw, KH=kh,
        KW=kw, S=stride, P=padding, K_BLOCKS=k_pad // BLOCK_K, BM=BLOCK_M, BN=bn, BK=BLOCK_K,
        BF16=bf16, UPCAST=upcast, PRECISION='ieee' if upcast or not bf16 else 'tf32',
        num_warps=8 if bn > 128 else 4)
    return out


def pack(conv: torch.nn.Conv2d, dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """(weight [K_pad, N], bias [N]) of ``conv`` in ``dtype`` (as autocast casts them; the
    parameters as they are where precast): row (c * KH + dy) * KW + dx, zero rows up to a
    multiple of BLOCK_K."""
    n = conv.out_channels
    w = conv.weight.to(dtype).reshape(n, -1).t()                          # [K, N]
    k = w.shape[0]
    packed = w.new_zeros(triton.cdiv(k, BLOCK_K) * BLOCK_K, n)
    packed[:k] = w
    return packed, conv.bias.to(dtype)


class FusedPatchEmbed(torch.nn.Module):
    """Replaces a sam2 ``PatchEmbed`` in the fused trunk: [B, C, H, W] -> [B, Ho, Wo, N] (a
    contiguous channels-last tensor where sam2's is a permuted view), in the dtype sam2's
    convolution computes in; float16 compute runs sam2's module."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        self.packed: Dict[Tuple[torch.dtype, torch.device],
                          Tuple[torch.Tensor, torch.Tensor]] = {}

    @staticmethod
    def applicable(inner: torch.nn.Module) -> bool:
        """A plain biased Conv2d of square stride and padding and a small receptive field."""
        conv = getattr(inner, 'proj', None)
        return (isinstance(conv, torch.nn.Conv2d) and conv.bias is not None
                and conv.groups == 1 and conv.dilation == (1, 1)
                and conv.padding_mode == 'zeros' and isinstance(conv.padding, tuple)
                and conv.stride[0] == conv.stride[1] and conv.padding[0] == conv.padding[1]
                and conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1] <= 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.inner.proj
        dtype = linear_input(x, torch.promote_types(x.dtype, conv.weight.dtype))
        if dtype not in (torch.bfloat16, torch.float32):
            return self.inner(x)
        key = (dtype, x.device)
        if key not in self.packed:
            with torch.no_grad():
                self.packed[key] = pack(conv, dtype)
        return patch_embed(x, *self.packed[key], conv.kernel_size, conv.stride[0],
                           conv.padding[0])
