"""The object pointers' temporal position encoding in one kernel: the fused copy's 'pointer_pos'
group (``fused.py``).

sam2 (``SAM2Base._prepare_memory_conditioned_features``, which ``step.memory_tokens`` redoes)
encodes each object pointer's signed temporal distance as
``obj_ptr_tpos_proj(get_1d_sine_pe(dist / t_diff_max, dim))`` and repeats the result over the
pointer's ``C / Cm`` memory tokens: per step a division, the sine encoding (a division by its
frequencies, sin, cos, a cat), autocast's cast of it, the Linear (addmm) and the copy into the
memory's positional encoding, eight kernels for a few dozen numbers. Here one program per 16
(pointer, object) rows (tl.dot's smallest M) does all of it and writes each row straight into
its ``split`` token rows of memory_pos (the strided view ``memory_tokens`` fills).

Numerics are sam2's, op for op in float32, as torch computes them on the tensors' device:
dist / t_diff_max by a Python number, which torch's CUDA kernel computes as dist times the
float32 reciprocal (``div_true_kernel_cuda``: a CPU scalar divisor) and its CPU kernel as an
IEEE division; then pos / dim_t, a division of tensors, IEEE on both (``tl.math.div_rn``:
Triton's ``/`` on float32 is an approximate division on CUDA); the frequencies dim_t computed
once by torch (``constants.sine_frequencies``); sin and cos by libdevice on CUDA (``sinf`` /
``cosf``, what torch's CUDA kernels call: the encoding is torch's, bit for bit; the interpreter
has no libdevice, there numpy's, within an ulp of torch's CPU ones). The encoding, weight and
bias are cast to the Linear's compute dtype (autocast's, rounded to nearest even as its casts
round: ``rounding.py``), the products summed in float32 (in another order than the GEMM's) and
the result rounded to that dtype, as the Linear writes it, then stored in memory_pos's dtype.

sam2's ops run instead (``PointerPos.dtype`` is None), decided per call from types, flags and
dtypes, never from values: a projection that is not a ``torch.nn.Linear`` with a bias from
``hidden_dim`` to ``mem_dim`` (an ``Identity`` where ``proj_tpos_enc_in_obj_ptrs`` is off);
distances of another dtype than float32 / int32 / int64 (int with a default dtype other than
float32); an autocast other than bf16; weights other than float32 without autocast; autograd
recording the weights; another device than CPU or CUDA.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from sam2_ros.engine import step
from sam2_ros.engine.cuda.kernels.constants import Store, sine_frequencies
from sam2_ros.engine.cuda.kernels.dtypes import linear_input
from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne, dot_operand, rne_as
from sam2_ros.engine.cuda.kernels.swap import with_children

TEMPERATURE = 10000     # get_1d_sine_pe's default, with which sam2 and memory_tokens call it
_BLOCK_R = 16           # (pointer, object) rows per program: tl.dot's smallest M
_DISTANCES = (torch.float32, torch.int32, torch.int64)


@jit
def _pointer_pos_kernel(d_ptr, d_sp, d_sb, f_ptr, w_ptr, w_sn, w_sk, b_ptr, o_ptr,
                        o_sp, o_ss, o_sb, o_sc, rows, batch, t_arg, SPLIT: tl.constexpr,
                        HALF: tl.constexpr, N: tl.constexpr, BLOCK_K: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr, BF16: tl.constexpr,
                        PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                        RECIPROCAL: tl.constexpr, LIBDEVICE: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    rm = r < rows
    p = (r // batch).to(tl.int64)
    b = (r % batch).to(tl.int64)
    # pos [BLOCK_R] = dist / t_diff_max as torch divides by a Python number on the device
    # (RECIPROCAL: t_arg = 1 / t_diff_max), pe [BLOCK_R, BLOCK_K] = pos / dim_t (float32,
    # IEEE; div_rn does not broadcast: operands of one shape)
    dist = tl.load(d_ptr + p * d_sp + b * d_sb, mask=rm, other=0).to(tl.float32)
    if RECIPROCAL:
        pos = dist * t_arg
    else:
        pos = tl.math.div_rn(dist, tl.full([BLOCK_R], t_arg, tl.float32))
    k = tl.arange(0, BLOCK_K)
    km = k < HALF
    freq = tl.load(f_ptr + k, mask=km, other=1.0)
    pe = tl.math.div_rn(tl.broadcast_to(pos[:, None], (BLOCK_R, BLOCK_K)),
                        tl.broadcast_to(freq[None, :], (BLOCK_R, BLOCK_K)))
    if LIBDEVICE:
        sin = libdevice.sin(pe)
        cos = libdevice.cos(pe)
    else:
        sin = tl.sin(pe)
        cos = tl.cos(pe)
    # padded frequencies multiply zero weights; zeroed so that a NaN there cannot leak in
    sin = dot_operand(tl.where(km[None, :], sin, 0.0), BF16, UPCAST)
    cos = dot_operand(tl.where(km[None, :], cos, 0.0), BF16, UPCAST)
    # weight [N, 2 HALF] as stored: columns [0, HALF) weigh the sines, [HALF, 2 HALF) the
    # cosines (sam2's cat order); read transposed, [BLOCK_K, BLOCK_N]
    n = tl.arange(0, BLOCK_N)
    nm = n < N
    wm = km[:, None] & nm[None, :]
    w_at = w_ptr + (n.to(tl.int64) * w_sn)[None, :] + (k.to(tl.int64) * w_sk)[:, None]
    w_sin = dot_operand(tl.load(w_at, mask=wm, other=0.0), BF16, UPCAST)
    w_cos = dot_operand(tl.load(w_at + HALF * w_sk, mask=wm, other=0.0), BF16, UPCAST)
    acc = tl.dot(sin, w_sin, input_precision=PRECISION)
    acc = tl.dot(cos, w_cos, acc, input_precision=PRECISION)
    bias = dot_operand(tl.load(b_ptr + n, mask=nm, other=0.0), BF16, True).to(tl.float32)
    y = rne_as(acc + bias[None, :], BF16)              # the Linear's output value
    y = cast_rne(y, o_ptr.dtype.element_ty)
    # each pointer's row goes to its `split` tokens (sam2's repeat_interleave)
    dst = o_ptr + (p * o_sp + b * o_sb)[:, None] + (n.to(tl.int64) * o_sc)[None, :]
    om = rm[:, None] & nm[None, :]
    for t in tl.static_range(SPLIT):
        tl.store(dst + t * o_ss, y, mask=om)


def encodes(model: torch.nn.Module) -> bool:
    """Whether ``model``'s pointer encoding has the structure the kernel computes: sam2's
    ``proj_tpos_enc_in_obj_ptrs`` with a biased Linear hidden_dim -> mem_dim."""
    proj = getattr(model, 'obj_ptr_tpos_proj', None)
    return (bool(getattr(model, 'proj_tpos_enc_in_obj_ptrs', False))
            and type(proj) is torch.nn.Linear and proj.bias is not None
            and proj.in_features % 2 == 0
            and (proj.in_features, proj.out_features) == (model.hidden_dim, model.mem_dim))


class PointerPos:
    """What the fused copy carries as ``step.POINTER_POS``: ``dtype`` says whether the kernel
    computes a call (and the dtype sam2's result would have), calling it writes the encoding.
    Holds the frequencies per (dim, device), computed once (read-only)."""

    def __init__(self):
        self.store = Store()

    def dtype(self, model: torch.nn.Module, dist: torch.Tensor) -> Optional[torch.dtype]:
        """The dtype of ``obj_ptr_tpos_proj``'s output on the encoding of dist [n_p, B] when
        the kernel computes it, else None (sam2's ops run; module docstring)."""
        if not encodes(model) or dist.dim() != 2 or dist.dtype not in _DISTANCES:
            return None
        if dist.dtype != torch.float32 and torch.get_default_dtype() != torch.float32:
            return None                 # int / int divides in the default dtype
        proj = model.obj_ptr_tpos_proj
        if dist.device != proj.weight.device or dist.device.type not in ('cpu', 'cuda'):
            return None
        if torch.is_grad_enabled() and proj.weight.requires_grad:
            return None
        compute = linear_input(dist, torch.float32)        # the sine encoding is float32
        if compute == torch.bfloat16:
            return compute              # autocast casts weight and bias, whatever they are
        if compute == torch.float32 and proj.weight.dtype == proj.bias.dtype == torch.float32:
            return compute
        return None

    def __call__(self, model: torch.nn.Module, dist: torch.Tensor, t_diff_max: float,
                 out: torch.Tensor, dtype: torch.dtype) -> None:
        """Writes obj_ptr_tpos_proj(get_1d_sine_pe(dist / t_diff_max)) of dist [n_p, B] into
        out [n_p, split, B, Cm] (any strides and float dtype, memory_pos's pointer rows), each
        pointer's row into its split tokens; t_diff_max a Python number, as memory_tokens
        divides by it. ``dtype``: what ``dtype(model, dist)`` returned (not None)."""
        proj = model.obj_ptr_tpos_proj
        dim = proj.in_features
        dev = dist.device
        freqs = self.store.get(('dim_t', dim, dev),
                               lambda: sine_frequencies(dim, TEMPERATURE, dev))   # [dim // 2]
        n_p, split, batch, width = out.shape
        rows = n_p * batch
        if rows == 0 or split == 0:
            return
        bf16 = dtype == torch.bfloat16
        on_cpu = dev.type != 'cuda'
        # Triton's interpreter (triton 3.6) multiplies bf16 tl.dot operands as their bit
        # patterns: there they go in as float32 holding the bf16 values (the same products)
        upcast = on_cpu
        precision = 'ieee' if not bf16 or upcast else 'tf32'       # float32: no TF32
        # torch's CUDA division by a CPU scalar multiplies by its float32 reciprocal, rounded
        # on the host (div_true_kernel_cuda); its CPU kernel divides
        with np.errstate(divide='ignore'):
            t_arg = float(np.float32(1.0) / np.float32(t_diff_max)) if not on_cpu else \
                float(t_diff_max)
        w = proj.weight                                            # [Cm, dim]
        _pointer_pos_kernel[(triton.cdiv(rows, _BLOCK_R),)](
            dist, *dist.stride(), freqs, w, *w.stride(), proj.bias, out, *out.stride(),
            rows, batch, t_arg, SPLIT=split, HALF=dim // 2, N=width,
            BLOCK_K=max(16, next_pow2(dim // 2)), BLOCK_N=max(16, next_pow2(width)),
            BLOCK_R=_BLOCK_R, BF16=bf16, PRECISION=precision, UPCAST=upcast,
            RECIPROCAL=not on_cpu, LIBDEVICE=not on_cpu, num_warps=8)   # launch_probe.py


def with_pointer_pos(model: torch.nn.Module) -> torch.nn.Module:
    """A shallow copy of ``model`` carrying a ``PointerPos`` as ``step.POINTER_POS``, or
    ``model`` itself where its pointer encoding has another structure (``encodes``)."""
    if not encodes(model):
        return model
    twin = with_children(model)
    setattr(twin, step.POINTER_POS, PointerPos())
    return twin
