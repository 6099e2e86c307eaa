"""Results as JSON-ready plain types and the summary's statistics, shared by the offline
tracking and image modes."""

from __future__ import annotations

from typing import TYPE_CHECKING, List

if TYPE_CHECKING:
    from sam2_ros.engine.types import ObjectResult


def object_record(o: ObjectResult) -> dict:
    """One ObjectResult as JSON-ready plain types (states.jsonl)."""
    return {'object_id': int(o.obj_id), 'state': o.state, 'score': round(float(o.score), 4),
            'box': None if o.box is None else [int(v) for v in o.box], 'area': int(o.area),
            'centroid': None if o.centroid is None else [round(float(v), 2) for v in o.centroid],
            'frames_since_prompt': int(o.frames_since_prompt)}


def count_frame(stats: dict, engine_ms: float, mode: str, applied: List[int],
                objs: List[dict]) -> None:
    """Add a written frame to the summary's statistics."""
    stats['frames'] += 1
    stats['engine_ms'].append(engine_ms)
    stats['modes'][mode] = stats['modes'].get(mode, 0) + 1
    stats['applied'] += applied
    stats['ids'].update(o['object_id'] for o in objs)
