"""Kernel census of tracked frames: kernels per frame, GPU kernel ms per frame, ms per frame and
the kernel groups, for trackers with and without fused kernels (TrackerConfig.fused_kernels).

    python tools/probes/kernel_census.py --objects 1,8 --out $OUT/census.json

Random weights, 1280x720 synthetic frames, each object prompted by a box on frame 0, then
steady tracking; ms/frame is the median wall time of ``track()`` (masks on the host).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Dict, List

import torch

from tools.bench.profiling import group_of

def make(model: str, res: int, objects: int, fused, precision: str):
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.engine.types import Prompt
    from sam2_ros.synthetic import SyntheticCamera
    cfg = TrackerConfig(model_size=model, image_size=res, random_weights=True, device='cuda',
                        precision=precision, max_objects=max(8, objects),
                        graph_mode='batched', fused_kernels=fused)
    t0 = time.perf_counter()
    tr = StreamingTracker(cfg)
    configure_s = time.perf_counter() - t0
    cam = SyntheticCamera(1280, 720, objects=max(2, objects), seed=0)
    frames = [cam.frame(t) for t in range(96)]
    tr.track(frames[0])
    for i, box in enumerate(cam.boxes(0, objects)):
        tr.add_prompt(Prompt(i + 1, box=box))
    return tr, frames, configure_s


def census(tr, frames: List, n: int = 5) -> Dict[str, object]:
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for f in frames[:n]:
            tr.track(f)
        torch.cuda.synchronize()
    per_name: Dict[str, list] = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        low = e.name.lower()
        if low.startswith('memcpy') or low.startswith('memset'):
            continue
        us = e.device_time if hasattr(e, 'device_time') else e.cuda_time
        item = per_name.setdefault(e.name[:100], [0, 0.0])
        item[0] += 1
        item[1] += us
    groups: Dict[str, list] = {}
    for name, (count, us) in per_name.items():
        g = groups.setdefault(group_of(name), [0, 0.0])
        g[0] += count
        g[1] += us
    top = sorted(per_name.items(), key=lambda kv: -kv[1][1])[:25]
    return {
        'kernels_per_frame': round(sum(c for c, _ in per_name.values()) / n, 1),
        'gpu_kernel_ms': round(sum(u for _, u in per_name.values()) / 1e3 / n, 4),
        'groups': {g: {'kernels': round(c / n, 1), 'ms': round(u / 1e3 / n, 4)}
                   for g, (c, u) in sorted(groups.items(), key=lambda kv: -kv[1][1])},
        'top': [[name, round(c / n, 1), round(u / 1e3 / n, 4)] for name, (c, u) in top],
    }


def wall_ms(tr, frames: List) -> float:
    times = []
    for f in frames:
        torch.cuda.synchronize()
        t = time.perf_counter()
        tr.track(f)
        times.append((time.perf_counter() - t) * 1e3)
    return round(statistics.median(times), 3)


def row(model: str, res: int, objects: int, fused, precision: str) -> Dict[str, object]:
    tr, frames, configure_s = make(model, res, objects, fused, precision)
    for f in frames[1:21]:                              # past the 15 frames after a prompt
        tr.track(f)
    ms = wall_ms(tr, frames[21:81])
    out = {'model': model, 'res': res, 'objects': objects, 'fused_kernels': fused,
           'precision': precision, 'ms_per_frame_p50': ms, 'configure_s': round(configure_s, 2),
           'eager_steps': tr.stats.get('eager_steps', 0),
           'fallbacks': dict(tr.fallback_reasons)}
    out.update(census(tr, frames[81:86]))
    del tr
    torch.cuda.empty_cache()
    return out


def warm_start_s(model: str, res: int) -> float:
    """Configure time of a fresh process (Triton's on-disk kernel cache now warm)."""
    code = ('import time, torch; from sam2_ros.engine.config import TrackerConfig; '
            'from sam2_ros.engine.tracker import StreamingTracker; t = time.perf_counter(); '
            f'StreamingTracker(TrackerConfig(model_size={model!r}, image_size={res}, '
            'random_weights=True, max_objects=8)); print(time.perf_counter() - t)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         check=True)
    return round(float(out.stdout.strip().splitlines()[-1]), 2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--model', default='tiny')
    p.add_argument('--res', type=int, default=512)
    p.add_argument('--objects', default='1,8')
    p.add_argument('--precision', default='bf16')
    p.add_argument('--warm-start', action='store_true', help='also time a fresh process start')
    p.add_argument('--out', default=None)
    a = p.parse_args()
    rows = []
    for n in [int(x) for x in a.objects.split(',')]:
        for fused in (True, False):
            r = row(a.model, a.res, n, fused, a.precision)
            rows.append(r)
            print(f"{a.model}@{a.res} x{n} fused={fused}: {r['kernels_per_frame']} kernels, "
                  f"{r['gpu_kernel_ms']} ms kernels, {r['ms_per_frame_p50']} ms/frame, "
                  f"configure {r['configure_s']} s, groups "
                  + ', '.join(f"{g} {v['kernels']}/{v['ms']}" for g, v in r['groups'].items()),
                  flush=True)
    result = {'rows': rows, 'torch': torch.__version__, 'gpu': torch.cuda.get_device_name()}
    if a.warm_start:
        result['warm_start_configure_s'] = warm_start_s(a.model, a.res)
        print('warm start configure', result['warm_start_configure_s'], 's', flush=True)
    if a.out:
        with open(a.out, 'w') as f:
            json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
