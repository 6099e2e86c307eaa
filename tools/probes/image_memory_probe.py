"""Probe: where image mode's peak memory is reached, stage by stage, ours against sam2's
``SAM2ImagePredictor`` (tiny@1024 bf16 by default, random weights, 1 then 8 boxes).

    python -m tools.probes.image_memory_probe [--model tiny] [--out $OUT/image_memory.json]

Why: the benchmark's ``peak_mib`` (max allocated since the model was built) says how much,
not when. Each stage here starts from a reset peak and reports the allocated memory after it,
the peak within it and what the variant's objects hold (``tools/bench/held.py``), so a stage
that keeps memory (a model copy, a graph's buffers) and one that only passes through it (the
encoder's activations) are told apart. Stages, ours: build (fp32, then cast in place), the
eager twin the benchmark counts module calls on, the first image (encoder graph capture,
1-box decoder graph), 8 boxes (capture), replays, the eager twin's image; predictor: build,
set_image + predict with 1 and 8 boxes.
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--model', default='tiny')
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'image_memory.json'))
    a = p.parse_args(argv)
    img = images(1, 1024, 1024, 0)[0]
    bx = {n: boxes(n, 1024, 1024) for n in (1, 8)}
    result = {}
    for name, fn in (('sam2_predictor', predictor), ('ours', ours)):
        result[name] = fn(a.model, img, bx)
        gc.collect()
        torch.cuda.empty_cache()
    os.makedirs(os.path.dirname(a.out) or '.', exist_ok=True)
    with open(a.out, 'w') as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
