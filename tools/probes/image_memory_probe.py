"""Probe: where image mode's peak memory is reached, stage by stage, ours against sam2's
``SAM2ImagePredictor`` (tiny@1024 bf16 by default, random weights, 1 then 8 boxes).

    python -m tools.probes.image_memory_probe [--model tiny] [--out $OUT/image_memory.json]
        [--history]

Why: the benchmark's ``peak_mib`` (max allocated since the model was built) says how much,
not when. Each stage here starts from a reset peak and reports the allocated memory after it,
the peak within it and what the variant's objects hold (``tools/bench/held.py``), so a stage
that keeps memory (a model copy, a graph's buffers) and one that only passes through it (the
encoder's activations) are told apart. Stages, ours: build (fp32, then cast in place), the
eager twin the benchmark counts module calls on, the first image (encoder graph capture,
1-box decoder graph), 8 boxes (capture), replays, the eager twin's image; predictor: build,
set_image + predict with 1 and 8 boxes. ``--history`` also records the allocator's history
(``torch.cuda.memory._record_memory_history``) through each variant and lists, at the
variant's peak and at its end, the live blocks by the innermost sam2/sam2_ros source line that
allocated them: what the peak is made of, not only when it happens.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from typing import Callable, Dict, List

import torch

from tools.bench.held import held_bytes
from tools.bench.image_mode import boxes, images

MIB = 2 ** 20


def _stage(log: List[Dict], name: str, fn: Callable, holds: Callable[[], tuple]) -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    log.append({'stage': name, 'before_mib': round(before / MIB, 1),
                'after_mib': round(torch.cuda.memory_allocated() / MIB, 1),
                'peak_mib': round(torch.cuda.max_memory_allocated() / MIB, 1),
                'held_mib': round(held_bytes(*holds(), device='cuda') / MIB, 1)})
    print(json.dumps(log[-1]), flush=True)


def ours(model: str, img, bx: Dict[int, object]) -> List[Dict]:
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.image import ImageSegmenter
    from sam2_ros.engine.types import Prompt
    cfg = TrackerConfig(model_size=model, image_size=1024, random_weights=True, device='cuda',
                        precision='bf16')
    s: Dict[str, object] = {}
    log: List[Dict] = []

    def prompts(n):
        return [Prompt(i + 1, box=tuple(float(v) for v in b)) for i, b in enumerate(bx[n])]

    def holds():
        return tuple(s.values())
    _stage(log, 'build', lambda: s.update(seg=ImageSegmenter(cfg)), holds)
    _stage(log, 'eager twin', lambda: s.update(twin=ImageSegmenter(
        cfg.replace(use_cuda_graphs=False), model=s['seg'].model)), holds)
    for n in (1, 8):
        _stage(log, f'{n} boxes, first (captures)', lambda: s['seg'].segment(img, prompts(n)),
               holds)
        _stage(log, f'{n} boxes, replay', lambda: s['seg'].segment(img, prompts(n)), holds)
    _stage(log, '8 boxes, eager twin', lambda: s['twin'].segment(img, prompts(8)), holds)
    _stage(log, 'set_image alone', lambda: s['seg'].set_image(img), holds)
    return log


def predictor(model: str, img, bx: Dict[int, object]) -> List[Dict]:
    from sam2.build_sam import build_sam2
    from sam2.sam2_image_predictor import SAM2ImagePredictor

    from sam2_ros.engine.config import MODEL_CONFIGS
    s: Dict[str, object] = {}
    log: List[Dict] = []

    def holds():
        return tuple(s.values())

    def build():
        torch.manual_seed(0)
        s['pred'] = SAM2ImagePredictor(build_sam2(MODEL_CONFIGS[model], ckpt_path=None,
                                                  device='cuda'))

    def run(n):
        with torch.inference_mode(), torch.autocast('cuda', dtype=torch.bfloat16):
            s['pred'].set_image(img)
            s['pred'].predict(box=bx[n], multimask_output=False)
    _stage(log, 'build', build, holds)
    for n in (1, 8):
        _stage(log, f'{n} boxes', lambda: run(n), holds)
    return log


def _where(frames: List[Dict]) -> str:
    """The innermost sam2/sam2_ros frame of an allocation's stack, with the innermost of ours
    when that is not the same one."""
    ours_or_sam2 = [f for f in frames if '/sam2' in f.get('filename', '')]
    if not ours_or_sam2:
        return '(other) ' + (frames[0].get('name', '?') if frames else '?')

    def fmt(f):
        path = f['filename']
        return f"{path[path.rfind('/sam2'):]}:{f['line']} {f['name']}"
    first, mine = ours_or_sam2[0], [f for f in frames if '/sam2_ros/' in f['filename']]
    if mine and mine[0] is not first:
        return f'{fmt(first)} <- {fmt(mine[0])}'
    return fmt(first)


def live_at_peak(trace: List[Dict]) -> Dict[str, object]:
    """Replay an allocator trace: the peak of live bytes, and the live blocks at the peak and
    at the end grouped by allocation site (MiB, top 25)."""
    live: Dict[int, tuple] = {}
    cur = peak = peak_at = 0
    for i, ev in enumerate(trace):
        act = ev.get('action')
        if act == 'alloc':
            live[ev['addr']] = (ev['size'], i)
            cur += ev['size']
            if cur > peak:
                peak, peak_at = cur, i
        elif act in ('free_requested', 'free_completed') and ev['addr'] in live:
            cur -= live.pop(ev['addr'])[0]

    def groups(upto: int) -> List[List]:
        alive: Dict[int, tuple] = {}
        for ev in trace[:upto + 1]:
            act = ev.get('action')
            if act == 'alloc':
                alive[ev['addr']] = (ev['size'], _where(ev.get('frames', [])))
            elif act in ('free_requested', 'free_completed'):
                alive.pop(ev['addr'], None)
        by: Dict[str, int] = {}
        for size, where in alive.values():
            by[where] = by.get(where, 0) + size
        return [[round(b / MIB, 1), w] for w, b in sorted(by.items(), key=lambda kv: -kv[1])
                [:25]]
    return {'peak_traced_mib': round(peak / MIB, 1), 'at_peak': groups(peak_at),
            'at_end': groups(len(trace) - 1)}


def with_history(fn: Callable[[], List[Dict]]) -> Dict[str, object]:
    """Run fn with the allocator's history recorded; its log and the trace's analysis."""
    torch.cuda.memory._record_memory_history(enabled='all', context='alloc', stacks='python',
                                             max_entries=2_000_000)
    try:
        log = fn()
        snap = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    trace = snap['device_traces'][torch.cuda.current_device()]
    out = live_at_peak(trace)
    for size, where in out['at_peak'][:15]:
        print(f'  at peak {size:8.1f} MiB  {where[:150]}', flush=True)
    return {'stages': log, **out}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--model', default='tiny')
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'image_memory.json'))
    p.add_argument('--history', action='store_true',
                   help='record the allocator history: the peak by allocation site')
    a = p.parse_args(argv)
    img = images(1, 1024, 1024, 0)[0]
    bx = {n: boxes(n, 1024, 1024) for n in (1, 8)}
    result = {}
    for name, fn in (('sam2_predictor', predictor), ('ours', ours)):
        if a.history:
            print(f'== {name}', flush=True)
            result[name] = with_history(lambda: fn(a.model, img, bx))
        else:
            result[name] = fn(a.model, img, bx)
        gc.collect()
        torch.cuda.empty_cache()
    os.makedirs(os.path.dirname(a.out) or '.', exist_ok=True)
    with open(a.out, 'w') as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
