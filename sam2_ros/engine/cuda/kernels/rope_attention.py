"""sam2's ``RoPEAttention`` with its rotary encoding in one kernel (``rope.py``).

Projections and the output projection are sam2's Linears (a self-attention whose q, k and v
inputs are one tensor runs one GEMM over the three projections' concatenated weights,
``projections.py``); the attention call is ``attend`` (q, k, v [B, H, L, D] -> [B, H, Lq, D]):
SDPA as sam2, or the graph runner's variable-length / split-KV attention (``attention.py``
swaps it in through ``swapped``). Built with ``folded`` (a ``FoldedValues``: the opt-in
'memory_values'), a one-head attention attends with its raw values and applies its value
projection inside the output projection (``value_attention.py`` says why).
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from sam2.modeling.sam.transformer import RoPEAttention
from torch.nn.attention import SDPBackend, sdpa_kernel

from sam2_ros.engine.cuda.kernels.projections import Projections
from sam2_ros.engine.cuda.kernels.rope import rope_tables, rotary_qk


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


# Keys up to which one object's self-attention runs FlashAttention: tiny@512's 1,024 tokens,
# where it was faster than cuDNN's kernel; at large@1024's 4,096 the step graphs' own
# split-KV (attention.split_kv) was faster than it (run 20261206T163835Z-36dabd, H100)
FLASH_ALONE_MAX_KEYS = 2048


def flash_applies(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether ``flash_alone`` runs FlashAttention for q, k [B, H, L, D]: one head of one
    row, 16-bit, on CUDA, at most ``FLASH_ALONE_MAX_KEYS`` keys."""
    return (q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
            and q.shape[0] * q.shape[1] == 1 and k.shape[2] <= FLASH_ALONE_MAX_KEYS)


def flash_alone(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q, k, v [B, H, L, D] -> [B, H, Lq, D]: FlashAttention where ``flash_applies`` (the
    fused group 'self_flash': one object's memory self-attention), SDPA as sam2 elsewhere.
    SDPA picks cuDNN's kernel there, one program per 64 queries of the one head, most of the
    GPU idle; FlashAttention splits the keys across the GPU itself (the SDPA probe's
    'mem_self' rows: faster for one object, slower for three)."""
    if flash_applies(q, k):
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                          SDPBackend.MATH]):
            return F.scaled_dot_product_attention(q, k, v)
    return F.scaled_dot_product_attention(q, k, v)


class FoldedValues:
    """out_proj after v_proj as one Linear of the raw values' width: every row of the softmax
    sums to 1, so out_proj(P (M Wv^T + bv)) = (P M) (Wo Wv)^T + (Wo bv + bo). The product is
    taken once per compute dtype, in float32 of the weights as that dtype rounds them (what
    sam2's Linears multiply under autocast), so weights cast once (``precast_weights``) or per
    call fold to the same bits; no cast kernel per call."""

    def __init__(self, attn: RoPEAttention):
        self.out_proj, self.v_proj = attn.out_proj, attn.v_proj
        self.cast: Dict[torch.dtype, Tuple[torch.Tensor, torch.Tensor]] = {}

    @staticmethod
    def applicable(attn: torch.nn.Module) -> bool:
        """One head, and biased Linears for the values and the output."""
        return getattr(attn, 'num_heads', 0) == 1 and all(
            isinstance(m, torch.nn.Linear) and m.bias is not None
            for m in (attn.v_proj, attn.out_proj))

    def folded(self, dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
        """(weight [C, Cv], bias [C]) in ``dtype``."""
        if dtype not in self.cast:
            with torch.no_grad():
                wo, bo, wv, bv = (t.to(dtype).float() for t in (
                    self.out_proj.weight, self.out_proj.bias, self.v_proj.weight,
                    self.v_proj.bias))
                self.cast[dtype] = ((wo @ wv).to(dtype), (wo @ bv + bo).to(dtype))
        return self.cast[dtype]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, L, Cv] (the attention over raw values) -> [B, L, C] in x's dtype."""
        return F.linear(x, *self.folded(x.dtype))


class FusedRoPEAttention(RoPEAttention):
    """Wraps an existing RoPEAttention (its weights and tables); an instance of RoPEAttention
    so that sam2's layers pass it the pointer-token count."""

    def __init__(self, inner: RoPEAttention, attend: Optional[Callable] = None,
                 fuse_qkv: bool = False, proj: Optional[Projections] = None,
                 folded: Optional[FoldedValues] = None, narrow: Optional[Callable] = None):
        torch.nn.Module.__init__(self)
        self.inner = inner
        # folded: values attended raw, v_proj inside the output projection; ``narrow``
        # attends with values narrower than the keys (value_attention.attend)
        self.folded = folded
        self.attend = attend or (narrow if folded is not None else _sdpa)
        self.narrow = narrow
        self.proj = proj if proj is not None or not fuse_qkv else Projections(inner)
        self.tables: Dict[tuple, Tuple[torch.Tensor, torch.Tensor]] = {}

    def swapped(self, attend: Callable) -> 'FusedRoPEAttention':
        """The same module attending with ``attend`` (shares weights and tables)."""
        twin = FusedRoPEAttention(self.inner, attend, proj=self.proj, folded=self.folded,
                                  narrow=self.narrow)
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
        attention projects every layer's keys and values at once); k and v are then unused.
        Folded: v is attended as it is (projected values unused, None)."""
        a = self.inner
        if self.folded is not None:
            qp, vp = a.q_proj(q), v
            kp = projected[0] if projected is not None else a.k_proj(k)
        elif projected is not None:
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
        if self.folded is not None:
            return self.folded(a._recombine_heads(out))
        return a.out_proj(a._recombine_heads(out))
