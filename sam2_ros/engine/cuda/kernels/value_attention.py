"""Attention whose values are narrower than its keys: sam2's memory cross-attention without its
value projection (the opt-in fused group 'memory_values').

Why: the memory attention's cross-attention (one head) projects the 64-channel memory to
256-channel keys and values and attends the frame's queries over every memory token (at
large@1024 4,096 queries over up to 28,736 keys, the largest attention of a frame). The keys
need their projection (RoPE rotates them afterwards), the values do not: each row of the
softmax sums to 1, so softmax(S) (M Wv^T + bv) = (softmax(S) M) Wv^T + bv, and the output
projection takes the value projection in: out_proj(.) = (softmax(S) M) (Wo Wv)^T + Wo bv + bo
(``rope_attention.folded_values``). Attending with the 64-channel memory as values does 5/8
of the multiply-adds (QK^T at 256 channels, PV at 64) and skips the values' projection.
PyTorch's FlashAttention takes no values narrower than the keys, so this kernel attends:
flash-style (online softmax, float32), each row over its own keys (all of them, or the valid
ones packed by ``attention.KeyPacking``), split into key chunks where one head of a few
thousand queries would leave the GPU idle, the chunks merged by ``split_merge``'s kernel.
Not bitwise sam2's (other rounding of the values and the attention output), so opt-in.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from sam2_ros.engine import attention
from sam2_ros.engine.cuda.kernels.launch import dummy_like, jit
from sam2_ros.engine.cuda.kernels.rounding import cast_rne, dot_operand
from sam2_ros.engine.cuda.kernels.split_merge import merge_splits, merge_varlen

LOG2E = 1.4426950408889634
# (block of queries, block of keys, warps, pipeline stages): tools/probes/value_attention_probe
# times the candidates on the GPU. CONFIG_LONG where each program's chunk of keys is long
# (LONG_CHUNK keys or more: large@1024's one object, several objects batched): each key block
# loaded serves 128 queries; CONFIG for short chunks (one tiny object split 16 ways, a few
# hundred keys a program), where twice the programs fill the GPU better.
# Float32 tiles are twice the bytes: smaller blocks and stages keep a program's shared memory
# within a multiprocessor's.
CONFIG: Tuple[int, int, int, int] = (64, 64, 4, 3)
CONFIG_LONG: Tuple[int, int, int, int] = (128, 64, 8, 3)
CONFIG_FP32: Tuple[int, int, int, int] = (32, 32, 4, 2)
LONG_CHUNK = 2048


def config_for(dtype: torch.dtype, longest: int) -> Tuple[int, int, int, int]:
    """The kernel's configuration for chunks of at most ``longest`` keys in ``dtype``."""
    if dtype not in (torch.bfloat16, torch.float16):
        return CONFIG_FP32
    return CONFIG_LONG if longest >= LONG_CHUNK else CONFIG


@jit
def _values_kernel(q_ptr, q_sb, q_sl, k_ptr, k_sl, v_ptr, v_sl, cu_ptr, n_keys, o_ptr, o_sb,
                   o_ss, o_sl, lse_ptr, l_sb, l_ss, Lq, splits, scale_log2,
                   N_BLOCKS: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr, BF16: tl.constexpr,
                   UPCAST: tl.constexpr, PRECISION: tl.constexpr, DENSE: tl.constexpr):
    """Row b's block of queries against chunk s of its keys [cu[b], cu[b+1]) (DENSE: the
    n_keys keys from b * n_keys, no table read): the output over
    that chunk and its log-sum-exp (natural log; -inf for a chunk without keys). N_BLOCKS:
    key blocks of the longest chunk (a trip count fixed at compile time: the interpreter takes
    no loop bound read at run time); a row's blocks past its chunk (padded memories) are
    masked out, doing no harm. BF16: the products take bf16 operands (the probabilities
    rounded as FlashAttention rounds them); UPCAST: as float32 holding those values (the
    interpreter's tl.dot multiplies bf16 operands as bit patterns)."""
    bs = tl.program_id(1)
    b = bs // splits
    s = bs % splits
    if DENSE:
        start = b * n_keys
        n = n_keys
    else:
        start = tl.load(cu_ptr + b)
        n = tl.load(cu_ptr + b + 1) - start
    per = (n + splits - 1) // splits
    k0 = s * per
    k1 = tl.minimum(n, k0 + per)
    b64 = b.to(tl.int64)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    rm = rows < Lq
    r64 = rows.to(tl.int64)
    dq = tl.arange(0, D)
    dv = tl.arange(0, DV)
    q = dot_operand(tl.load(q_ptr + b64 * q_sb + r64[:, None] * q_sl + dq[None, :],
                            mask=rm[:, None], other=0.0), BF16, UPCAST)
    m_i = tl.full([BM], float('-inf'), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, DV], tl.float32)
    for i in range(0, N_BLOCKS):
        cols = k0 + i * BN + tl.arange(0, BN)
        cm = cols < k1
        c64 = (start + cols).to(tl.int64)
        kt = dot_operand(tl.load(k_ptr + c64[None, :] * k_sl + dq[:, None], mask=cm[None, :],
                                 other=0.0), BF16, UPCAST)                   # [D, BN]
        sc = tl.dot(q, kt, input_precision=PRECISION) * scale_log2
        sc = tl.where(cm[None, :], sc, float('-inf'))
        m_new = tl.maximum(m_i, tl.max(sc, 1))
        m_safe = tl.where(m_new == float('-inf'), 0.0, m_new)   # no key yet: no NaN
        p = tl.exp2(sc - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        vt = dot_operand(tl.load(v_ptr + c64[:, None] * v_sl + dv[None, :], mask=cm[:, None],
                                 other=0.0), BF16, UPCAST)                   # [BN, DV]
        acc = acc * alpha[:, None] + tl.dot(dot_operand(p, BF16, UPCAST), vt,
                                            input_precision=PRECISION)
        m_i = m_new
    has = k1 > k0
    safe = tl.where(has, l_i, 1.0)
    lse = tl.where(has, (m_i + tl.log2(safe)) / 1.4426950408889634, float('-inf'))
    tl.store(o_ptr + b64 * o_sb + s * o_ss + r64[:, None] * o_sl + dv[None, :],
             cast_rne(acc / safe[:, None], o_ptr.dtype.element_ty), mask=rm[:, None])
    tl.store(lse_ptr + b64 * l_sb + s * l_ss + r64, lse, mask=rm)


def values_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     cu: Optional[torch.Tensor], max_keys: int, splits: int,
                     full: Optional[torch.Tensor] = None,
                     config: Optional[Tuple[int, int, int, int]] = None
                     ) -> Tuple[torch.Tensor, torch.Tensor]:
    """q [B, Lq, D] (channels contiguous), k [T, D] and v [T, Dv] (rows of keys) -> (out
    [B, Lq, Dv] in q's dtype, lse [B, S, Lq, 1] float32 of the chunks): softmax(q k^T /
    sqrt(D)) v, in ``splits`` key chunks per row merged by their log-sum-exps. Row b attends
    to keys cu[b]..cu[b+1]-1 (cu [B+1] int32, at most ``max_keys`` per row; with splits > 1
    ``full`` [B, S] says which chunks hold keys, ``attention.KeyPacking.chunks``' flags for
    the same cu), or with cu None to the ``max_keys`` keys from b * max_keys (every chunk
    holds some). ``config``: (block of queries, block of keys, warps, stages); None:
    ``config_for`` the longest chunk."""
    b, lq, d = q.shape
    dv = v.shape[-1]
    assert q.stride(2) == k.stride(1) == v.stride(1) == 1 and k.shape[1] == d
    assert cu is None or splits == 1 or full is not None, 'chunks of a table: say which hold keys'
    longest = -(-max(1, max_keys) // splits)            # keys of a row's longest chunk
    bm, bn, warps, stages = config or config_for(q.dtype, longest)
    bf16 = q.dtype == torch.bfloat16
    upcast = bf16 and not q.is_cuda
    out = torch.empty(b, splits, lq, 1, dv, device=q.device,
                      dtype=q.dtype if splits == 1 else torch.float32)
    lse = torch.empty(b, splits, lq, 1, device=q.device, dtype=torch.float32)
    _values_kernel[(triton.cdiv(lq, bm), b * splits)](
        q, q.stride(0), q.stride(1), k, k.stride(0), v, v.stride(0), dummy_like(cu, lse),
        max_keys, out, out.stride(0), out.stride(1), out.stride(2), lse, lse.stride(0),
        lse.stride(1), lq, splits, LOG2E / math.sqrt(d), N_BLOCKS=triton.cdiv(longest, bn),
        D=d, DV=dv, BM=bm, BN=bn, BF16=bf16, UPCAST=upcast,
        PRECISION='ieee' if upcast or not bf16 else 'tf32', DENSE=cu is None,
        num_warps=warps, num_stages=stages)
    if splits == 1:
        return out[:, 0, :, 0], lse
    if cu is None:      # chunk s of row b is head s: the merge of split-KV heads
        return merge_splits(out.view(b, splits, lq, dv), lse.view(b, splits, lq), 1, splits,
                            q.dtype)[:, 0], lse
    return merge_varlen(out, lse, full, q.dtype)[:, :, 0], lse


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           keys: Optional[attention.KeyPacking] = None) -> torch.Tensor:
    """The memory attention's ``attend`` for values narrower than the keys: q [B, 1, Lq, D],
    k [B, 1, Lk, D], v [B, 1, Lk, Dv] -> [B, 1, Lq, Dv] in q's dtype, each row over all its
    keys, or over its valid ones (``keys``: the runner's padded memories); split into key
    chunks as ``attention.kv_splits`` finds the call too small for the GPU."""
    b, h, lq, d = q.shape
    lk, dv = k.shape[2], v.shape[-1]
    assert h == 1, 'one head: the value projection folds into the output projection'
    splits = attention.kv_splits(b, 1, lq, lk, dividing=False)
    cu = full = None                   # every row over all its keys
    if keys is None:
        kf, vf = k.reshape(b * lk, d), v.reshape(b * lk, dv)
    else:                              # packed once for all layers, chunked once per count
        order, _, cu = keys.packed(lq)
        full = keys.chunks(lq, splits)[2] if splits > 1 else None
        kf = attention.packed_keys(k, order).view(b * lk, d)
        vf = attention.packed_keys(v, order).view(b * lk, dv)
    out = values_attention(q[:, 0] if q.stride(3) == 1 else q[:, 0].contiguous(), kf, vf, cu,
                           lk, splits, full)[0]
    return out[:, None]
