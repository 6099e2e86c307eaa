"""The masks sam2's memory encoder reads, made from mask logits where the first downsampler
stage loads them (``mask_downsampler.py``): no kernel of their own.

sam2's ``SAM2Base._encode_new_memory`` turns the high-res mask logits into the encoder's input
with two to three elementwise kernels, one rounding each: ``sigmoid`` (or, for a memory
encoded from a point prompt's output with ``binarize_mask_from_pts_for_mem_enc``, ``(x > 0)``
as float32), times ``sigmoid_scale_for_mem_enc``, plus ``sigmoid_bias_for_mem_enc``; the
memory encoder's own ``skip_mask_sigmoid=False`` is the sigmoid alone. Here the same ops on
each loaded value, rounded where sam2's ops round: in the logits' dtype (the sigmoid keeps it,
so do a multiply and an add by Python scalars), in float32 after a binarization. The
convolution's zero padding comes after them, as sam2 pads the finished masks.
"""

from __future__ import annotations

from typing import NamedTuple

import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.rounding import cast_rne

NONE, SIGMOID, BINARIZE = 0, 1, 2


class MaskPrologue(NamedTuple):
    """What the first stage applies to the logits it loads: ``mode`` (SIGMOID or BINARIZE),
    then ``* scale`` unless it is 1, then ``+ bias`` unless it is 0 (sam2 skips those too)."""

    mode: int
    scale: float = 1.0
    bias: float = 0.0


@triton.jit
def mask_prologue(x, MODE: tl.constexpr, scale, bias, HAS_SCALE: tl.constexpr,
                  HAS_BIAS: tl.constexpr, DT: tl.constexpr):
    """float32 ``x`` (logits of dtype DT, upcast) -> the mask value sam2 computes, in
    float32: each op rounded to DT, or to float32 after a binarization."""
    if MODE == 2:
        x = (x > 0).to(tl.float32)
        if HAS_SCALE:
            x = x * scale
        if HAS_BIAS:
            x = x + bias
    else:
        x = cast_rne(tl.sigmoid(x), DT).to(tl.float32)
        if HAS_SCALE:
            x = cast_rne(x * scale, DT).to(tl.float32)
        if HAS_BIAS:
            x = cast_rne(x + bias, DT).to(tl.float32)
    return x
