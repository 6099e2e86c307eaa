"""Probe: where a graphed frame's host time goes, and where a precompiled start spends its time.

    python tools/probes/host_probe.py --part frame [--objects 1,3] [--precompile encoder,heads]
    python tools/probes/host_probe.py --part startup

Why: replaying each captured graph of a frame alone sums to less than a whole ``track()``
call; the rest is host work between and around the graphs (staging the frame, gathering
memories, reading masks back, building results). A precompiled start spends longer than the
default in its encoder phase. Neither can be fixed without knowing where.

``frame``: per object count, the p50 of ``track()`` over 200 frames, a cProfile of 200 frames
(top functions by own time, pstats file), a torch.profiler trace of 10 frames (chrome JSON,
analysed offline) and the cost of the host copies a 1280x720 frame needs.
``startup``: two fresh processes with precompiled parts (the first compiles), the second under
cProfile (pstats file, top functions by cumulative time) and ``-X importtime``.
Writes into $OUT (default /tmp/out).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

OUT = os.environ.get('OUT', '/tmp/out')
ROWS = []


def emit(**row) -> None:
    ROWS.append(row)
    print(json.dumps(row), flush=True)


def tracker(objects: int, precompile: tuple, pdir: str):
    from sam2_ros.engine import Prompt, StreamingTracker, TrackerConfig
    from sam2_ros.synthetic import SyntheticCamera
    cfg = TrackerConfig(model_size='tiny', image_size=512, device='cuda', random_weights=True,
                        io_resolution=(1280, 720), max_objects=max(8, objects),
                        precompile=precompile, precompile_dir=pdir or None)
    trk = StreamingTracker(cfg)
    cam = SyntheticCamera(1280, 720, objects=max(2, objects))
    frames = [cam.frame(t) for t in range(64)]
    trk.track(frames[0])
    for i, box in enumerate(cam.boxes(0, objects)):
        trk.add_prompt(Prompt(obj_id=i + 1, box=tuple(box)))
    for t in range(1, 40):
        trk.track(frames[t])
    return trk, frames


def top(prof: cProfile.Profile, key: str, n: int) -> str:
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats(key).print_stats(n)
    return s.getvalue()


def frame_part(objects: int, precompile: tuple, pdir: str) -> None:
    tag = f'{objects}obj' + ('_pc' if precompile else '')
    trk, frames = tracker(objects, precompile, pdir)
    k = [0]

    def one():
        k[0] += 1
        return trk.track(frames[k[0] % len(frames)])
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        one()
        times.append((time.perf_counter() - t0) * 1e3)
    emit(part='frame', tag=tag, ms_p50=float(np.median(times)),
         ms_p90=float(np.percentile(times, 90)), modes=dict(trk.stats))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        one()
    prof.disable()
    prof.dump_stats(f'{OUT}/frame_{tag}.pstats')
    print(top(prof, 'tottime', 30))
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(10):
            one()
    p.export_chrome_trace(f'{OUT}/trace_{tag}.json')
    subprocess.run(['gzip', '-f', f'{OUT}/trace_{tag}.json'], check=False)


def copies() -> None:
    """Host copies of one 1280x720 rgb8 frame and of one object's mask."""
    frame = np.random.randint(0, 255, (720, 1280, 3), np.uint8)
    pinned = torch.empty(720, 1280, 3, dtype=torch.uint8).pin_memory()
    dev = torch.empty(720, 1280, 3, dtype=torch.uint8, device='cuda')
    mask = torch.empty(720, 1280, dtype=torch.bool).pin_memory()

    def ms(fn, n=200):
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1e3
    src = torch.from_numpy(frame)
    emit(part='copies', threads=torch.get_num_threads(),
         np_copyto_pinned=ms(lambda: np.copyto(pinned.numpy(), frame)),
         torch_copy_pinned=ms(lambda: pinned.copy_(src)),
         h2d_from_pinned=ms(lambda: dev.copy_(pinned, non_blocking=True)),
         h2d_from_pageable=ms(lambda: dev.copy_(src)),
         mask_numpy_copy=ms(lambda: mask.numpy().copy()),
         pinned_alloc_cached=ms(lambda: torch.empty(720, 1280, dtype=torch.bool,
                                                    pin_memory=True)))


STARTUP_CHILD = r'''
import json, sys, time
t0 = time.perf_counter()
from sam2_ros.engine import StreamingTracker, TrackerConfig
t1 = time.perf_counter()
cfg = TrackerConfig(model_size='tiny', image_size=512, device='cuda', random_weights=True,
                    io_resolution=(1280, 720), precompile=('encoder', 'heads'),
                    precompile_dir=sys.argv[1])
trk = StreamingTracker(cfg)
t2 = time.perf_counter()
print(json.dumps({'import_s': t1 - t0, 'configure_s': t2 - t1,
                  'phases': trk.runner.capture_phases, 'events': trk.runner.store.events}))
'''


def startup_part() -> None:
    pdir = tempfile.mkdtemp(prefix='pc_')
    script = f'{OUT}/startup_child.py'
    with open(script, 'w') as f:
        f.write(STARTUP_CHILD)
    for name, pre in (('first', []), ('second', ['-m', 'cProfile', '-o',
                                                  f'{OUT}/startup_second.pstats']),
                      ('third', ['-X', 'importtime'])):
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, *pre, script, pdir], capture_output=True,
                           text=True)
        if name == 'third':
            with open(f'{OUT}/startup_importtime.txt', 'w') as f:
                f.write(r.stderr)
        last = [ln for ln in r.stdout.splitlines() if ln.startswith('{')]
        emit(part='startup', start=name, wall_s=time.perf_counter() - t0, rc=r.returncode,
             result=json.loads(last[-1]) if last else r.stderr[-2000:])
    st = pstats.Stats(f'{OUT}/startup_second.pstats', stream=sys.stdout)
    st.sort_stats('cumulative').print_stats(60)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument('--part', choices=('frame', 'startup'), required=True)
    p.add_argument('--objects', default='1,3')
    p.add_argument('--precompile', default='')
    a = p.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if a.part == 'frame':
        copies()
        pre = tuple(x for x in a.precompile.split(',') if x)
        pdir = tempfile.mkdtemp(prefix='pc_') if pre else ''
        for n in (int(x) for x in a.objects.split(',')):
            frame_part(n, pre, pdir)
    else:
        startup_part()
    with open(f'{OUT}/host_probe_{a.part}.json', 'a') as f:
        for r in ROWS:
            f.write(json.dumps(r) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
