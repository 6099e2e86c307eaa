"""Probe: a tracked frame's time against the split-KV cap of the memory attention.

    python -m tools.probes.split_probe [--max-splits 8,16,32] [--objects 1,3]
        [--out $OUT/split_probe.json]

Why: ``attention.kv_splits`` cuts a memory-attention call into at most 8 key chunks (a head
of 1,024 queries is 8 query tiles: 64 programs for 132 multiprocessors on the H200). The
memory attention's FlashAttention calls are the largest kernel time of a tiny@512 frame left
(16 kernels, ~250 us at 1 object, ``tools/probes/kernel_sources.py``); more chunks may fill
the GPU better or cost more in the merge. The cap is a default argument read when the graphs
are captured, so each setting builds a tracker of its own (default configuration) and times
steady frames: wall p50 of ``track()`` and kernel ms / kernels per frame under torch.profiler.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace
from typing import Dict

import torch

from tools.bench.profiling import kernel_ms, sync
from tools.bench.results import save_probe


def row(max_splits: int, objects: int, res: int) -> Dict[str, object]:
    from sam2_ros.engine import attention
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.engine.types import Prompt
    from sam2_ros.synthetic import SyntheticCamera
    defaults = attention.kv_splits.__defaults__
    attention.kv_splits.__defaults__ = (max_splits,) + defaults[1:]
    try:
        tr = StreamingTracker(TrackerConfig(model_size='tiny', image_size=res,
                                            random_weights=True, max_objects=8))
        cam = SyntheticCamera(1280, 720, objects=max(2, objects), seed=0)
        frames = [cam.frame(t) for t in range(80)]
        tr.track(frames[0])
        for i, box in enumerate(cam.boxes(0, objects)):
            tr.add_prompt(Prompt(i + 1, box=box))
        for f in frames[1:20]:
            tr.track(f)
        ms = []
        for f in frames[20:70]:
            sync('cuda')
            t = time.perf_counter()
            tr.track(f)
            sync('cuda')
            ms.append((time.perf_counter() - t) * 1e3)
        it = iter(frames[70:])
        run = SimpleNamespace(step=lambda: tr.track(next(it)), info={})
        k_ms = kernel_ms(run, 3, 'cuda')
        out = {'max_splits': max_splits, 'objects': objects, 'res': res,
               'track_ms_p50': round(statistics.median(ms), 3),
               'kernel_ms': round(k_ms, 3), 'kernels': run.info['kernels_per_frame'],
               'groups': run.info['kernel_groups'],
               'eager_steps': int(tr.stats.get('eager_steps', 0))}
        del tr
    finally:
        attention.kv_splits.__defaults__ = defaults
    gc.collect()
    torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--max-splits', default='8,16,32')
    p.add_argument('--objects', default='1,3')
    p.add_argument('--res', type=int, default=512)
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'split_probe.json'))
    a = p.parse_args(argv)
    rows = []
    with torch.inference_mode():
        for n in [int(x) for x in a.objects.split(',')]:
            for s in [int(x) for x in a.max_splits.split(',')]:
                rows.append(row(s, n, a.res))
                print(json.dumps({k: v for k, v in rows[-1].items() if k != 'groups'}),
                      rows[-1]['groups'].get('flash'), flush=True)
    save_probe(a.out, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
