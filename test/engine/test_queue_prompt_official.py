"""``queue_prompt`` against the official predictor: a prompt queued for the next frame equals
``add_new_points_or_box`` on a frame ``propagate_in_video`` has not reached yet (an initial
conditioning frame, no memory read), compared numerically on every frame (CPU, fp32)."""

import numpy as np
import pytest
import torch

from conftest import make_tracker, shared_model
from reference import (bf16_excess, compare, emulate_sam2_C, init_reference, ours, outputs,
                       propagate)
from scenarios import synthetic_frames
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')


def check_against_official(tr, state, res, obj_id, obj_idx, f, worst, tol):
    ref = outputs(state, obj_idx, f)
    ptr, feats = ours(tr, obj_id, f)
    diffs = {'logits': compare(res.by_id(obj_id).low_res_logits, ref['pred_masks'][0, 0]),
             'score': abs(res.by_id(obj_id).score - float(ref['object_score_logits'][0, 0])),
             'obj_ptr': compare(ptr, ref['obj_ptr'][0]),
             # memories are bf16 (as sam2 stores them): allow one bf16 ulp of rounding flip
             'mem_feats': bf16_excess(feats, ref['maskmem_features'][0], tol)}
    for k, v in diffs.items():
        worst[k] = max(worst.get(k, 0.0), v)
        assert v <= tol, f'frame {f} object {obj_id}: {k} differs by {v:.3g}'


def test_queue_prompt_equals_official_predictor(monkeypatch):
    """12 frames at image size 128: object 1 by a click on frame 0; object 2 queued (a box)
    for frame 5 and a click for object 1 queued for frame 8 = add_new_points_or_box on frames
    5 and 8 before propagate_in_video reaches them (initial conditioning frames, no memory).
    Logits, scores, object pointers and memory features of both objects on every frame agree
    to 1e-4 (fp32, CPU; memory features within one bf16 ulp as in test_equivalence). Both
    fill holes (fill_hole_area=8): the official predictor through a CPU stand-in of sam2._C."""
    tol = 1e-4
    emulate_sam2_C(monkeypatch)
    tr = make_tracker(image_size=128, max_objects=3)
    predictor = shared_model(128)
    frames = synthetic_frames(12)
    h, w = frames[0].shape[:2]
    p1 = Prompt(1, points=np.array([[w * 0.15, h * 0.4]]), labels=np.array([1]))
    queued = {5: Prompt(2, box=(w * 0.6, h * 0.15, w * 0.9, h * 0.45)),
              8: Prompt(1, points=np.array([[w * 0.3, h * 0.4], [w * 0.5, h * 0.8]]),
                        labels=np.array([1, 0]))}
    worst = {}
    with torch.inference_mode():
        state = init_reference(predictor, frames)
        ids, done = [], -1
        for f, fr in enumerate(frames):
            if f in queued:
                p = queued[f]
                tr.queue_prompt(p)
                predictor.add_new_points_or_box(state, f, p.obj_id, points=p.points,
                                                labels=p.labels, box=p.box)
                if p.obj_id not in ids:
                    ids.append(p.obj_id)
            res = tr.track(fr)
            if f == 0:
                res = tr.add_prompt(p1)
                predictor.add_new_points_or_box(state, 0, 1, points=p1.points,
                                                labels=p1.labels)
                ids.append(1)
                propagate(predictor, state, 0, 0)
            else:
                assert propagate(predictor, state, done + 1, f)[-1] == f
            done = f
            assert [o.obj_id for o in res.objects] == sorted(ids)
            for i, oid in enumerate(ids):
                check_against_official(tr, state, res, oid, i, f, worst, tol)
    print('worst abs diffs:', worst)
    assert tr.bank.cond_frames(tr.objects[1].slot) == [0, 8]
    assert tr.bank.cond_frames(tr.objects[2].slot) == [5]
    assert any(0 < o.area < h * w for o in res.objects)       # not a degenerate comparison


def click_and_box(monkeypatch, as_cond):
    """(tracker at 64 px, the official predictor on its model, 20 frames, object 1's click,
    object 2's box): both fill holes (sam2._C's CPU stand-in); 20 frames because sam2 scales
    pointer distances by min(num_frames, 16)."""
    emulate_sam2_C(monkeypatch)
    tr = make_tracker(image_size=64, max_objects=3, corrections_as_cond=as_cond)
    frames = synthetic_frames(20)
    h, w = frames[0].shape[:2]
    return (tr, shared_model(64, as_cond), frames,
            Prompt(1, points=np.array([[w * 0.15, h * 0.4]]), labels=np.array([1])),
            Prompt(2, box=(w * 0.6, h * 0.15, w * 0.9, h * 0.45)))


@pytest.mark.parametrize('as_cond', [True, False], ids=['cond', 'noncond'])
def test_correction_on_the_frame_a_queued_prompt_started_equals_official(monkeypatch, as_cond):
    """Object 2 started by a queued box on frame 3, then a click for it on frame 3 after that
    frame's track: sam2 has propagated over frame 3 (add_new_points_or_box, then
    propagate_in_video through it), so its second prompt there is a correction (the previous
    logits, memory read), not another initial prompt. Every later frame agrees too. The
    reference video has 20 frames: sam2 scales pointer distances by min(num_frames, 16)."""
    tol = 1e-4
    tr, predictor, frames, p1, box = click_and_box(monkeypatch, as_cond)
    h, w = frames[0].shape[:2]
    click = Prompt(2, points=np.array([[w * 0.7, h * 0.3], [w * 0.2, h * 0.8]]),
                   labels=np.array([1, 0]))
    worst = {}
    with torch.inference_mode():
        state = init_reference(predictor, frames)
        for f, fr in enumerate(frames[:8]):
            if f == 3:
                tr.queue_prompt(box)
                predictor.add_new_points_or_box(state, 3, 2, box=box.box)
            res = tr.track(fr)
            if f == 0:
                res = tr.add_prompt(p1)
                predictor.add_new_points_or_box(state, 0, 1, points=p1.points,
                                                labels=p1.labels)
            propagate(predictor, state, f, f)
            if f == 3:
                res = tr.add_prompt(click)
                predictor.add_new_points_or_box(state, 3, 2, points=click.points,
                                                labels=click.labels)
                temp = state['temp_output_dict_per_obj'][1]
                ref = temp['cond_frame_outputs' if as_cond else 'non_cond_frame_outputs'][3]
                d = compare(res.by_id(2).low_res_logits, ref['pred_masks'][0, 0])
                assert d <= tol, f'the correction of frame 3 differs by {d:.3g}'
                continue
            for i, oid in enumerate([1, 2] if f > 3 else [1]):
                check_against_official(tr, state, res, oid, i, f, worst, tol)
    assert (3 in tr.bank.cond_frames(tr.objects[2].slot)) is True
