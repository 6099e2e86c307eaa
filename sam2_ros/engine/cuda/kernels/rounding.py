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


@triton.jit
def rne_as(x, BF16: tl.constexpr):
    """float32 ``x`` rounded to bf16 (nearest even) and back to float32 when BF16, else ``x``:
    the value a bf16 op would write, kept in float32 for the arithmetic that follows."""
    if BF16:
        x = cast_rne(x, tl.bfloat16).to(tl.float32)
    return x


@triton.jit
def dot_operand(x, BF16: tl.constexpr, UPCAST: tl.constexpr):
    """A loaded tile as a ``tl.dot`` operand in the compute dtype (bf16 when BF16, rounded as
    autocast's cast rounds; else float32); with UPCAST as float32 holding those values (Triton's
    interpreter multiplies bf16 operands of tl.dot as bit patterns: ``mlp_heads.py``)."""
    if BF16:
        if x.dtype != tl.bfloat16:
            x = cast_rne(x.to(tl.float32), tl.bfloat16)
        if UPCAST:
            x = x.to(tl.float32)
    else:
        x = x.to(tl.float32)
    return x
