"""Run-time parameters of the tracker node (`ros2 param set`): click_mode, click_object_id and
the detection_* rules take effect at once; bad values are refused with the reason. A mixin of
:class:`sam2_ros.ros.node.TrackerNode`, kept apart so each file holds one concern.
"""

from __future__ import annotations

from typing import Any, List

from sam2_ros.ros import detections as det
from sam2_ros.ros import params


class RuntimeParamsMixin:
    """Parameter callbacks and the detection rules read from the current values."""

    def _detection_rules(self) -> det.Rules:
        """The association rules from the run-time parameters (read per message)."""
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        return det.Rules(min_score=float(get('detection_min_score')),
                         class_ids=tuple(get('detection_class_ids') or ()),
                         match_iou=float(get('detection_match_iou')),
                         drift_iou=float(get('detection_drift_iou')),
                         max_objects=int(self.cfg.max_objects),
                         max_age_frames=int(get('detection_max_age_frames')))

    def _on_set_parameters(self, changes: List[Any]) -> Any:
        """click_mode and click_object_id take effect at once; refuse bad values with the
        reason (`ros2 param set` prints it). Others are only checked at configure."""
        from rcl_interfaces.msg import SetParametersResult

        for p in changes:
            if p.name == 'click_mode' and p.value not in params.CLICK_MODES:
                return SetParametersResult(successful=False, reason=(
                    f'click_mode must be one of {params.CLICK_MODES}, got {p.value!r}'))
            if p.name == 'click_object_id' and not (
                    isinstance(p.value, int) and not isinstance(p.value, bool)
                    and 1 <= p.value <= 255):
                return SetParametersResult(successful=False, reason=(
                    f'click_object_id must be an integer in 1..255, got {p.value!r}'))
        reason = self._check_detection_params(changes)
        if reason:
            return SetParametersResult(successful=False, reason=reason)
        return SetParametersResult(successful=True)

    def _check_detection_params(self, changes: List[Any]) -> str:
        """Why the detection_* values (these changes over the current ones) are bad, or ''."""
        names = ('detection_min_score', 'detection_match_iou', 'detection_drift_iou')
        new = {p.name: p.value for p in changes}
        if not any(n.startswith('detection_') for n in new):
            return ''
        vals = {n: new.get(n, self.get_parameter(n).value) for n in names}
        for n, v in vals.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return f'{n} must be a number in [0, 1], got {v!r}'
        try:
            det.check_rules(*(float(vals[n]) for n in names))
        except ValueError as exc:
            return str(exc)
        age = new.get('detection_max_age_frames', 0)
        if isinstance(age, bool) or not isinstance(age, int) or age < 0:
            return f'detection_max_age_frames must be an integer >= 0, got {age!r}'
        classes = new.get('detection_class_ids', [])
        if classes is not None and not (isinstance(classes, (list, tuple)) and
                                        all(isinstance(c, str) for c in classes)):
            return f'detection_class_ids must be a list of strings, got {classes!r}'
        return ''
