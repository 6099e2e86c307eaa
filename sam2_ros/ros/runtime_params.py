"""Run-time parameters of the tracker node (`ros2 param set`): click_mode, click_object_id and
the detection_* rules take effect at once; bad values are refused with the reason. autostart
and executor are read when the node starts. The others are read at configure: a value that
would fail the next configure is refused now, a valid one applies at the next configure. That
includes what configure finds missing before it loads a model: a device this machine lacks, a
checkpoint path that is no readable file. Functions of the parameter values (the node's
callback reads them and hands them in).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List

from sam2_ros.engine.errors import CheckpointError
from sam2_ros.engine.model import check_checkpoint_file
from sam2_ros.ros import detections as det
from sam2_ros.ros import params
from sam2_ros.ros.node_cli import check_device
from sam2_ros.ros.options import CLICK_MODES

DETECTION_FLOATS = ('detection_min_score', 'detection_match_iou', 'detection_drift_iou')


def rules(value: Callable[[str], Any], max_objects: int) -> det.Rules:
    """The association rules from the current parameter values (``value(name)``)."""
    return det.Rules(min_score=float(value('detection_min_score')),
                     class_ids=tuple(value('detection_class_ids') or ()),
                     match_iou=float(value('detection_match_iou')),
                     drift_iou=float(value('detection_drift_iou')),
                     max_objects=int(max_objects),
                     max_age_frames=int(value('detection_max_age_frames')))


def refusal(changes: Dict[str, Any], value: Callable[[str], Any]) -> str:
    """Why these changes (name -> new value) must be refused, or '' to accept them; the
    values not changed are ``value(name)``. Parameters read at configure are checked as the
    whole configuration with the changes (:func:`sam2_ros.ros.params.refusal`). A deleted
    parameter (``ros2 param delete``: value None) is refused: configure reads every one."""
    deleted = sorted(n for n, v in changes.items() if v is None)
    if deleted:
        return (f'parameters of this node cannot be deleted ({", ".join(deleted)}): set them '
                f"instead (an empty list or '' where that means the default)")
    mode = changes.get('click_mode', CLICK_MODES[0])
    if mode not in CLICK_MODES:
        return f'click_mode must be one of {CLICK_MODES}, got {mode!r}'
    if 'click_object_id' in changes:
        v = changes['click_object_id']
        if not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 255):
            return f'click_object_id must be an integer in 1..255, got {v!r}'
    reason, later = _detection_refusal(changes, value), configure_time(changes)
    if reason or not later:
        return reason
    return (params.refusal({n: value(n) for n in params.names()}, later)
            or missing_resource(later))


def missing_resource(changes: Dict[str, Any]) -> str:
    """What configure would find missing in these changes, checked without building a model
    (the value is valid, but not on this machine), or '': a CUDA device that is not there
    (configure's own check, node_cli.check_device), a checkpoint path that is not a readable
    file (its contents are read at configure)."""
    device = changes.get('device')
    if isinstance(device, str):
        try:
            check_device(device)
        except ValueError as exc:
            return str(exc)
    path = changes.get('checkpoint')
    if isinstance(path, str) and path:      # '': no checkpoint (random_weights)
        try:
            check_checkpoint_file(path)     # configure's own check (engine/model.py)
        except CheckpointError as exc:
            return str(exc)
    return ''


def configure_time(changes: Dict[str, Any]) -> Dict[str, Any]:
    """The changes of parameters read only at configure (not run-time ones)."""
    return {n: v for n, v in changes.items()
            if n in params.names() and n not in params.RUNTIME_PARAMS}


def applies_later(changes: Dict[str, Any]) -> List[str]:
    """The log lines for accepted changes of configure-time and start-up parameters."""
    return [f'{n} set to {v!r}: it is read when the node starts, so it applies when the node '
            f'is started again' if n in params.STARTUP_PARAMS else
            f'{n} set to {v!r}: it is read at configure, so it applies at the next configure '
            f'(cleanup, then configure, when configured now)'
            for n, v in configure_time(changes).items()]


def _detection_refusal(new: Dict[str, Any], value: Callable[[str], Any]) -> str:
    """Why the detection_* values (these changes over the current ones) are bad, or ''."""
    if not any(n.startswith('detection_') for n in new):
        return ''
    vals = {n: new[n] if n in new else value(n) for n in DETECTION_FLOATS}
    for n, v in vals.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f'{n} must be a number in [0, 1], got {v!r}'
    try:
        det.check_rules(*(float(vals[n]) for n in DETECTION_FLOATS))
    except ValueError as exc:     # one request checks each value against the others' current
        return f'{exc} (setting both? set them one at a time, in an order valid at each step)'
    age = new.get('detection_max_age_frames', 0)
    # a whole float (20.0) is an integer here as in a params file (params.to_field_value)
    if isinstance(age, bool) or not isinstance(age, (int, float)) or not math.isfinite(age) \
            or age < 0 or age != int(age):
        return f'detection_max_age_frames must be an integer >= 0, got {age!r}'
    classes = new.get('detection_class_ids', [])
    if classes is not None and not (isinstance(classes, (list, tuple)) and
                                    all(isinstance(c, str) for c in classes)):
        return f'detection_class_ids must be a list of strings, got {classes!r}'
    return ''
