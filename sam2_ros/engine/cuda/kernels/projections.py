"""An attention's q, k and v projections as fewer GEMMs where their inputs are one tensor
(the fused two-way transformer's and memory attention's self-attentions): the same products
as sam2's three Linears, within a GEMM's rounding."""

from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F


class Projections:
    """An attention's q, k, v projections with their weights concatenated once, for inputs
    that are one tensor: q = k = v (one GEMM for the three) or q = k (one GEMM for both, one
    for v). Other inputs, or projections of different input widths (a cross-attention to
    64-channel memories), run the three Linears."""

    def __init__(self, attn: torch.nn.Module):
        self.attn = attn
        ps = (attn.q_proj, attn.k_proj, attn.v_proj)
        self.qkv = self.qk = None
        with torch.no_grad():
            if ps[0].in_features == ps[1].in_features:
                self.qk = (torch.cat([p.weight for p in ps[:2]]),
                           torch.cat([p.bias for p in ps[:2]]))
                if ps[1].in_features == ps[2].in_features:
                    self.qkv = (torch.cat([p.weight for p in ps]),
                                torch.cat([p.bias for p in ps]))

    def __call__(self, q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = self.attn
        if q is k and k is v and self.qkv is not None:
            return _linear(q, *self.qkv).split(a.internal_dim, dim=-1)
        if q is k and self.qk is not None:
            qp, kp = _linear(q, *self.qk).split(a.internal_dim, dim=-1)
            return qp, kp, a.v_proj(v)
        return a.q_proj(q), a.k_proj(k), a.v_proj(v)


def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """F.linear in x's dtype (x is already in the dtype the Linears compute in)."""
    if w.dtype != x.dtype:
        w, b = w.to(x.dtype), b.to(x.dtype)
    return F.linear(x, w, b)
