"""Several corrections of one object on one frame against the official predictor (CPU, fp32).

sam2 keeps a click's output apart (``temp_output_dict``) until the next propagation, so every
click on a frame reads the memories as they were when the frame was tracked, never an earlier
click's. A correction written to the bank at once must not be read by the next correction of
the same frame, and a conditioning row the frame had when tracked (an object a queued prompt
started there) is read as it was then (``MemoryBank`` snapshot row)."""

import numpy as np
import pytest
import torch

from reference import compare, init_reference, propagate
from sam2_ros.engine.types import Prompt
from test_queue_prompt_official import check_against_official, click_and_box

pytestmark = pytest.mark.usefixtures('one_thread')


def clicks(obj_id, w, h):
    """Three different corrections of one object."""
    return [Prompt(obj_id, points=np.array([[w * 0.3, h * 0.4], [w * 0.5, h * 0.8]]),
                   labels=np.array([1, 0])),
            Prompt(obj_id, points=np.array([[w * 0.2, h * 0.3]]), labels=np.array([0])),
            Prompt(obj_id, points=np.array([[w * 0.7, h * 0.35]]), labels=np.array([1]))]


@pytest.mark.parametrize('as_cond', [True, False], ids=['cond', 'noncond'])
@pytest.mark.parametrize('started', ['tracked', 'queued'])
def test_corrections_on_one_frame_each_equal_the_official_predictor(monkeypatch, as_cond,
                                                                     started):
    """Object 1 by a click on frame 0; object 2 by a box on frame 0 ('tracked': tracked since,
    corrected three times on frame 6) or queued for frame 6 ('queued': started there by the
    track, corrected three times on it). Each correction's logits, and every frame's logits,
    scores, pointers and memories after them, equal sam2's (20-frame reference video: sam2
    scales pointer distances by min(num_frames, 16))."""
    tol = 0.0
    tr, predictor, frames, p1, box = click_and_box(monkeypatch, as_cond)
    h, w = frames[0].shape[:2]
    worst = {}
    with torch.inference_mode():
        state = init_reference(predictor, frames)
        for f, fr in enumerate(frames[:10]):
            if f == 6 and started == 'queued':
                tr.queue_prompt(box)
                predictor.add_new_points_or_box(state, 6, 2, box=box.box)
            res = tr.track(fr)
            initial = [(p1, None)] + ([(box, box.box)] if started == 'tracked' else [])
            if f == 0:
                for p, b in initial:
                    res = tr.add_prompt(p)
                    predictor.add_new_points_or_box(state, 0, p.obj_id, points=p.points,
                                                    labels=p.labels, box=b)
            propagate(predictor, state, f, f)
            ids = [1, 2] if started == 'tracked' or f >= 6 else [1]
            for i, oid in enumerate(ids):
                check_against_official(tr, state, res, oid, i, f, worst, tol)
            if f != 6:
                continue
            for k, c in enumerate(clicks(2, w, h)):
                res = tr.add_prompt(c)
                predictor.add_new_points_or_box(state, 6, 2, points=c.points, labels=c.labels)
                temp = state['temp_output_dict_per_obj'][1]
                ref = temp['cond_frame_outputs' if as_cond else 'non_cond_frame_outputs'][6]
                d = compare(res.by_id(2).low_res_logits, ref['pred_masks'][0, 0])
                assert d <= tol, f'correction {k + 1} of frame 6 differs by {d:.3g}'
    assert any(0 < o.area < h * w for o in res.objects)       # not a degenerate comparison
