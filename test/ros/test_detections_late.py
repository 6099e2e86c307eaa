"""Detections whose frame is not the latest one: a detector lagging several frames behind the
tracker starts each object once (its detections of the frames after the one that started an
object are that object), and detections stamped far ahead are refused instead of filling the
hold. A fake tracker over a scripted world, no DDS, no model."""

import dataclasses

import numpy as np

from sam2_ros.engine.errors import CapacityError, UnknownObjectError
from sam2_ros.engine.types import TRACKING, FrameResult, ObjectResult, Prompt
from sam2_ros.ros import hold
from sam2_ros.ros.detections import (CORRECT, IGNORE, NEW, Association, Detection,
                                     RawDetection, Rules, Tracked)
from sam2_ros.ros.inputs import ACTION_ADD, ACTION_REMOVE
from sam2_ros.ros.worker import FrameItem, Mailbox, PromptItem, TrackingWorker

from test_ros_worker import host, outputs

W, H = 160, 120


def moving_discs(frame):
    """Two 24 px boxes, the first moving right 3 px a frame, the second left."""
    f = max(frame, 0)
    return [(20.0 + 3 * f, 28.0, 44.0 + 3 * f, 52.0), (110.0 - 3 * f, 60.0, 134.0 - 3 * f, 84.0)]


class WorldTracker:
    """A perfect fake tracker over ``world(frame)`` (true boxes): an object is the true box
    nearest its prompt, and its mask box is that box on every frame."""

    def __init__(self, world=moving_discs, max_objects=8):
        self.world, self.max_objects = world, max_objects
        self.frame = -1
        self.objs, self.queued, self.deferred = {}, {}, {}
        self.refuse = None              # an exception add_prompt raises, if set

    @property
    def object_ids(self):
        return sorted(self.objs)

    @property
    def frame_index(self):
        return self.frame

    @property
    def queued_ids(self):
        return sorted(self.queued)

    @property
    def deferred_ids(self):
        return sorted(self.deferred)

    @property
    def starting_prompts(self):
        return [p for i, p in sorted({**self.deferred, **self.queued}.items())
                if i not in self.objs]

    def _start(self, p):
        if p.obj_id not in self.objs and len(self.objs) >= self.max_objects:
            raise CapacityError(f'max_objects={self.max_objects}')
        b = p.box if p.box is not None else (*p.points[0], *p.points[0])
        cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
        self.objs[p.obj_id] = int(np.argmin([abs((q[0] + q[2]) / 2 - cx) + abs((q[1] + q[3]) / 2
                                                                                 - cy)
                                             for q in self.world(self.frame)]))

    def result(self):
        out = []
        for i, k in sorted(self.objs.items()):
            x0, y0, x1, y1 = self.world(self.frame)[k]
            out.append(ObjectResult(i, None, 5.0, TRACKING, (int(x0), int(y0), int(x1) - 1,
                                                              int(y1) - 1), 1, None, 0))
        return FrameResult(self.frame, H, W, out)

    def add_prompt(self, p):
        if self.refuse is not None:
            raise self.refuse
        self._start(p)
        return self.result()

    def defer_prompt(self, p):
        self.deferred[p.obj_id] = p

    def queue_prompt(self, p):
        self.queued[p.obj_id] = p

    def track(self, rgb):
        for p in self.deferred.values():
            self._start(p)
        self.frame += 1
        for p in self.queued.values():
            self._start(p)
        self.deferred, self.queued = {}, {}
        return self.result()

    def remove_object(self, i):
        if i not in self.objs:
            raise UnknownObjectError(f'cannot remove object {i}')
        del self.objs[i]

    def reset(self):
        self.objs, self.queued, self.deferred = {}, {}, {}


def make(rules=Rules(), tracker=None, association=None):
    """A worker on a WorldTracker; its published results and log lines."""
    tr = tracker or WorldTracker()
    published, logs = [], []
    w = TrackingWorker(tr, Mailbox(True, 4, 16),
                       host(lambda m: np.zeros((H, W, 3), np.uint8), lambda item: item.msg,
                            log=lambda lvl, t: logs.append((lvl, t)),
                            convert_detections=lambda m: m, detection_rules=lambda: rules),
                       outputs(published.append), association=association,
                       corrections_on_next_frame=True)
    return w, tr, published, logs


def stamp(i):
    return 1_000_000_000_000 + i * 100_000_000


def frame(w, i):
    w.handle_frame(FrameItem(None, stamp(i), f'header {i}', 0.0))


def raw(box, cls='a', score=0.9):
    x0, y0, x1, y1 = box
    return RawDetection((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0, 0.0, cls, score)


def detect(w, stamp_ns, boxes, cls='a'):
    w.handle_prompt(PromptItem([raw(b, cls) for b in boxes], 'detections', stamp_ns))


def prompt(w, stamp_ns, action, p):
    w.handle_prompt(PromptItem((action, p), 'prompt', stamp_ns))


def test_a_detector_lagging_two_frames_starts_each_object_once():
    """docs/ros.md: a slower detector is the usual case and ids are stable. The detections of
    frames 1 and 2 arrive after frame 0's started the objects on frame 2: they are those
    objects (matched by the box that started them), not new ones."""
    w, tr, _, logs = make()
    for i in range(10):
        frame(w, i)
        if i >= 2:
            detect(w, stamp(i - 2), moving_discs(i - 2))
    assert tr.objs == {1: 0, 2: 1}
    assert w.detection_counts[NEW] == 2 and w.detection_counts[IGNORE] == 14
    assert sum('starts object' in t for _, t in logs) == 2


def test_a_late_detection_matches_an_object_started_after_its_frame():
    """Pure rules: an object started after the detection's frame is matched by its start box
    (a detection's) or its last known box (a prompt's object), and left alone."""
    a = Association()
    rules = Rules(match_iou=0.3, drift_iou=0.5)
    started = a.plan([Detection((20, 28, 44, 52), 'a')], [], rules)
    a.prompted(started[0])
    a.observe([Tracked(1, (26, 28, 50, 52), TRACKING), Tracked(2, (100, 60, 124, 84), TRACKING)])
    out = a.plan([Detection((23, 28, 47, 52), 'a', index=0),
                  Detection((101, 60, 125, 84), 'b', index=1),
                  Detection((60, 0, 80, 20), 'a', index=2)], [], rules, later=[1, 2])
    later = 'started or prompted after its frame'
    assert [(x.kind, x.obj_id, x.reason) for x in out] == [
        (IGNORE, 1, later), (IGNORE, 2, later), (NEW, 3, 'unmatched')]


def test_an_id_removed_and_started_again_is_a_new_object_for_older_frames():
    """Object 1 (the first disc) is removed and a prompt starts a new object 1 on the second
    disc: a late detection of the first disc is not the new object 1 (it starts one)."""
    from sam2_ros.engine.types import Prompt

    w, tr, _, _ = make()
    frame(w, 0)
    detect(w, stamp(0), moving_discs(0)[:1])
    frame(w, 1)
    frame(w, 2)
    prompt(w, stamp(2), ACTION_REMOVE, Prompt(1))
    prompt(w, stamp(2), ACTION_ADD, Prompt(1, box=moving_discs(2)[1]))
    assert tr.objs == {1: 1}
    detect(w, stamp(1), moving_discs(1)[:1])
    assert tr.objs == {1: 1, 2: 0}


def test_detections_stamped_far_ahead_are_refused_and_never_fill_the_hold():
    """A detector on another clock for a while (an hour ahead) gets each message refused with
    the reason; a detector that is merely faster (the next frame's stamp) still works."""
    w, tr, published, logs = make()
    frame(w, 0)
    hour = 3600 * 10 ** 9
    for k in range(20):
        detect(w, stamp(0) + hour + k, moving_discs(0)[:1])
    assert w.waiting_prompts == 0 and w.detection_counts['rejected'] == 20
    errors = [t for lvl, t in logs if lvl == 'error']
    assert len(errors) == 20 and all(
        's after the latest frame (more than 10 s ahead: a wrong stamp?); stamp detections '
        'like the image they were computed on' in e for e in errors), errors[0]
    detect(w, stamp(1), moving_discs(1)[:1])     # the detector was faster: held for frame 1
    assert w.waiting_prompts == 1
    frame(w, 1)
    assert tr.objs == {1: 0} and w.detection_counts[NEW] == 1


def test_detections_held_before_the_first_frame_are_refused_when_it_is_far_behind():
    w, tr, published, logs = make()
    detect(w, stamp(0) + int(hold.MAX_LEAD_S * 1e9) + 1, moving_discs(0)[:1])
    detect(w, stamp(0), moving_discs(0)[:1])
    assert w.waiting_prompts == 2
    frame(w, 0)
    assert w.waiting_prompts == 0 and tr.objs == {1: 0}
    assert w.detection_counts['rejected'] == 1 and w.counters.prompt_errors == 1
    assert any('more than 10 s ahead' in e for p in published for e in p.errors)


class DriftingTracker(WorldTracker):
    """WorldTracker whose masks drift 12 px right from frame ``at`` on, for every object a
    prompt has not re-anchored since."""

    def __init__(self, at):
        super().__init__()
        self.at = at
        self.anchored = set()

    def result(self):
        res = super().result()
        if self.frame < self.at:
            return res
        objs = [o if o.obj_id in self.anchored else dataclasses.replace(
            o, box=(o.box[0] + 12, o.box[1], o.box[2] + 12, o.box[3])) for o in res.objects]
        return FrameResult(res.frame_index, H, W, objs)

    def add_prompt(self, p):
        if p.obj_id in self.objs:
            self.anchored.add(p.obj_id)
        return super().add_prompt(p)

    def defer_prompt(self, p):
        self.anchored.add(p.obj_id)
        super().defer_prompt(p)


def test_a_lagging_detector_corrects_a_drifted_object_once():
    """A detector 4 frames behind: its detections of the frames tracked before its first
    correction took effect still show the drift; they are older news, not 3 more
    corrections with boxes 4 frames old."""
    w, tr, _, logs = make(tracker=DriftingTracker(at=5))
    for i in range(14):
        frame(w, i)
        if i >= 4:
            detect(w, stamp(i - 4), moving_discs(i - 4)[:1])
    assert w.detection_counts[NEW] == 1 and w.detection_counts[CORRECT] == 1
    assert sum('re-prompts object 1' in t for _, t in logs) == 1


def test_a_late_detection_does_not_undo_a_users_correction():
    """The user corrects the detector's object on the latest frame; detections of the frames
    before it (still showing the drift) leave the object alone."""
    w, tr, _, logs = make(tracker=DriftingTracker(at=0))
    frame(w, 0)
    detect(w, stamp(0), moving_discs(0)[:1])                        # starts object 1
    for i in range(1, 6):
        frame(w, i)
    prompt(w, stamp(5), ACTION_ADD, Prompt(1, box=moving_discs(5)[0]))   # deferred correction
    for i in range(1, 6):                                           # the detector catches up
        detect(w, stamp(i), moving_discs(i)[:1])
    assert w.detection_counts[CORRECT] == 0 and not any('re-prompts' in t for _, t in logs)
