"""Probe: what a correction click costs against a tracked frame, and in which kernels.

    python -m tools.probes.correction_probe [--objects 1,3] [--reuse-attention on,off]
        [--out $OUT/correction.json]

Why: in the interaction benchmark a frame with a correction costs about twice a frame
(tiny@512, 1 object: 7.6-8.3 ms against a p50 of 4.2), deferred or immediate. A correction is
a prompted step on an already encoded frame (no image encoder), so it should cost less than a
frame; this says whether its graph's kernels or the host work around it are the difference.
Per object count and ``corrections_reuse_attention`` (on: the correction starts from the
frame's kept memory attention), steady state (past the 15 frames after the prompts): wall ms
p50 of ``track()`` and of ``add_prompt`` (a click on object 1 on a freshly tracked frame,
results read back: each correction follows a track, so each is the first on its frame), and
for each the kernels per call and their ms under torch.profiler, by kernel group (the engine
benchmark's census), plus the tracker's step counters (every correction should be a prompt
graph step, no fallback).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace
from typing import Callable, Dict

import numpy as np
import torch

from tools.bench.profiling import kernel_ms, sync
from tools.bench.results import save_probe


def profiled(fn: Callable[[], object], calls: int, device: str) -> Dict[str, object]:
    """Kernels per call of ``fn`` and their ms, total and by group (the engine benchmark's
    census, ``tools/bench/profiling.kernel_ms``); None values on the CPU."""
    run = SimpleNamespace(step=fn, info={})
    ms = kernel_ms(run, calls, device)
    return {'kernels': run.info.get('kernels_per_frame'),
            'kernel_ms': None if ms is None else round(ms, 3),
            'groups': run.info.get('kernel_groups')}


def wall(fn: Callable[[], object], calls: int, device: str) -> float:
    times = []
    for _ in range(calls):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t) * 1e3)
    return round(statistics.median(times), 3)


def row(objects: int, device: str, res: int, reuse: bool = True) -> Dict[str, object]:
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.engine.types import Prompt
    from sam2_ros.synthetic import SyntheticCamera
    cfg = TrackerConfig(model_size='tiny', image_size=res, random_weights=True, device=device,
                        precision='bf16' if device == 'cuda' else 'fp32', max_objects=8,
                        corrections_reuse_attention=reuse)
    tr = StreamingTracker(cfg)
    cam = SyntheticCamera(1280, 720, objects=max(2, objects), seed=0)
    frames = [cam.frame(t) for t in range(80)]
    tr.track(frames[0])
    for i, box in enumerate(cam.boxes(0, objects)):
        tr.add_prompt(Prompt(i + 1, box=box))
    for f in frames[1:25]:
        tr.track(f)
    x0, y0, x1, y1 = cam.boxes(24, 1)[0]
    click = Prompt(1, points=np.array([[(x0 + x1) / 2, (y0 + y1) / 2]], np.float32),
                   labels=np.array([1], np.int32))
    it = iter(frames[25:])
    track_ms = wall(lambda: tr.track(next(it)), 20, device)
    corrections = []
    for f in frames[45:65]:           # a frame tracked, then its correction timed
        tr.track(f)
        corrections.append(wall(lambda: tr.add_prompt(click), 1, device))
    track_profile = profiled(lambda: tr.track(frames[65]), 3, device)
    tr.track(frames[66])
    return {'objects': objects, 'reuse_attention': reuse, 'track_ms_p50': track_ms,
            'correction_ms_p50': round(statistics.median(corrections), 3),
            'track_profile': track_profile,
            'correction_profile': profiled(lambda: tr.add_prompt(click), 1, device),
            'stats': {k: v for k, v in tr.stats.items() if isinstance(v, int)}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--objects', default='1,3')
    p.add_argument('--device', default='cuda')
    p.add_argument('--res', type=int, default=512)
    p.add_argument('--reuse-attention', default='on,off',
                   help="comma list of 'on', 'off' (TrackerConfig.corrections_reuse_attention)")
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'correction.json'))
    a = p.parse_args(argv)
    rows = []
    for n, r in ((n, r) for n in [int(x) for x in a.objects.split(',')]
                 for r in a.reuse_attention.split(',')):
        rows.append(row(n, a.device, a.res, reuse=r == 'on'))
        print(json.dumps(rows[-1]), flush=True)
        torch.cuda.empty_cache()
    save_probe(a.out, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
