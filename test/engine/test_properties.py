"""Property-based tests (hypothesis) of the core's input boundary: whatever a caller passes as
a prompt or a frame, the core either accepts it or raises a TrackerError subclass, never any
other exception; a rejected call changes nothing, and an accepted one never touches another
object's bank rows.

Examples per test as designed (HYPOTHESIS_PROFILE=thorough; the default 'ci' profile runs a
quarter, at least 20: conftest.examples; the counts actually run are written to
out/hypothesis_counts.json at the end of the session, with accepted/rejected splits):
  test_any_prompt_is_accepted_sanely_or_raises_prompt_error
                                    400  (preprocess only, no model)
  test_frame_size_accepts_exactly_uint8_rgb_frames_else_frame_error
                                    300  (preprocess only, no model)
  test_tracker_prompt_boundary       80  (add_prompt + queue_prompt on an encoded frame)
  test_tracker_frame_boundary        40  (track(); only frames of the stream's size run)
Model calls are few: an accepted prompt is one step of a 64-pixel model.
"""

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import (HYPOTHESIS_COUNTS, assert_unchanged, examples, make_tracker, snapshot,
                      textured_frame)
from sam2_ros.engine import frame_in
from sam2_ros.engine.prompts import prompt_mask, prompt_points
from sam2_ros.engine.errors import FrameError, PromptError, TrackerError
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')

H, W, S = 48, 64, 64
CPU = torch.device('cpu')


def count(test, outcome):
    c = HYPOTHESIS_COUNTS.setdefault(test, {'examples': 0})
    c['examples'] += 1
    c[outcome] = c.get(outcome, 0) + 1


# ---- strategies ---------------------------------------------------------------------------
coord = st.one_of(st.floats(-5, W + 5), st.floats(0, H), st.floats(),        # nan, inf, 1e308
                  st.integers(-10, 100), st.sampled_from([0.0, W, H, -0.0, 1e-300]))
obj_ids = st.one_of(st.integers(-3, 300), st.sampled_from([0, 1, 2, 3, 255, 256, -1]),
                    st.floats(allow_nan=True), st.text(max_size=2), st.none(), st.booleans(),
                    st.sampled_from([np.int64(3), np.uint8(4), np.float32(3.0), np.int32(256)]))


@st.composite
def points(draw):
    kind = draw(st.sampled_from(['none', 'array', 'array', 'array', 'empty', 'flat', 'wide',
                                 'deep', 'ragged', 'scalar', 'strings', 'many']))
    if kind == 'none':
        return None
    if kind == 'array':
        n = draw(st.integers(1, 4))
        return np.array(draw(st.lists(st.tuples(coord, coord), min_size=n, max_size=n)),
                        np.float64)
    return {'empty': np.zeros((0, 2)), 'flat': np.array([1.0, 2.0]),
            'wide': np.ones((2, 3)), 'deep': np.ones((1, 1, 2)),
            'ragged': [[1.0, 2.0], [3.0]], 'scalar': draw(coord),
            'strings': [['a', 'b']], 'many': np.ones((65, 2))}[kind]


labels = st.one_of(st.none(), st.lists(st.sampled_from([0, 1, 1, 1, 2, -1]), max_size=5),
                   st.lists(st.floats(-1, 2), max_size=3), st.just(['pos']),
                   st.just(np.array([True])))
boxes = st.one_of(st.none(), st.none(), st.tuples(coord, coord, coord, coord),
                  st.tuples(coord, coord, coord), st.just('abcd'),
                  st.tuples(st.floats(0, W / 2), st.floats(0, H / 2),
                            st.floats(W / 2, W), st.floats(H / 2, H)))


@st.composite
def masks(draw):
    if draw(st.integers(0, 2)):
        return None
    shape = draw(st.sampled_from([(H, W), (H, W), (H, W), (W, H), (H, W + 1), (H, W, 1),
                                  (0, 0), (H,)]))
    dtype = draw(st.sampled_from([bool, np.uint8, np.float32, np.float64, np.int64, object]))
    fill = draw(st.sampled_from(['empty', 'full', 'block', 'nan', 'half']))
    m = np.zeros(shape, np.float64)
    if fill == 'full':
        m[...] = 1
    elif fill == 'block' and m.ndim >= 2:
        m[m.shape[0] // 4: m.shape[0] // 2, m.shape[1] // 4: m.shape[1] // 2] = 1
    elif fill == 'nan':
        m[...] = np.nan
    elif fill == 'half':
        m[...] = 0.5
    if dtype is not object and not (fill == 'nan' and dtype in (bool, np.uint8, np.int64)):
        m = m.astype(dtype)
    elif dtype is object:
        m = m.astype(object)
    return m


wild_prompts = st.builds(Prompt, obj_id=obj_ids, points=points(), labels=labels, box=boxes,
                         mask=masks())
FAULTS = [None, None, None, 'id', 'nan', 'inf', 'outside', 'negative', 'labels', 'label_value',
          'shape', 'mask_with_points', 'empty_mask', 'mask_shape', 'box_order']


@st.composite
def near_valid_prompts(draw, ids=(2, 3, 4, 255, np.int64(3))):
    """A valid points / box / points+box / mask prompt, with at most one fault injected."""
    oid = draw(st.sampled_from(ids))
    kind = draw(st.sampled_from(['points', 'box', 'both', 'mask']))
    n = draw(st.integers(1, 4))
    pts = np.array(draw(st.lists(st.tuples(st.floats(0, W), st.floats(0, H)),
                                 min_size=n, max_size=n)))
    lab = np.array(draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n)))
    x0, y0 = draw(st.floats(0, W / 2 - 1)), draw(st.floats(0, H / 2 - 1))
    box = (x0, y0, draw(st.floats(W / 2, W)), draw(st.floats(H / 2, H)))
    mask = np.zeros((H, W), draw(st.sampled_from([bool, np.uint8, np.float32])))
    r, c = draw(st.integers(0, H - 8)), draw(st.integers(0, W - 8))
    mask[r:r + draw(st.integers(4, 20)), c:c + draw(st.integers(4, 20))] = 1
    p = Prompt(oid, points=pts if kind in ('points', 'both') else None,
               labels=lab if kind in ('points', 'both') else None,
               box=box if kind in ('box', 'both') else None, mask=mask if kind == 'mask' else None)
    fault = draw(st.sampled_from(FAULTS))
    bad = draw(st.sampled_from([0, 256, -1, 3.0, '3', None, True]))
    if fault == 'id':
        p.obj_id = bad
    elif fault in ('nan', 'inf', 'outside', 'negative') and p.points is not None:
        v = {'nan': np.nan, 'inf': np.inf, 'outside': W + 0.5, 'negative': -1.0}[fault]
        p.points = p.points.copy()
        p.points[draw(st.integers(0, n - 1)), draw(st.integers(0, 1))] = v
    elif fault == 'labels' and p.labels is not None:
        p.labels = p.labels[:-1] if draw(st.booleans()) else np.append(p.labels, 1)
    elif fault == 'label_value' and p.labels is not None:
        p.labels = p.labels.copy()
        p.labels[0] = draw(st.sampled_from([2, -1, 3]))
    elif fault == 'shape' and p.points is not None:
        p.points = p.points.reshape(-1)
    elif fault == 'mask_with_points' and p.mask is not None:
        p.points, p.labels = pts, lab
    elif fault == 'empty_mask' and p.mask is not None:
        p.mask = np.zeros_like(p.mask)
    elif fault == 'mask_shape' and p.mask is not None:
        p.mask = p.mask[:-1]
    elif fault == 'box_order' and p.box is not None:
        p.box = (box[2], box[1], box[0], box[3])
    return p


prompts = st.one_of(wild_prompts, near_valid_prompts())


def valid_id(i):
    return not isinstance(i, (bool, np.bool_)) and isinstance(i, (int, np.integer)) and \
        1 <= int(i) <= 255


def has_points(p):
    try:
        return p.points is not None and np.asarray(p.points, np.float64).size > 0
    except (TypeError, ValueError):
        return True


# ---- preprocess (no model) ----------------------------------------------------------------
@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=prompts)
def test_any_prompt_is_accepted_sanely_or_raises_prompt_error(p):
    """prompt_points / prompt_mask: accepted with sane outputs, or PromptError."""
    fn = prompt_mask if p.mask is not None else prompt_points
    try:
        out = fn(p, H, W, S, CPU)
    except PromptError:
        count('test_any_prompt_is_accepted_sanely_or_raises_prompt_error', 'rejected')
        return
    count('test_any_prompt_is_accepted_sanely_or_raises_prompt_error', 'accepted')
    assert valid_id(p.obj_id)
    if p.mask is not None:
        assert p.box is None and not has_points(p)
        assert out.shape == (1, 1, S, S) and set(out.unique().tolist()) <= {0.0, 1.0}
        assert out.any()
    else:
        xy, lab = out['point_coords'], out['point_labels']
        assert xy.shape[:2] == lab.shape and xy.shape[0] == 1 and lab.shape[1] >= 1
        assert torch.isfinite(xy).all() and (xy >= 0).all() and (xy <= S).all()
        assert set(lab.unique().tolist()) <= {0, 1, 2, 3}
        if p.box is not None:
            assert lab[0, :2].tolist() == [2, 3]
            assert (xy[0, 0] <= xy[0, 1]).all()


@st.composite
def frames(draw):
    kind = draw(st.sampled_from(['numpy', 'numpy', 'numpy', 'torch', 'valid', 'other']))
    if kind == 'valid':
        h, w = draw(st.sampled_from([(H, W), (H, W), (16, 16), (17, 33), (64, 48)]))
        return np.random.default_rng(h * w).integers(0, 256, (h, w, 3), dtype=np.uint8)
    if kind == 'other':
        return draw(st.sampled_from([None, 'frame', [[0, 0, 0]], 3, b'\x00' * 9]))
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 3, 4, 15, 16, H, W]),
                                min_size=ndim, max_size=ndim)))
    if kind == 'torch':
        dt = draw(st.sampled_from([torch.uint8, torch.float32, torch.int16, torch.bool]))
        return torch.zeros(shape, dtype=dt)
    dt = draw(st.sampled_from([np.uint8, np.uint8, np.int8, np.uint16, np.float32, np.float64,
                               bool, object]))
    a = np.zeros(shape, dt)
    if draw(st.booleans()) and a.ndim == 3:
        a = a[:, ::-1]                                 # a negative-stride view
    return a


def frame_ok(fr):
    return isinstance(fr, (np.ndarray, torch.Tensor)) and fr.dtype in (np.uint8, torch.uint8) \
        and fr.ndim == 3 and fr.shape[2] == 3 and 16 <= fr.shape[0] <= 8192 \
        and 16 <= fr.shape[1] <= 8192


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fr=frames())
def test_frame_size_accepts_exactly_uint8_rgb_frames_else_frame_error(fr):
    """frame_size accepts exactly the uint8 [H, W, 3] frames of 16..8192 pixels a side
    (FrameError otherwise), and every accepted frame preprocesses to a finite input."""
    try:
        hw = frame_in.frame_size(fr)
    except FrameError:
        count('test_frame_size_accepts_exactly_uint8_rgb_frames_else_frame_error', 'rejected')
        assert not frame_ok(fr)
        return
    count('test_frame_size_accepts_exactly_uint8_rgb_frames_else_frame_error', 'accepted')
    assert frame_ok(fr) and hw == tuple(fr.shape[:2])
    x = frame_in.to_model_input(fr, S, CPU)
    assert x.shape == (1, 3, S, S) and torch.isfinite(x).all()
    assert x.min() >= -2.2 and x.max() <= 2.7                 # (0 - mean)/std .. (1 - mean)/std


# ---- through the tracker --------------------------------------------------------------------
_TRACKER = {}


def stream():
    """A tracker with objects 1 and 2 tracked on a few frames (3 slots), shared by the
    examples; each example restores it (removes what it added)."""
    if 'tr' not in _TRACKER:
        tr = make_tracker(image_size=S, max_objects=3)
        tr.track(textured_frame(H, W, seed=0))
        tr.add_prompt(Prompt(1, points=np.array([[20.0, 20.0]]), labels=np.array([1])))
        tr.add_prompt(Prompt(2, box=(35.0, 5.0, 60.0, 30.0)))
        tr.track(textured_frame(H, W, seed=1))
        _TRACKER['tr'] = tr
    return _TRACKER['tr']


def not_one(i):
    return not (valid_id(i) and int(i) == 1)


@settings(max_examples=examples(80), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(p=st.one_of(wild_prompts.filter(lambda p: not_one(p.obj_id)), near_valid_prompts()))
def test_tracker_prompt_boundary(p):
    """add_prompt and queue_prompt agree: both accept or both raise the same TrackerError
    subclass (nothing else). A rejected call changes nothing; an accepted one leaves object 1
    (never prompted here) bit-identical. Added objects and queued prompts are undone after
    each example."""
    tr = stream()
    slot1 = tr.objects[1].slot
    snap = snapshot(tr)
    results = []
    for call in (tr.queue_prompt, tr.add_prompt):
        try:
            call(p)
            results.append(None)
        except TrackerError as e:
            results.append(type(e))
            assert_unchanged(tr, snap)
    assert results[0] == results[1], results
    if results[1] is not None:
        count('test_tracker_prompt_boundary', 'rejected')
        assert results[1] is PromptError           # ids and shapes: capacity is never hit
        return
    count('test_tracker_prompt_boundary', 'accepted')
    assert valid_id(p.obj_id) and (p.mask is None or not (has_points(p) or p.box is not None))
    assert int(p.obj_id) in tr.object_ids
    assert_unchanged(tr, snap, slots=[slot1])
    tr.handle.stream.queued.clear()                # undo the queued copy
    if int(p.obj_id) != 2:
        tr.remove_object(int(p.obj_id))
    assert tr.object_ids == [1, 2]


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fr=frames())
def test_tracker_frame_boundary(fr):
    """track(): a frame of the stream's size is tracked (objects 1 and 2 present, counter +1);
    anything else, including a valid frame of another size, raises FrameError and changes
    nothing."""
    tr = stream()
    snap = snapshot(tr)
    try:
        res = tr.track(fr)
    except FrameError:
        count('test_tracker_frame_boundary', 'rejected')
        assert_unchanged(tr, snap)
        assert not (frame_ok(fr) and tuple(fr.shape[:2]) == (H, W))
        return
    count('test_tracker_frame_boundary', 'accepted')
    assert frame_ok(fr) and tuple(fr.shape[:2]) == (H, W)
    assert res.frame_index == snap['frame'] + 1 and [o.obj_id for o in res.objects] == [1, 2]
