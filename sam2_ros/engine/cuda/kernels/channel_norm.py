"""sam2's ``LayerNorm2d`` (+ exact GELU) over the channels of a tile of pixels, inside a kernel.

One place for the normalisation math of every kernel that computes a LayerNorm2d: the
one-module kernel of ``layernorm2d.py`` (a [channels, pixels] tile loaded from memory, channels
padded to a power of two) and the convolution kernels of ``mask_downsampler.py`` and
``cx_block.py`` (a [pixels, channels] tile held in registers, ``layernorm_rows``). Under
autocast LayerNorm2d's input is a bf16 convolution output and each of its seven ops (mean,
sub, pow, mean, add, sqrt, div) rounds to bf16 (to the input's dtype in general); the affine
with the float32 parameters (and the GELU after it) is float32.
"""

import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.rounding import cast_rne


@triton.jit
def gelu_erf(y):
    """nn.GELU (approximate='none') of float32 ``y``, in float32: torch's formula
    (x * 0.5 * (1 + erf(x * M_SQRT1_2))), which computes bf16 inputs in float32 too."""
    return 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))


@triton.jit
def layernorm2d_math(x, w_ptr, b_ptr, c, valid, c_valid, eps, C, AXIS: tl.constexpr,
                     DT: tl.constexpr, MASKED: tl.constexpr, GELU: tl.constexpr):
    """x float32 (values of DT), channels along AXIS (0 or 1) of a 2-D tile -> LayerNorm2d
    over them, float32, each op rounded to DT as torch rounds it; the affine's parameters are
    read at w_ptr + c, b_ptr + c. C: the channel count (the mean's divisor). MASKED: the tile
    pads the channels (``valid`` marks the tile's real entries, ``c_valid`` the real ones of
    c; the padding of x is 0); else those two are unused."""
    u = tl.expand_dims(cast_rne(tl.sum(x, axis=AXIS) / C, DT).to(tl.float32), AXIS)  # mean
    d = cast_rne(x - u, DT).to(tl.float32)                                # x - u
    if MASKED:
        d = tl.where(valid, d, 0.0)
    sq = cast_rne(d * d, DT).to(tl.float32)                               # .pow(2)
    s = cast_rne(tl.sum(sq, axis=AXIS) / C, DT).to(tl.float32)            # .mean(1)
    r = cast_rne(tl.sqrt(cast_rne(s + eps, DT).to(tl.float32)), DT).to(tl.float32)
    xn = cast_rne(d / tl.expand_dims(r, AXIS), DT).to(tl.float32)         # (x - u) / sqrt
    if MASKED:
        w = tl.load(w_ptr + c, mask=c_valid, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + c, mask=c_valid, other=0.0).to(tl.float32)
    else:
        w = tl.load(w_ptr + c).to(tl.float32)
        b = tl.load(b_ptr + c).to(tl.float32)
    y = tl.expand_dims(w, 1 - AXIS) * xn
    y = y + tl.expand_dims(b, 1 - AXIS)
    if GELU:
        y = gelu_erf(y)
    return y


@triton.jit
def layernorm_rows(x, w_ptr, b_ptr, eps, C: tl.constexpr, BF16: tl.constexpr,
                   GELU: tl.constexpr):
    """x [P, C] float32 (values of the compute dtype) -> LayerNorm2d over axis 1, float32."""
    c = tl.arange(0, C)
    if BF16:
        y = layernorm2d_math(x, w_ptr, b_ptr, c, x, c, eps, C, 1, tl.bfloat16, False, GELU)
    else:
        y = layernorm2d_math(x, w_ptr, b_ptr, c, x, c, eps, C, 1, tl.float32, False, GELU)
    return y
