"""sam2's ``LayerNorm2d`` (+ exact GELU) over the channels of a tile of pixels, inside a kernel.

The same operations as ``layernorm2d.py``'s kernel, on a [pixels, channels] tile held in
registers by a convolution kernel (``mask_downsampler.py``, ``cx_block.py``) instead of on a
tensor in memory: under autocast LayerNorm2d's input is a bf16 convolution output and each of
its seven ops (mean, sub, pow, mean, add, sqrt, div) rounds to bf16; the affine with the float32
parameters (and the GELU after it) is float32.
"""

import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.rounding import rne_as


@triton.jit
def layernorm_rows(x, w_ptr, b_ptr, eps, C: tl.constexpr, BF16: tl.constexpr,
                   GELU: tl.constexpr):
    """x [P, C] float32 (values of the compute dtype) -> LayerNorm2d over axis 1, float32."""
    c = tl.arange(0, C)
    u = rne_as(tl.sum(x, axis=1) / C, BF16)                             # x.mean(1)
    d = rne_as(x - u[:, None], BF16)                                    # x - u
    sq = rne_as(d * d, BF16)                                            # .pow(2)
    s = rne_as(tl.sum(sq, axis=1) / C, BF16)                            # .mean(1)
    r = rne_as(tl.sqrt(rne_as(s + eps, BF16)), BF16)                    # sqrt(s + eps)
    xn = rne_as(d / r[:, None], BF16)                                   # (x - u) / sqrt
    w = tl.load(w_ptr + c).to(tl.float32)
    b = tl.load(b_ptr + c).to(tl.float32)
    y = w[None, :] * xn
    y = y + b[None, :]
    if GELU:
        y = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    return y
