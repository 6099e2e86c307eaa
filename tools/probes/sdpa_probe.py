"""Probe: PyTorch's attention backends on the attention shapes of a tracked frame.

    python -m tools.probes.sdpa_probe [--out $OUT/sdpa_probe.json]

Why: at large@1024 the memory attention's FlashAttention calls (one head of 256 channels,
4,096 queries over up to 28,736 keys) are about 1.7 ms of a frame's 10 ms of kernels, and
Hiera-L's global attention (8 heads of 72 channels over 4,096 tokens) runs cuDNN's kernel
padded to 128 channels. Which backend is fastest per shape, and by how much, decides whether
another steady-state kernel is worth building. Each shape is timed per backend (FlashAttention,
cuDNN, memory-efficient) with CUDA events, bf16, the median of ``--iters`` calls; a backend
that refuses a shape is reported as such. Relative error against float32 math on the same
inputs is reported too (the backends differ in summation order and rounding). Where one
call's heads and query tiles leave the GPU idle, FlashAttention over key chunks merged by the
package's kernel (``attention.split_attention``, the chunks ``attention.kv_splits`` picks) is
timed too. Calls are timed inside a CUDA graph (``time_call``), as the tracker runs them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from sam2_ros.engine.attention import kv_splits, split_attention
from sam2_ros.engine.cuda.kernels.split_merge import merge_splits
from tools.bench.results import save_probe

# name -> (batch, heads, queries, keys, head dim)
SHAPES: Dict[str, Tuple[int, int, int, int, int]] = {
    'large_mem_cross_full': (1, 1, 4096, 7 * 4096 + 64, 256),
    'large_mem_self': (1, 1, 4096, 4096, 256),
    'large_hiera_global': (1, 8, 4096, 4096, 72),
    'large_hiera_window256': (16, 8, 256, 256, 72),
    'tiny_mem_cross_full': (1, 1, 1024, 7 * 1024 + 64, 256),
    'tiny_mem_cross_8obj': (8, 1, 1024, 7 * 1024 + 64, 256),
    # the memory attention's self-attention at one and three tiny objects: 16 query tiles of
    # one head leave most multiprocessors idle (the 'split' row splits its keys)
    'tiny_mem_self': (1, 1, 1024, 1024, 256),
    'tiny_mem_self_3obj': (3, 1, 1024, 1024, 256),
}
BACKENDS = {'flash': SDPBackend.FLASH_ATTENTION, 'cudnn': SDPBackend.CUDNN_ATTENTION,
            'efficient': SDPBackend.EFFICIENT_ATTENTION}


def time_call(fn, iters: int, per_graph: int = 10) -> float:
    """Median us of one ``fn()`` on the GPU: ``per_graph`` calls captured in one CUDA graph,
    each replay between two CUDA events, as the tracker's graphs run them. Timed eagerly
    (one call between events) where the capture fails; then the host's launch time counts
    too, which for calls of a few tens of us is most of what is measured."""
    for _ in range(3):
        fn()
    run, calls = fn, 1
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(per_graph):
                fn()
        run, calls = graph.replay, per_graph
    except Exception:  # noqa: BLE001 - a call that cannot be captured is timed eagerly
        torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(times)


def shape_rows(name: str, shape: Tuple[int, int, int, int, int],
               iters: int) -> List[Dict[str, object]]:
    b, h, lq, lk, d = shape
    g = torch.Generator(device='cuda').manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device='cuda', generator=g, dtype=torch.bfloat16)
               for n in (lq, lk, lk))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    flops = 4 * b * h * lq * lk * d
    rows = []
    for backend, kind in BACKENDS.items():
        def call(kind=kind):
            with sdpa_kernel([kind]):
                return F.scaled_dot_product_attention(q, k, v)
        rows.append(measure({'shape': name, 'bhqkd': list(shape), 'backend': backend}, call,
                            ref, flops, iters))
    splits = kv_splits(b, h, lq, lk)
    if splits > 1:       # FlashAttention over key chunks, merged by the package's kernel
        rows.append(measure({'shape': name, 'bhqkd': list(shape), 'backend': 'split',
                             'splits': splits},
                            lambda: split_attention(q, k, v, splits, merge_splits), ref, flops,
                            iters))
    return rows


def measure(row: Dict[str, object], fn, ref: Optional[torch.Tensor], flops: float,
            iters: int, rate: str = 'tflops') -> Dict[str, object]:
    """``row`` with ``fn()``'s time (``time_call``), its work as TFLOP/s under ``rate`` and
    its largest error relative to ``ref``'s largest magnitude (where ``ref`` is given); a
    call that refuses the shape or configuration gets 'refused' (a result too). Printed."""
    try:
        out = fn()
        us = time_call(fn, iters)
        row.update({'us': round(us, 1), rate: round(flops / us / 1e6, 1)})
        if ref is not None:
            err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
            row['rel_err'] = float(f'{err:.3g}')
    except Exception as exc:  # noqa: BLE001 - a refused shape or config is a result
        row['refused'] = str(exc).splitlines()[0][:200] if str(exc) else repr(exc)
    print(json.dumps(row), flush=True)
    return row


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--shapes', default=','.join(SHAPES))
    p.add_argument('--iters', type=int, default=30)
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'sdpa_probe.json'))
    a = p.parse_args(argv)
    rows = []
    with torch.inference_mode():
        for name in a.shapes.split(','):
            rows += shape_rows(name, SHAPES[name], a.iters)
    save_probe(a.out, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
