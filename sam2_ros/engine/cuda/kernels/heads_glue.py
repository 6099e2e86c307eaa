"""The outputs of sam2's ``SAM2Base._forward_sam_heads`` after its mask decoder and object
pointer projection, in one kernel (``sam_glue.py`` calls it).

sam2 (sam2/modeling/sam2_base.py) runs some fifteen kernels there per frame: the object score
test, the ``NO_OBJ_SCORE`` ``torch.where`` on the masks, their float32 cast, the bilinear
upsampling to the image size, the IoU argmax and three gathers of the best mask and token, the
object-pointer gating (``is_obj_appearing``, ``no_obj_ptr``). Here one program per
(object, mask, block of high-res pixels) computes:

* the best mask (first maximum IoU, NaN first, as ``torch.argmax``) when selecting;
* its block of high-res pixels: ``F.interpolate(bilinear, align_corners=False)``'s arithmetic
  in float32 (source index ``scale * (dst + 0.5) - 0.5`` clamped at 0, ``scale = in / out``,
  weights ``1 - l, l``, rows outside in) on the masks after the ``where`` and the cast, written
  to the multimask output and, for the best mask, to the selected one;
* a block of low-res pixels (the ``where`` and the cast: bitwise), likewise;
* programs (pixel block 0, mask 0): the object pointer, read from the projected token of the
  best mask (the projection ran on every token: ``sam_glue.py``), gated in float32 as sam2
  gates it (``lambda * ptr + (1 - lambda) * no_obj_ptr``, lambda = score > 0).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne

NO_OBJ_SCORE = -1024.0      # sam2.modeling.sam2_base.NO_OBJ_SCORE


@jit
def _heads_glue_kernel(m_ptr, m_sb, m_sm, m_sh, m_sw, s_ptr, s_sb, i_ptr, i_sb, i_sm,
                       p_ptr, p_sb, p_st, n_ptr, lo_ptr, hi_ptr, los_ptr, his_ptr, o_ptr,
                       H, W, HO, WO, scale_h, scale_w, C, no_obj,
                       M: tl.constexpr, PRED: tl.constexpr, SELECT: tl.constexpr,
                       TOKEN_SELECT: tl.constexpr, FIXED: tl.constexpr,
                       BLOCK: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_C: tl.constexpr):
    chunk = tl.program_id(0)
    bm = tl.program_id(1)
    b = (bm // M).to(tl.int64)
    m = bm % M
    best = 0
    if SELECT:       # torch.argmax: the first maximum; a NaN beats everything, the first one
        best_v = tl.load(i_ptr + b * i_sb).to(tl.float32)
        for j in tl.static_range(1, M):
            v = tl.load(i_ptr + b * i_sb + j * i_sm).to(tl.float32)
            take = (v > best_v) | ((v != v) & (best_v == best_v))
            best = tl.where(take, j, best)
            best_v = tl.where(take, v, best_v)
    appear = 1.0
    if PRED:
        appear = (tl.load(s_ptr + b * s_sb).to(tl.float32) > 0).to(tl.float32)
    src = m_ptr + b * m_sb + m * m_sm
    is_best = m == best
    # high-res block: bilinear from the low-res masks after where + float
    offs = chunk * BLOCK + tl.arange(0, BLOCK)
    om = offs < HO * WO
    oy = offs // WO
    ox = offs % WO
    sy = tl.maximum(scale_h * (oy.to(tl.float32) + 0.5) - 0.5, 0.0)
    sx = tl.maximum(scale_w * (ox.to(tl.float32) + 0.5) - 0.5, 0.0)
    y0 = tl.minimum(sy.to(tl.int32), H - 1)
    x0 = tl.minimum(sx.to(tl.int32), W - 1)
    y1 = y0 + (y0 < H - 1).to(tl.int32)
    x1 = x0 + (x0 < W - 1).to(tl.int32)
    ly1 = sy - y0.to(tl.float32)
    lx1 = sx - x0.to(tl.float32)
    ly0 = 1.0 - ly1
    lx0 = 1.0 - lx1
    v00 = tl.load(src + y0 * m_sh + x0 * m_sw, mask=om, other=0.0).to(tl.float32)
    v01 = tl.load(src + y0 * m_sh + x1 * m_sw, mask=om, other=0.0).to(tl.float32)
    v10 = tl.load(src + y1 * m_sh + x0 * m_sw, mask=om, other=0.0).to(tl.float32)
    v11 = tl.load(src + y1 * m_sh + x1 * m_sw, mask=om, other=0.0).to(tl.float32)
    if PRED:
        v00 = tl.where(appear > 0, v00, no_obj)
        v01 = tl.where(appear > 0, v01, no_obj)
        v10 = tl.where(appear > 0, v10, no_obj)
        v11 = tl.where(appear > 0, v11, no_obj)
    hi = ly0 * (lx0 * v00 + lx1 * v01) + ly1 * (lx0 * v10 + lx1 * v11)
    plane_hi = HO * WO
    tl.store(hi_ptr + bm.to(tl.int64) * plane_hi + offs, hi, mask=om)
    if SELECT:
        tl.store(his_ptr + b * plane_hi + offs, hi, mask=om & is_best)
    # low-res block: where + float
    lo_offs = chunk * BLOCK_L + tl.arange(0, BLOCK_L)
    lm = lo_offs < H * W
    lo = tl.load(src + (lo_offs // W) * m_sh + (lo_offs % W) * m_sw, mask=lm,
                 other=0.0).to(tl.float32)
    if PRED:
        lo = tl.where(appear > 0, lo, no_obj)
    tl.store(lo_ptr + bm.to(tl.int64) * (H * W) + lo_offs, lo, mask=lm)
    if SELECT:
        tl.store(los_ptr + b * (H * W) + lo_offs, lo, mask=lm & is_best)
    # the object pointer of object b
    if (chunk == 0) & (m == 0):
        cc = tl.arange(0, BLOCK_C)
        cm = cc < C
        tok = 0
        if TOKEN_SELECT:
            tok = best
        ptr = tl.load(p_ptr + b * p_sb + tok * p_st + cc, mask=cm, other=0.0).to(tl.float32)
        if PRED:
            if FIXED:
                ptr = appear * ptr
            ptr = ptr + (1.0 - appear) * tl.load(n_ptr + cc, mask=cm, other=0.0).to(tl.float32)
        tl.store(o_ptr + b * C + cc, cast_rne(ptr, o_ptr.dtype.element_ty), mask=cm)


class HeadsOutputs(NamedTuple):
    """``_forward_sam_heads``' outputs but the IoUs and the score (the decoder's own)."""

    low_res_multimasks: torch.Tensor    # [B, M, h, w] float32
    high_res_multimasks: torch.Tensor   # [B, M, S, S] float32
    low_res_masks: torch.Tensor         # [B, 1, h, w] float32 (the multimasks when M = 1)
    high_res_masks: torch.Tensor        # [B, 1, S, S] float32
    obj_ptr: torch.Tensor               # [B, C]


def heads_outputs(masks: torch.Tensor, ious: torch.Tensor, score: torch.Tensor,
                  projected: torch.Tensor, token_strides: tuple, token_select: bool,
                  no_obj_ptr: Optional[torch.Tensor], image_size: int, multimask: bool,
                  fixed_no_obj_ptr: bool, ptr_dtype: torch.dtype) -> HeadsOutputs:
    """masks [B, M, h, w] (the decoder's, any float dtype and strides), ious [B, M], score
    [B, 1] logits, projected: the object-pointer projection's output whose row (b, t) starts
    at ``b * token_strides[0] + t * token_strides[1]`` (element strides; its channels
    contiguous), t the best mask when ``token_select`` else 0; no_obj_ptr [1, C] (None:
    sam2's ``pred_obj_scores`` off, no score test) -> sam2's outputs, the pointer in
    ``ptr_dtype``."""
    bsz, n_masks, h, w = masks.shape
    size = image_size
    dev = masks.device
    c = projected.shape[-1]
    low = torch.empty(bsz, n_masks, h, w, device=dev, dtype=torch.float32)
    high = torch.empty(bsz, n_masks, size, size, device=dev, dtype=torch.float32)
    low_sel, high_sel = (low, high) if not multimask else (
        torch.empty(bsz, 1, h, w, device=dev, dtype=torch.float32),
        torch.empty(bsz, 1, size, size, device=dev, dtype=torch.float32))
    ptr = torch.empty(bsz, c, device=dev, dtype=ptr_dtype)
    on_cpu = dev.type != 'cuda'
    # one program per plane in the interpreter (it runs programs one after another)
    block = min(next_pow2(size * size), 1 << 16) if on_cpu else 1024
    chunks = triton.cdiv(size * size, block)
    block_l = next_pow2(triton.cdiv(h * w, chunks))
    pred = no_obj_ptr is not None
    # torch's scale: in / out in float32 (correctly rounded, as its float32 division)
    scale_h = float(np.float32(h) / np.float32(size))
    scale_w = float(np.float32(w) / np.float32(size))
    _heads_glue_kernel[(chunks, bsz * n_masks)](
        masks, *masks.stride(), score, score.stride(0), ious, *ious.stride(), projected,
        *token_strides, no_obj_ptr if pred else projected, low, high, low_sel, high_sel, ptr,
        h, w, size, size, scale_h, scale_w, c, NO_OBJ_SCORE, M=n_masks, PRED=pred,
        SELECT=multimask, TOKEN_SELECT=token_select, FIXED=fixed_no_obj_ptr, BLOCK=block,
        BLOCK_L=block_l, BLOCK_C=next_pow2(c), num_warps=4)
    return HeadsOutputs(low, high, low_sel, high_sel, ptr)
