"""StreamingTracker's public API and its handling of bad input.

Every rejected call must raise the documented TrackerError subclass and leave the tracker
exactly as it was: bank tensors (values and storage), bank bookkeeping, object table, queued
prompts, frame counter and size are compared before/after (conftest.snapshot).

Small random models (image_size 64 unless said otherwise; shared per session). The tests at the
end reproduce bugs once found in tracker.py (queue/capacity accounting, bad queued prompts).
``queue_prompt`` against the official predictor: test_queue_prompt_official.py.
"""

import numpy as np
import pytest
import torch

from conftest import assert_unchanged, make_tracker, snapshot, textured_frame
from sam2_ros.engine.errors import CapacityError, FrameError, PromptError, TrackerError, \
    UnknownObjectError
from sam2_ros.engine.image import ImageSegmenter
from sam2_ros.engine.types import LOST, OCCLUDED, TRACKING, Prompt

pytestmark = pytest.mark.usefixtures('one_thread')

H, W = 48, 64


def click(obj_id, x=20.0, y=20.0, label=1):
    return Prompt(obj_id, points=np.array([[x, y]]), labels=np.array([label]))


def frame(seed=0, h=H, w=W):
    return textured_frame(h, w, seed=seed)


def busy_tracker():
    """A tracker with objects 1 (click) and 2 (box) tracked over three frames."""
    tr = make_tracker(image_size=64, max_objects=3)
    tr.track(frame(0))
    tr.add_prompt(click(1))
    tr.add_prompt(Prompt(2, box=(35.0, 5.0, 60.0, 30.0)))
    tr.track(frame(1))
    tr.track(frame(2))
    return tr


@pytest.fixture
def busy():
    return busy_tracker()


@pytest.fixture(scope='module')
def steady():
    """busy_tracker() shared by the rejection tests (which must not change it: each checks)."""
    return busy_tracker()


def same_results(a, b):
    assert [o.obj_id for o in a.objects] == [o.obj_id for o in b.objects]
    for x, y in zip(a.objects, b.objects):
        assert torch.equal(x.low_res_logits, y.low_res_logits)
        assert x.score == y.score and x.state == y.state and np.array_equal(x.mask, y.mask)


# ---- frames ---------------------------------------------------------------------------------
BAD_FRAMES = {
    'float32': np.zeros((H, W, 3), np.float32),
    'uint16': np.zeros((H, W, 3), np.uint16),
    'bool': np.zeros((H, W, 3), bool),
    'gray': np.zeros((H, W), np.uint8),
    'rgba': np.zeros((H, W, 4), np.uint8),
    'one_channel': np.zeros((H, W, 1), np.uint8),
    'chw': np.zeros((3, H, W), np.uint8),
    'batched': np.zeros((1, H, W, 3), np.uint8),
    'too_small': np.zeros((15, W, 3), np.uint8),
    'too_large': np.zeros((8193, 16, 3), np.uint8),
    'empty': np.zeros((0, 0, 3), np.uint8),
    'torch_float': torch.zeros(H, W, 3),
    'list': frame(0).tolist(),
    'none': None,
}


@pytest.mark.parametrize('name', sorted(BAD_FRAMES))
def test_bad_frame_rejected_state_untouched(steady, name):
    snap = snapshot(steady)
    with pytest.raises(FrameError):
        steady.track(BAD_FRAMES[name])
    assert_unchanged(steady, snap)


def test_new_resolution_is_refused_while_tracking_and_taken_after_reset(busy):
    snap = snapshot(busy)
    with pytest.raises(FrameError, match='resolution changed'):
        busy.track(frame(3, h=64, w=64))
    assert_unchanged(busy, snap)
    res = busy.track(frame(3))                    # the old size still works
    assert res.frame_index == 3 and [o.obj_id for o in res.objects] == [1, 2]
    busy.reset()
    assert busy.object_ids == []
    res = busy.track(frame(4, h=64, w=80))        # after reset: a new size is fine
    assert (res.frame_index, res.height, res.width, res.objects) == (4, 64, 80, [])
    res = busy.add_prompt(click(5, x=70.0, y=60.0))
    assert res.by_id(5).mask.shape == (64, 80) and busy.object_ids == [5]
    res = busy.track(frame(5, h=64, w=80))
    assert res.by_id(5).frames_since_prompt == 1


# ---- prompts --------------------------------------------------------------------------------
PTS = np.array([[10.0, 10.0]])
ONES = np.ones((H, W), bool)
BAD_PROMPTS = {
    'nan': Prompt(3, points=np.array([[np.nan, 10.0]]), labels=[1]),
    'inf': Prompt(3, points=np.array([[10.0, np.inf]]), labels=[1]),
    'neg_inf_box': Prompt(3, box=(-np.inf, 0, 5, 5)),
    'outside_x': Prompt(3, points=np.array([[W + 1.0, 10.0]]), labels=[1]),
    'outside_y': Prompt(3, points=np.array([[10.0, H + 0.01]]), labels=[1]),
    'negative': Prompt(3, points=np.array([[-0.5, 10.0]]), labels=[1]),
    'huge': Prompt(3, points=np.array([[1e30, 1e30]]), labels=[1]),
    'labels_short': Prompt(3, points=np.array([[1.0, 1.0], [2.0, 2.0]]), labels=[1]),
    'labels_long': Prompt(3, points=PTS, labels=[1, 0]),
    'labels_missing': Prompt(3, points=PTS),
    'label_2': Prompt(3, points=PTS, labels=[2]),
    'label_neg': Prompt(3, points=PTS, labels=[-1]),
    'label_str': Prompt(3, points=PTS, labels=['pos']),
    'points_1d': Prompt(3, points=np.array([1.0, 2.0]), labels=[1]),
    'points_ragged': Prompt(3, points=[[1.0, 2.0], [3.0]], labels=[1, 1]),
    'empty': Prompt(3),
    'empty_points': Prompt(3, points=np.zeros((0, 2)), labels=[]),
    'box_flat': Prompt(3, box=(10, 5, 10, 20)),
    'box_reversed': Prompt(3, box=(20, 5, 10, 20)),
    'box_3': Prompt(3, box=(1, 2, 3)),
    'box_outside': Prompt(3, box=(0, 0, W, H + 5)),
    'mask_shape': Prompt(3, mask=np.ones((H + 1, W), bool)),
    'mask_transposed': Prompt(3, mask=np.ones((W, H), bool)),
    'mask_empty': Prompt(3, mask=np.zeros((H, W), bool)),
    'mask_nan': Prompt(3, mask=np.full((H, W), np.nan)),
    'mask_and_points': Prompt(3, mask=ONES, points=PTS, labels=[1]),
    'mask_and_box': Prompt(3, mask=ONES, box=(1, 1, 9, 9)),
    'id_0': click(0),
    'id_256': click(256),
    'id_neg': click(-1),
    'id_float': click(3.0),
    'id_str': click('3'),
    'id_bool': click(True),
    'id_none': click(None),
    'mask_id_0': Prompt(0, mask=ONES),
    'mask_id_256': Prompt(256, mask=ONES),
}


@pytest.mark.parametrize('name', sorted(BAD_PROMPTS))
@pytest.mark.parametrize('target', ['new', 'existing'])
def test_bad_prompt_rejected_state_untouched(steady, name, target):
    """Each bad prompt, for a new id (3) and as a correction of object 1, through add_prompt
    and queue_prompt: PromptError, nothing changed."""
    p = BAD_PROMPTS[name]
    if target == 'existing' and type(p.obj_id) is int and p.obj_id == 3:
        p = Prompt(1, p.points, p.labels, p.box, p.mask)
    snap = snapshot(steady)
    with pytest.raises(PromptError):
        steady.add_prompt(p)
    assert_unchanged(steady, snap)
    with pytest.raises(PromptError):
        steady.queue_prompt(p)
    assert_unchanged(steady, snap)


def test_unknown_object_removal(busy):
    snap = snapshot(busy)
    for oid in (3, 0, 999, 'x', None, 1.5):
        with pytest.raises(UnknownObjectError):
            busy.remove_object(oid)
        assert_unchanged(busy, snap)
    slot = busy.objects[2].slot
    busy.remove_object(2)
    assert busy.object_ids == [1] and busy.bank.cond_frames(slot) == []
    with pytest.raises(UnknownObjectError):
        busy.remove_object(2)
    busy.queue_prompt(click(4))
    busy.remove_object(4)                          # a queued, not yet tracked, object
    res = busy.track(frame(3))
    assert [o.obj_id for o in res.objects] == [1]


def test_capacity_error_leaves_others_tracking_identically():
    """max_objects=2: a third object is refused (add and queue) and the two tracked objects
    give bit-identical results to a tracker that never saw the refused prompt."""
    a = make_tracker(image_size=64, max_objects=2)
    b = make_tracker(image_size=64, max_objects=2)
    for tr in (a, b):
        tr.track(frame(0))
        tr.add_prompt(click(1))
        tr.add_prompt(click(2, x=45.0))
    snap = snapshot(a)
    with pytest.raises(CapacityError):
        a.add_prompt(click(3, x=30.0))
    with pytest.raises(CapacityError):
        a.queue_prompt(click(3, x=30.0))
    with pytest.raises(CapacityError):
        a.queue_prompt(Prompt(3, mask=ONES))
    assert_unchanged(a, snap)
    for f in range(1, 4):
        same_results(a.track(frame(f)), b.track(frame(f)))
    # a correction of a tracked object is not a new object: allowed at capacity
    same_results(a.add_prompt(click(2, x=40.0)), b.add_prompt(click(2, x=40.0)))


def test_queue_before_first_frame_applies_on_frame_0():
    a = make_tracker(image_size=64)
    a.queue_prompt(click(1))
    assert a.add_prompt(click(2, x=45.0)).frame_index == -1    # before any frame: queued too
    assert a.object_ids == [] and a.queued_ids == [1, 2]
    ra = a.track(frame(0))
    assert a.queued_ids == []
    assert ra.frame_index == 0 and [o.obj_id for o in ra.objects] == [1, 2]
    for oid in (1, 2):
        o = a.objects[oid]
        assert o.created_frame == 0 and a.bank.cond_frames(o.slot) == [0]
        assert ra.by_id(oid).frames_since_prompt == 0
    # the same as prompting frame 0 after tracking it (an initial conditioning frame)
    b = make_tracker(image_size=64)
    b.track(frame(0))
    b.add_prompt(click(1))
    rb = b.add_prompt(click(2, x=45.0))
    same_results(ra, rb)
    same_results(a.track(frame(1)), b.track(frame(1)))


def test_queue_prompt_next_frame_and_newest_wins(busy):
    busy.queue_prompt(click(3, x=30.0))
    busy.queue_prompt(click(3, x=40.0))            # newest per id wins
    res = busy.track(frame(3))
    o = busy.objects[3]
    assert o.created_frame == 3 and busy.bank.cond_frames(o.slot) == [3]
    ref = make_tracker(image_size=64)
    ref.track(frame(3))
    same = ref.add_prompt(click(3, x=40.0))       # a fresh initial prompt on the same frame
    assert torch.equal(res.by_id(3).low_res_logits, same.by_id(3).low_res_logits)


def test_correction_becomes_conditioning_frame(busy):
    res = busy.add_prompt(click(1, x=25.0))
    slot = busy.objects[1].slot
    assert busy.bank.cond_frames(slot) == [0, 2]
    assert res.by_id(1).frames_since_prompt == 0 and res.frame_index == 2
    assert busy.track(frame(3)).by_id(1).frames_since_prompt == 1


def test_segment_image_is_stateless(busy):
    still = frame(9, h=70, w=90)                   # another size: image mode does not care
    mask = np.zeros((70, 90), bool)
    mask[40:65, 10:50] = True
    prompts = [click(7, x=30.0, y=30.0), Prompt(200, mask=mask), Prompt(7, box=(50, 5, 85, 40))]
    snap = snapshot(busy)
    res = busy.segment_image(still, prompts)
    assert_unchanged(busy, snap)
    assert [o.obj_id for o in res.objects] == [7, 200, 7]         # one result per prompt
    assert all(o.mask.shape == (70, 90) for o in res.objects)
    assert res.by_id(200).area > 0
    # each result is what the prompt gives alone, and what the image path gives without a
    # tracker (sam2's image-predictor computation: test/engine/test_image_segmenter.py)
    alone = busy.segment_image(still, [prompts[2]])
    assert torch.equal(alone.objects[0].low_res_logits, res.objects[2].low_res_logits)
    lone = ImageSegmenter(busy.cfg, model=busy.model).segment(still, prompts)
    for o, lg in zip(res.objects, lone.low_res_logits):
        assert torch.equal(o.low_res_logits, lg[0])
    assert busy.segment_image(still, []).objects == []
    for bad, err in (([Prompt(3, points=np.array([[np.nan, 1.0]]), labels=[1])], PromptError),
                     ([Prompt(0, mask=mask)], PromptError)):
        with pytest.raises(err):
            busy.segment_image(still, bad)
    with pytest.raises(FrameError):
        busy.segment_image(np.zeros((70, 90), np.uint8), prompts)
    assert_unchanged(busy, snap)
    # and the stream carries on as if nothing happened
    other = make_tracker(image_size=64, max_objects=3)
    other.track(frame(0))
    other.add_prompt(click(1))
    other.add_prompt(Prompt(2, box=(35.0, 5.0, 60.0, 30.0)))
    other.track(frame(1))
    other.track(frame(2))
    same_results(busy.track(frame(3)), other.track(frame(3)))


def test_lost_after_frames_state_machine(monkeypatch):
    """Scores <= 0 for lost_after_frames (3) frames: occluded, occluded, then lost; a
    positive score brings the object back to tracking. Scores are forced by wrapping the
    runner (a random model's scores are what they are)."""
    tr = make_tracker(image_size=64, lost_after_frames=3)
    tr.track(frame(0))
    tr.add_prompt(click(1))
    sign = {'s': -1.0}
    real = tr.runner.track

    def forced(*args, **kw):
        out, modes = real(*args, **kw)
        out.score = sign['s'] * (out.score.abs() + 0.1)
        return out, modes

    monkeypatch.setattr(tr.runner, 'track', forced)
    states = []
    for f in range(1, 6):
        o = tr.track(frame(f)).by_id(1)
        states.append(o.state)
        assert o.score <= 0 and not o.visible
    assert states == [OCCLUDED, OCCLUDED, LOST, LOST, LOST]
    sign['s'] = 1.0
    o = tr.track(frame(6)).by_id(1)
    assert o.state == TRACKING and o.visible and tr.objects[1].hidden_run == 0
    sign['s'] = -1.0
    assert tr.track(frame(7)).by_id(1).state == OCCLUDED


def test_label_mask_and_object_stats():
    """Mask prompts (used as the output directly) make two overlapping non-empty objects; the
    label image holds their ids, the higher id where they overlap; area/box/centroid agree
    with each mask."""
    tr = make_tracker(image_size=64)
    tr.track(frame(0))
    a = np.zeros((H, W), bool)
    a[5:30, 5:40] = True
    b = np.zeros((H, W), bool)
    b[20:45, 25:60] = True
    tr.add_prompt(Prompt(200, mask=b))
    res = tr.add_prompt(Prompt(7, mask=a))
    lm = res.label_mask()
    assert lm.dtype == np.uint8 and lm.shape == (H, W)
    assert set(np.unique(lm).tolist()) == {0, 7, 200}
    m7, m200 = res.by_id(7).mask, res.by_id(200).mask
    assert (lm == 200).sum() == m200.sum() and (m7 & m200).any()
    assert np.array_equal(lm == 7, m7 & ~m200) and np.array_equal(lm == 0, ~(m7 | m200))
    for o in res.objects:
        ys, xs = np.nonzero(o.mask)
        assert o.area == len(xs) > 0
        assert o.box == (xs.min(), ys.min(), xs.max(), ys.max())
        assert np.allclose(o.centroid, (xs.mean(), ys.mean()))
    # each mask roughly reproduces its prompt (64-pixel model, 16x16 logits)
    assert (m7 & a).sum() / (m7 | a).sum() > 0.6


def test_errors_are_tracker_errors():
    for e in (FrameError, PromptError, UnknownObjectError, CapacityError):
        assert issubclass(e, TrackerError) and issubclass(e, ValueError)


# ---- regressions: bugs found in tracker.py ---------------------------------------------------
def test_bug_queue_capacity_counts_queued_corrections(busy):
    """3 slots, objects 1 and 2 tracked, a correction of 1 queued: a new object 3 fits."""
    busy.queue_prompt(click(1, x=25.0))
    busy.queue_prompt(click(3, x=30.0))            # raises CapacityError today
    assert busy.track(frame(3)).frame_index == 3 and busy.object_ids == [1, 2, 3]


def test_bug_capacity_race_between_queue_and_add(busy):
    busy.remove_object(2)                          # 1 tracked, 3 slots
    busy.queue_prompt(click(2, x=45.0))
    busy.queue_prompt(click(4, x=50.0))            # 1 tracked + 2 queued = full
    snap = snapshot(busy)
    try:
        busy.add_prompt(click(3, x=30.0))          # should be a CapacityError ...
    except CapacityError:
        assert_unchanged(busy, snap)
    res = busy.track(frame(3))                     # ... but today this raises instead,
    assert res.frame_index == 3                    # after advancing the frame counter
    assert sorted(o.obj_id for o in res.objects) == busy.object_ids


def test_bug_bad_queued_prompt_breaks_first_frame():
    """Acceptable fixes: reject the prompt in queue_prompt, drop it (and report) in track(), or
    raise from track() with nothing changed but the bad prompt dropped, so the next frame
    works. Today track() raises after advancing the frame counter and loses object 2."""
    tr = make_tracker(image_size=64)
    try:
        tr.queue_prompt(click(1, x=500.0))         # outside the 64x48 first frame
    except PromptError:
        pass
    tr.queue_prompt(click(2))
    try:
        res = tr.track(frame(0))
    except PromptError:
        assert tr.frame_index == -1 and tr.object_ids == [] and tr.queued_ids == [2]
        res = tr.track(frame(0))
    assert res.frame_index == 0 and tr.object_ids == [2]


def test_starting_prompts_are_the_queued_and_deferred_prompts_of_new_ids():
    """What a detector's association compares with (objects about to start): prompts queued
    or deferred for ids no object has; a correction of a tracked object is not one."""
    tr = make_tracker(image_size=64)
    tr.track(frame(0))
    tr.add_prompt(click(1))
    tr.queue_prompt(click(2, x=45.0))
    tr.defer_prompt(click(3, x=30.0))
    tr.defer_prompt(click(1, x=22.0))                  # a correction of object 1
    tr.queue_prompt(click(3, x=31.0))                  # object 3 twice: both are compared
    assert [(p.obj_id, p.points[0][0]) for p in tr.starting_prompts] == [
        (3, 30.0), (2, 45.0), (3, 31.0)]                 # deferred, then queued
    tr.track(frame(1))
    assert tr.starting_prompts == [] and tr.object_ids == [1, 2, 3]
