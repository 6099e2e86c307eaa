"""A camera's ``FrameResult`` from the read-back of its objects (``MultiStreamTracker._read``):
masks, scores and mask statistics per object, and each object's tracking state, whose
occluded/lost run advances on a new frame. Imports no ROS."""

from __future__ import annotations

import time

from sam2_ros.engine import masks_out
from sam2_ros.engine.stream import Stream
from sam2_ros.engine.types import LOST, OCCLUDED, TRACKING, FrameResult, ObjectResult


def built(stream: Stream, read: tuple, mode: str, t0: float, tracked: bool,
          lost_after_frames: int) -> FrameResult:
    """The FrameResult of a completed read-back ``read`` = (objects, their logits
    [B, 1, s, s], (masks [B, H, W], stats [B, 8], label [H, W])); engine_ms runs from t0 (a
    ``time.perf_counter()``) to now. tracked=True (a new frame) advances each object's
    occluded/lost run; an object is LOST after ``lost_after_frames`` frames without a score."""
    f, (h, w) = stream.frame, stream.hw
    objs, logits, (masks, stats, label) = read
    ids = [o.obj_id for o in objs]
    stream.occluded_runs()      # those of prompts deferred on the previous frame, first
    res = FrameResult(f, h, w, mode=mode, engine_ms=(time.perf_counter() - t0) * 1e3)
    res.set_label(label, ids)
    for o, m, s, lg in zip(objs, masks, stats, logits):
        o.score = float(s[7])
        if tracked or o.score > 0:
            o.hidden_run = 0 if o.score > 0 else o.hidden_run + 1
        area, box, cen = masks_out.unpack(s)
        state = TRACKING if o.score > 0 else (
            LOST if o.hidden_run >= lost_after_frames else OCCLUDED)
        res.objects.append(ObjectResult(o.obj_id, m, o.score, state, box, area, cen,
                                        f - o.last_prompt_frame, lg[0]))
    return res
