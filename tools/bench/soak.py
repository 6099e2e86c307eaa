"""Long-stream soak of the streaming tracker: is memory and frame time flat over many frames?

Synthetic frames (``sam2_ros.synthetic``, default 1280x720: a textured background with two
moving discs), up to
``--objects`` objects: the object count alternates between all of them and one, every
``--churn`` frames (the oldest objects are removed, new ids added, alternately via add_prompt
and queue_prompt); every ``--correct-every`` frames one object gets a correction (a positive
and a negative click). Recorded per ``--window`` frames (default 1000):
torch.cuda.memory_allocated / max_memory_allocated (CUDA only), host RSS, p50/p99 frame ms
(time.perf_counter around track(), which ends in a device-to-host copy, so it includes the
GPU work), and the graph / eager / mixed frame counts, fallbacks and failed frames.

    python -m tools.bench.soak --frames 10000 --objects 5 --out out/soak.json    # H200
    python -m tools.bench.soak --frames 60 --image-size 64 --device cpu \
        --random-weights --width 64 --height 48 --window 20                         # smoke

Without ``--checkpoint`` the model has random weights (needs ``--random-weights``): the masks
are meaningless but the memory and time behaviour is the one being measured.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np


def rss_mib() -> float:
    with open('/proc/self/statm') as fh:
        return int(fh.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20


def click(obj_id: int, h: int, w: int, rng, correction: bool = False):
    from sam2_ros.engine.types import Prompt

    x, y = rng.uniform(0.05 * w, 0.95 * w), rng.uniform(0.05 * h, 0.95 * h)
    if not correction:
        return Prompt(obj_id, points=np.array([[x, y]]), labels=np.array([1]))
    return Prompt(obj_id, points=np.array([[x, y], [w - x, h - y]]), labels=np.array([1, 0]))


def run(args) -> Dict:
    import torch

    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.synthetic import SyntheticCamera

    cuda = torch.device(args.device).type == 'cuda'
    cfg = TrackerConfig(model_size=args.model, image_size=args.image_size,
                        checkpoint=args.checkpoint, random_weights=args.random_weights,
                        device=args.device, precision=args.precision,
                        max_objects=args.objects, use_cuda_graphs=not args.eager,
                        graph_mode=args.graph_mode)
    t0 = time.perf_counter()
    tr = StreamingTracker(cfg)
    build_s = time.perf_counter() - t0
    # distinct frames drawn once and cycled: the soak measures the tracker, not the camera
    frames = SyntheticCamera(args.width, args.height, objects=2).frames(args.distinct_frames)
    rng = np.random.default_rng(0)
    bank_ptrs = {k: v.data_ptr() for k, v in vars(tr.bank).items()
                 if isinstance(v, torch.Tensor)}
    live: List[int] = []
    next_id = 1
    windows, times, modes = [], [], collections.Counter()
    failed = 0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t_run = time.perf_counter()
    for f in range(args.frames):
        if f % args.churn == 0:
            target = args.objects if (f // args.churn) % 2 == 0 else 1
            while len(live) > target:
                tr.remove_object(live.pop(0))
            while len(live) < target:
                p = click(next_id, args.height, args.width, rng)
                if f == 0 or (f // args.churn) % 4 == 2:
                    tr.queue_prompt(p)
                else:
                    tr.add_prompt(p)
                live.append(next_id)
                next_id = next_id % 255 + 1
                while next_id in live:
                    next_id = next_id % 255 + 1
        t = time.perf_counter()
        try:
            res = tr.track(frames[f % len(frames)])
            modes[res.mode] += 1
        except Exception as exc:  # noqa: BLE001 - a soak reports failures, it does not stop
            failed += 1
            print(f'frame {f} failed: {exc!r}', file=sys.stderr)
        times.append((time.perf_counter() - t) * 1e3)
        if f % args.correct_every == args.correct_every // 2 and live:
            tr.add_prompt(click(live[int(rng.integers(len(live)))], args.height, args.width,
                                rng, correction=True))
        if (f + 1) % args.window == 0 or f + 1 == args.frames:
            ms = np.array(times)
            w = {'frames_to': f + 1, 'objects_now': len(live),
                 'p50_ms': round(float(np.percentile(ms, 50)), 2),
                 'p99_ms': round(float(np.percentile(ms, 99)), 2),
                 'max_ms': round(float(ms.max()), 2),
                 'host_rss_mib': round(rss_mib(), 1),
                 'graph_frames': modes['graph'], 'eager_frames': modes['eager'],
                 'mixed_frames': modes['mixed'], 'failed_frames': failed,
                 'fallbacks': int(tr.stats.get('fallbacks', 0))}
            if cuda:
                w['cuda_allocated_mib'] = round(torch.cuda.memory_allocated() / 2**20, 1)
                w['cuda_max_allocated_mib'] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
            windows.append(w)
            print(json.dumps(w), flush=True)      # survives a time limit that cuts the run
            times, modes, failed = [], collections.Counter(), 0
    now = {k: v.data_ptr() for k, v in vars(tr.bank).items() if isinstance(v, torch.Tensor)}
    first, last = windows[0], windows[-1]
    summary = {
        'p99_ms_change_pct': round(100 * (last['p99_ms'] / first['p99_ms'] - 1), 1),
        'host_rss_change_mib': round(last['host_rss_mib'] - first['host_rss_mib'], 1),
        'bank_reallocated': now != bank_ptrs,
    }
    if cuda:
        summary['cuda_allocated_change_mib'] = round(
            last['cuda_allocated_mib'] - first['cuda_allocated_mib'], 1)
    return {
        'config': {k: v for k, v in vars(args).items() if k != 'out'},
        'device_name': torch.cuda.get_device_name(torch.device(args.device)) if cuda else 'cpu',
        'torch': torch.__version__, 'build_s': round(build_s, 1),
        'wall_s': round(time.perf_counter() - t_run, 1), 'ids_used': next_id,
        'stats': {k: int(v) for k, v in tr.stats.items()},
        'fallback_reasons': dict(tr.fallback_reasons),
        'windows': windows, 'summary': summary,
    }


def table(result: Dict) -> str:
    cols = ['frames_to', 'objects_now', 'p50_ms', 'p99_ms', 'host_rss_mib', 'cuda_allocated_mib',
            'cuda_max_allocated_mib', 'graph_frames', 'eager_frames', 'mixed_frames',
            'failed_frames', 'fallbacks']
    cols = [c for c in cols if c in result['windows'][0]]
    lines = [' '.join(f'{c:>12.12}' for c in cols)]
    for w in result['windows']:
        lines.append(' '.join(f'{w[c]:>12}' for c in cols))
    lines.append(json.dumps(result['summary']))
    return '\n'.join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog='python -m tools.bench.soak', description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--frames', type=int, default=10000)
    p.add_argument('--objects', type=int, default=5)
    p.add_argument('--churn', type=int, default=300, help='frames between add/remove events')
    p.add_argument('--correct-every', type=int, default=100)
    p.add_argument('--window', type=int, default=1000, help='frames per recorded window')
    p.add_argument('--width', type=int, default=1280)
    p.add_argument('--height', type=int, default=720)
    p.add_argument('--distinct-frames', type=int, default=32,
                   help='synthetic frames generated and cycled')
    p.add_argument('--model', default='tiny')
    p.add_argument('--image-size', type=int, default=1024)
    p.add_argument('--precision', default='bf16')
    p.add_argument('--device', default='cuda')
    p.add_argument('--eager', action='store_true', help='no CUDA graphs')
    p.add_argument('--graph-mode', default='swap', choices=('swap', 'batched'))
    p.add_argument('--checkpoint', default=None)
    p.add_argument('--random-weights', action='store_true')
    p.add_argument('--out', default=None, help='JSON file for the results')
    args = p.parse_args(argv)
    if args.checkpoint is None and not args.random_weights:
        p.error('give --checkpoint PATH (official SAM 2.1 .pt) or --random-weights')
    if args.device == 'cpu':
        args.precision = 'fp32' if args.precision == 'bf16' else args.precision
    result = run(args)
    print(table(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(f'wrote {args.out}')
    return 1 if result['summary']['bank_reallocated'] else 0


if __name__ == '__main__':
    sys.exit(main())
