"""sam2's ``RoPEAttention`` with its rotary encoding in one kernel (``rope.py``).

Projections and the output projection are sam2's Linears (a self-attention whose q, k and v
inputs are one tensor runs one GEMM over the three projections' concatenated weights,
``projections.py``); the attention call is ``attend`` (q, k, v [B, H, L, D] -> [B, H, Lq, D]):
SDPA as sam2, or the graph runner's variable-length / split-KV attention (``attention.py``
swaps it in through ``swapped``).
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from sam2.modeling.sam.transformer import RoPEAttention

from sam2_ros.engine.cuda.kernels.projections import Projections
from sam2_ros.engine.cuda.kernels.rope import rope_tables, rotary_qk


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


class FusedRoPEAttention(RoPEAttention):
    """Wraps an existing RoPEAttention (its weights and tables); an instance of RoPEAttention
    so that sam2's layers pass it the pointer-token count."""

    def __init__(self, inner: RoPEAttention, attend: Optional[Callable] = None,
                 fuse_qkv: bool = False, proj: Optional[Projections] = None):
        torch.nn.Module.__init__(self)
        self.inner = inner
        self.attend = attend or _sdpa
        self.proj = proj if proj is not None or not fuse_qkv else Projections(inner)
        self.tables: Dict[tuple, Tuple[torch.Tensor, torch.Tensor]] = {}

    def swapped(self, attend: Callable) -> 'FusedRoPEAttention':
        """The same module attending with ``attend`` (shares weights and tables)."""
        twin = FusedRoPEAttention(self.inner, attend, proj=self.proj)
        twin.tables = self.tables
        return twin

    def _tables(self, lq: int, device) -> Tuple[torch.Tensor, torch.Tensor]:
        key = (lq, device)
        if key not in self.tables:      # sam2's table for this size (its own when it fits)
            a = self.inner
            freqs = a.freqs_cis
            if freqs.shape[0] != lq:
                side = math.sqrt(lq)
                freqs = a.compute_cis(end_x=side, end_y=side)
            self.tables[key] = rope_tables(freqs.to(device))
        return self.tables[key]

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                num_k_exclude_rope: int = 0,
                projected: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """projected: (k_proj(k), v_proj(v)) already computed (``SharedKeyValues``: the memory
        attention projects every layer's keys and values at once); k and v are then unused."""
        a = self.inner
        if projected is not None:
            qp, (kp, vp) = a.q_proj(q), projected                    # [B, L, C] (views)
        else:
            qp, kp, vp = self.proj(q, k, v) if self.proj is not None else (
                a.q_proj(q), a.k_proj(k), a.v_proj(v))              # [B, L, C] (views)
        lq = qp.shape[1]
        if lq != kp.shape[1] - num_k_exclude_rope:
            assert a.rope_k_repeat, 'keys of another length than the queries need rope_k_repeat'
        cos, sin = self._tables(lq, qp.device)
        qr, kr = rotary_qk(qp, kp, a.num_heads, cos, sin, num_k_exclude_rope, a.rope_k_repeat)
        out = self.attend(qr, kr, a._separate_heads(vp, a.num_heads))
        return a.out_proj(a._recombine_heads(out))
