"""Frozen-frame-index drift: what a constant prompt-pointer distance does to the outputs.

The seed issue's CUDA graph froze the frame index to a constant T, so the object pointer of
the prompt (conditioning) frame got the constant temporal distance T - C (C: the key the
prompt frame was stored under) instead of the true, growing distance f - c. This script
emulates that by patching ``MemoryBank.select`` of one tracker (here only) so conditioning
pointers get a constant distance, and runs it in lockstep with the true-distance tracker
(which equals the official predictor, see test/test_graphs_gpu.py) over a long stream:
1 object prompted by a box on frame 0, 1280x720 synthetic frames.

Per frame: max |logit diff| (low-res logits), IoU of the two masks at 1280x720, |object score
diff|. Plus the cosine similarity of the pointer temporal encoding, true vs frozen, at
chosen distances: raw sine encoding (weight independent) and after ``obj_ptr_tpos_proj``.
Random weights: the numbers show how much the computation differs, not the accuracy impact
on real tracking.

    python -m sam2_ros.bench.drift --frames 1800 --frozen 16 --precision bf16,fp32 \
        --out benchmarks/results/h200_drift.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch


def frozen_select(const: int):
    """A MemoryBank.select replacement: conditioning pointers at distance ``const``."""
    from sam2_ros.engine.memory import MemoryBank
    orig = MemoryBank.select

    def select(self, slot, frame):
        sel = orig(self, slot, frame)
        n_cond = len(self._cond_rows(slot))
        n_cond_ptrs = sum(1 for r in self._cond_rows(slot) if self.cond_frame[slot, r] <= frame)
        assert n_cond_ptrs <= n_cond
        sel.ptr_dist = [const] * n_cond_ptrs + sel.ptr_dist[n_cond_ptrs:]
        return sel
    return select


def tpos_cosine(model, true_d: float, frozen_d: float):
    from sam2.modeling.sam2_utils import get_1d_sine_pe
    t_max = model.max_obj_ptrs_in_encoder - 1
    dim = model.hidden_dim if model.proj_tpos_enc_in_obj_ptrs else model.mem_dim
    d = torch.tensor([true_d, frozen_d], dtype=torch.float32, device=model.device) / t_max
    raw = get_1d_sine_pe(d, dim=dim)
    with torch.inference_mode():
        proj = model.obj_ptr_tpos_proj(raw.to(next(model.obj_ptr_tpos_proj.parameters()).dtype))
    cos = torch.nn.functional.cosine_similarity
    return (float(cos(raw[0:1].float(), raw[1:2].float())),
            float(cos(proj[0:1].float(), proj[1:2].float())))


def run(precision: str, frames: int, const: int, model_size: str, res: int,
        graphs: bool, checkpoints):
    from sam2_ros.bench.variants import SRC_H, SRC_W
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.engine.types import Prompt
    from sam2_ros.synthetic import SyntheticCamera

    cfg = TrackerConfig(model_size=model_size, image_size=res, random_weights=True,
                        precision=precision, max_objects=1, use_cuda_graphs=graphs)
    true_tr = StreamingTracker(cfg)
    frozen_tr = StreamingTracker(cfg, model=true_tr.model)       # same weights
    sel = frozen_select(const)
    frozen_tr.bank.select = sel.__get__(frozen_tr.bank)          # this instance only
    stream = SyntheticCamera(SRC_W, SRC_H, objects=2)
    box = stream.boxes(0, 1)[0]
    logit, iou, score, area = [], [], [], []
    t0 = time.perf_counter()
    for f in range(frames):
        fr = stream.frame(f)
        ra, rb = true_tr.track(fr), frozen_tr.track(fr)
        if f == 0:
            ra = true_tr.add_prompt(Prompt(1, box=box))
            rb = frozen_tr.add_prompt(Prompt(1, box=box))
        a, b = ra.objects[0], rb.objects[0]
        logit.append(float((a.low_res_logits - b.low_res_logits).abs().max()))
        inter = np.logical_and(a.mask, b.mask).sum()
        union = np.logical_or(a.mask, b.mask).sum()
        iou.append(float(inter / union) if union else 1.0)
        score.append(abs(a.score - b.score))
        area.append(int(a.area))
    wall = time.perf_counter() - t0
    model = true_tr.model
    cos = {}
    for d in checkpoints:
        raw, proj = tpos_cosine(model, float(d), float(const))
        cos[str(d)] = {'raw_sine': round(raw, 4), 'projected': round(proj, 4)}
    at = {}
    for f in checkpoints:
        i = min(f, frames - 1)
        at[str(f)] = {'frame': i, 'max_abs_logit_diff': logit[i], 'mask_iou': iou[i],
                      'score_diff': score[i],
                      'max_abs_logit_diff_upto': max(logit[:i + 1]),
                      'min_mask_iou_upto': min(iou[:i + 1])}
    summary = {
        'precision': precision, 'frozen_distance': const, 'frames': frames,
        'model': model_size, 'res': res, 'graphs': graphs, 'wall_s': round(wall, 1),
        'stats_true': {k: int(v) for k, v in true_tr.stats.items()},
        'stats_frozen': {k: int(v) for k, v in frozen_tr.stats.items()},
        'tpos_cosine_true_vs_frozen': cos, 'at_frames': at,
        'max_abs_logit_diff': max(logit), 'min_mask_iou': min(iou),
        'mean_mask_iou': float(np.mean(iou)), 'max_score_diff': max(score),
        'mean_true_mask_area_px': float(np.mean(area)),
        'per_frame': {'max_abs_logit_diff': [float(f'{x:.4g}') for x in logit],
                      'mask_iou': [float(f'{x:.6g}') for x in iou],
                      'score_diff': [float(f'{x:.4g}') for x in score]},
    }
    del true_tr, frozen_tr
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog='python -m sam2_ros.bench.drift')
    p.add_argument('--frames', type=int, default=1800)
    p.add_argument('--frozen', default='16', help='constant distance(s), comma separated')
    p.add_argument('--precision', default='bf16,fp32')
    p.add_argument('--model', default='tiny')
    p.add_argument('--res', type=int, default=512)
    p.add_argument('--eager', action='store_true', help='no CUDA graphs')
    p.add_argument('--checkpoints', default='30,60,300,1800')
    p.add_argument('--out', default='benchmarks/results/h200_drift.json')
    a = p.parse_args(argv)
    cks = [int(x) for x in a.checkpoints.split(',')]
    results = []
    for prec in a.precision.split(','):
        for const in [int(x) for x in a.frozen.split(',')]:
            s = run(prec, a.frames, const, a.model, a.res, not a.eager, cks)
            results.append(s)
            brief = {k: v for k, v in s.items() if k != 'per_frame'}
            print(json.dumps(brief), flush=True)
            os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
            json.dump({'command': 'python -m sam2_ros.bench.drift ' + ' '.join(
                argv if argv is not None else sys.argv[1:]),
                'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu',
                'torch': torch.__version__, 'results': results}, open(a.out, 'w'))
    return 0


if __name__ == '__main__':
    sys.exit(main())
