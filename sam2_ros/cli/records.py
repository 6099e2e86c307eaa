"""Results as JSON-ready plain types, shared by the offline tracking and image modes."""

from __future__ import annotations


def object_record(o) -> dict:
    """One ObjectResult as JSON-ready plain types (states.jsonl)."""
    return {'object_id': int(o.obj_id), 'state': o.state, 'score': round(float(o.score), 4),
            'box': None if o.box is None else [int(v) for v in o.box], 'area': int(o.area),
            'centroid': None if o.centroid is None else [round(float(v), 2) for v in o.centroid],
            'frames_since_prompt': int(o.frames_since_prompt)}
