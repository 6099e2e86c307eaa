"""Detections as box prompts (issue 17) without DDS or a model: validation, the association rules
(sam2_ros/ros/detections.py), the worker's handling of detection stamps with a fake tracker, and
the vision_msgs conversions (skipped only where vision_msgs is absent)."""

import math
import sys

import numpy as np
import pytest

from sam2_ros.engine.types import LOST, OCCLUDED, TRACKING, FrameResult, ObjectResult
from sam2_ros.ros import detections as det
from sam2_ros.ros import params
from sam2_ros.ros.detections import (CORRECT, FILTERED, IGNORE, NEW, SKIPPED, Association,
                                     Detection, DetectionError, RawDetection, Rules, Tracked)
from sam2_ros.ros.worker import FrameItem, Mailbox, PromptItem, TrackingWorker

from test_ros_worker import host, outputs

W, H = 64, 48


def raw(x0, y0, x1, y1, cls='', score=0.9, theta=0.0):
    return RawDetection((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0, theta, cls, score)


def d(x0, y0, x1, y1, cls='', score=0.9, index=0):
    return Detection((x0, y0, x1, y1), cls, score, index)


# ----------------------------------------------------------------------------- pure rules

def test_iou_is_overlap_over_union_and_mask_box_is_end_exclusive():
    """iou: 1 for one box, 0 for touching boxes, 1/3 for half overlap; mask_box turns inclusive
    pixel indices into continuous coordinates (the end one further), None into None."""
    assert det.iou((0, 0, 10, 10), (0, 0, 10, 10)) == 1.0
    assert det.iou((0, 0, 10, 10), (10, 0, 20, 10)) == 0.0
    assert math.isclose(det.iou((0, 0, 10, 10), (5, 0, 15, 10)), 50 / 150)
    assert det.mask_box((2, 3, 4, 5)) == (2.0, 3.0, 5.0, 6.0) and det.mask_box(None) is None


@pytest.mark.parametrize('bad, words', [
    (RawDetection(float('nan'), 5, 4, 4), 'non-finite'),
    (RawDetection(5, 5, float('inf'), 4), 'non-finite'),
    (RawDetection(5, 5, 4, 4, score=float('nan')), 'non-finite'),
    (RawDetection(5, 5, 0, 4), 'width and height must be > 0'),
    (RawDetection(5, 5, 4, -3), 'width and height must be > 0'),
    (RawDetection(5, 5, 4, 4, theta=0.3), 'rotated'),
    (RawDetection(-10, 5, 4, 4), 'outside the 64x48 frame'),
    (RawDetection(70, 5, 4, 4), 'outside the 64x48 frame'),
    (RawDetection(5, 60, 4, 4), 'outside the 64x48 frame'),
])
def test_bad_detections_are_rejected_with_the_reason(bad, words):
    with pytest.raises(DetectionError, match=words):
        det.to_detection(bad, W, H, 3)
    ok, errors = det.validate_all([raw(1, 1, 9, 9), bad], W, H)
    assert [o.index for o in ok] == [0] and len(errors) == 1 and 'detection 1' in errors[0]


def test_partly_outside_box_is_clipped():
    assert det.to_detection(raw(-5, 40, 10, 60), W, H).box == (0.0, 40.0, 10.0, 48.0)


def test_detection_rules_and_params_refuse_bad_values_keep_class_ids():
    """Rules refuse a match IoU above the drift IoU and a min score out of range, the parameters
    a NaN drift IoU; class ids are kept as given and the thresholds are runtime parameters."""
    Rules().validate()
    with pytest.raises(ValueError, match='detection_match_iou .* must be <= detection_drift'):
        Rules(match_iou=0.6, drift_iou=0.5).validate()
    with pytest.raises(ValueError, match='detection_min_score must be in'):
        Rules(min_score=1.5).validate()
    with pytest.raises(ValueError, match='detection_drift_iou'):
        params.build({'checkpoint': '/x.pt', 'detection_drift_iou': float('nan')})
    _, opts = params.build({'checkpoint': '/x.pt', 'detection_class_ids': ['car', 'person']})
    assert opts.detection_class_ids == ['car', 'person']
    assert {'detection_min_score', 'detection_drift_iou'} <= set(params.RUNTIME_PARAMS)


def kinds(decisions):
    return [(x.kind, x.obj_id) for x in decisions]


def test_new_matched_drifted_lost_and_filters():
    a = Association()
    rules = Rules(min_score=0.5, match_iou=0.3, drift_iou=0.6, max_objects=3)
    first = a.plan([d(0, 0, 10, 10, 'car', index=0), d(30, 0, 40, 10, 'person', index=1),
                    d(30, 30, 40, 40, 'car', 0.2, index=2)], [], rules)
    assert kinds(first) == [(NEW, 1), (NEW, 2), (FILTERED, 0)]
    assert 'score 0.20' in first[2].reason
    for x in first[:2]:
        a.prompted(x)
    assert a.class_of(1) == 'car' and a.class_of(2) == 'person' and a.class_of(9) == ''
    tracked = [Tracked(1, (1, 0, 11, 10), TRACKING), Tracked(2, (36, 0, 46, 10), TRACKING)]
    a.observe(tracked)
    out = a.plan([d(0, 0, 10, 10, 'car', index=0), d(30, 0, 40, 10, 'person', index=1)],
                 tracked, rules)
    # car: IoU 0.82 tracks well; person: IoU 0.25 < match 0.3 -> a new object
    assert kinds(out) == [(IGNORE, 1), (NEW, 3)]
    rules = Rules(min_score=0.5, match_iou=0.2, drift_iou=0.6, max_objects=3)
    out = a.plan([d(0, 0, 10, 10, 'car', index=0), d(30, 0, 40, 10, 'person', index=1)],
                 tracked, rules)
    assert kinds(out) == [(IGNORE, 1), (CORRECT, 2)] and 'drifted' in out[1].reason
    # the class gate: a person detection on the car's box does not match the car
    out = a.plan([d(0, 0, 10, 10, 'person')], tracked, rules)
    assert kinds(out) == [(NEW, 3)]
    # lost / empty objects match by their last known box and are re-prompted
    lost = [Tracked(1, None, LOST), Tracked(2, (30, 0, 40, 10), OCCLUDED)]
    out = a.plan([d(2, 0, 12, 10, 'car', index=0), d(30, 0, 40, 10, 'person', index=1)],
                 lost, rules)
    assert kinds(out) == [(CORRECT, 1), (CORRECT, 2)]
    assert out[0].reason == 'empty mask' and out[1].reason == 'occluded'
    # class filter
    out = a.plan([d(0, 0, 10, 10, 'car')], tracked, Rules(class_ids=('person',)))
    assert out[0].kind == FILTERED and 'detection_class_ids' in out[0].reason


def test_capacity_duplicates_and_id_reuse():
    """Ids in use (e.g. a held prompt's object 1) are neither taken nor free capacity."""
    a = Association()
    rules = Rules(match_iou=0.3, drift_iou=0.5, max_objects=3)
    out = a.plan([d(0, 0, 10, 10, index=0), d(1, 0, 11, 10, 0.8, index=1),
                  d(20, 20, 30, 30, index=2), d(40, 0, 50, 10, index=3)], [], rules,
                 used_ids=[1])
    assert kinds(out) == [(NEW, 2), (FILTERED, 0), (NEW, 3), (SKIPPED, 0)]
    assert 'duplicate of detection 0' in out[1].reason and 'max_objects 3' in out[3].reason
    # removed objects are forgotten, their ids free again
    a.prompted(out[0])
    a.observe([])
    assert a.objects == {}


def test_ids_stay_stable_for_moving_boxes_with_a_missed_frame_and_a_false_positive():
    """The scenario of the node test, as pure rules: two boxes move 2 px per frame."""
    a = Association()
    rules = Rules(min_score=0.5, match_iou=0.3, drift_iou=0.5, max_objects=4)
    tracked, started = [], []
    for i in range(12):
        dets = [d(2 + 2 * i, 5, 22 + 2 * i, 25, 'a', index=0),
                d(40 - 2 * i, 20, 60 - 2 * i, 40, 'b', index=1)]
        if i == 5:
            dets.append(d(0, 30, 10, 40, 'a', 0.3, index=2))   # false positive: low score
        if i == 7:
            dets = []                                          # missed frame
        for x in a.plan(dets, tracked, rules):
            if x.kind in (NEW, CORRECT):
                a.prompted(x)
                started += [x.obj_id] if x.kind == NEW else []
        # the "tracker" follows each object's last box, 1 px behind
        tracked = [Tracked(i_, tuple(v + 1 for v in m.last_box), TRACKING)
                   for i_, m in sorted(a.objects.items())]
        a.observe(tracked)
    assert started == [1, 2] and a.class_of(1) == 'a' and a.class_of(2) == 'b'


# ----------------------------------------------------------------------------- worker

class BoxTracker:
    """A fake tracker whose objects stay where they were last prompted, plus a drift."""

    def __init__(self):
        self.boxes, self.drift, self.frame, self.calls = {}, {}, -1, []

    @property
    def object_ids(self):
        return sorted(self.boxes)

    queued_ids = deferred_ids = ()    # prompts are only ever applied at once here
    starting_prompts = ()

    def _result(self):
        res = FrameResult(self.frame, H, W)
        for i, b in sorted(self.boxes.items()):
            dx = self.drift.get(i, 0)
            box = (int(b[0]) + dx, int(b[1]), int(b[2]) - 1 + dx, int(b[3]) - 1)
            res.objects.append(ObjectResult(i, np.zeros((H, W), bool), 2.0, TRACKING, box,
                                            1, None, 0))
        return res

    def track(self, rgb):
        self.frame += 1
        return self._result()

    def add_prompt(self, p):
        self.calls.append((self.frame, p.obj_id, tuple(p.box)))
        self.boxes[p.obj_id] = p.box
        return self._result()


def dets_msg(*boxes):
    return list(boxes)    # convert_detections below takes the list as is


def make_worker():
    tr = BoxTracker()
    published, logs = [], []
    rules = Rules(match_iou=0.3, drift_iou=0.6, max_objects=4, max_age_frames=3)
    w = TrackingWorker(tr, Mailbox(True, 4, 8),
                       host(lambda m: np.zeros((H, W, 3), np.uint8),
                            log=lambda lvl, t: logs.append((lvl, t)),
                            convert_detections=lambda m: m, detection_rules=lambda: rules),
                       outputs(published.append))
    return tr, w, published, logs


def frame(w, stamp):
    w.handle_frame(FrameItem(None, stamp, f'header {stamp}', 0.0))


def detections(w, stamp, *boxes):
    w.handle_prompt(PromptItem(list(boxes), 'detections', stamp))


def test_worker_detection_stamps():
    tr, w, published, logs = make_worker()
    detections(w, 100, raw(2, 2, 12, 12, 'a'))          # before its frame: held
    assert w.waiting_prompts == 1 and not tr.calls
    frame(w, 100)
    assert tr.calls == [(0, 1, (2.0, 2.0, 12.0, 12.0))] and w.waiting_prompts == 0
    # the frame's result, then the prompted result again with the same header
    assert [p.header for p in published] == ['header 100', 'header 100']
    assert [o.obj_id for o in published[-1].result.objects] == [1]
    frame(w, 200)
    detections(w, 200, raw(2, 2, 12, 12, 'a'), raw(30, 30, 40, 40, 'b'))   # 1 ok, 2 new
    assert [c[1] for c in tr.calls] == [1, 2]
    tr.drift[1] = 5                                       # object 1 drifts 5 px
    frame(w, 300)
    detections(w, 300, raw(2, 2, 12, 12, 'a'))
    assert tr.calls[-1] == (2, 1, (2.0, 2.0, 12.0, 12.0))
    assert any('re-prompts object 1: drifted' in t for _, t in logs)
    # a late detection (frame 200, two frames back) is associated against frame 200's boxes
    n = len(tr.calls)
    detections(w, 200, raw(30, 30, 40, 40, 'b'))
    assert len(tr.calls) == n
    # bad stamps and bad boxes: rejected with the reason, nothing applied
    w.drop_pending()
    detections(w, 0, raw(2, 2, 12, 12))
    detections(w, 150, raw(2, 2, 12, 12))                 # between frames: never seen
    detections(w, 300, raw(2, 2, 2, 12), RawDetection(float('nan'), 1, 1, 1))
    detections(w, 350, raw(2, 2, 12, 12))                 # held ...
    frame(w, 400)                                         # ... its frame never came
    for k in range(4):
        frame(w, 500 + 100 * k)
    detections(w, 400, raw(2, 2, 12, 12))                 # 4 frames later: too old
    errors = [t for lvl, t in logs if lvl == 'error']
    assert len(tr.calls) == n, tr.calls[n:]
    for words in ('no stamp', 'no processed frame has this stamp', 'width and height',
                  'non-finite', 'no frame with this stamp was processed',
                  'more than detection_max_age_frames 3'):
        assert any(words in e for e in errors), (words, errors)
    assert w.counters.prompt_errors == 6 and w.detection_counts['rejected'] == 6
    assert w.detection_counts[NEW] == 2 and w.detection_counts[CORRECT] == 1


def test_worker_held_detections_are_reported_on_stop():
    tr, w, _, _ = make_worker()
    detections(w, 100, raw(2, 2, 12, 12))
    assert w.drop_pending() == ['detections (stamp 100 ns)'] and w.waiting_prompts == 0


# ----------------------------------------------------------------------------- messages

def test_vision_msgs_absent_is_a_clear_import_error(monkeypatch):
    from sam2_ros.ros import inputs, messages

    monkeypatch.setitem(sys.modules, 'vision_msgs', None)
    monkeypatch.setitem(sys.modules, 'vision_msgs.msg', None)
    with pytest.raises(ImportError, match='vision_msgs is not importable.*install.sh'):
        messages.vision_interfaces()


def test_detection2darray_in_and_out():
    pytest.importorskip('vision_msgs.msg', reason='vision_msgs is not installed')
    from vision_msgs.msg import Detection2D, Detection2DArray, ObjectHypothesisWithPose

    from sam2_ros.ros import inputs, messages

    arr = Detection2DArray()
    d1 = Detection2D()
    d1.bbox.center.position.x, d1.bbox.center.position.y = 20.0, 10.0
    d1.bbox.size_x, d1.bbox.size_y = 8.0, 4.0
    for cls, score in (('car', 0.4), ('truck', 0.7)):
        h = ObjectHypothesisWithPose()
        h.hypothesis.class_id, h.hypothesis.score = cls, score
        d1.results.append(h)
    arr.detections = [d1, Detection2D()]
    r = inputs.detections_from_msg(arr)
    assert r[0] == RawDetection(20.0, 10.0, 8.0, 4.0, 0.0, 'truck', 0.7)
    assert r[1].class_id == '' and r[1].score == 1.0 and r[1].size_x == 0.0

    res = FrameResult(3, H, W)
    res.objects = [ObjectResult(2, None, 0.0, OCCLUDED, (4, 6, 13, 9), 1, None, 0),
                   ObjectResult(1, None, -3.0, LOST, None, 0, None, 9)]
    from std_msgs.msg import Header

    hdr = Header(frame_id='cam')
    out = messages.objects_msg(res, hdr, {2: 'car'}.get)
    assert out.header.frame_id == 'cam' and len(out.detections) == 1   # empty masks left out
    o = out.detections[0]
    assert o.id == '2' and o.header.frame_id == 'cam'
    assert (o.bbox.center.position.x, o.bbox.center.position.y) == (9.0, 8.0)
    assert (o.bbox.size_x, o.bbox.size_y) == (10.0, 4.0)
    assert o.results[0].hypothesis.class_id == 'car' and o.results[0].hypothesis.score == 0.5
    # round trip: our output box read as a detection is the mask's box
    back = det.to_detection(inputs.detections_from_msg(out)[0], W, H)
    assert back.box == det.mask_box((4, 6, 13, 9))


def test_node_without_vision_msgs_runs_with_those_topics_off(tmp_path):
    """Where vision_msgs is absent (hidden here) the node configures and activates, says why
    ~/detections and ~/objects are off, and reports it in its diagnostics."""
    import subprocess

    from ros_helpers import PYTHON, ROOT, DomainLease

    code = '''
import sys
sys.modules['vision_msgs'] = None          # import vision_msgs -> ImportError
sys.modules['vision_msgs.msg'] = None
import rclpy
from rclpy.parameter import Parameter
from sam2_ros.ros.node import TrackerNode
rclpy.init()
over = [Parameter(k, value=v) for k, v in dict(
    model_size='tiny', image_size=64, random_weights=True, device='cpu', precision='fp32',
    use_cuda_graphs=False, max_objects=2).items()]
node = TrackerNode(parameter_overrides=over)
from rclpy.lifecycle import TransitionCallbackReturn as R
assert node.trigger_configure() == R.SUCCESS and node.trigger_activate() == R.SUCCESS
print('OFF', node.vision_off)
print('PUB', node.outputs.pubs['objects'])
print('SUBS', sorted(s.topic_name for s in node.input_subs))
sent = []
node.diag_pub.publish = sent.append
node.on_diagnostics()
print('DIAG', {kv.key: kv.value for kv in sent[0].status[0].values}.get('detections'))
node.release_io()
node.destroy_node()
rclpy.shutdown()
'''
    lease = DomainLease()
    try:
        p = subprocess.run([PYTHON, '-c', code], env=lease.env(), cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    finally:
        lease.release()
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert 'OFF vision_msgs is not importable' in out and 'PUB None' in out, out[-3000:]
    assert '~/detections and ~/objects are off: vision_msgs is not importable' in out
    assert 'detections' not in out.split('SUBS', 1)[1].splitlines()[0]
    assert 'DIAG off (no vision_msgs)' in out
    assert 'detections/objects: off (no vision_msgs)' in out


def test_a_users_object_is_not_re_prompted_by_a_detection_of_another_class():
    """An object a prompt started has no class: a detection overlapping it (any class) is
    that object, left alone, never a re-prompt that makes it the detector's."""
    a = Association()
    rules = Rules(match_iou=0.3, drift_iou=0.5)
    mine = [Tracked(1, (40, 40, 80, 80), TRACKING)]      # a user's box prompt started it
    a.observe(mine)
    out = a.plan([d(30, 30, 90, 100, 'hand')], mine, rules)          # IoU 0.38 < drift
    assert kinds(out) == [(IGNORE, 1)]
    assert out[0].reason == "a prompt started it: the user's object"
    assert a.class_of(1) == ''
    lost = [Tracked(1, None, LOST)]                                   # nor when it is lost
    assert kinds(a.plan([d(40, 40, 80, 80, 'hand')], lost, rules)) == [(IGNORE, 1)]


def test_a_second_box_on_an_object_another_detection_took_is_a_duplicate():
    """A detector reporting one object twice: the better box matches it, the other is a
    duplicate of that object, not a second object on the same instrument."""
    a = Association()
    rules = Rules(match_iou=0.3, drift_iou=0.5)
    (first,) = a.plan([d(0, 0, 20, 20, 'tool')], [], rules)
    a.prompted(first)
    tracked = [Tracked(1, (0, 0, 20, 20), TRACKING)]
    a.observe(tracked)
    out = a.plan([d(0, 0, 20, 20, 'tool', index=0), d(2, 0, 22, 18, 'tool', 0.8, index=1),
                  d(60, 60, 80, 80, 'tool', index=2)], tracked, rules)
    assert kinds(out) == [(IGNORE, 1), (FILTERED, 0), (NEW, 2)]
    assert out[1].reason == 'duplicate of object 1'
