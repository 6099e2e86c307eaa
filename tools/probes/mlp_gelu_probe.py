"""Probe: a Hiera block's MLP as sam2 runs it against the 'hiera_mlp' group's (fc1 + exact GELU
in one Triton GEMM, ``engine/cuda/kernels/mlp_gelu.py``), per stage shape of each model.

    python -m tools.probes.mlp_gelu_probe [--models tiny,large] [--res 512,1024]
        [--precision bf16,fp32] [--batch 1] [--reps 20] [--out $OUT/mlp_gelu_probe.json]

Why: the group saves GELU's pass over the [M, 4C] hidden (a read and a write of the block's
largest tensor) only if our GEMM is about as fast as cuBLAS's for fc1; it stays on by default
only where ours is faster than sam2's fc1 + GELU in bf16 for tiny and large. Per stage shape
(M = batch x tokens, C, 4C; sam2's own MLP modules, random weights): microseconds of sam2's
fc1 + GELU, of ``linear_gelu``, of sam2's whole MLP and of ``GeluMLP``, each the mean of
``reps`` calls captured into one CUDA graph (as the tracker replays them; launch overhead
out), bf16 as the tracker runs it (bf16 input from the fused norm, weights stored in bf16,
autocast) and fp32 (TF32 off). ``per_frame_us_saved``: blocks of that shape x (sam2 - ours).
On the CPU (``--device cpu``, the CPU test) the kernel runs in Triton's interpreter, timed by
the wall clock: a check of the code, not a measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Callable, Dict, List, Tuple

import torch
import torch.nn.functional as F

PATCH_STRIDE = 4     # Hiera's patch embedding: a 4 x 4 stride


def block_shapes(model: str, res: int, batch: int = 1) -> List[Dict[str, int]]:
    """Per stage of the model's Hiera trunk: its blocks' MLP shape, from sam2's config
    (embed_dim, stages; Hiera's defaults: channels x2 and a 2 x 2 pooling per stage, MLP
    ratio 4)."""
    from omegaconf import OmegaConf
    import sam2

    from sam2_ros.engine.config import MODEL_CONFIGS
    path = os.path.join(os.path.dirname(sam2.__file__), MODEL_CONFIGS[model])
    trunk = OmegaConf.load(path).model.image_encoder.trunk
    side = res // PATCH_STRIDE
    rows = []
    for i, blocks in enumerate(trunk.stages):
        c = trunk.embed_dim * 2 ** i
        rows.append({'stage': i + 1, 'blocks': int(blocks), 'm': batch * side * side, 'c': c,
                     'hidden': 4 * c})
        side //= 2
    return rows


def timer(device: str, reps: int) -> Callable[[Callable[[], object]], float]:
    """A function timing ``fn``: mean microseconds per call. CUDA: ``reps`` calls captured in
    one graph (after a warm-up call, in which the kernel compiles and picks its blocks),
    replayed 5 times between events; CPU: the wall clock over ``reps`` calls."""
    def cuda(fn) -> float:
        fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(reps):
                fn()
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e3 / (5 * reps)

    def cpu(fn) -> float:
        fn()
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t) * 1e6 / reps
    return cuda if device == 'cuda' else cpu


def row(model: str, res: int, shape: Dict[str, int], precision: str, device: str,
        reps: int) -> Dict[str, object]:
    """One shape's timings (module docstring) and the largest |ours - sam2| of the MLP's
    output relative to max |sam2|."""
    from sam2.modeling.sam2_utils import MLP

    from sam2_ros.engine.cuda.kernels.mlp_gelu import GeluMLP, linear_gelu
    torch.manual_seed(0)
    c, hid, m = shape['c'], shape['hidden'], shape['m']
    mlp = MLP(c, hid, c, num_layers=2, activation=torch.nn.GELU).to(device).eval()
    bf16 = precision == 'bf16'
    dtype = torch.bfloat16 if bf16 else torch.float32
    mlp = mlp.to(dtype)               # bf16: weights stored in bf16 (precast_weights)
    ours = GeluMLP(mlp)
    x = torch.randn(1, m, c, device=device).to(dtype)           # [B, HW, C] as FusedHiera's
    fc1 = mlp.layers[0]
    rows2d = x.view(m, c)
    ctx = torch.autocast(device, torch.bfloat16) if bf16 else contextlib.nullcontext()
    time_us = timer(device, reps)
    with torch.inference_mode(), ctx:
        out = {'sam2_fc1_gelu_us': time_us(lambda: F.gelu(fc1(x))),
               'ours_fc1_gelu_us': time_us(lambda: linear_gelu(rows2d, fc1.weight, fc1.bias,
                                                               dtype)),
               'sam2_mlp_us': time_us(lambda: mlp(x)),
               'ours_mlp_us': time_us(lambda: ours(x))}
        ref, got = mlp(x).float(), ours(x).float()
    rel = float((got - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
    saved = shape['blocks'] * (out['sam2_mlp_us'] - out['ours_mlp_us'])
    return {'model': model, 'res': res, 'precision': precision, **shape,
            **{k: round(v, 2) for k, v in out.items()},
            'fc1_gelu_speedup': round(out['sam2_fc1_gelu_us'] / out['ours_fc1_gelu_us'], 3),
            'mlp_speedup': round(out['sam2_mlp_us'] / out['ours_mlp_us'], 3),
            'per_frame_us_saved': round(saved, 1), 'rel_err': rel}


def build_rows(models: List[str], res: List[int], precisions: List[str], batch: int,
               device: str, reps: int) -> List[Dict[str, object]]:
    rows = []
    for p in precisions:
        for model in models:
            for r in res:
                for shape in block_shapes(model, r, batch):
                    rows.append(row(model, r, shape, p, device, reps))
                    print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: List[Dict[str, object]]) -> str:
    """The rows as a fixed-width table, one line per shape, then the frame's sum per model."""
    cols = ('model', 'res', 'precision', 'stage', 'blocks', 'm', 'c', 'sam2_fc1_gelu_us',
            'ours_fc1_gelu_us', 'fc1_gelu_speedup', 'sam2_mlp_us', 'ours_mlp_us',
            'mlp_speedup', 'per_frame_us_saved')
    width = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in cols}
    lines = [' '.join(f'{c:>{width[c]}}' for c in cols)]
    lines += [' '.join(f'{str(r[c]):>{width[c]}}' for c in cols) for r in rows]
    sums: Dict[Tuple, List[float]] = {}
    for r in rows:
        key = (r['model'], r['res'], r['precision'])
        saved, slowest = sums.get(key, [0.0, float('inf')])
        sums[key] = [saved + r['per_frame_us_saved'], min(slowest, r['fc1_gelu_speedup'])]
    # the group's rule: on by default only if ours beats sam2's fc1 + GELU in bf16 for tiny and
    # large, i.e. every bf16 line's smallest speedup > 1
    lines += [f'{m}@{res} {p}: {us:.1f} us per frame saved, fc1 + GELU speedup >= {low:.3f}'
              for (m, res, p), (us, low) in sums.items()]
    return '\n'.join(lines)


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--models', default='tiny,large')
    p.add_argument('--res', default='512,1024')
    p.add_argument('--precision', default='bf16,fp32')
    p.add_argument('--batch', type=int, default=1)
    p.add_argument('--reps', type=int, default=20)
    p.add_argument('--device', default='cuda')
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'mlp_gelu_probe.json'))
    a = p.parse_args(argv)
    a.models = a.models.split(',')
    a.res = [int(r) for r in a.res.split(',')]
    a.precision = a.precision.split(',')
    if any(x not in ('bf16', 'fp32') for x in a.precision):
        p.error(f'--precision: bf16 and/or fp32, got {a.precision}')
    return a


def main(argv=None) -> int:
    from tools.bench.results import save_probe
    a = parse(argv)
    torch.backends.cuda.matmul.allow_tf32 = False       # fp32 as torch's default: no TF32
    rows = build_rows(a.models, a.res, a.precision, a.batch, a.device, a.reps)
    print(table(rows))
    save_probe(a.out, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
