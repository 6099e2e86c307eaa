"""Probe: Hiera's attention calls per block shape, timed under each SDPA backend.

    python -m tools.probes.hiera_attention_probe [--models tiny@512,large@1024]
        [--out $OUT/hiera_attention_probe.json]

Why: at large@1024 the trunk's attention kernels take 3.49 ms of a 10.45 ms frame (census of
run 20261205T182432Z-3367bb) for about 0.2 TFLOP of attention math, while its GEMMs do about
1.5 TFLOP in 4.07 ms. Hiera-L's heads are 72 channels wide; its windows hold 16 to 256 tokens
(4,096 at the three global blocks). Which backend suits which shape decides whether a
per-stage backend choice can cut that time. Each block's attention input is recorded with a
forward hook on sam2's ``MultiScaleAttention`` (random weights, one 1280x720-sized frame
resized to the model's resolution), then SDPA is timed on tensors of each recorded shape and
layout (strided views of one qkv tensor, as sam2 calls it) with every backend that accepts it.
"""

from __future__ import annotations

import argparse
import collections
import math
from contextlib import nullcontext
import os
import sys
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tools.bench.results import save_probe

WARPS = (2, 4, 8)     # num_warps of our window kernel (window_attention.py) timed per shape
BACKENDS = {'flash': SDPBackend.FLASH_ATTENTION, 'cudnn': SDPBackend.CUDNN_ATTENTION,
            'efficient': SDPBackend.EFFICIENT_ATTENTION}
CALLS = 10


def block_shapes(model: str, res: int) -> List[Tuple[int, int, int, int, int]]:
    """Per trunk block: (batch, heads, q tokens, kv tokens, head dim) of its SDPA call."""
    from sam2.modeling.backbones.hieradet import MultiScaleAttention

    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.model import build_model
    cfg = TrackerConfig(model_size=model, image_size=res, random_weights=True, device='cuda')
    sam = build_model(cfg)
    shapes: List[Tuple[int, int, int, int, int]] = []

    def hook(mod, args, _out):
        b, h, w, _ = args[0].shape                   # [B*windows, ws, ws, dim] in
        heads = mod.num_heads
        q_tokens = h * w
        if mod.q_pool is not None:
            q_tokens //= 4
        shapes.append((b, heads, q_tokens, h * w, mod.dim_out // heads))
    handles = [m.register_forward_hook(hook) for m in sam.image_encoder.trunk.modules()
               if isinstance(m, MultiScaleAttention)]
    with torch.inference_mode(), torch.autocast('cuda', dtype=torch.bfloat16):
        sam.image_encoder(torch.zeros(1, 3, res, res, device='cuda'))
    for h in handles:
        h.remove()
    del sam
    torch.cuda.empty_cache()
    return shapes


def time_sdpa(shape: Tuple[int, int, int, int, int], backend: Optional[str],
              reps: int) -> float:
    """Median ms of one SDPA call of the shape under the backend (None: the one torch picks,
    as sam2 calls it); nan where it refuses."""
    b, heads, lq, lk, d = shape
    qkv = torch.randn(b, lk, 3, heads, d, device='cuda', dtype=torch.bfloat16)
    q, k, v = (t.transpose(1, 2) for t in torch.unbind(qkv, 2))
    if lq != lk:
        q = q[:, :, :lq]
    try:
        with nullcontext() if backend is None else sdpa_kernel([BACKENDS[backend]]):
            return _median_ms(lambda: F.scaled_dot_product_attention(q, k, v), reps)
    except RuntimeError:
        return float('nan')


def time_window_kernel(shape: Tuple[int, int, int, int, int], warps: int,
                       reps: int) -> float:
    """Median ms of our window kernel (opt-in 'window_attention') on the shape, pooled
    queries too; nan where it does not take it (windows that do not ``fit``)."""
    from sam2_ros.engine.cuda.kernels.window_attention import fits, window_attention
    b, heads, lq, lk, d = shape
    ws = math.isqrt(lk)
    if lq not in (lk, lk // 4) or ws * ws != lk or not fits(lk, d):
        return float('nan')
    pool = (ws, 2, 2) if lq < lk else None           # a stage change's 2x2 query pooling
    qkv = torch.randn(b, lk, 3, heads, d, device='cuda', dtype=torch.bfloat16)
    return _median_ms(lambda: window_attention(qkv, num_warps=warps, pool=pool), reps)


def _median_ms(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(CALLS):       # back to back: the kernels', not the launches'
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / CALLS)
    times.sort()
    return times[len(times) // 2]


def probe(model: str, res: int, reps: int) -> List[Dict[str, object]]:
    counts = collections.Counter(block_shapes(model, res))
    rows = []
    for shape, n in counts.items():
        ms = {name: time_sdpa(shape, name, reps) for name in BACKENDS}
        default = time_sdpa(shape, None, reps)
        ms.update({f'window_w{w}': time_window_kernel(shape, w, reps) for w in WARPS})
        rows.append({'model': model, 'res': res, 'shape_b_h_lq_lk_d': list(shape),
                     'blocks': n, 'default_ms': default,
                     **{f'{k}_ms': v for k, v in ms.items()}})
        best = min((v, k) for k, v in ms.items() if v == v)
        print(f'{model}@{res} {shape} x{n}: default {default:.4f} ' +
              ' '.join(f'{k} {v:.4f}' for k, v in ms.items()) + f' best {best[1]}', flush=True)
    total = {k: sum(r['blocks'] * r[f'{k}_ms'] for r in rows)
             for k in ['default', *BACKENDS]}
    # the window kernel where it takes the shape, the default elsewhere (as the opt-in does)
    for w in WARPS:
        total[f'window_w{w}'] = sum(
            r['blocks'] * (r[f'window_w{w}_ms'] if r[f'window_w{w}_ms'] == r[f'window_w{w}_ms']
                           else r['default_ms']) for r in rows)
    best = sum(r['blocks'] * min(v for k, v in r.items() if k.endswith('_ms') and v == v)
               for r in rows)
    print(f'{model}@{res} total ms per frame: ' +
          ' '.join(f'{k} {v:.3f}' for k, v in total.items()) + f' best-per-shape {best:.3f}')
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--models', default='tiny@512,large@1024')
    p.add_argument('--reps', type=int, default=30)
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'hiera_attention_probe.json'))
    a = p.parse_args(argv)
    rows = []
    for item in a.models.split(','):
        model, res = item.split('@')
        rows += probe(model, int(res), a.reps)
    save_probe(a.out, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
