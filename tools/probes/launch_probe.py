"""Probe: every Triton kernel of the package at a tracked frame's shapes, under other launch
settings (warps, pipeline stages, a loop's unroll factor), each output compared bitwise.

    python -m tools.probes.launch_probe [--model tiny --res 512 --objects 1]
        [--max-objects 8] [--warps 2,4,8] [--stages 1,2,3,4] [--unroll 1,2,4,8] [--min-us 4]
        [--flag NAME=0,1 ...] [--out $OUT/launch_probe.json]

Why: the kernel census of a tiny@512 frame (benchmarks/results/h200_extra.json) shows our own
kernels at 40% of the frame's kernel time, several of them at 20-30 us on a few thousand
pixels (the frame's resize, the memory encoder's depthwise convolution, the heads' MLPs):
latency, not work. Their launch settings were picked once, by hand. Here a tracker is built
(graphs on, random weights) and runs a few frames while ``launch.recording`` keeps every
launch; each distinct launch (kernel, grid, argument shapes, strides, dtypes, scalars) is
then timed again in a CUDA graph of ``--repeat`` launches under each setting, and its outputs
(every tensor argument after the launch, from the same inputs) are compared byte for byte
with those of the package's own setting. Rows: the kernel, its launch, the package's time,
every setting's time and whether it was bitwise equal, the fastest equal one. A setting is
only worth taking where it is bitwise equal and faster at every shape of that kernel.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from sam2_ros.engine.cuda.kernels import launch
from tools.bench.results import save_probe


def signature(rec: launch.Launch) -> Tuple:
    """What makes two launches the same work: kernel, grid, each argument's shape, strides
    and dtype (tensors) or value, the keyword settings."""
    def one(a: Any):
        if isinstance(a, torch.Tensor):
            return ('T', tuple(a.shape), tuple(a.stride()), str(a.dtype))
        return ('V', repr(a))
    return (rec.kernel.__name__, tuple(rec.grid), tuple(one(a) for a in rec.args),
            tuple(sorted((k, repr(v)) for k, v in rec.kwargs.items())))


def tensors_of(rec: launch.Launch) -> List[torch.Tensor]:
    """Each tensor argument's whole storage as bytes, once per storage (arguments may be
    views of one buffer, or expanded: stride 0)."""
    seen, out = set(), []
    for a in rec.args:
        if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() not in seen:
            st = a.untyped_storage()
            seen.add(st.data_ptr())
            out.append(torch.empty(0, dtype=torch.uint8, device=a.device).set_(
                st, 0, (st.nbytes(),), (1,)))
    return out


def run_once(rec: launch.Launch, kwargs: Dict[str, Any], snapshot: List[torch.Tensor],
             tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    """The launch from the snapshot's inputs: every argument's storage afterwards."""
    for t, s in zip(tensors, snapshot):
        t.copy_(s)
    rec.kernel[rec.grid](*rec.args, **kwargs)
    torch.cuda.synchronize()
    return [t.clone() for t in tensors]


def timed_us(rec: launch.Launch, kwargs: Dict[str, Any], repeat: int) -> float:
    """Microseconds per launch: a CUDA graph of ``repeat`` launches, the median of 7 replays."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeat):
            rec.kernel[rec.grid](*rec.args, **kwargs)
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / repeat)
    del graph
    return float(np.median(times))


def settings(rec: launch.Launch, args: argparse.Namespace) -> List[Dict[str, int]]:
    """The launch settings tried for this kernel: each warp count; each pipeline depth where
    the kernel multiplies tiles (``tl.dot``: the loads its loops pipeline); each unroll factor
    at each warp count where the kernel takes one (its ``UNROLL`` constexpr); each value of a
    ``--flag`` constexpr the kernel takes (a code path the package switches by one), alone."""
    out: List[Dict[str, int]] = [{'num_warps': w} for w in args.warps]
    if 'tl.dot' in inspect.getsource(rec.kernel.fn):
        out += [{'num_stages': s} for s in args.stages]
    params = inspect.signature(rec.kernel.fn).parameters
    if 'UNROLL' in params:
        out = [{**kw, 'UNROLL': u} for kw in out for u in args.unroll]
    for name, values in args.flag:
        if name in params:
            out += [{name: v} for v in values]
    return out


def measured(rec: launch.Launch, count: int, repeat: int) -> Dict[str, Any]:
    """The launch at the package's own setting: its row."""
    return {'kernel': rec.kernel.__name__, 'launches': count, 'grid': list(rec.grid),
            'shapes': [list(t.shape) for t in rec.args if isinstance(t, torch.Tensor)][:4],
            'setting': {k: v for k, v in rec.kwargs.items()
                        if k in ('num_warps', 'num_stages', 'UNROLL')},
            'us': round(timed_us(rec, dict(rec.kwargs), repeat), 2), 'tried': []}


def sweep(rec: launch.Launch, row: Dict[str, Any], args: argparse.Namespace) -> None:
    """Each setting of ``settings`` from the same inputs: its time and whether every output
    byte equals the package's setting's; ``best``: the fastest equal one."""
    tensors = tensors_of(rec)
    snapshot = [t.clone() for t in tensors]
    base_kw = dict(rec.kwargs)
    ref = run_once(rec, base_kw, snapshot, tensors)
    t0 = time.time()
    for kw in settings(rec, args):
        trial = {**base_kw, **kw}
        try:
            out = run_once(rec, trial, snapshot, tensors)
            equal = all(torch.equal(a, b) for a, b in zip(ref, out))
            us = timed_us(rec, trial, args.repeat)
            row['tried'].append({**kw, 'us': round(us, 2), 'equal': equal})
        except Exception as e:  # noqa: BLE001 - a setting out of resources is a row, not a stop
            row['tried'].append({**kw, 'error': type(e).__name__ + ': ' + str(e)[:120]})
        if time.time() - t0 > args.per_launch_s:
            row['cut'] = True
            break
    run_once(rec, base_kw, snapshot, tensors)        # the state as the tracker left it
    good = [t for t in row['tried'] if t.get('equal')]
    if good:
        best = min(good, key=lambda t: t['us'])
        row['best'] = best
        row['saved_us'] = round(max(0.0, row['us'] - best['us']), 2)


def record_frames(args: argparse.Namespace) -> List[launch.Launch]:
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.engine.types import Prompt
    from sam2_ros.synthetic import SyntheticCamera
    cfg = TrackerConfig(model_size=args.model, image_size=args.res, random_weights=True,
                        device='cuda', precision='bf16',
                        max_objects=max(args.max_objects, args.objects))
    cam = SyntheticCamera(1280, 720, objects=max(2, args.objects), seed=0)
    with launch.recording() as rec:
        tr = StreamingTracker(cfg)
        tr.track(cam.frame(0))
        for i, box in enumerate(cam.boxes(0, args.objects)):
            tr.add_prompt(Prompt(i + 1, box=box))
        for t in range(1, args.frames + 1):
            tr.track(cam.frame(t))
    torch.cuda.synchronize()
    print(f'# {len(rec)} launches recorded, stats {tr.stats}', file=sys.stderr)
    return rec


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--model', default='tiny')
    ap.add_argument('--res', type=int, default=512)
    ap.add_argument('--objects', type=int, default=1)
    ap.add_argument('--max-objects', type=int, default=8,
                    help="the tracker's max_objects: the batch sizes its graphs are captured at")
    ap.add_argument('--frames', type=int, default=20)
    ap.add_argument('--warps', default='2,4,8')
    ap.add_argument('--stages', default='1,2,3,4')
    ap.add_argument('--unroll', default='1,2,4,8')
    ap.add_argument('--flag', action='append', default=[],
                    help='NAME=v1,v2: each value of the constexpr NAME where a kernel takes it')
    ap.add_argument('--repeat', type=int, default=20)
    ap.add_argument('--min-us', type=float, default=4.0,
                    help='launches faster than this are timed but not swept')
    ap.add_argument('--per-launch-s', type=float, default=30.0)
    ap.add_argument('--sweeps', type=int, default=3, help='launches swept per kernel')
    ap.add_argument('--total-s', type=float, default=300.0, help='no sweep starts after this')
    ap.add_argument('--only', default='', help='comma-separated kernel names')
    ap.add_argument('--out', default=os.path.join(os.environ.get('OUT', 'out'),
                                                  'launch_probe.json'))
    args = ap.parse_args(argv)
    for name in ('warps', 'stages', 'unroll'):
        setattr(args, name, [int(v) for v in getattr(args, name).split(',') if v])
    args.flag = [(f.split('=')[0], [int(v) for v in f.split('=')[1].split(',')])
                 for f in args.flag]
    only = {n for n in args.only.split(',') if n}
    groups: Dict[Tuple, List[launch.Launch]] = {}
    for rec in record_frames(args):
        if not only or rec.kernel.__name__ in only:
            groups.setdefault(signature(rec), []).append(rec)
    # the slowest launches of each kernel are swept first; ``--sweeps`` of them per kernel
    rows = [(measured(recs[-1], len(recs), args.repeat), recs[-1]) for recs in groups.values()]
    rows.sort(key=lambda rr: -rr[0]['us'])
    swept: Dict[str, int] = {}
    t0 = time.time()
    for row, rec in rows:                 # the slowest launches of each kernel first
        name = row['kernel']
        if row['us'] >= args.min_us and swept.get(name, 0) < args.sweeps \
                and time.time() - t0 < args.total_s:
            sweep(rec, row, args)
            swept[name] = swept.get(name, 0) + 1
        print(json.dumps({k: v for k, v in row.items() if k != 'tried'}), flush=True)
    rows = [row for row, _ in rows]
    rows.sort(key=lambda r: -r.get('saved_us', 0.0))
    print('| kernel | grid | package us | best setting | best us | saved us |')
    print('|---|---|---|---|---|---|')
    for r in rows:
        b = r.get('best', {})
        setting = ' '.join(f'{k}={v}' for k, v in b.items() if k not in ('us', 'equal'))
        print(f"| {r['kernel']} | {r['grid']} | {r['us']} | {setting or '-'} | "
              f"{b.get('us', '-')} | {r.get('saved_us', '-')} |")
    save_probe(args.out, rows)
    return 0


if __name__ == '__main__':
    with torch.inference_mode():          # the tracker's tensors are inference tensors
        sys.exit(main())
