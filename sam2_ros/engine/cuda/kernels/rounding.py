"""Float32 -> bf16 rounding inside our kernels, identical on the GPU and in the interpreter.

The GPU converts float32 to bf16 rounding to nearest even; Triton's CPU interpreter truncates.
Rounding by integer arithmetic first (the rounded value is exact in bf16, so the final
conversion is exact either way) gives the same bits on both, so the CPU tests check the
rounding the GPU does.
"""

import triton
import triton.language as tl


@triton.jit
def cast_rne(x, DTYPE: tl.constexpr):
    """float32 ``x`` converted to DTYPE, rounded to nearest even (finite values)."""
    if DTYPE == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        x = ((bits >> 16) << 16).to(tl.float32, bitcast=True)
    return x.to(DTYPE)
