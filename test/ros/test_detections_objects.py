"""Which objects detections start, how they are counted and which class an object reports:
a detection never takes the id of a user's object about to start, max_objects counts every
object tracked or starting (skipped with a warning, never an error counted as new), a prompt
the tracker refuses is counted rejected, a removed object's class dies with it, and the
detection texts stay readable. A fake tracker over a scripted world, no DDS, no model."""

import numpy as np
import pytest

from sam2_ros.engine.errors import CapacityError, PromptError
from sam2_ros.engine.types import Prompt
from sam2_ros.ros import detections as det
from sam2_ros.ros.detections import (IGNORE, NEW, Association, Detection, DetectionError,
                                     RawDetection, Rules)
from sam2_ros.ros.inputs import ACTION_ADD, ACTION_REMOVE, ACTION_RESET

from test_detections_late import (H, W, WorldTracker, detect, frame, make, moving_discs, prompt,
                                  stamp)


def test_a_detection_never_takes_the_id_of_a_held_new_object_prompt():
    """The user's object 1 waits for the next frame (stamp 0): a detection of the other disc
    on the latest frame starts object 2, and frame 1 has both."""
    w, tr, _, _ = make()
    frame(w, 0)
    prompt(w, 0, ACTION_ADD, Prompt(1, box=moving_discs(0)[1]))
    detect(w, stamp(0), moving_discs(0)[:1])
    assert tr.objs == {2: 0}
    frame(w, 1)
    assert tr.objs == {1: 1, 2: 0}


def test_a_held_new_object_prompt_counts_toward_max_objects():
    w, tr, _, logs = make(Rules(max_objects=1), WorldTracker(max_objects=1))
    frame(w, 0)
    prompt(w, 0, ACTION_ADD, Prompt(1, box=moving_discs(0)[1]))
    detect(w, stamp(0), moving_discs(0)[:1])
    frame(w, 1)
    assert tr.objs == {1: 1} and w.detection_counts['skipped'] == 1
    assert w.detection_counts[NEW] == 0 and w.counters.prompt_errors == 0


def test_max_objects_reached_by_a_user_object_on_the_latest_frame_is_a_skipped_warning():
    """docs/ros.md: max_objects reached -> detections_skipped and a warning, not an error."""
    w, tr, published, logs = make(Rules(max_objects=1), WorldTracker(max_objects=1))
    frame(w, 0)
    prompt(w, stamp(0), ACTION_ADD, Prompt(1, box=moving_discs(0)[1]))    # applied now
    detect(w, stamp(0), moving_discs(0)[:1])
    assert tr.objs == {1: 1}
    assert w.detection_counts['skipped'] == 1 and w.detection_counts[NEW] == 0
    assert w.counters.prompt_errors == 0 and not [t for lvl, t in logs if lvl == 'error']
    warned = ['1 detection(s) of this message not started: max_objects 1 reached (counted in '
              'diagnostics)']
    assert [t for lvl, t in logs if lvl == 'warn'] == warned
    # a busy scene is no error: the same again is counted, not logged again nor reported
    detect(w, stamp(0), moving_discs(0)[:1])
    assert w.detection_counts['skipped'] == 2 and [t for lvl, t in logs if lvl == 'warn'] == warned
    assert w.errors.drain() == [] and w.errors.take_count().count == 0


@pytest.mark.parametrize('refusal, kind, level', [
    (CapacityError('cannot add object 1: max_objects=1 reached (1 tracked, 0 queued and 0 '
                   'deferred to start); remove_object() one of them, or configure a larger '
                   'max_objects'), 'skipped', 'warn'),
    (PromptError('box must have x0 < x1 and y0 < y1'), 'rejected', 'error')])
def test_a_prompt_the_tracker_refuses_is_counted_by_what_happened(refusal, kind, level):
    w, tr, _, logs = make()
    frame(w, 0)
    tr.refuse = refusal
    detect(w, stamp(0), moving_discs(0)[:1])
    assert w.detection_counts[kind] == 1 and w.detection_counts[NEW] == 0 and tr.objs == {}
    assert w.counters.prompt_errors == (kind == 'rejected')
    assert [lvl for lvl, t in logs if 'detection' in t] == [level]


def test_a_box_of_zero_size_at_floating_point_resolution_is_rejected():
    """1e-15 px at x 50 is x0 == x1: rejected here, not refused by the core later."""
    with pytest.raises(DetectionError, match='size 1e-15 x 10: width and height must be > 0'):
        det.to_detection(RawDetection(50.0, 50.0, 1e-15, 10.0, 0.0, 'a', 0.9), W, H)


@pytest.mark.parametrize('bad', [RawDetection(1e300, 50.0, 1e300, 10.0),
                                 RawDetection(float('nan'), 1e300, 10.0, 10.0)])
def test_huge_numbers_in_a_rejected_detection_are_short(bad):
    with pytest.raises(DetectionError) as err:
        det.to_detection(bad, W, H)
    assert 'e+' in str(err.value) and len(str(err.value)) < 160, str(err.value)


@pytest.mark.parametrize('action', [ACTION_REMOVE, ACTION_RESET])
def test_a_new_object_does_not_inherit_the_class_of_a_removed_one(action):
    """A detection starts object 1 ('car'); the user removes it (or resets) and starts a new
    object 1 with a Prompt: ~/objects reports class '' for it (docs/ros.md)."""
    a = Association()
    w, tr, _, _ = make(association=a)
    frame(w, 0)
    detect(w, stamp(0), moving_discs(0)[:1], cls='car')
    frame(w, 1)
    assert a.class_of(1) == 'car'
    prompt(w, stamp(1), action, Prompt(1))
    prompt(w, stamp(1), ACTION_ADD, Prompt(1, box=moving_discs(1)[1]))
    assert tr.objs == {1: 1} and a.class_of(1) == ''
    frame(w, 2)
    assert a.class_of(1) == ''


def test_match_iou_0_gives_each_detection_of_a_class_its_own_object():
    """match_iou 0 associates by class alone, and two detections of a class that do not
    overlap are two objects, kept by the next messages (no new ones, ids stable)."""
    a = Association()
    rules = Rules(match_iou=0.0, drift_iou=0.0)
    boxes = [(0, 0, 10, 10), (40, 0, 50, 10)]
    out = a.plan([Detection(b, 'a', index=i) for i, b in enumerate(boxes)], [], rules)
    assert [(x.kind, x.obj_id) for x in out] == [(NEW, 1), (NEW, 2)]
    for x in out:
        a.prompted(x)
    tracked = [det.Tracked(i + 1, b, 'tracking') for i, b in enumerate(boxes)]
    a.observe(tracked)
    out = a.plan([Detection((41, 0, 51, 10), 'a', index=0), Detection((1, 0, 11, 10), 'a',
                                                                      index=1)], tracked, rules)
    assert [(x.kind, x.obj_id) for x in out] == [(IGNORE, 2), (IGNORE, 1)]


@pytest.mark.parametrize('held', [
    Prompt(1, box=moving_discs(0)[0]),
    Prompt(1, points=np.array([[32.0, 40.0]], np.float32), labels=np.array([1], np.int32))])
def test_a_detection_of_the_object_a_held_prompt_starts_is_that_object(held):
    """The user's box or click on a disc waits for the next frame; the detector's box of the
    same disc on the latest frame starts no second object: left alone, as object 1."""
    w, tr, _, logs = make()
    frame(w, 0)
    prompt(w, 0, ACTION_ADD, held)
    detect(w, stamp(0), moving_discs(0)[:1])
    assert tr.objs == {} and w.detection_counts[IGNORE] == 1 and w.detection_counts[NEW] == 0
    frame(w, 1)
    assert tr.objs == {1: 0}                  # object 1 on the first disc, and no other


def test_plan_matches_pending_prompts_by_box_iou_or_by_their_positive_points():
    d_a = Detection((0.0, 0.0, 10.0, 10.0), 'a', 0.9, 0)
    d_b = Detection((50.0, 50.0, 60.0, 60.0), 'a', 0.9, 1)
    d_c = Detection((100.0, 0.0, 110.0, 10.0), 'a', 0.9, 2)
    pending = [det.Pending(4, box=(1.0, 1.0, 10.0, 10.0)),
               det.Pending(5, points=((55.0, 55.0), (58.0, 52.0))),
               det.Pending(6, points=((105.0, 5.0), (200.0, 5.0)))]   # one point outside
    got = Association().plan([d_a, d_b, d_c], [], Rules(), used_ids={4, 5, 6},
                             pending=pending)
    assert [(g.kind, g.obj_id) for g in got] == [(IGNORE, 4), (IGNORE, 5), (NEW, 1)]


def test_a_click_inside_nested_boxes_is_the_smaller_one_and_any_prompt_of_an_id_counts():
    """A click on a cup on a table: the cup's detection is the clicked object (the table starts
    its own); an id with a box and a later negative click is matched by its box."""
    table = Detection((0.0, 0.0, 100.0, 100.0), 'a', 0.9, 0)
    cup = Detection((2.0, 2.0, 8.0, 8.0), 'a', 0.9, 1)
    got = Association().plan([table, cup], [], Rules(), used_ids={1},
                             pending=[det.Pending(1, points=((5.0, 5.0),))])
    assert [(g.kind, g.obj_id) for g in got] == [(NEW, 2), (IGNORE, 1)]
    boxed = [det.Pending(1, box=(2.0, 2.0, 8.0, 8.0)), det.Pending(1)]   # box, then negative
    got = Association().plan([cup], [], Rules(), used_ids={1}, pending=boxed)
    assert [(g.kind, g.obj_id) for g in got] == [(IGNORE, 1)]
