"""sam2's ``CXBlock`` (the memory encoder's fuser layers) in three kernels.

sam2 runs depthwise conv, the seven ops of ``LayerNorm2d`` and its affine, a permute, the two
Linears with GELU between, the layer scale, a permute back and the residual add (plus
autocast's casts): 15 kernels a block. Here, on channels-last rows [B * h * w, C]:

1. the depthwise k x k convolution and the LayerNorm2d of each pixel's C channels, one program
   per block of pixels with all channels in registers, writing pwconv1's bf16 input
   (``_dwconv_norm_kernel``);
2. pwconv1 + bias + exact GELU (``row_gemm.GELU``);
3. pwconv2 + bias, times gamma, plus the block's input (``row_gemm.RESIDUAL``), float32 as
   sam2's sum is.

Numerics as sam2's under autocast: the convolution's input and weights rounded to bf16, float32
accumulation from the bias and one rounding (PyTorch's depthwise kernel), the norm as
``channel_norm.py``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.channel_norm import layernorm_rows
from sam2_ros.engine.cuda.kernels.launch import jit
from sam2_ros.engine.cuda.kernels.mask_downsampler import rows_block
from sam2_ros.engine.cuda.kernels.rounding import cast_rne, rne_as
from sam2_ros.engine.cuda.kernels.row_gemm import GELU, RESIDUAL, row_gemm

# the taps' loop unrolled by this factor with eight warps a program: several taps' loads in
# flight at once (tools/probes/launch_probe.py times the factors; bitwise the same output)
_UNROLL, _WARPS = 4, 8


@jit
def _dwconv_norm_kernel(x_ptr, w_ptr, b_ptr, lnw_ptr, lnb_ptr, y_ptr, H, W, n_rows, eps,
                        C: tl.constexpr, KS: tl.constexpr, PAD: tl.constexpr,
                        BF16: tl.constexpr, BLOCK_P: tl.constexpr, UNROLL: tl.constexpr):
    # int64 index arithmetic: the interpreter checks every int32 op for overflow (its costliest
    # step here); on the GPU these are a few [BLOCK_P] and [C] vectors
    rows = (tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)).to(tl.int64)
    rm = rows < n_rows
    bb = rows // (H * W)
    pp = rows % (H * W)
    hh = pp // W
    ww = pp % W
    c = tl.arange(0, C).to(tl.int64)
    acc = tl.zeros([BLOCK_P, C], dtype=tl.float32) \
        + rne_as(tl.load(b_ptr + c).to(tl.float32), BF16)[None, :]
    # autocast's bf16 casts of the input and weights inline, where a value is not bf16 yet (no
    # helper call per tap: each costs the interpreter a millisecond)
    for t in tl.range(0, KS * KS, loop_unroll_factor=UNROLL):
        hi = hh + t // KS - PAD
        wi = ww + t % KS - PAD
        m = rm & (hi >= 0) & (hi < H) & (wi >= 0) & (wi < W)
        src = ((bb * H + hi) * W + wi) * C
        x = tl.load(x_ptr + src[:, None] + c[None, :], mask=m[:, None], other=0.0)
        wt = tl.load(w_ptr + c * (KS * KS) + t)
        if BF16:
            if x_ptr.dtype.element_ty != tl.bfloat16:
                x = cast_rne(x, tl.bfloat16)
            if w_ptr.dtype.element_ty != tl.bfloat16:
                wt = cast_rne(wt, tl.bfloat16)
        acc += x.to(tl.float32) * wt.to(tl.float32)[None, :]
    y = rne_as(acc, BF16)
    y = layernorm_rows(y, lnw_ptr, lnb_ptr, eps, C, BF16, False)
    tl.store(y_ptr + (rows * C)[:, None] + c[None, :],
             cast_rne(y, y_ptr.dtype.element_ty), mask=rm[:, None])


def supported(block: torch.nn.Module, dim: int) -> bool:
    """True for a sam2 CXBlock these kernels compute: depthwise odd k x k 'same' convolution
    over ``dim`` channels (a power of two in [16, 256]: one pixel's channels in registers),
    LayerNorm2d, Linears dim -> any -> dim with biases, exact GELU, no drop path."""
    from sam2.modeling.memory_encoder import CXBlock
    from sam2.modeling.sam2_utils import LayerNorm2d
    if type(block) is not CXBlock or not 16 <= dim <= 256 or dim & (dim - 1):
        return False
    dw, p1, p2 = block.dwconv, block.pwconv1, block.pwconv2
    k = dw.kernel_size
    return (dw.in_channels == dw.out_channels == dw.groups == dim and k[0] == k[1]
            and k[0] % 2 == 1 and dw.stride == (1, 1) and dw.padding == (k[0] // 2,) * 2
            and dw.dilation == (1, 1) and dw.bias is not None and dw.padding_mode == 'zeros'
            and type(block.norm) is LayerNorm2d and type(block.act) is torch.nn.GELU
            and block.act.approximate == 'none' and type(block.drop_path) is torch.nn.Identity
            and p1.in_features == dim and p2.out_features == dim
            and p2.in_features == p1.out_features and p1.out_features % 16 == 0
            and p1.bias is not None and p2.bias is not None)


def cx_block(x: torch.Tensor, size: tuple, block: torch.nn.Module,
             compute: torch.dtype) -> torch.Tensor:
    """x [B * h * w, C] channels-last rows (contiguous), size = (B, h, w) -> the block's
    output, the same layout, float32 (or x's dtype without gamma, as torch promotes)."""
    bsz, hgt, wid = size
    n_rows, dim = x.shape
    dw = block.dwconv
    t = torch.empty(n_rows, dim, device=x.device, dtype=compute)
    block_p = rows_block(n_rows, 8192 // dim, least=8, spread=x.device.type == 'cuda')
    _dwconv_norm_kernel[(triton.cdiv(n_rows, block_p),)](
        x, dw.weight, dw.bias, block.norm.weight, block.norm.bias, t, hgt, wid, n_rows,
        float(block.norm.eps), C=dim, KS=dw.kernel_size[0], PAD=dw.padding[0],
        BF16=compute == torch.bfloat16, BLOCK_P=block_p, UNROLL=_UNROLL, num_warps=_WARPS)
    p1, p2 = block.pwconv1, block.pwconv2
    u = torch.empty(n_rows, p1.out_features, device=x.device, dtype=compute)
    row_gemm(t, p1.weight, p1.bias, GELU, compute, u)
    gamma = block.gamma
    out_dtype = torch.promote_types(x.dtype, compute if gamma is None else gamma.dtype)
    y = torch.empty(n_rows, dim, device=x.device, dtype=out_dtype)
    return row_gemm(u, p2.weight, p2.bias, RESIDUAL, compute, y, residual=x, gamma=gamma)
