"""Attention projections as fewer GEMMs where their inputs are shared: an attention's q, k and
v where those inputs are one tensor (the fused two-way transformer's and memory attention's
self-attentions), and the keys and values of several attentions that read the same inputs
(the memory attention's cross-attentions: every layer attends to the same memory). The same
products as sam2's Linears, within a GEMM's rounding."""

from __future__ import annotations

from typing import List, Sequence, Tuple

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


class SharedKeyValues:
    """The k and v projections of attentions that all read the same keys' and values' inputs,
    with their weights concatenated once: one GEMM for every attention's keys and one for
    their values, instead of two per attention. Why: the memory attention's four
    cross-attentions project the same memory of a few thousand tokens; four narrow GEMMs of
    it are four launches, one wide GEMM is one. The outputs are column slices (views) of the
    wide products."""

    def __init__(self, attns: Sequence[torch.nn.Module], values: bool = True):
        assert self.applicable(attns)
        self.widths = [a.internal_dim for a in attns]
        with torch.no_grad():
            self.k = (torch.cat([a.k_proj.weight for a in attns]),
                      torch.cat([a.k_proj.bias for a in attns]))
            # values False: the attentions take raw values (``rope_attention.FoldedValues``)
            self.v = (torch.cat([a.v_proj.weight for a in attns]),
                      torch.cat([a.v_proj.bias for a in attns])) if values else None

    @staticmethod
    def applicable(attns: Sequence[torch.nn.Module]) -> bool:
        """Whether the attentions' k and v projections are biased Linears of one input width
        each (so one input can feed them all)."""
        lins = [(a.k_proj, a.v_proj) for a in attns]
        return len(lins) > 1 and all(
            isinstance(m, torch.nn.Linear) and m.bias is not None for kv in lins for m in kv) \
            and len({k.in_features for k, _ in lins}) == 1 \
            and len({v.in_features for _, v in lins}) == 1 \
            and all(k.out_features == v.out_features == a.internal_dim
                    for (k, v), a in zip(lins, attns))

    def __call__(self, k: torch.Tensor,
                 v: torch.Tensor) -> List[Tuple[torch.Tensor, torch.Tensor]]:
        """k [B, Lk, Ck], v [B, Lk, Cv] (in the Linears' compute dtype) -> per attention
        (k_proj(k), v_proj(v)), each [B, Lk, internal_dim] (views of the wide products);
        v_proj(v) is None without values."""
        ks = _linear(k, *self.k).split(self.widths, dim=-1)
        if self.v is None:
            return [(kp, None) for kp in ks]
        return list(zip(ks, _linear(v, *self.v).split(self.widths, dim=-1)))
