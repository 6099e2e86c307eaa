"""A stream's ``FrameResult`` on its latest frame, in two halves: ``issue`` (the read-back of
its objects' masks and stats, not waited for) and ``finish`` (waited for, converted).

Why two: a step of several cameras issues every camera's read-back before it waits for the
first, so the host waits for the device once per step instead of once per camera, and the
device works on camera 1's masks while the host converts camera 0's. Imports no ROS.
"""

from __future__ import annotations

import time
from typing import Any, List, Tuple

import torch

from sam2_ros.engine import masks_out
from sam2_ros.engine.memory import MemoryBank
from sam2_ros.engine.stream import ObjectInfo, Stream
from sam2_ros.engine.types import LOST, OCCLUDED, TRACKING, FrameResult, ObjectResult

# (the objects in id order, their low-resolution logits, the issued read-back)
Issued = Tuple[List[ObjectInfo], torch.Tensor, masks_out.ReadBack]


def issue(stream: Stream, bank: MemoryBank, runner: Any) -> Issued:
    """Issue the read-back of every object of the stream on its latest frame (one
    device-to-host copy by the runner's ``read_back``, not waited for)."""
    (h, w), objs = stream.hw, stream.sorted_objects()
    slots = bank.stage([o.slot for o in objs])
    logits = bank.logits.index_select(0, slots)
    scores = bank.scores.index_select(0, slots)
    return objs, logits, runner.read_back(logits, scores, h, w, [o.obj_id for o in objs])


def finish(stream: Stream, issued: Issued, mode: str, t0: float, lost_after: int,
           tracked: bool = False) -> FrameResult:
    """The stream's ``FrameResult`` from its issued read-back (waited for here). engine_ms
    runs from t0 (``time.perf_counter``) to the end of that copy, so it includes the GPU
    work. tracked=True (a new frame) advances each object's occluded/lost run; an object is
    LOST after ``lost_after`` frames unseen."""
    objs, logits, read = issued
    masks, stats, label = read()
    f, (h, w), ids = stream.frame, stream.hw, [o.obj_id for o in objs]
    stream.occluded_runs()      # those of prompts deferred on the previous frame, first
    res = FrameResult(f, h, w, mode=mode, engine_ms=(time.perf_counter() - t0) * 1e3)
    res.set_label(label, ids)
    for o, m, s, lg in zip(objs, masks, stats, logits):
        o.score = float(s[7])
        if tracked or o.score > 0:
            o.hidden_run = 0 if o.score > 0 else o.hidden_run + 1
        area, box, cen = masks_out.unpack(s)
        state = TRACKING if o.score > 0 else (LOST if o.hidden_run >= lost_after else OCCLUDED)
        res.objects.append(ObjectResult(o.obj_id, m, o.score, state, box, area, cen,
                                        f - o.last_prompt_frame, lg[0]))
    return res
