"""Probe: what one step of N cameras costs in the engine, against one camera with the same
objects and against N separate one-camera steps (tiny@512 bf16 by default, random weights,
1280x720 synthetic frames, each object a box prompt on frame 0, then steady tracking).

    python -m tools.probes.multistream_probe [--objects 1,3] [--out $OUT/multistream.json]

Why: a node serving both cameras of a stereo pair measured 7.9 ms per pair in ``track`` at one
object per camera, where one camera takes about 4 ms; this says whether the engine's batched
step of two cameras is the cost (its kernels and its host time), or the node around it.
Per row: median ms per step (all masks on the host), GPU kernels and kernel ms per step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Dict, List

import torch

from tools.bench.results import save_probe


def tracker(cameras: int, objects: int, batch_streams: bool = True, device: str = 'cuda',
            res: int = 512):
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.multistream import MultiStreamTracker
    from sam2_ros.engine.types import Prompt
    from sam2_ros.synthetic import SyntheticCamera
    cfg = TrackerConfig(model_size='tiny', image_size=res, random_weights=True, device=device,
                        precision='bf16' if device == 'cuda' else 'fp32', max_objects=8,
                        batch_streams=batch_streams)
    tr = MultiStreamTracker(cfg, cameras=cameras)
    cams = [SyntheticCamera(1280, 720, objects=max(2, objects), seed=c) for c in range(cameras)]
    frames = [[cam.frame(t) for cam in cams] for t in range(80)]
    tr.track(frames[0])
    for c, cam in enumerate(cams):
        for i, box in enumerate(cam.boxes(0, objects)):
            tr.stream(c).add_prompt(Prompt(i + 1, box=box))
    return tr, frames


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measure(tr, frames: List) -> Dict[str, float]:
    from torch.profiler import ProfilerActivity, profile
    for f in frames[1:21]:                           # past the 15 frames after a prompt
        tr.track(f)
    times = []
    for f in frames[21:71]:
        _sync()
        t = time.perf_counter()
        tr.track(f)
        times.append((time.perf_counter() - t) * 1e3)
    acts = [ProfilerActivity.CUDA] if torch.cuda.is_available() else [ProfilerActivity.CPU]
    with profile(activities=acts) as prof:
        for f in frames[71:76]:
            tr.track(f)
        _sync()
    ks = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
          and not e.name.lower().startswith(('memcpy', 'memset'))]
    us = sum(e.device_time if hasattr(e, 'device_time') else e.cuda_time for e in ks)
    return {'ms_p50': round(statistics.median(times), 3), 'kernels': len(ks) / 5,
            'kernel_ms': round(us / 1e3 / 5, 3), 'graph_steps': tr.stats.get('graph_steps', 0),
            'eager_steps': tr.stats.get('eager_steps', 0),
            'fallbacks': tr.stats.get('fallbacks', 0)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--objects', default='1,3')
    p.add_argument('--device', default='cuda')
    p.add_argument('--res', type=int, default=512)
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'multistream.json'))
    a = p.parse_args(argv)
    rows = []
    for n in [int(x) for x in a.objects.split(',')]:
        for name, cams, objs, batch in (('1 camera', 1, n, True),
                                        ('1 camera, objects of both', 1, 2 * n, True),
                                        ('2 cameras batched', 2, n, True),
                                        ('2 cameras, batch_streams off', 2, n, False)):
            tr, frames = tracker(cams, objs, batch, a.device, a.res)
            row = {'case': name, 'cameras': cams, 'objects_per_camera': objs,
                   **measure(tr, frames)}
            rows.append(row)
            print(json.dumps(row), flush=True)
            del tr
            torch.cuda.empty_cache()
    save_probe(a.out, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
