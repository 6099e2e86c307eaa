"""Memory cross-attention over padded memories: one graph shape for every frame of a stream.

Why: sam2's memory attention reads n_s spatial memories (HW tokens each) and n_p object
pointers (4 tokens each), and both counts grow for 15 frames after every prompt. SDPA's fast
kernels take no key mask, so a graph captured at one shape could not run those frames. Here
a graph's memory is padded to its bucket's capacity; a validity flag per memory says which
slots hold something. The keys and values of the valid slots are packed, in sam2's order, into
a variable-length batch (``cu_seqlens``), and FlashAttention's variable-length kernel attends
over exactly those keys: the same softmax over the same keys as sam2's one SDPA call, so no
padding token contributes. Flash is also faster than cuDNN's kernel at one object (the
``_sam2attn`` rows of benchmarks/results/h200.json; docs/performance.md). fp32 uses the
memory-efficient kernel's variable-length mode; on the CPU (tests only) each object is
attended separately.

Everything here is a fixed-shape function of device tensors (the packing order is an argsort
of the validity mask on the device), so it is captured in the step graphs. Only the inner
attention of sam2's ``RoPEAttention`` is replaced, for the duration of one call; projections,
RoPE, the layers and their norms and MLPs are sam2's own modules.
"""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Tuple

import torch
import torch.nn.functional as F
from sam2.modeling.position_encoding import apply_rotary_enc
from sam2.modeling.sam.transformer import RoPEAttention

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

# (out [B, S, Lq, H, D], lse [B, S, Lq, H], full [B, S], dtype) -> [B, Lq, H, D]
VarlenMerge = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.dtype], torch.Tensor]
# (out [B, H*S, Lq, D], lse [B, H*S, >= Lq], H, S, dtype) -> [B, H, Lq, D]
SplitMerge = Callable[[torch.Tensor, torch.Tensor, int, int, torch.dtype], torch.Tensor]


def token_mask(feat_valid: torch.Tensor, ptr_valid: torch.Tensor, hw: int,
               ptr_tokens: int) -> torch.Tensor:
    """feat_valid [n_s, B], ptr_valid [n_p, B] bool or int64 (1: valid) -> [B, n_s*hw +
    ptr_tokens*n_p] of their dtype in the memory sequence's order (spatial memories, then
    pointer tokens)."""
    spatial = feat_valid.t().repeat_interleave(hw, dim=1)
    ptrs = ptr_valid.t().repeat_interleave(ptr_tokens, dim=1)
    return torch.cat([spatial, ptrs], dim=1)


class KeyPacking:
    """Which keys each batch row attends to, and how the valid ones are packed into a
    variable-length batch. Every memory-attention layer of a step reads the same memory, so
    the packing (an argsort and two prefix sums) is computed once, by the first layer."""

    def __init__(self, valid: torch.Tensor):
        self.valid = valid                          # [B, Lk] bool or int64 (1: valid)
        self._packed = None
        self._chunks = {}                           # splits -> chunk_bounds of the keys

    def packed(self, lq: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(order [B*Lk], cu_q [B+1], cu_k [B+1]): packed key i is key order[i]; row r's
        queries are [cu_q[r], cu_q[r+1]), its keys [cu_k[r], cu_k[r+1])."""
        if self._packed is None:
            b = self.valid.shape[0]
            # valid keys first, each row's in order
            order = torch.argsort((self.valid.reshape(-1) == 0).to(torch.uint8), stable=True)
            cu_k = F.pad(self.valid.sum(1, dtype=torch.int32).cumsum(0, dtype=torch.int32),
                         (1, 0))
            cu_q = torch.arange(0, (b + 1) * lq, lq, dtype=torch.int32,
                                device=self.valid.device)
            self._packed = order, cu_q, cu_k
        return self._packed

    def chunks(self, lq: int, splits: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(cu [B*S+1], lengths [B, S], full [B, S]: lengths > 0) of the packed keys in
        ``splits`` chunks (``chunk_bounds``), once for all layers."""
        if splits not in self._chunks:
            cu, lengths = chunk_bounds(self.packed(lq)[2], splits)
            self._chunks[splits] = cu, lengths, lengths > 0
        return self._chunks[splits]


def packed_keys(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """x [B, H, Lk, D] -> [B*Lk, H, D] rows in ``KeyPacking.packed``'s order (valid first)."""
    b, h, lk, d = x.shape
    return x.transpose(1, 2).reshape(b * lk, h, d).index_select(0, order)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     keys: KeyPacking) -> torch.Tensor:
    """Attention of each batch row over its valid keys only.

    q [B, H, Lq, D], k/v [B, H, Lk, D], keys.valid [B, Lk] (1: valid) -> [B, H, Lq, D].
    """
    b, h, lq, d = q.shape
    lk = k.shape[2]
    if not q.is_cuda:
        return _per_row(q, k, v, keys.valid)
    order, cu_q, cu_k = keys.packed(lq)
    kp, vp = packed_keys(k, order), packed_keys(v, order)
    qp = q.transpose(1, 2).reshape(b * lq, h, d)
    if q.dtype in (torch.float16, torch.bfloat16):
        out = torch.ops.aten._flash_attention_forward(
            qp, kp, vp, cu_q, cu_k, lq, lk, 0.0, False, False)[0]
    else:
        out = torch.ops.aten._efficient_attention_forward(
            qp[None], kp[None], vp[None], None, cu_q, cu_k, lq, lk, 0.0, 0)[0][0]
    return out.view(b, lq, h, d).transpose(1, 2)


def varlen_split_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           keys: KeyPacking, splits: int,
                           merge: Optional[VarlenMerge] = None) -> torch.Tensor:
    """``varlen_attention`` with each row's valid keys cut into ``splits`` chunks that are
    attended in parallel, as sequences of their own, and merged by their log-sum-exp: the same
    softmax over the same keys (only the summation order differs). Why: a correction, and the
    frames after a prompt, attend over padded memories with one head of a few thousand
    queries, which leaves most of the GPU's multiprocessors idle (as ``split_attention`` for
    the unpadded call).

    q [B, H, Lq, D], k/v [B, H, Lk, D], keys.valid [B, Lk] -> [B, H, Lq, D] in q's dtype.
    CUDA half precision (FlashAttention's variable-length kernel, which returns the
    log-sum-exp); elsewhere (tests) a per-sequence reference of that kernel.
    merge: (out [B, S, Lq, H, D], lse [B, S, Lq, H], full [B, S], dtype) -> [B, Lq, H, D], one
    kernel for the merge below (the fused memory attention's ``split_merge_varlen``); None:
    PyTorch ops.
    """
    b, h, lq, d = q.shape
    lk = k.shape[2]
    order = keys.packed(lq)[0]
    kp, vp = packed_keys(k, order), packed_keys(v, order)
    # sequence r*S + j: row r's queries against chunk j of its keys
    qs = q.transpose(1, 2).unsqueeze(1).expand(b, splits, lq, h, d).reshape(-1, h, d)
    cu_ks, _, full = keys.chunks(lq, splits)                            # [B*S+1], [B, S]
    cu_qs = torch.arange(0, (b * splits + 1) * lq, lq, dtype=torch.int32, device=q.device)
    if q.is_cuda:
        out, lse = torch.ops.aten._flash_attention_forward(
            qs, kp, vp, cu_qs, cu_ks, lq, -(-lk // splits), 0.0, False, False)[:2]
    else:
        out, lse = _varlen_with_lse(qs, kp, vp, cu_qs, cu_ks)
    out = out.view(b, splits, lq, h, d)
    if lse.dim() == 2:                                  # [H, B*S*Lq]
        lse = lse.view(h, b, splits, lq).permute(1, 2, 3, 0)
    else:                                               # [B*S, H, Lq]
        lse = lse.view(b, splits, h, lq).permute(0, 1, 3, 2)
    # an empty chunk (a row of fewer keys than chunks) has no share, whatever the kernel wrote
    if merge is not None:
        return merge(out, lse, full, q.dtype).transpose(1, 2)
    full = full[:, :, None, None]                                        # [B, S, 1, 1]
    w = torch.softmax(lse.float().masked_fill(~full, float('-inf')), dim=1)   # [B, S, Lq, H]
    merged = (torch.where(full[..., None], out.float(), 0.0) * w[..., None]).sum(1)
    return merged.to(q.dtype).transpose(1, 2)


def chunk_bounds(cu_k: torch.Tensor, splits: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """cu_k [B+1] int32 (row r's keys [cu_k[r], cu_k[r+1])) -> (cu [B*S+1] int32: sequence
    r*S + j is chunk j of row r, of ceil(n_r / S) keys or fewer, lengths [B, S])."""
    start = cu_k[:-1].long()
    n = cu_k[1:].long() - start
    per = (n + splits - 1) // splits
    j = torch.arange(splits + 1, device=cu_k.device)
    edges = start[:, None] + torch.minimum(j[None] * per[:, None], n[:, None])      # [B, S+1]
    cu = torch.cat([edges[:, :-1].reshape(-1), edges[-1:, -1]]).to(torch.int32)
    return cu, edges[:, 1:] - edges[:, :-1]


def _varlen_with_lse(q, k, v, cu_q, cu_k):
    """Reference of FlashAttention's variable-length call on the CPU (host-synchronizing):
    q [Tq, H, D], k/v [Tk, H, D] -> (out [Tq, H, D], lse [H, Tq] fp32; an empty sequence:
    out 0 and lse +inf, as FlashAttention writes them, so a merge must mask empty chunks)."""
    out = torch.zeros_like(q)
    lse = torch.full((q.shape[1], q.shape[0]), float('inf'))
    for (q0, q1), (k0, k1) in zip(zip(cu_q.tolist(), cu_q.tolist()[1:]),
                                  zip(cu_k.tolist(), cu_k.tolist()[1:])):
        if k1 > k0:
            o, l = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                *(x.transpose(0, 1)[None] for x in (q[q0:q1], k[k0:k1], v[k0:k1])))[:2]
            out[q0:q1] = o[0].transpose(0, 1)
            lse[:, q0:q1] = l[0]
    return out, lse


def _per_row(q, k, v, valid):
    """Reference on the CPU: each row attends over its own valid keys (host-synchronizing)."""
    rows = [F.scaled_dot_product_attention(q[i:i + 1], k[i:i + 1, :, m], v[i:i + 1, :, m])
            for i, m in enumerate(valid.bool())]
    return torch.cat(rows)


def kv_splits(batch: int, heads: int, lq: int, lk: int, max_splits: int = 16,
              min_chunk: int = 128, dividing: bool = True) -> int:
    """How many key chunks one attention call is split into: enough for the batch, heads and
    query tiles together to fill the GPU's multiprocessors (one 1,024-query head fills 16 of
    132 on the H200), each chunk at least ``min_chunk`` keys; a power of two, dividing lk
    unless ``dividing`` is False (chunks of variable-length rows need not be equal). The cap
    of 16 rather than 8 fills 128 programs for one object (``tools/probes/split_probe.py``
    compares the two; its rows are in benchmarks/results)."""
    tiles = batch * heads * -(-lq // 128)
    s = 1
    while s * 2 <= max_splits and tiles * s < 128 and (lk % (s * 2) == 0 or not dividing) \
            and lk // (s * 2) >= min_chunk:
        s *= 2
    return s


def split_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    splits: int, merge: Optional[SplitMerge] = None) -> torch.Tensor:
    """Split-KV attention: ``splits`` chunks of the keys attended in parallel, as extra heads
    of one kernel call, merged by their log-sum-exp. The same softmax over the same keys as
    one call (only the summation order differs), for calls whose few heads and queries leave
    most of the GPU idle.

    q [B, H, Lq, D], k/v [B, H, Lk, D] with Lk % splits == 0 -> [B, H, Lq, D] in q's dtype.
    merge: (out, lse, H, splits, dtype) -> merged, one kernel for the merge below (the fused
    memory attention's, ``split_merge`` of its module); None: PyTorch ops.
    """
    b, h, lq, d = q.shape
    lk = k.shape[2]
    qs = q.unsqueeze(2).expand(b, h, splits, lq, d).reshape(b, h * splits, lq, d)
    ks = k.reshape(b, h * splits, lk // splits, d)      # chunk j of head i: keys [j*Lk/S, ...)
    vs = v.reshape(b, h * splits, lk // splits, d)
    out, lse = _attention_with_lse(qs, ks, vs)          # [B, H*S, Lq, D], [B, H*S, Lq] fp32
    if merge is not None:
        return merge(out, lse, h, splits, q.dtype)
    lse = lse[..., :lq].reshape(b, h, splits, lq, 1)
    w = torch.softmax(lse, dim=2)                       # each chunk's share of the softmax
    merged = (out.reshape(b, h, splits, lq, d).float() * w).sum(2)
    return merged.to(q.dtype)


def _attention_with_lse(q, k, v):
    """One attention call that also returns the log-sum-exp of each query's scores."""
    if not q.is_cuda:
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v)[:2]
    if q.dtype in (torch.float16, torch.bfloat16):
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v)[:2]
    return torch.ops.aten._scaled_dot_product_efficient_attention(q, k, v, None, True)[:2]


class _SwappedRoPEAttention(RoPEAttention):
    """sam2's RoPEAttention with only its inner attention call replaced by ``attend``
    (q, k, v [B, H, L, D] -> [B, H, Lq, D]): restricted to valid memory tokens, or split-KV.

    Built around an existing module (its projections and RoPE tables), not initialised as a
    new one; an instance of RoPEAttention so sam2's layers pass it the pointer-token count.
    """

    def __init__(self, inner: RoPEAttention, attend):
        torch.nn.Module.__init__(self)
        self.inner, self.attend = inner, attend

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                num_k_exclude_rope: int = 0) -> torch.Tensor:
        a = self.inner
        q = a._separate_heads(a.q_proj(q), a.num_heads)       # [B, H, Lq, D]
        k = a._separate_heads(a.k_proj(k), a.num_heads)       # [B, H, Lk, D]
        v = a._separate_heads(a.v_proj(v), a.num_heads)
        if a.freqs_cis.shape[0] != q.shape[-2]:     # as sam2: tables for this feature size
            side = q.shape[-2] ** 0.5
            a.freqs_cis = a.compute_cis(end_x=side, end_y=side)
        a.freqs_cis = a.freqs_cis.to(q.device)
        n_rope = k.shape[-2] - num_k_exclude_rope
        q, k[:, :, :n_rope] = apply_rotary_enc(q, k[:, :, :n_rope], freqs_cis=a.freqs_cis,
                                               repeat_freqs_k=a.rope_k_repeat)
        out = self.attend(q, k, v)
        return a.out_proj(a._recombine_heads(out))


@contextlib.contextmanager
def _swapped(layers, name: str, attend) -> Iterator[None]:
    """Within the block, attribute ``name`` of every layer attends with ``attend``."""
    inner = [getattr(layer, name) for layer in layers]
    try:
        for layer, mod in zip(layers, inner):     # a fused module swaps its own call
            swap = getattr(mod, 'swapped', None)
            setattr(layer, name, swap(attend) if swap else _SwappedRoPEAttention(mod, attend))
        yield
    finally:
        for layer, mod in zip(layers, inner):
            setattr(layer, name, mod)


@contextlib.contextmanager
def masked_memory(model: SAM2Base, valid: torch.Tensor, split: bool = False) -> Iterator[None]:
    """Within the block, every memory-attention layer of ``model`` attends only to the memory
    tokens where valid [B, Lk] is True; split: in key chunks (``varlen_split_attention``)
    where ``kv_splits`` finds the call too small for the GPU (CUDA half precision)."""
    keys = KeyPacking(valid)                      # shared: packed once for all layers
    # a fused memory attention (TrackerConfig.fused_kernels) merges the chunks in one kernel,
    # and attends over values narrower than the keys with its own ('memory_values')
    merge = getattr(model.memory_attention, 'split_merge_varlen', None)
    narrow = getattr(model.memory_attention, 'narrow_values', None)
    with _swapped(model.memory_attention.layers, 'cross_attn_image',
                  lambda q, k, v: _padded_attend(q, k, v, keys, split, merge, narrow)):
        yield


def _padded_attend(q, k, v, keys: KeyPacking, split: bool, merge=None, narrow=None):
    if narrow is not None and v.shape[-1] != q.shape[-1]:
        return narrow(q, k, v, keys)
    s = kv_splits(q.shape[0], q.shape[1], q.shape[2], k.shape[2], dividing=False) \
        if split and q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) else 1
    return varlen_attention(q, k, v, keys) if s == 1 else \
        varlen_split_attention(q, k, v, keys, s, merge)


def _split_attend(q, k, v, merge=None, narrow=None):
    if narrow is not None and v.shape[-1] != q.shape[-1]:
        return narrow(q, k, v)            # splits its keys itself
    s = kv_splits(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    return F.scaled_dot_product_attention(q, k, v) if s == 1 else \
        split_attention(q, k, v, s, merge)


@contextlib.contextmanager
def split_kv(model: SAM2Base) -> Iterator[None]:
    """Within the block, the memory attention's self- and cross-attention calls run split-KV
    (``split_attention``) wherever ``kv_splits`` finds the call too small for the GPU."""
    layers = model.memory_attention.layers
    # a fused memory attention (TrackerConfig.fused_kernels) merges the splits in one kernel
    merge = getattr(model.memory_attention, 'split_merge', None)
    attend = functools.partial(_split_attend, merge=merge,
                               narrow=getattr(model.memory_attention, 'narrow_values', None))
    with _swapped(layers, 'self_attn', attend), _swapped(layers, 'cross_attn_image', attend):
        yield
