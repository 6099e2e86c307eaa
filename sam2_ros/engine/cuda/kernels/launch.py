"""Triton availability and a ``jit`` that runs each kernel on the tensors' device.

A kernel launched on CPU tensors runs in Triton's interpreter (the CPU tests), one launched
on CUDA tensors is compiled: the choice is made per launch from the first tensor argument,
not from ``TRITON_INTERPRET`` at import time, so one process can run both and the order in
which test modules import the kernels does not matter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import torch

if TYPE_CHECKING:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def triton_importable() -> bool:
    """True when ``import triton`` works (it is an optional dependency of the fast path)."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means: no fused kernels
        return False
    return True


class Kernel:
    """``kernel[grid](*args, **constexprs)`` as with ``triton.jit``; compiled for CUDA tensors,
    interpreted for CPU tensors. Both variants are built on first use."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.compiled = None
        self.interpreted = None
        functools.update_wrapper(self, fn)

    def variant(self, on_cpu: bool) -> Union[InterpretedFunction, JITFunction]:
        if on_cpu:
            if self.interpreted is None:
                from triton.runtime.interpreter import InterpretedFunction
                self.interpreted = InterpretedFunction(self.fn)
            return self.interpreted
        if self.compiled is None:
            import triton
            self.compiled = triton.runtime.jit.JITFunction(self.fn)
        return self.compiled

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            first = next(a for a in args if isinstance(a, torch.Tensor))
            if first.device.type == 'cuda':
                for record in _RECORDERS:
                    record.append(Launch(self, grid, args, kwargs))
                return self.variant(False)[grid](*args, **kwargs)
            from sam2_ros.engine.cuda.kernels import rounding     # imports triton
            with library_interpreted(), rounding.interpreted():
                return self.variant(True)[grid](*args, **kwargs)
        return launch


_INTERPRETED = {}
_RECORDERS: List[List['Launch']] = []


@dataclasses.dataclass
class Launch:
    """One compiled launch as it was made: ``kernel[grid](*args, **kwargs)`` launches it again
    (with other ``num_warps``/``num_stages`` or constexprs added to ``kwargs``)."""
    kernel: Kernel
    grid: Tuple[int, ...]
    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]


@contextlib.contextmanager
def recording() -> Iterator[List[Launch]]:
    """Within the block, every compiled (CUDA) launch of these kernels is appended to the
    yielded list, tensors by reference (tools/probes/launch_probe.py times each again under
    other launch settings). Costs nothing outside the block."""
    record: List[Launch] = []
    _RECORDERS.append(record)
    try:
        yield record
    finally:
        _RECORDERS.remove(record)


@contextlib.contextmanager
def library_interpreted() -> Iterator[None]:
    """Within the block, Triton's own jit'd library functions (``tl.sum``, ``tl.max``, ...),
    built as compiled functions when ``triton`` was imported without ``TRITON_INTERPRET``,
    run through the interpreter when an interpreted kernel calls them."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction
    original = JITFunction.__call__

    def call(fn, *args, **kwargs):
        if fn.fn not in _INTERPRETED:
            _INTERPRETED[fn.fn] = InterpretedFunction(fn.fn)
        return _INTERPRETED[fn.fn](*args, **kwargs)
    JITFunction.__call__ = call
    try:
        yield
    finally:
        JITFunction.__call__ = original


def jit(fn: Callable) -> Kernel:
    """Decorator: a ``Kernel`` around a Triton kernel function (no nested jit helpers: the
    interpreter and the compiler each need their own copy of those)."""
    return Kernel(fn)


def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def dummy_like(t: Optional[torch.Tensor], ref: torch.Tensor) -> torch.Tensor:
    """``t`` or, for an absent optional argument, ``ref`` (never read: a constexpr flag says
    the argument is absent)."""
    return ref if t is None else t
