"""Plain data exchanged with the tracker core: prompts in, per-object results out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

# Object states reported per frame.
TRACKING, OCCLUDED, LOST = 'tracking', 'occluded', 'lost'


@dataclass
class Prompt:
    """A prompt for one object, in source-image pixel coordinates.

    obj_id: 1..255; a new id starts an object, a tracked one corrects it.
    points: [N, 2] float (x, y); labels: [N] int (1 positive, 0 negative; required with
    points, as sam2 requires them); box: (x0, y0, x1, y1), x1 > x0 and y1 > y0; mask: [H, W]
    bool at source resolution. Points and box may be combined; a mask is used alone. The
    tracker checks every field against the frame and raises ``PromptError`` before changing
    anything.
    """

    obj_id: int
    points: Optional[np.ndarray] = None
    labels: Optional[np.ndarray] = None
    box: Optional[Tuple[float, float, float, float]] = None
    mask: Optional[np.ndarray] = None


@dataclass
class ObjectResult:
    """One object on one frame, at the frame's (source) resolution, on the host.

    ``state`` follows the score: TRACKING while visible (score > 0), OCCLUDED while
    hidden, LOST once hidden ``TrackerConfig.lost_after_frames`` frames in a row (the object
    keeps being tracked and is TRACKING again when visible). ``box`` and ``centroid`` are
    None when the mask is empty. ``low_res_logits`` (the model-space logits the mask was
    upsampled from) stays on the model's device.
    """

    obj_id: int
    mask: np.ndarray                   # [H, W] bool, source resolution
    score: float                       # object score logit; > 0 means visible
    state: str                         # TRACKING / OCCLUDED / LOST
    box: Optional[Tuple[int, int, int, int]]  # (x0, y0, x1, y1) inclusive, None if empty
    area: int                          # mask pixels
    centroid: Optional[Tuple[float, float]]   # (x, y), None if empty
    frames_since_prompt: int
    low_res_logits: Optional[object] = None  # torch [h/4, w/4] fp32 on the model device

    @property
    def visible(self) -> bool:
        """The model sees the object on this frame (object score logit > 0)."""
        return self.score > 0


@dataclass
class FrameResult:
    """All tracked objects on one frame.

    frame_index: the tracker's count of frames (0-based; -1 for a prompt queued before any
    frame); height, width: the frame's size; objects: ascending ids; mode: 'graph' when
    every object step was a CUDA graph replay, 'eager' or 'mixed' otherwise; engine_ms: wall
    time of the call inside the tracker.
    """

    frame_index: int
    height: int
    width: int
    objects: List[ObjectResult] = field(default_factory=list)
    mode: str = 'eager'                # 'graph' when every object step was a graph replay
    engine_ms: float = 0.0
    # The label mask as the tracker built it on the device, and the object ids it holds.
    _label: Optional[np.ndarray] = field(default=None, repr=False, compare=False)
    _label_ids: Tuple[int, ...] = field(default=(), repr=False, compare=False)

    def set_label(self, label: np.ndarray, ids: List[int]) -> None:
        """Keep a label mask computed elsewhere (the tracker's, from the device) for the
        objects ``ids``; ``label_mask`` returns it while ``objects`` still has those ids."""
        self._label, self._label_ids = label, tuple(ids)

    def label_mask(self) -> np.ndarray:
        """[H, W] uint8: 0 background, each object's pixels hold its id (ids are 1..255).
        Where masks overlap the higher id wins, so the image is deterministic. The tracker's
        results carry it precomputed (one array, shared by every call: copy it before writing
        to it); for any other object list it is built here from the masks."""
        if self._label is not None and \
                self._label_ids == tuple(o.obj_id for o in self.objects):
            return self._label
        out = np.zeros((self.height, self.width), np.uint8)
        for o in sorted(self.objects, key=lambda o: o.obj_id):
            np.copyto(out, o.obj_id, where=o.mask)     # no index arrays: one pass, no gather
        return out

    def by_id(self, obj_id: int) -> ObjectResult:
        """The result of object ``obj_id``; KeyError if it is not in this frame."""
        for o in self.objects:
            if o.obj_id == obj_id:
                return o
        raise KeyError(obj_id)


@dataclass
class StreamsResult:
    """One step of a ``MultiStreamTracker`` over N cameras, indexed by camera.

    results[c]: camera c's ``FrameResult``; None where it had no frame this step or its frame
    failed. errors[c]: the ``TrackerError`` of camera c's failed frame (``FrameError``,
    ``PromptError``, ``StepError``, as ``StreamingTracker.track`` raises them), else None.
    """

    results: List[Optional[FrameResult]]
    errors: List[Optional[Exception]]
