"""What dtype sam2's code would produce at a point, under the autocast state of the call.

The fused modules write each intermediate in the dtype its consumer computes in: a tensor only
Linears read is written in autocast's dtype (they would cast it), a LayerNorm's output read by
anything else in the dtype autocast gives it, otherwise in the dtype of plain type promotion.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F


def autocast_dtype(device: torch.device) -> Optional[torch.dtype]:
    """The lower-precision dtype of the active autocast on ``device``'s type, or None."""
    kind = device.type
    if not torch.is_autocast_enabled(kind):
        return None
    return torch.get_autocast_dtype(kind)


def linear_input(x: torch.Tensor, natural: torch.dtype) -> torch.dtype:
    """The dtype a Linear computes in on a value of dtype ``natural`` (on x's device)."""
    return autocast_dtype(x.device) or natural


def norm_output(x: torch.Tensor, natural: torch.dtype) -> torch.dtype:
    """LayerNorm's output dtype for an input of dtype ``natural`` on x's device: float32
    under CUDA autocast (layer_norm is on its float32 list); CPU autocast has no such entry,
    so there (the CPU tests) it keeps the input's dtype."""
    if x.device.type == 'cuda' and autocast_dtype(x.device):
        return torch.float32
    return natural


def weight_and_bias(linear: torch.nn.Linear,
                    dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """(weight, bias) of ``linear`` in ``dtype``: the parameters themselves when they have it
    (precast weights), else a cast copy, as autocast would make."""
    w, b = linear.weight, linear.bias
    return (w if w.dtype == dtype else w.to(dtype)), (b if b.dtype == dtype else b.to(dtype))


def relu_linear(linear: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """relu(linear(x)) for x [..., K] already in the Linear's compute dtype: one GEMM with a
    bias + ReLU epilogue (cuBLASLt) where torch has one, the same values as the two ops."""
    w, b = weight_and_bias(linear, x.dtype)
    if not x.is_contiguous():
        return F.relu(F.linear(x, w, b))
    out = torch._addmm_activation(b, x.reshape(-1, x.shape[-1]), w.t())
    return out.view(*x.shape[:-1], w.shape[0])


def gelu_mlp(mlp: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A 2-layer GELU ``sam2_utils.MLP`` on x [..., C] in its Linears' compute dtype, with the
    GELU in the first GEMM's epilogue (cuBLASLt's bias + GELU): no separate elementwise pass
    over the hidden activations. cuBLASLt's GELU is the tanh approximation, applied to the
    float32 accumulator before rounding, where sam2's exact GELU reads the rounded bf16 product:
    not bitwise; the two differ by far less than a bf16 step (``FUSED_OPT_IN``)."""
    first, second = mlp.layers
    w, b = weight_and_bias(first, x.dtype)
    hidden = torch._addmm_activation(b, x.reshape(-1, x.shape[-1]), w.t(), use_gelu=True)
    return second(hidden).view(*x.shape[:-1], second.out_features)


def is_gelu_mlp(mlp: torch.nn.Module) -> bool:
    """A sam2 MLP ``gelu_mlp`` computes: two Linears with biases, exact GELU, no sigmoid."""
    layers = getattr(mlp, 'layers', ())
    act = getattr(mlp, 'act', None)
    return (len(layers) == 2 and all(isinstance(m, torch.nn.Linear) and m.bias is not None
                                     for m in layers)
            and type(act) is torch.nn.GELU and act.approximate == 'none'
            and not getattr(mlp, 'sigmoid_output', False))
