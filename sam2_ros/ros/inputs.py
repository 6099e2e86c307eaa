"""Incoming messages -> the core's plain types: prompts, clicks, detections, stamps.

Checks only what a message's layout can get wrong (action, id range, label count); the core
checks geometry (NaN, out of frame) because only it knows the frame size. Pure functions of
their inputs, tested without DDS; nothing here imports ROS (messages are read by attribute).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np

from sam2_ros.engine.errors import PromptError
from sam2_ros.engine.types import Prompt
from sam2_ros.ros.detections import RawDetection
from sam2_ros.ros.images import mask_to_bool

# msg/Prompt.msg's action constants, restated so the worker and its tests need no generated
# messages (test_messages checks that they agree).
ACTION_ADD, ACTION_REMOVE, ACTION_RESET = 0, 1, 2


def prompt_from_msg(msg: Any, bridge: Any) -> Tuple[int, Optional[Prompt]]:
    """sam2_ros/msg/Prompt -> (action, core Prompt or None for remove/reset).

    Checks only what the message layout can get wrong (action, id range, label count); the
    core checks geometry (NaN, out of frame) because only it knows the frame size.
    """
    action = int(msg.action)
    if action not in (ACTION_ADD, ACTION_REMOVE, ACTION_RESET):
        raise PromptError(f'unknown prompt action {action}')
    if action == ACTION_RESET:
        return action, None
    obj_id = int(msg.object_id)
    if not 1 <= obj_id <= 255:
        raise PromptError(f'object_id must be in 1..255, got {obj_id}')
    if action == ACTION_REMOVE:
        return action, Prompt(obj_id=obj_id)
    points = labels = box = mask = None
    if len(msg.points):
        points = np.array([[p.x, p.y] for p in msg.points], dtype=np.float32)
        if len(msg.labels) == 0:
            labels = np.ones(len(points), dtype=np.int64)  # no labels: all positive
        elif len(msg.labels) != len(points):
            raise PromptError(f'{len(msg.labels)} labels for {len(points)} points')
        else:
            labels = np.array(list(msg.labels), dtype=np.int64)
    elif len(msg.labels):
        raise PromptError(f'{len(msg.labels)} labels but no points')
    if msg.has_box:
        box = tuple(float(v) for v in msg.box)
    if msg.mask.width > 0:     # msg/Prompt.msg: width == 0 means no mask, whatever the height
        mask = mask_to_bool(msg.mask, bridge)
    if mask is not None:       # msg/Prompt.msg: with a mask, points and box are ignored
        return action, Prompt(obj_id=obj_id, mask=mask)
    if points is None and box is None:
        raise PromptError(f'add prompt for object {obj_id} has no points, box or mask')
    return action, Prompt(obj_id=obj_id, points=points, labels=labels, box=box)


def click_to_prompt(point: Any, obj_id: int, positive: bool = True) -> Prompt:
    """A click (geometry_msgs/Point, x and y in source px; a PointStamped's ``.point``) ->
    one point for ``obj_id``, positive (label 1) or negative (label 0)."""
    # float64 as the message's: a huge coordinate is then out of frame, not an overflow to inf
    return Prompt(obj_id=int(obj_id), points=np.array([[point.x, point.y]], np.float64),
                  labels=np.full(1, 1 if positive else 0, np.int64))


def stamp_ns(stamp: Any) -> int:
    """builtin_interfaces/Time -> integer nanoseconds (0 means 'no stamp')."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def detections_from_msg(msg: Any) -> List[RawDetection]:
    """vision_msgs/Detection2DArray -> [detections.RawDetection] (not validated: that needs the
    frame size, see detections.to_detection). Class and score come from the best hypothesis
    (highest score); a detection without hypotheses has class '' (none) and score 1.0."""
    out = []
    for d in msg.detections:
        best = max(d.results, key=lambda r: r.hypothesis.score, default=None)
        c = d.bbox.center
        out.append(RawDetection(
            cx=float(c.position.x), cy=float(c.position.y), size_x=float(d.bbox.size_x),
            size_y=float(d.bbox.size_y), theta=float(c.theta),
            class_id='' if best is None else str(best.hypothesis.class_id),
            score=1.0 if best is None else float(best.hypothesis.score)))
    return out
