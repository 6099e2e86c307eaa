"""Float32 -> bf16 rounding inside our kernels, identical on the GPU and in the interpreter.

The GPU converts float32 to bf16 rounding to nearest even; Triton's CPU interpreter truncates.
In the interpreter the value is rounded by integer arithmetic first (the rounded value is
exact in bf16, so the final conversion is exact), so the CPU tests check the rounding the GPU
does. A compiled kernel converts with the GPU's one instruction instead: the integer steps
cost six instructions per value, in loops such as the memory encoder's depthwise convolution
(a conversion per tap) that made those kernels instruction-bound. Both give the same bits for
every finite value and infinity (the GPU tests compare the kernels bitwise against sam2's
modules, which convert in hardware too).
"""

import contextlib
import threading
from typing import Iterator

import triton
import triton.language as tl

# False while an interpreted kernel runs (``interpreted``): the interpreter reads this global
# at run time, a compiled kernel at compile time (Triton keys its cache on the value and checks
# that it is unchanged at each launch: ``interpreted`` restores it before any)
HARDWARE_RNE = tl.constexpr(True)
_LOCK = threading.Lock()
_DEPTH = [0]


@contextlib.contextmanager
def interpreted() -> Iterator[None]:
    """Within the block (an interpreted launch, ``launch.Kernel``), ``cast_rne`` rounds by
    integer arithmetic; reentrant and shared by threads (the last one out restores it)."""
    global HARDWARE_RNE
    with _LOCK:
        _DEPTH[0] += 1
        HARDWARE_RNE = tl.constexpr(False)
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH[0] -= 1
            if _DEPTH[0] == 0:
                HARDWARE_RNE = tl.constexpr(True)


@triton.jit
def cast_rne(x, DTYPE: tl.constexpr):
    """float32 ``x`` converted to DTYPE, rounded to nearest even (finite values)."""
    if DTYPE == tl.bfloat16:
        if not HARDWARE_RNE:
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
