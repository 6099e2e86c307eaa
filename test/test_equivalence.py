"""Our streaming tracker equals the official SAM2VideoPredictor driven in the same order.

Random weights (no checkpoint can be downloaded here): masks of a random model may be
degenerate, so low-res logits, object scores, object pointers and memory features are compared
numerically on every frame and object. fp32 on the CPU: max abs diff <= 1e-4.
"""

import numpy as np
import pytest
import torch

from reference import compare, init_reference, ours, outputs, propagate
from sam2_ros.config import TrackerConfig
from sam2_ros.tracker import StreamingTracker
from sam2_ros.types import Prompt

TOL = 1e-4
N_FRAMES = 32


def synthetic_frames(n, h=96, w=128, seed=0):
    """A textured background with two moving blobs, so features change over time."""
    rng = np.random.default_rng(seed)
    bg = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    frames = []
    for t in range(n):
        fr = bg.copy()
        for (cx, cy, col) in ((20 + t, 40, (250, 30, 30)), (100 - t, 30 + t // 2, (30, 30, 250))):
            fr[(xx - cx) ** 2 + (yy - cy) ** 2 < 120] = col
        frames.append(fr)
    return frames


def check(tracker, state, res, obj_id, obj_idx, frame, worst):
    ref = outputs(state, obj_idx, frame)
    mine = res.by_id(obj_id)
    ptr, feats = ours(tracker, obj_id, frame)
    diffs = {
        'logits': compare(mine.low_res_logits, ref['pred_masks'][0, 0]),
        'score': abs(mine.score - float(ref['object_score_logits'].float()[0, 0])),
        'obj_ptr': compare(ptr, ref['obj_ptr'][0]),
        'mem_feats': compare(feats, ref['maskmem_features'][0]),
    }
    for k, v in diffs.items():
        worst[k] = max(worst.get(k, 0.0), v)
        assert v <= TOL, f'frame {frame} object {obj_id}: {k} differs by {v:.3g}'


@pytest.mark.parametrize('corrections_as_cond', [True, False])
def test_stream_equals_official_predictor(corrections_as_cond):
    torch.manual_seed(0)
    cfg = TrackerConfig(model_size='tiny', image_size=256, device='cpu', precision='fp32',
                        random_weights=True, use_cuda_graphs=False,
                        corrections_as_cond=corrections_as_cond)
    tracker = StreamingTracker(cfg)
    predictor = tracker.model           # the same weights drive both
    frames = synthetic_frames(N_FRAMES)
    state = init_reference(predictor, frames)
    worst = {}
    p1 = Prompt(1, points=np.array([[20.0, 40.0]]), labels=np.array([1]))
    p2 = Prompt(2, box=(85.0, 20.0, 110.0, 45.0))
    p3 = Prompt(3, mask=np.zeros((96, 128), bool))
    p3.mask[60:80, 40:70] = True
    fix = Prompt(1, points=np.array([[35.0, 40.0], [60.0, 80.0]]), labels=np.array([1, 0]))
    # (frame, action) schedule: prompts apply to the frame just tracked.
    events = {0: [('add', p1)], 8: [('add', p2)], 12: [('add', p3)], 20: [('add', fix)],
              25: [('remove', 2)]}
    ids = []                              # reference object order (obj_idx)
    ref_done = -1
    with torch.inference_mode():
        for f, frame in enumerate(frames):
            res = tracker.track(frame)
            if ids:                       # reference: propagate up to this frame
                got = propagate(predictor, state, ref_done + 1, f)
                assert got[-1] == f
                ref_done = f
                for i, oid in enumerate(ids):
                    check(tracker, state, res, oid, i, f, worst)
            for kind, p in events.get(f, []):
                if kind == 'remove':
                    tracker.remove_object(p)
                    predictor.remove_object(state, p)
                    ids.remove(p)
                    continue
                res = tracker.add_prompt(p)
                if p.mask is not None:
                    predictor.add_new_mask(state, f, p.obj_id, p.mask)
                else:
                    predictor.add_new_points_or_box(
                        state, f, p.obj_id, points=p.points, labels=p.labels, box=p.box)
                if p.obj_id not in ids:
                    ids.append(p.obj_id)
                ref_done = f
                i = ids.index(p.obj_id)
                ref = state['temp_output_dict_per_obj'][i]
                key = 'cond_frame_outputs' if f in ref['cond_frame_outputs'] else \
                    'non_cond_frame_outputs'
                d = compare(res.by_id(p.obj_id).low_res_logits, ref[key][f]['pred_masks'][0, 0])
                assert d <= TOL, f'prompt on frame {f} object {p.obj_id}: logits differ {d}'
    assert ids == [1, 3] and tracker.object_ids == [1, 3]
    print('worst abs diffs:', worst)
    # the random model must not be degenerate, or the comparison would prove little
    assert any(o.area > 0 for o in res.objects)
