"""Detections -> box prompts: validation and association with the tracked objects (no ROS).

A detector publishes boxes for a frame (``vision_msgs/Detection2DArray`` on ``~/detections``,
stamped like the image); :func:`sam2_ros.ros.inputs.detections_from_msg` turns the message into
:class:`RawDetection` values and this module decides, per detection, what the tracker does:

* filtered: score below ``min_score`` or class not in ``class_ids`` (when that list is set);
* rejected: NaN/inf values, zero or negative size, a rotated box, a box entirely outside the
  frame (a box partly outside is clipped to the frame);
* matched to an object: same class (an object or detection without a class matches any) and
  box IoU >= ``match_iou`` with the object's reference box (its box on the detection's frame
  when its mask is non-empty, else its last known box), greedily by highest IoU, one detection
  per object. A matched object is left alone while it tracks well (state TRACKING and IoU >=
  ``drift_iou``) and re-prompted with the detection's box otherwise ('drifted', or 'occluded' /
  'lost' / 'empty'), if a detection started it: an object a user's prompt started is the
  user's, never re-prompted by a detector (whose class may be another's);
* matched to an object started or prompted after the detection's frame (a detector slower
  than the tracker: its detections of frames k+1.. arrive after frame k's started or
  corrected the object), by the box of the detection that started it or its last known box:
  left alone, as that object (no second correction from older news, no user's undone);
* matched to a prompt about to start an object (queued for the next frame, deferred, or held
  for a later frame: a user's click or box the detector sees before the tracker does): a box
  prompt by IoU >= ``match_iou``, a click when the box holds all its positive points: left
  alone, as that object (the prompt starts it);
* unmatched: starts a new object with the lowest id not in use (tracked, queued, or held
  for a later frame), unless it overlaps an object of its class (another detection took that
  object) or a new detection of its class already planned (IoU >= ``match_iou``: a duplicate)
  or ``max_objects`` is reached (skipped, counted).

Everything is a pure function of its inputs except :class:`Association`, which remembers per
object the class and score of the detection that prompted it, the box of the detection that
started it and its last known box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

Box = Tuple[float, float, float, float]   # x0, y0, x1, y1 in continuous pixel coordinates

NEW, CORRECT, IGNORE, FILTERED, SKIPPED = 'new', 'correct', 'ignore', 'filtered', 'skipped'


class DetectionError(ValueError):
    """A detection that cannot be a prompt; the text says why."""


@dataclass(frozen=True)
class RawDetection:
    """A detection as the message has it (vision_msgs BoundingBox2D: centre, full size)."""

    cx: float
    cy: float
    size_x: float
    size_y: float
    theta: float = 0.0
    class_id: str = ''
    score: float = 1.0


@dataclass(frozen=True)
class Detection:
    """A valid detection: its box in the frame, class ('' = none) and score."""

    box: Box
    class_id: str = ''
    score: float = 1.0
    index: int = 0                    # position in the message, for reports


@dataclass(frozen=True)
class Rules:
    """The association parameters (NodeOptions.detection_*; settable at run time)."""

    min_score: float = 0.5
    class_ids: Tuple[str, ...] = ()   # empty: every class
    match_iou: float = 0.3
    drift_iou: float = 0.5
    max_objects: int = 8
    max_age_frames: int = 15          # detections of older frames are rejected

    def validate(self) -> 'Rules':
        check_rules(self.min_score, self.match_iou, self.drift_iou)
        return self


def check_rules(min_score: float, match_iou: float, drift_iou: float) -> None:
    """ValueError naming the parameter that is out of range (used by the node's run-time
    parameter callback and by NodeOptions.validate)."""
    for name, v in (('detection_min_score', min_score), ('detection_match_iou', match_iou),
                    ('detection_drift_iou', drift_iou)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and 0.0 <= v <= 1.0):
            raise ValueError(f'{name} must be in [0, 1], got {v!r}')
    if match_iou > drift_iou:
        raise ValueError(f'detection_match_iou ({match_iou}) must be <= detection_drift_iou '
                         f'({drift_iou}): a matched object below drift_iou is re-prompted')


@dataclass(frozen=True)
class Tracked:
    """One object on the detection's frame, as the association needs it."""

    obj_id: int
    box: Optional[Box]                # None: empty mask on that frame
    state: str                        # 'tracking' | 'occluded' | 'lost'


@dataclass(frozen=True)
class Pending:
    """A prompt about to start an object, as the association compares it: its box (a box
    prompt's, a mask prompt's extent) and its positive points."""

    obj_id: int
    box: Optional[Box] = None
    points: Tuple[Tuple[float, float], ...] = ()


def pending_overlap(d: 'Detection', p: Pending) -> float:
    """How well a detection matches a pending prompt: the IoU with its box, else 1.0 when
    the detection's box holds every positive point (0.0 without either)."""
    if p.box is not None:
        return iou(d.box, p.box)
    x0, y0, x1, y1 = d.box
    inside = all(x0 <= x <= x1 and y0 <= y <= y1 for x, y in p.points)
    return 1.0 if p.points and inside else 0.0


@dataclass(frozen=True)
class Decision:
    kind: str                         # NEW | CORRECT | IGNORE | FILTERED | SKIPPED
    detection: Detection
    obj_id: int = 0                   # the object started, corrected or left alone
    iou: float = 0.0
    reason: str = ''


def iou(a: Box, b: Box) -> float:
    """Intersection over union of two (x0, y0, x1, y1) boxes; 0 for empty ones."""
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    union = _area(a) + _area(b) - inter
    return float(inter / union) if union > 0 else 0.0


def mask_box(box: Optional[Sequence[int]]) -> Optional[Box]:
    """An ObjectResult box (inclusive pixel indices) -> continuous coordinates."""
    if box is None:
        return None
    x0, y0, x1, y1 = box
    return float(x0), float(y0), float(x1) + 1.0, float(y1) + 1.0


def to_detection(raw: RawDetection, width: int, height: int, index: int = 0) -> Detection:
    """Validate one detection against the frame size; DetectionError says what is wrong.
    Numbers in the texts are %g: a detector's 1e300 must not print as 300 digits."""
    values = (raw.cx, raw.cy, raw.size_x, raw.size_y, raw.theta, raw.score)
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        cx, cy, sx, sy, theta, score = (f'{v:g}' if isinstance(v, (int, float)) else repr(v)
                                        for v in values)
        raise DetectionError(f'detection {index} has a non-finite value (centre {cx}, {cy}, '
                             f'size {sx} x {sy}, theta {theta}, score {score})')
    x0, x1 = raw.cx - raw.size_x / 2, raw.cx + raw.size_x / 2
    y0, y1 = raw.cy - raw.size_y / 2, raw.cy + raw.size_y / 2
    # a size below the centre's floating-point resolution (1e-15 px at x 50) gives x0 == x1:
    # a zero-size box as the core sees it, so it is rejected here, not refused by the core
    if raw.size_x <= 0 or raw.size_y <= 0 or not (x0 < x1 and y0 < y1):
        raise DetectionError(f'detection {index} has size {raw.size_x:g} x {raw.size_y:g}: '
                             f'width and height must be > 0')
    if raw.theta != 0.0:
        raise DetectionError(f'detection {index} is rotated (theta {raw.theta:g}): only '
                             f'axis-aligned boxes are prompts')
    if x1 <= 0 or y1 <= 0 or x0 >= width or y0 >= height:
        raise DetectionError(f'detection {index} box ({x0:g}, {y0:g}, {x1:g}, {y1:g}) is '
                             f'outside the {width}x{height} frame')
    box = (max(0.0, x0), max(0.0, y0), min(float(width), x1), min(float(height), y1))
    return Detection(box, str(raw.class_id), float(raw.score), index)


def validate_all(raws: Iterable[RawDetection], width: int,
                 height: int) -> Tuple[List[Detection], List[str]]:
    """The valid detections and one error text per rejected one."""
    ok, errors = [], []
    for i, raw in enumerate(raws):
        try:
            ok.append(to_detection(raw, width, height, i))
        except DetectionError as exc:
            errors.append(str(exc))
    return ok, errors


def _classes_match(det_class: str, obj_class: str) -> bool:
    return not det_class or not obj_class or det_class == obj_class


@dataclass
class ObjectMemory:
    class_id: str = ''
    score: float = 0.0                # score of the detection that last prompted it
    last_box: Optional[Box] = None    # last non-empty box (or the prompted box)
    start_box: Optional[Box] = None   # box of the detection that started it (None: a prompt did)


# An object matched as a reference: its boxes to compare with, its state on the detection's
# frame (None: started or prompted after that frame), its class and whether a detection
# started it (only those are re-prompted).
Reference = Tuple[Tuple[Box, ...], Optional[Tracked], str, bool]


@dataclass
class Association:
    """What the association remembers per object between detection messages."""

    objects: Dict[int, ObjectMemory] = field(default_factory=dict)

    def observe(self, tracked: Iterable[Tracked]) -> None:
        """A frame's results: remember the last non-empty box; forget removed objects."""
        seen = set()
        for t in tracked:
            seen.add(t.obj_id)
            mem = self.objects.setdefault(t.obj_id, ObjectMemory())
            if t.box is not None:
                mem.last_box = t.box
        for obj_id in set(self.objects) - seen:
            del self.objects[obj_id]

    def forget(self, obj_ids: Optional[Iterable[int]] = None) -> None:
        """Objects removed (``obj_ids``) or all of them (None: a reset): a new object that
        later gets one of their ids starts with no class, score or boxes of theirs."""
        for obj_id in list(self.objects) if obj_ids is None else obj_ids:
            self.objects.pop(obj_id, None)

    def class_of(self, obj_id: int) -> str:
        mem = self.objects.get(obj_id)
        return mem.class_id if mem is not None else ''

    def plan(self, detections: Sequence[Detection], tracked: Sequence[Tracked],
             rules: Rules, used_ids: Iterable[int] = (),
             later: Iterable[int] = (), pending: Sequence[Pending] = ()) -> List[Decision]:
        """One decision per detection (in message order). ``tracked``: the objects on the
        detection's frame; ``later``: ids of objects started after that frame (matched by the
        box that started them or their last known box); ``used_ids``: every other id tracked
        or about to start (queued or held prompts): no new object takes one, and all of them
        count toward ``max_objects``; ``pending``: prompts about to start objects (their ids
        in ``used_ids``), which an unmatched detection of the same place is."""
        decisions: Dict[int, Decision] = {}
        candidates = _filter(detections, rules, decisions)
        later = list(later)
        refs = self._references(tracked, later)
        pairs = []
        for d in candidates:
            for obj_id, (boxes, t, cls, owned) in refs.items():
                if _classes_match(d.class_id, cls):
                    v = max(iou(d.box, b) for b in boxes)
                    # match_iou 0 admits every pair of the class (association by class
                    # alone); the most-overlapping pairs still go first
                    if v >= rules.match_iou:
                        pairs.append((-v, d.index, obj_id, d, t, owned))
        pairs.sort(key=lambda p: (p[0], p[1], p[2]))
        taken = set()
        for negv, _, obj_id, d, t, owned in pairs:
            if d.index in decisions or obj_id in taken:
                continue
            taken.add(obj_id)
            decisions[d.index] = _match(d, obj_id, -negv, t, owned, rules)
        _pending_matches(candidates, pending, rules, decisions)
        used = (set(used_ids) | {t.obj_id for t in tracked} | set(later)
                | set(self.objects) | {p.obj_id for p in pending})
        _new_objects(candidates, used, rules, decisions, refs)
        return [decisions[d.index] for d in sorted(detections, key=lambda d: d.index)]

    def _references(self, tracked: Sequence[Tracked], later: Sequence[int]) -> \
            Dict[int, Reference]:
        """The boxes a detection is compared with, per object that has one."""
        refs: Dict[int, Reference] = {}
        for t in tracked:
            mem = self.objects.get(t.obj_id, ObjectMemory())
            ref = t.box if t.box is not None else mem.last_box
            if ref is not None:
                refs[t.obj_id] = ((ref,), t, mem.class_id, mem.start_box is not None)
        for obj_id in later:
            mem = self.objects.get(obj_id, ObjectMemory())
            boxes = tuple(b for b in (mem.start_box, mem.last_box) if b is not None)
            if boxes and obj_id not in refs:
                refs[obj_id] = (boxes, None, mem.class_id, mem.start_box is not None)
        return refs

    def prompted(self, decision: Decision) -> None:
        """The tracker accepted the box prompt of ``decision``: its class and score now travel
        with the object, and the box is its last known box (a new object's start box too)."""
        if decision.kind == NEW:     # nothing of an earlier object with this id is kept
            self.objects[decision.obj_id] = ObjectMemory(start_box=decision.detection.box)
        mem = self.objects.setdefault(decision.obj_id, ObjectMemory())
        if decision.detection.class_id:
            mem.class_id = decision.detection.class_id
        mem.score = decision.detection.score
        mem.last_box = decision.detection.box

    def matched(self, decision: Decision) -> None:
        """A matched detection left alone: its score is the object's latest detection score."""
        mem = self.objects.get(decision.obj_id)
        if mem is not None:
            mem.score = decision.detection.score


def _filter(detections: Sequence[Detection], rules: Rules,
            decisions: Dict[int, Decision]) -> List[Detection]:
    """The detections that pass min_score and class_ids; the others decided FILTERED."""
    candidates: List[Detection] = []
    for d in detections:
        if d.score < rules.min_score:
            decisions[d.index] = Decision(FILTERED, d, reason=f'score {d.score:.2f} < '
                                          f'detection_min_score {rules.min_score}')
        elif rules.class_ids and d.class_id not in rules.class_ids:
            decisions[d.index] = Decision(FILTERED, d, reason=f'class {d.class_id!r} not '
                                          f'in detection_class_ids')
        else:
            candidates.append(d)
    return candidates


def _match(d: Detection, obj_id: int, v: float, t: Optional[Tracked], owned: bool,
           rules: Rules) -> Decision:
    """A detection matched to object ``obj_id`` (``t``: its state on the detection's frame;
    ``owned``: a detection started it)."""
    if t is None:
        # the object started or was prompted after this frame (a newer detection, a user's
        # click): the detection is older news of it, nothing to correct
        return Decision(IGNORE, d, obj_id, v, 'started or prompted after its frame')
    if not owned:
        return Decision(IGNORE, d, obj_id, v, "a prompt started it: the user's object")
    if t.box is None:
        return Decision(CORRECT, d, obj_id, v, 'empty mask')
    if t.state != 'tracking':
        return Decision(CORRECT, d, obj_id, v, t.state)
    if v < rules.drift_iou:
        return Decision(CORRECT, d, obj_id, v, f'drifted (IoU {v:.2f} < '
                        f'detection_drift_iou {rules.drift_iou})')
    return Decision(IGNORE, d, obj_id, v, 'tracks well')


def _pending_matches(candidates: Sequence[Detection], pending: Sequence[Pending],
                     rules: Rules, decisions: Dict[int, Decision]) -> None:
    """Detections no object matched, matched to the prompts about to start objects (greedily
    by overlap, the smaller box first among equals: a click on a cup on a table is the cup;
    one detection per object): left alone, the prompt starts that object."""
    pairs = sorted((-v, _area(d.box), d.index, p.obj_id, d) for d in candidates
                   if d.index not in decisions for p in pending
                   if (v := pending_overlap(d, p)) >= max(rules.match_iou, 1e-9))
    taken = set()
    for negv, _, _, obj_id, d in pairs:
        if d.index in decisions or obj_id in taken:
            continue
        taken.add(obj_id)
        decisions[d.index] = Decision(IGNORE, d, obj_id, -negv,
                                      'a prompt starts this object on a later frame')


def _area(box: Box) -> float:
    return (box[2] - box[0]) * (box[3] - box[1])


def _new_objects(candidates: Sequence[Detection], used: Set[int], rules: Rules,
                 decisions: Dict[int, Decision], refs: Dict[int, Reference]) -> None:
    """The unmatched detections, best score first: a new object each with the lowest id not
    in ``used``, unless a duplicate of an object (``refs``: another detection took it) or of
    one already planned, or max_objects is reached.

    Two detections of a class that do not overlap are two objects even with match_iou 0
    (association by class alone): a detector reports each instance once, so dropping the
    second would lose a real object; a false positive is for min_score or class_ids."""
    count = len(used)
    new: List[Detection] = []
    for d in sorted(candidates, key=lambda d: (-d.score, d.index)):
        if d.index in decisions:
            continue
        least = max(rules.match_iou, 1e-9)
        dup = next((f'detection {n.index}' for n in new if _classes_match(d.class_id, n.class_id)
                    and iou(d.box, n.box) >= least), None) or next(
            (f'object {obj_id}' for obj_id, (boxes, _, cls, _) in refs.items()
             if _classes_match(d.class_id, cls) and max(iou(d.box, b) for b in boxes) >= least),
            None)
        if dup is not None:
            decisions[d.index] = Decision(FILTERED, d, reason=f'duplicate of {dup}')
            continue
        obj_id = next((i for i in range(1, 256) if i not in used), 0)
        if count >= rules.max_objects or not obj_id:
            decisions[d.index] = Decision(SKIPPED, d, reason=f'max_objects '
                                          f'{rules.max_objects} reached')
            continue
        used.add(obj_id)
        count += 1
        new.append(d)
        decisions[d.index] = Decision(NEW, d, obj_id, 0.0, 'unmatched')
