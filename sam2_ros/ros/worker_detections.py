"""Detections in the worker thread (vision_msgs Detection2DArray as PromptItems of kind
'detections'): associated with the tracked objects of the frame they were computed on, and
with the objects started since (a detector lagging several frames sees an object it started
in the frames after the one that started it), turned into box prompts on the latest frame.
Held until their frame by the worker's :class:`~sam2_ros.ros.hold.StampHold`; the association
memory (:class:`detections.Association`) is the node's, as it outlives an activation.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import numpy as np

from sam2_ros.engine.errors import CapacityError, TrackerError
from sam2_ros.engine.types import FrameResult, Prompt
from sam2_ros.ros import click_ids
from sam2_ros.ros import detections as det
from sam2_ros.ros.mailbox import PromptItem
from sam2_ros.ros.worker_types import ErrorLog, WorkerCounters, WorkerHost

# Processed frames remembered for late detections (the age limit is the run-time rule
# max_age_frames).
SEEN_FRAMES = 256
COUNT_KEYS = ('messages', det.NEW, det.CORRECT, det.IGNORE, det.FILTERED, det.SKIPPED,
              'rejected')


class DetectionPrompts:
    """Detection messages -> box prompts, against the objects as they were on their frame.
    ``held_prompts()``: the add prompts the worker holds for later frames (objects about to
    start: a detection must not take their ids, and a detection of one is that object)."""

    def __init__(self, tracker: Any, association: det.Association, host: WorkerHost,
                 errors: ErrorLog, counters: WorkerCounters, *,
                 held_prompts: Callable[[], Iterable[Prompt]]) -> None:
        self.tracker, self.association, self.host = tracker, association, host
        self.errors, self.counters = errors, counters
        self.held_prompts = held_prompts
        # processed frames by stamp: (processed count, width, height, objects)
        self._seen: 'collections.OrderedDict[int, Tuple[int, int, int, List[det.Tracked]]]' = \
            collections.OrderedDict()
        # per object: the processed count of the first frame that showed it (removed objects
        # forgotten), so an id removed and started again is a new object for older frames
        self._born: Dict[int, int] = {}
        # per object: the processed count of the frame its latest prompt (a user's or a
        # detection's) is on: a detection of that frame or an older one is older news
        self._prompted: Dict[int, int] = {}
        self._skipped = 0               # detections skipped (max_objects) by the last message
        # every key present from the start: diagnostics read it from the executor thread
        self.counts: Dict[str, int] = dict.fromkeys(COUNT_KEYS, 0)

    def remember(self, stamp_ns: int, res: FrameResult) -> None:
        """A processed frame's objects, for detections stamped like it."""
        tracked = [det.Tracked(o.obj_id, det.mask_box(o.box), o.state) for o in res.objects]
        self._seen[stamp_ns] = (self.counters.processed, res.width, res.height, tracked)
        self._seen.move_to_end(stamp_ns)
        while len(self._seen) > SEEN_FRAMES:
            self._seen.popitem(last=False)
        shown = {t.obj_id for t in tracked}
        self._born = {i: self._born.get(i, self.counters.processed) for i in shown}
        self.association.observe(tracked)

    def forget_frames(self) -> None:
        """Time went back (time_jump.py): the processed stamps are of another time line."""
        self._seen.clear()

    def forget_objects(self, obj_ids: Optional[Iterable[int]] = None) -> None:
        """Objects removed (``obj_ids``) or reset (None): their class and boxes are not a new
        object's with the same id, which starts with class '' (a prompt's or a click's)."""
        ids = list(self._born) + list(self._prompted) if obj_ids is None else list(obj_ids)
        for obj_id in ids:
            self._born.pop(obj_id, None)
            self._prompted.pop(obj_id, None)
        self.association.forget(None if obj_ids is None else ids)

    def note_prompt(self, obj_id: int, next_frame: bool = False) -> None:
        """A prompt of ``obj_id`` on the latest processed frame (``next_frame``: on the frame
        about to be tracked): detections of frames up to it do not re-prompt the object."""
        self._prompted[obj_id] = self.counters.processed + (1 if next_frame else 0)

    def reject(self, item: PromptItem, why: str) -> None:
        self.counters.add_prompt_errors()
        self.counts['rejected'] += 1
        self.errors.report(f'rejected detections (stamp {item.stamp_ns} ns): {why}')

    def associate(self, item: PromptItem) -> Optional[FrameResult]:
        """Detections of an already processed frame -> box prompts on the latest frame; the
        tracker's result after the last prompt, if any (the worker re-publishes it)."""
        seen = self._seen.get(item.stamp_ns)
        rules = self.host.detection_rules()
        if seen is None:
            self.reject(item, 'no processed frame has this stamp (never received, dropped, '
                              'failed, or long ago)')
            return None
        index, width, height, tracked = seen
        age = self.counters.processed - index
        if age > rules.max_age_frames:
            self.reject(item, f'its frame is {age} frames old (more than '
                              f'detection_max_age_frames {rules.max_age_frames})')
            return None
        try:
            raws = self.host.convert_detections(item.msg)
        except Exception as exc:  # a malformed message: say so, keep tracking
            self.reject(item, f'cannot read the message: {exc!r}')
            return None
        dets, errors = det.validate_all(raws, width, height)
        for e in errors:
            self.counters.add_prompt_errors()
            self.counts['rejected'] += 1
            self.errors.report(f'rejected {e} (stamp {item.stamp_ns} ns)')
        late = f', applied {age} frames later' if age else ''
        # the frame's objects that exist now, and the objects started after that frame
        now = set(self.tracker.object_ids)
        on_frame = [t for t in tracked
                    if t.obj_id in now and self._born.get(t.obj_id, index + 1) <= index
                    and self._prompted.get(t.obj_id, -1) < index]
        later = sorted(now - {t.obj_id for t in on_frame})
        held = list(self.held_prompts())
        used = click_ids.ids_in_use(self.tracker, [p.obj_id for p in held])
        # every prompt of an object about to start (a box, then a click on it: either matches)
        pending = [pending_of(p) for p in [*held, *self.tracker.starting_prompts]
                   if p.obj_id not in now]
        res, skipped = None, self.counts[det.SKIPPED]
        for d in self.association.plan(dets, on_frame, rules, used, later, pending):
            prompted = self._apply(d, late)
            res = prompted if prompted is not None else res
        self._report_skipped(self.counts[det.SKIPPED] - skipped, rules.max_objects)
        return res

    def _report_skipped(self, n: int, max_objects: int) -> None:
        """Detections not started for max_objects: counted (diagnostics), and logged once when
        that begins or its number changes, not per detection and message: a busy scene is no
        error."""
        if n != self._skipped and n:
            self.host.log('warn', f'{n} detection(s) of this message not started: max_objects '
                                  f'{max_objects} reached (counted in diagnostics)')
        self._skipped = n

    def _apply(self, d: det.Decision, late: str) -> Optional[FrameResult]:
        """One decision of the association plan; the tracker's result when it prompted.
        Counted by what happened: a prompt the tracker refuses is not 'new' or 'correct'."""
        box = ', '.join(f'{v:.0f}' for v in d.detection.box)
        label = f'detection {d.detection.index} ({d.detection.class_id or "no class"} ' \
                f'{d.detection.score:.2f}, box {box})'
        if d.kind not in (det.NEW, det.CORRECT):
            self.counts[d.kind] += 1
            if d.kind == det.IGNORE:
                self.association.matched(d)
            return None
        try:
            res = self.tracker.add_prompt(Prompt(obj_id=d.obj_id, box=d.detection.box))
        except CapacityError:            # max_objects by the tracker's count: a planned skip
            self.counts[det.SKIPPED] += 1
            return None
        except TrackerError as exc:
            self.counters.add_prompt_errors()
            self.counts['rejected'] += 1
            self.errors.report(f'rejected {label}: {type(exc).__name__}: {exc}')
            return None
        self.counts[d.kind] += 1
        self.association.prompted(d)
        self.note_prompt(d.obj_id)
        self.host.log('info', f'{label} ' + (f'starts object {d.obj_id}' if d.kind == det.NEW
                                             else f're-prompts object {d.obj_id}: {d.reason}')
                      + late)
        return res


def pending_of(prompt: Prompt) -> det.Pending:
    """A prompt about to start an object as the association compares it with a detection: its
    box (a mask prompt's extent) and its positive points."""
    box = None if prompt.box is None else tuple(float(v) for v in prompt.box)
    if box is None and prompt.mask is not None and np.any(prompt.mask):
        ys, xs = np.nonzero(prompt.mask)
        box = det.mask_box((xs.min(), ys.min(), xs.max(), ys.max()))
    points: Tuple[Tuple[float, float], ...] = ()
    if prompt.points is not None and prompt.labels is not None:
        points = tuple((float(x), float(y)) for (x, y), lab in
                       zip(np.asarray(prompt.points).reshape(-1, 2),
                           np.asarray(prompt.labels).reshape(-1)) if lab == 1)
    return det.Pending(prompt.obj_id, box, points)
