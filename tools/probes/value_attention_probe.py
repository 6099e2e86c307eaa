"""Probe: the memory attention's cross-attention with its values left at the memory's width.

    python -m tools.probes.value_attention_probe [--out $OUT/value_attention_probe.json]

Why: sam2's memory cross-attention projects 64-channel memories to 256-channel keys and
values (one head) and attends 4,096 queries over up to 28,736 keys at large@1024; the
FlashAttention calls are about 1.7 ms of a frame's 10 ms of kernels. Keys need their
projection (RoPE rotates them afterwards), values do not: softmax(S) (M Wv^T + bv) =
(softmax(S) M) Wv^T + bv, because every row of softmax(S) sums to 1, and the output projection
folds in, out_proj(.) = (softmax(S) M) (Wo Wv)^T + (Wo bv + bo). Attending with 64-channel
values does 5/8 of the attention's multiply-adds (QK^T at 256 channels, PV at 64) and skips
the values' projection. No PyTorch backend takes 64-channel values beside 256-channel keys as
fast as FlashAttention takes 256 and 256 (FlashAttention refuses them); so this probe carries
a Triton kernel for it, with split-KV (chunks of each row's keys merged by their log-sum-exps
with the package's merge kernel), and times it against FlashAttention's current call and
against PyTorch's backends with 64-channel values, per shape and kernel configuration, bf16,
CUDA events, the median of ``--iters`` calls. Each row's error against float32 math is
reported. Whether the kernel earns a place in the engine (an opt-in fused group: not bitwise
sam2's) is for these rows to say; it is not used by the package.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.launch import jit
from sam2_ros.engine.cuda.kernels.split_merge import merge_varlen

LOG2E = 1.4426950408889634
# name -> (batch (objects), queries, keys, key channels, value channels)
SHAPES: Dict[str, Tuple[int, int, int, int, int]] = {
    'large_mem_cross_full': (1, 4096, 7 * 4096 + 64, 256, 64),
    'tiny_mem_cross_full': (1, 1024, 7 * 1024 + 64, 256, 64),
    'tiny_mem_cross_8obj': (8, 1024, 7 * 1024 + 64, 256, 64),
}
# (block of queries, block of keys, warps, pipeline stages)
CONFIGS = ((64, 64, 4, 2), (64, 64, 4, 3), (128, 64, 8, 3), (64, 32, 4, 3))
SPLITS = (1, 2, 4, 8, 16)


@jit
def _attn_lse_kernel(q_ptr, q_sb, q_sl, k_ptr, k_sb, k_sl, v_ptr, v_sb, v_sl, klen_ptr,
                     o_ptr, o_sb, o_ss, o_sl, lse_ptr, l_sb, l_ss, Lq, splits, scale_log2,
                     N_BLOCKS: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                     BM: tl.constexpr, BN: tl.constexpr):
    """Row b's queries [BM block] against chunk s of its first klen[b] keys: the attention's
    output over that chunk (float32) and its log-sum-exp (natural log; -inf: no keys).
    ``N_BLOCKS``: key blocks of the longest chunk (a fixed trip count: a graph-captured call
    cannot read klen on the host); a row's blocks past its chunk are masked out."""
    bs = tl.program_id(1)
    b = (bs // splits).to(tl.int64)
    s = bs % splits
    n = tl.load(klen_ptr + b)
    per = (n + splits - 1) // splits
    k0 = s * per
    k1 = tl.minimum(n, k0 + per)
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    rm = rows < Lq
    r64 = rows.to(tl.int64)
    dq = tl.arange(0, D)
    dv = tl.arange(0, DV)
    q = tl.load(q_ptr + b * q_sb + r64[:, None] * q_sl + dq[None, :], mask=rm[:, None],
                other=0.0)
    m_i = tl.full([BM], float('-inf'), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, DV], tl.float32)
    for i in range(0, N_BLOCKS):
        cols = k0 + i * BN + tl.arange(0, BN)
        cm = cols < k1
        c64 = cols.to(tl.int64)
        kt = tl.load(k_ptr + b * k_sb + c64[None, :] * k_sl + dq[:, None], mask=cm[None, :],
                     other=0.0)                                               # [D, BN]
        sc = tl.where(cm[None, :], tl.dot(q, kt) * scale_log2, float('-inf'))  # [BM, BN]
        m_new = tl.maximum(m_i, tl.max(sc, 1))
        m_safe = tl.where(m_new == float('-inf'), 0.0, m_new)   # no key yet: no NaN
        p = tl.exp2(sc - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        vt = tl.load(v_ptr + b * v_sb + c64[:, None] * v_sl + dv[None, :], mask=cm[:, None],
                     other=0.0)                                               # [BN, DV]
        acc = acc * alpha[:, None] + tl.dot(p.to(vt.dtype), vt)
        m_i = m_new
    has = k1 > k0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse = tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.0))) / 1.4426950408889634,
                   float('-inf'))
    tl.store(o_ptr + b * o_sb + s * o_ss + r64[:, None] * o_sl + dv[None, :], out,
             mask=rm[:, None])
    tl.store(lse_ptr + b * l_sb + s * l_ss + r64, lse, mask=rm)


def attention_values(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, klen: torch.Tensor,
                     splits: int = 1, config: Tuple[int, int, int, int] = CONFIGS[0]
                     ) -> Tuple[torch.Tensor, torch.Tensor]:
    """q [B, Lq, D], k [B, Lk, D], v [B, Lk, Dv] (channels contiguous), klen [B] int32 (row b
    attends to its first klen[b] keys) -> (out [B, Lq, Dv] in q's dtype, lse [B, Lq] float32):
    softmax(q k^T / sqrt(D)) v. ``splits`` > 1: each row's keys in that many chunks, merged
    by ``split_merge.merge_varlen``."""
    b, lq, d = q.shape
    dv = v.shape[-1]
    bm, bn, warps, stages = config
    out = torch.empty(b, splits, lq, 1, dv, device=q.device, dtype=torch.float32)
    lse = torch.empty(b, splits, lq, 1, device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(lq, bm), b * splits)
    n_blocks = triton.cdiv(triton.cdiv(k.shape[1], splits), bn)     # the longest chunk's
    _attn_lse_kernel[grid](q, q.stride(0), q.stride(1), k, k.stride(0), k.stride(1), v,
                           v.stride(0), v.stride(1), klen, out, out.stride(0), out.stride(1),
                           out.stride(2), lse, lse.stride(0), lse.stride(1), lq, splits,
                           LOG2E / math.sqrt(d), N_BLOCKS=n_blocks, D=d, DV=dv, BM=bm, BN=bn,
                           num_warps=warps, num_stages=stages)
    if splits == 1:
        return out[:, 0, :, 0].to(q.dtype), lse[:, 0, :, 0]
    per = (klen.long() + splits - 1) // splits
    full = torch.arange(splits, device=q.device)[None] * per[:, None] < klen[:, None]
    merged = merge_varlen(out, lse, full, q.dtype)                      # [B, Lq, 1, Dv]
    return merged[:, :, 0], lse          # the chunks' lse (the merge needs no total)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              klen: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """float32 math of ``attention_values``: (out [B, Lq, Dv], lse [B, Lq])."""
    outs, lses = [], []
    for i, n in enumerate(klen.tolist()):
        s = q[i].float() @ k[i, :n].float().t() / math.sqrt(q.shape[-1])
        outs.append(torch.softmax(s, -1) @ v[i, :n].float())
        lses.append(torch.logsumexp(s, -1))
    return torch.stack(outs), torch.stack(lses)


def time_call(fn, iters: int) -> float:
    """Median us of ``fn()`` over ``iters`` calls, each between two CUDA events."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def shape_rows(name: str, iters: int) -> List[Dict[str, object]]:
    b, lq, lk, d, dv = SHAPES[name]
    g = torch.Generator(device='cuda').manual_seed(0)
    q, k = (torch.randn(b, n, d, device='cuda', generator=g, dtype=torch.bfloat16)
            for n in (lq, lk))
    v = torch.randn(b, lk, dv, device='cuda', generator=g, dtype=torch.bfloat16)
    v_full = torch.randn(b, lk, d, device='cuda', generator=g, dtype=torch.bfloat16)
    klen = torch.full((b,), lk, device='cuda', dtype=torch.int32)
    ref = reference(q, k, v, klen)[0]
    # the attention's multiply-adds at 256 + 64 channels, as TFLOP/s of work done
    flops = 2 * b * lq * lk * (d + dv)
    rows: List[Dict[str, object]] = []

    def add(row: Dict[str, object], fn, out_ref: Optional[torch.Tensor]) -> None:
        row = {'shape': name, 'b_lq_lk_d_dv': [b, lq, lk, d, dv], **row}
        try:
            out = fn()
            us = time_call(fn, iters)
            row.update(us=round(us, 1), tflops_at_dv=round(flops / us / 1e6, 1))
            if out_ref is not None:
                err = ((out.float() - out_ref).abs().max() / out_ref.abs().max()).item()
                row['rel_err'] = float(f'{err:.3g}')
        except Exception as exc:  # noqa: BLE001 - a refused shape or config is a result
            row['refused'] = str(exc).splitlines()[0][:200] if str(exc) else repr(exc)
        rows.append(row)
        print(json.dumps(row), flush=True)

    qh, kh = q[:, None], k[:, None]
    add({'kernel': 'flash_256_values (the current call)'},
        lambda: F.scaled_dot_product_attention(qh, kh, v_full[:, None]), None)
    for backend in ('efficient', 'cudnn', 'flash'):
        kind = getattr(torch.nn.attention.SDPBackend, {
            'efficient': 'EFFICIENT_ATTENTION', 'cudnn': 'CUDNN_ATTENTION',
            'flash': 'FLASH_ATTENTION'}[backend])

        def sdpa(kind=kind):
            with torch.nn.attention.sdpa_kernel([kind]):
                return F.scaled_dot_product_attention(qh, kh, v[:, None])[:, 0]
        add({'kernel': f'sdpa_{backend}_{dv}_values'}, sdpa, ref)
    for splits in SPLITS:
        for cfg in CONFIGS:
            add({'kernel': f'triton_{dv}_values', 'splits': splits, 'config': list(cfg)},
                lambda s=splits, c=cfg: attention_values(q, k, v, klen, s, c)[0], ref)
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    from tools.bench.results import save_probe
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--shapes', default=','.join(SHAPES))
    p.add_argument('--iters', type=int, default=20)
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'value_attention_probe.json'))
    a = p.parse_args(argv)
    rows = []
    with torch.inference_mode():
        for name in a.shapes.split(','):
            rows += shape_rows(name, a.iters)
    best = {}
    for r in rows:       # the fastest Triton row of each shape, beside the current call
        if r['kernel'].startswith('triton') and 'us' in r and (
                r['shape'] not in best or r['us'] < best[r['shape']]['us']):
            best[r['shape']] = r
    for name, r in best.items():
        flash = next(x for x in rows if x['shape'] == name and x['kernel'].startswith('flash'))
        print(f"{name}: current {flash.get('us')} us, best Triton {r['us']} us "
              f"(splits {r['splits']}, config {r['config']}, rel_err {r.get('rel_err')})")
    save_probe(a.out, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
