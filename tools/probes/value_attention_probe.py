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
fast as FlashAttention takes 256 and 256 (FlashAttention refuses them); the package's Triton
kernel for it (``sam2_ros/engine/cuda/kernels/value_attention.py``, the opt-in fused group
'memory_values') is timed here per shape, split-KV chunk count and kernel configuration
against FlashAttention's current call and PyTorch's backends with 64-channel values, bf16,
CUDA events, the median of ``--iters`` calls, each row's error against float32 math beside.
Its rows choose the kernel's configuration (``value_attention.CONFIG``) and say whether the
group pays.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from sam2_ros.engine.cuda.kernels.value_attention import values_attention
from tools.probes.sdpa_probe import measure

# name -> (batch (objects), queries, keys, key channels, value channels)
SHAPES: Dict[str, Tuple[int, int, int, int, int]] = {
    'large_mem_cross_full': (1, 4096, 7 * 4096 + 64, 256, 64),
    'tiny_mem_cross_full': (1, 1024, 7 * 1024 + 64, 256, 64),
    'tiny_mem_cross_8obj': (8, 1024, 7 * 1024 + 64, 256, 64),
}
# (block of queries, block of keys, warps, pipeline stages)
CONFIGS = ((64, 64, 4, 2), (64, 64, 4, 3), (128, 64, 8, 3), (64, 32, 4, 3))
SPLITS = (1, 2, 4, 8, 16)


def attention_values(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, splits: int,
                     config: Tuple[int, int, int, int]) -> torch.Tensor:
    """q [B, Lq, D], k [B, Lk, D], v [B, Lk, Dv] -> [B, Lq, Dv]: the package's kernel
    (``value_attention.values_attention``) with every row over all its keys."""
    b, lk, d = k.shape
    return values_attention(q, k.reshape(b * lk, d), v.reshape(b * lk, -1), None, lk, splits,
                            config=config)[0]


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """float32 math of ``attention_values``: [B, Lq, Dv]."""
    s = q.float() @ k.float().transpose(1, 2) / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ v.float()


def shape_rows(name: str, iters: int) -> List[Dict[str, object]]:
    b, lq, lk, d, dv = SHAPES[name]
    g = torch.Generator(device='cuda').manual_seed(0)
    q, k = (torch.randn(b, n, d, device='cuda', generator=g, dtype=torch.bfloat16)
            for n in (lq, lk))
    v = torch.randn(b, lk, dv, device='cuda', generator=g, dtype=torch.bfloat16)
    v_full = torch.randn(b, lk, d, device='cuda', generator=g, dtype=torch.bfloat16)
    ref = reference(q, k, v)
    # the attention's multiply-adds at 256 + 64 channels, as TFLOP/s of work done
    flops = 2 * b * lq * lk * (d + dv)
    rows: List[Dict[str, object]] = []

    def add(row: Dict[str, object], fn, out_ref: Optional[torch.Tensor]) -> None:
        rows.append(measure({'shape': name, 'b_lq_lk_d_dv': [b, lq, lk, d, dv], **row}, fn,
                            out_ref, flops, iters, rate='tflops_at_dv'))

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
                lambda s=splits, c=cfg: attention_values(q, k, v, s, c), ref)
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
