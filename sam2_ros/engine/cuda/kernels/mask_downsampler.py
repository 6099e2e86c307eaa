"""sam2's ``MaskDownSampler`` in one kernel per stage, the last one also fusing the memory
encoder's ``pix_feat_proj`` and the add (``memory_encoder.py`` runs them).

Each stage of sam2's downsampler is a strided convolution, a ``LayerNorm2d`` and a GELU (five
to eleven kernels with the norm's ops and autocast's casts); here one program computes a block of
output pixels with all their channels: the convolution as a product of an im2col tile [pixels,
Cin * k * k] (k = ci * k * k + tap, the weight's own order, so the weight tile is read as
stored) with the weight tile, by ``tl.dot`` where the tiles are large enough for it and by
outer products otherwise (the first stage: 1 input channel, 4 outputs), then the norm and the
GELU in registers (``channel_norm.py``), written channels-last for the next stage. The last
stage goes on, still in registers: sam2's final 1x1 convolution of the downsampler, the 1x1
``pix_feat_proj`` of the image features and their sum, written [B * h * w, E] (channels-last),
the fuser's input.

Numerics are sam2's under autocast: each convolution's input and weights in bf16, float32
accumulation, its output rounded to bf16 and its bias added in bf16 (the cuDNN path: the
convolution, then the bias add), the norm rounding as ``channel_norm.py`` says, the sum of the two
projections in bf16. In float32 every step is float32, in another summation order.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.channel_norm import layernorm_rows
from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2
from sam2_ros.engine.cuda.kernels.mask_prologue import NONE, MaskPrologue, mask_prologue
from sam2_ros.engine.cuda.kernels.rounding import cast_rne, dot_operand, rne_as

_PROGRAMS = 128      # enough programs for most of the GPU's 132 SMs at one object


@jit
def _stage_kernel(x_ptr, x_sb, x_sc, x_sh, x_sw, w_ptr, b_ptr, lnw_ptr, lnb_ptr, y_ptr,
                  H, W, HO, WO, n_rows, eps, m_scale, m_bias,
                  wf_ptr, bf_ptr, p_ptr, p_sb, p_sc, p_sh, p_sw, wp_ptr, bp_ptr,
                  COUT: tl.constexpr, K: tl.constexpr, KS: tl.constexpr,
                  STRIDE: tl.constexpr, PAD: tl.constexpr, PROLOGUE: tl.constexpr,
                  HAS_SCALE: tl.constexpr, HAS_BIAS: tl.constexpr,
                  DOT: tl.constexpr, FUSE: tl.constexpr, E: tl.constexpr, CP: tl.constexpr,
                  BF16: tl.constexpr, ROUND2: tl.constexpr, UPCAST: tl.constexpr,
                  PRECISION: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr,
                  BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    rm = rows < n_rows
    bb = (rows // (HO * WO)).to(tl.int64)
    pp = rows % (HO * WO)
    ho = pp // WO
    wo = pp % WO
    co = tl.arange(0, COUT)
    acc = tl.zeros([BLOCK_P, COUT], dtype=tl.float32)
    if DOT:
        for k0 in range(0, K, BLOCK_K):
            kk = k0 + tl.arange(0, BLOCK_K)
            km = kk < K
            ci = kk // (KS * KS)
            hi = ho[:, None] * STRIDE - PAD + ((kk % (KS * KS)) // KS)[None, :]
            wi = wo[:, None] * STRIDE - PAD + (kk % KS)[None, :]
            m = rm[:, None] & km[None, :] & (hi >= 0) & (hi < H) & (wi >= 0) & (wi < W)
            x = tl.load(x_ptr + (bb * x_sb)[:, None] + (ci * x_sc)[None, :] + hi * x_sh
                        + wi * x_sw, mask=m, other=0.0)
            if PROLOGUE != 0:        # the masks made from the logits; 0 padding after
                x = tl.where(m, mask_prologue(x.to(tl.float32), PROLOGUE, m_scale, m_bias,
                                              HAS_SCALE, HAS_BIAS, x_ptr.dtype.element_ty), 0.0)
            w = tl.load(w_ptr + (co * K)[None, :] + kk[:, None], mask=km[:, None], other=0.0)
            acc = tl.dot(dot_operand(x, BF16, UPCAST), dot_operand(w, BF16, UPCAST), acc,
                         input_precision=PRECISION)
    else:
        for k in range(0, K):
            hi = ho * STRIDE - PAD + (k % (KS * KS)) // KS
            wi = wo * STRIDE - PAD + k % KS
            m = rm & (hi >= 0) & (hi < H) & (wi >= 0) & (wi < W)
            x = tl.load(x_ptr + bb * x_sb + (k // (KS * KS)) * x_sc + hi * x_sh + wi * x_sw,
                        mask=m, other=0.0).to(tl.float32)
            if PROLOGUE != 0:        # the masks made from the logits; 0 padding after
                x = tl.where(m, mask_prologue(x, PROLOGUE, m_scale, m_bias, HAS_SCALE,
                                              HAS_BIAS, x_ptr.dtype.element_ty), 0.0)
            x = rne_as(x, BF16)
            w = rne_as(tl.load(w_ptr + co * K + k).to(tl.float32), BF16)
            acc += x[:, None] * w[None, :]
    bias = rne_as(tl.load(b_ptr + co).to(tl.float32), BF16)
    y = rne_as(rne_as(acc, ROUND2) + bias[None, :], BF16)           # conv (+ bias)
    h = rne_as(layernorm_rows(y, lnw_ptr, lnb_ptr, eps, COUT, BF16, True), BF16)
    r64 = rows.to(tl.int64)
    if FUSE:
        # masks = final 1x1 conv (h), proj = pix_feat_proj(pix_feat), x = proj + masks
        cp = tl.arange(0, CP)
        px = tl.load(p_ptr + (bb * p_sb + ho * p_sh + wo * p_sw)[:, None]
                     + (cp * p_sc)[None, :], mask=rm[:, None], other=0.0)
        px = dot_operand(px, BF16, UPCAST)
        hd = dot_operand(h, BF16, UPCAST)
        for n0 in range(0, E, BLOCK_N):
            nn = n0 + tl.arange(0, BLOCK_N)
            wf = tl.load(wf_ptr + (nn * COUT)[None, :] + co[:, None])            # [COUT, BN]
            wp = tl.load(wp_ptr + (nn * CP)[None, :] + cp[:, None])              # [CP, BN]
            a1 = tl.dot(hd, dot_operand(wf, BF16, UPCAST), input_precision=PRECISION)
            a2 = tl.dot(px, dot_operand(wp, BF16, UPCAST), input_precision=PRECISION)
            b1 = rne_as(tl.load(bf_ptr + nn).to(tl.float32), BF16)
            b2 = rne_as(tl.load(bp_ptr + nn).to(tl.float32), BF16)
            s = rne_as(rne_as(a2, ROUND2) + b2[None, :], BF16) \
                + rne_as(rne_as(a1, ROUND2) + b1[None, :], BF16)
            tl.store(y_ptr + (r64 * E)[:, None] + nn[None, :],
                     cast_rne(s, y_ptr.dtype.element_ty), mask=rm[:, None])
    else:
        tl.store(y_ptr + (r64 * COUT)[:, None] + co[None, :],
                 cast_rne(h, y_ptr.dtype.element_ty), mask=rm[:, None])


def rows_block(rows: int, cap: int, least: int = 16, spread: bool = True) -> int:
    """Rows per program: the largest power of two in [least, cap] that still gives
    ``_PROGRAMS`` programs (``least`` when none does); without ``spread`` (Triton's
    interpreter, which runs programs one after another) the largest the rows fill."""
    block = max(least, cap)
    while block > least and (triton.cdiv(rows, block) < _PROGRAMS if spread
                             else block // 2 >= rows):
        block //= 2
    return block


def out_size(n: int, conv: torch.nn.Conv2d) -> int:
    """The convolution's output size along a dimension of size n."""
    k, s, p = conv.kernel_size[0], conv.stride[0], conv.padding[0]
    return (n + 2 * p - k) // s + 1


def conv_stage(x: torch.Tensor, size: Tuple[int, int, int], strides: Tuple[int, ...],
               conv: torch.nn.Conv2d, norm: torch.nn.Module, dtype: torch.dtype,
               prologue: Optional[MaskPrologue] = None,
               fuse: Optional[Tuple[torch.nn.Conv2d, torch.nn.Conv2d, torch.Tensor]] = None
               ) -> torch.Tensor:
    """One downsampler stage: x (the [B, Cin, H, W] values, ``size`` = (B, H, W), at
    ``strides`` (batch, channel, row, column), any dtype) ->
    gelu(norm(conv(x))) as channels-last [B, h, w, Cout] in ``dtype`` (the compute dtype),
    with ``prologue`` of x's values (logits) as the convolution's input (``mask_prologue.py``);
    with ``fuse`` = (final 1x1 conv, pix_feat_proj, pix_feat [B, Cp, h, w]) -> their
    proj(pix_feat) + final(...) as [B * h * w, E] in ``dtype``."""
    bsz, hgt, wid = size
    ho, wo = out_size(hgt, conv), out_size(wid, conv)
    cin, cout, ks = conv.in_channels, conv.out_channels, conv.kernel_size[0]
    n_rows = bsz * ho * wo
    bf16 = dtype == torch.bfloat16
    upcast = x.device.type != 'cuda'
    precision = 'ieee' if not bf16 or upcast else 'tf32'
    k = cin * ks * ks
    dot = cout >= 16 and k >= 16
    if fuse is None:
        y = torch.empty(bsz, ho, wo, cout, device=x.device, dtype=dtype)
        cap = 8192 if upcast else min(256, 8192 // cout)
        block_p = rows_block(n_rows, max(16, cap), spread=not upcast)
        final, proj, pix = conv, conv, x            # not read (FUSE off)
        e = cp = 16
        p_strides = (0, 0, 0, 0)
    else:
        final, proj, pix = fuse
        e, cp = final.out_channels, proj.in_channels
        y = torch.empty(n_rows, e, device=x.device, dtype=dtype)
        block_p = rows_block(n_rows, 16 if not upcast else 64, spread=not upcast)
        p_strides = pix.stride()
    pro = MaskPrologue(NONE) if prologue is None else prologue
    _stage_kernel[(triton.cdiv(n_rows, block_p),)](
        x, *strides, conv.weight, conv.bias, norm.weight, norm.bias, y, hgt, wid, ho, wo,
        n_rows, float(norm.eps), float(pro.scale), float(pro.bias), final.weight, final.bias,
        pix, *p_strides, proj.weight, proj.bias, COUT=cout, K=k, KS=ks,
        STRIDE=conv.stride[0], PAD=conv.padding[0], PROLOGUE=pro.mode,
        HAS_SCALE=pro.scale != 1.0, HAS_BIAS=pro.bias != 0.0, DOT=dot, FUSE=fuse is not None,
        E=e, CP=cp, BF16=bf16, ROUND2=bf16 and not upcast, UPCAST=upcast, PRECISION=precision,
        BLOCK_P=block_p, BLOCK_K=min(1024 if upcast else 64, next_pow2(k)), BLOCK_N=min(64, e),
        num_warps=4, num_stages=pipeline_stages(bf16, upcast, (conv, final, proj)))
    return y


def pipeline_stages(bf16: bool, upcast: bool, convs: Tuple[torch.nn.Conv2d, ...]) -> int:
    """Pipelined stages of the stage kernel's tiles: float32 operands (fp32 compute, or bf16
    compute on weights left float32: ``precast_weights`` off) in three stages need 274-288 KiB
    of shared memory, more than the H200's 227 (OutOfResources at capture, so the graphs fell
    back to sam2's modules); one stage fits. bf16 tiles: two stages beat three
    (tools/probes/launch_probe.py; bitwise the same output). The interpreter (CPU) has no such
    limit."""
    narrow = all(c.weight.dtype == torch.bfloat16 for c in convs)
    return 3 if upcast else 2 if bf16 and narrow else 1
