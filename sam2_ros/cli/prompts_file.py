"""Prompt files of the offline tool: a YAML or JSON list of events, validated in full up front.

Each event is ``{frame, object_id, action, points, labels, box, mask}`` (see docs/offline.md).
The whole file is checked BEFORE any frame is processed, in two passes: :func:`load_prompts`
checks the schema and loads mask files (needs nothing but the file); :func:`check_against_input`
checks what depends on the input and the tracker (coordinates inside the frame, mask size,
removing only live objects, capacity). A mistake in event 40 thus costs a second, not the
minutes spent tracking up to frame 40, and every message names the event index and field.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import cv2
import numpy as np
import yaml

from sam2_ros.cli import CliError
from sam2_ros.engine.types import Prompt

ACTIONS = ('add', 'remove', 'reset')
KEYS = ('frame', 'object_id', 'action', 'points', 'labels', 'box', 'mask')
GEOMETRY = ('points', 'labels', 'box', 'mask')
MAX_POINTS = 64  # as the tracker core (sam2_ros/engine/prompts.py)


class PromptFileError(CliError):
    """A prompt file that cannot be used; the message names the file, event and field."""


@dataclass
class PromptEvent:
    """One validated event. ``index`` is its 0-based position in the file (for messages)."""

    index: int
    frame: int
    action: str
    object_id: Optional[int] = None
    points: Optional[np.ndarray] = None      # [N, 2] float64 (x, y)
    labels: Optional[np.ndarray] = None      # [N] int64, 1 positive / 0 negative
    box: Optional[Tuple[float, float, float, float]] = None
    mask_path: Optional[str] = None
    mask: Optional[np.ndarray] = None        # [H, W] bool, loaded from mask_path

    def to_prompt(self) -> Prompt:
        return Prompt(self.object_id, points=self.points, labels=self.labels, box=self.box,
                      mask=self.mask)


class DuplicateKey(ValueError):
    """A key given twice in one event (YAML and JSON would keep the last silently)."""


def _unique_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(f'key {k!r} given twice in one object')
        out[k] = v
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load that refuses a key given twice in one mapping, and reads as integers
    only plain decimals: YAML 1.1 reads ``000120`` (copied from a mask's file name) as octal
    80 and ``1:30`` as 90; here they stay strings, which the schema refuses by name."""

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        dup = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
        if dup is not None:
            raise DuplicateKey(f'key {dup!r} given twice in one mapping (line '
                               f'{node.start_mark.line + 1})')
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != 'tag:yaml.org,2002:int']
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_UniqueKeyLoader.add_implicit_resolver('tag:yaml.org,2002:int',
                                       re.compile(r'^[-+]?(?:0|[1-9][0-9]*)$'),
                                       list('-+0123456789'))


def _one_line(exc: Exception) -> str:
    """A parser's error as one line, naming the file's line and column where it has them."""
    mark = getattr(exc, 'problem_mark', None)
    if isinstance(exc, yaml.YAMLError) and mark is not None:
        what = getattr(exc, 'problem', None) or type(exc).__name__
        return f'line {mark.line + 1}, column {mark.column + 1}: {what}'
    return ' '.join(str(exc).split())


def load_prompts(path: str) -> List[PromptEvent]:
    """Parse and schema-check a prompt file; return its events ordered by (frame, file order).

    Raises PromptFileError for an unreadable file, a syntax error, or any bad event.
    """
    if not os.path.isfile(path):
        raise PromptFileError(f'prompt file not found: {path!r}')
    try:
        with open(path, encoding='utf-8') as fh:
            text = fh.read()
        data = json.loads(text, object_pairs_hook=_unique_keys) \
            if path.lower().endswith('.json') else yaml.load(text, Loader=_UniqueKeyLoader)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError,
            DuplicateKey) as exc:
        raise PromptFileError(f'cannot parse prompt file {path!r}: {_one_line(exc)}') from exc
    if data is None:
        data = []
    if not isinstance(data, list):
        raise PromptFileError(f'{path}: expected a list of events at the top level, '
                              f'got {type(data).__name__}')
    base = os.path.dirname(os.path.abspath(path))
    events = [_parse_event(path, base, i, raw) for i, raw in enumerate(data)]
    return sorted(events, key=lambda e: (e.frame, e.index))


def check_against_input(events: List[PromptEvent], height: int, width: int,
                        max_objects: int, path: str = 'prompts') -> None:
    """Check events against the input frame size and replay their effect on the object set.

    Coordinates may lie on the frame border (0..width, 0..height), as the tracker accepts.
    'remove' must name an object alive at that point (added, not removed or reset since), and
    no more than ``max_objects`` objects may be alive at once.
    """
    live: set = set()
    for ev in events:
        def fail(field: str, msg: str) -> None:
            raise PromptFileError(_where(path, ev.index, field, ev.frame) + msg)

        if ev.action == 'reset':
            live.clear()
            continue
        if ev.action == 'remove':
            if ev.object_id not in live:
                fail('object_id', f'object {ev.object_id} is not tracked at frame {ev.frame} '
                     f'(never added, or removed/reset before); tracked: {sorted(live)}')
            live.discard(ev.object_id)
            continue
        if ev.points is not None:
            _check_inside(ev.points, height, width, lambda m: fail('points', m))
        if ev.box is not None:
            _check_inside(np.array(ev.box, np.float64).reshape(2, 2), height, width,
                          lambda m: fail('box', m))
        if ev.mask is not None and ev.mask.shape != (height, width):
            fail('mask', f'{ev.mask_path!r} is {ev.mask.shape[1]}x{ev.mask.shape[0]} but the '
                 f'input frames are {width}x{height}')
        live.add(ev.object_id)
        if len(live) > max_objects:
            fail('object_id', f'{len(live)} objects alive at frame {ev.frame} '
                 f'({sorted(live)}) but max_objects={max_objects} (raise --max-objects)')


def events_by_frame(events: List[PromptEvent]) -> Dict[int, List[PromptEvent]]:
    out: Dict[int, List[PromptEvent]] = {}
    for ev in events:
        out.setdefault(ev.frame, []).append(ev)
    return out


# ---- parsing -----------------------------------------------------------------------------

def _where(path: str, index: int, field: Optional[str], frame: Optional[int] = None) -> str:
    at = f' (frame {frame})' if frame is not None else ''
    return f'{path}: event[{index}]{at}' + (f': field {field!r}: ' if field else ': ')


def _parse_event(path: str, base: str, i: int, raw: Any) -> PromptEvent:
    if not isinstance(raw, dict):
        raise PromptFileError(_where(path, i, None) + f'an event must be a mapping, '
                              f'got {type(raw).__name__}: {raw!r}')
    frame = raw.get('frame')

    def fail(field: Optional[str], msg: str) -> None:
        raise PromptFileError(_where(path, i, field, frame if _is_int(frame) else None) + msg)

    unknown = [k for k in raw if k not in KEYS]
    if unknown:
        fail(str(unknown[0]), f'unknown key (allowed: {", ".join(KEYS)})')
    if 'frame' not in raw:
        fail('frame', 'missing (the 0-based index of the frame the event applies after)')
    if not _is_int(frame) or frame < 0:
        fail('frame', f'must be an integer >= 0, got {frame!r}' + _decimal_hint(frame))
    action = raw.get('action', 'add')
    if action not in ACTIONS:
        fail('action', f'unknown action {action!r} (allowed: {", ".join(ACTIONS)})')
    ev = PromptEvent(i, int(frame), action)

    present = [k for k in GEOMETRY if raw.get(k) is not None]
    if action == 'reset':
        if 'object_id' in raw or present:
            fail('object_id' if 'object_id' in raw else present[0],
                 'not allowed with action reset (it forgets every object)')
        return ev
    oid = raw.get('object_id')
    if not _is_int(oid) or not 1 <= oid <= 255:
        fail('object_id', f'must be an integer 1..255 (the label-mask value), got {oid!r}'
             + _decimal_hint(oid))
    ev.object_id = int(oid)
    if action == 'remove':
        if present:
            fail(present[0], 'not allowed with action remove')
        return ev

    if not present:
        fail('points', 'an add event needs points, a box or a mask')
    if raw.get('mask') is not None and (raw.get('points') is not None or
                                        raw.get('box') is not None):
        fail('mask', 'a mask cannot be combined with points or a box')
    if raw.get('points') is not None:
        ev.points = _points(raw['points'], lambda m: fail('points', m))
        labels = raw.get('labels')
        if labels is None:
            ev.labels = np.ones(len(ev.points), np.int64)
        else:
            ev.labels = _labels(labels, lambda m: fail('labels', m))
            if len(ev.labels) != len(ev.points):
                fail('labels', f'{len(ev.labels)} labels but {len(ev.points)} points '
                     f'(one label per point)')
    elif raw.get('labels') is not None:
        fail('labels', 'labels given without points')
    if raw.get('box') is not None:
        ev.box = _box(raw['box'], lambda m: fail('box', m))
    if raw.get('mask') is not None:
        ev.mask_path, ev.mask = _mask(raw['mask'], base, lambda m: fail('mask', m))
    return ev


def _decimal_hint(v: Any) -> str:
    """For a number written with leading zeros or colons (read as text): how to write it."""
    if isinstance(v, str) and v.strip().lstrip('+-').replace(':', '').isdigit():
        return ' (write plain decimals: no leading zeros, no colons)'
    return ''


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _points(v: Any, fail) -> np.ndarray:
    if not isinstance(v, list) or not v:
        fail(f'must be a non-empty list of [x, y] pairs, got {v!r}')
    if len(v) > MAX_POINTS:
        fail(f'at most {MAX_POINTS} points per event, got {len(v)}')
    for j, p in enumerate(v):
        if not (isinstance(p, list) and len(p) == 2 and all(_is_number(c) for c in p)):
            fail(f'point {j} must be [x, y] with two finite numbers, got {p!r}')
    return np.array(v, np.float64)


def _labels(v: Any, fail) -> np.ndarray:
    if not isinstance(v, list):
        fail(f'must be a list of 1 (positive) / 0 (negative), got {v!r}')
    for j, lab in enumerate(v):
        if not _is_int(lab) or lab not in (0, 1):
            fail(f'label {j} must be 1 (positive) or 0 (negative), got {lab!r}')
    return np.array(v, np.int64)


def _box(v: Any, fail) -> Tuple[float, float, float, float]:
    if not (isinstance(v, list) and len(v) == 4 and all(_is_number(c) for c in v)):
        fail(f'must be [x0, y0, x1, y1] with four finite numbers, got {v!r}')
    x0, y0, x1, y1 = (float(c) for c in v)
    if not (x0 < x1 and y0 < y1):
        fail(f'must have x0 < x1 and y0 < y1, got {v!r}')
    return x0, y0, x1, y1


def _mask(v: Any, base: str, fail) -> Tuple[str, np.ndarray]:
    """Load a mask image (relative paths are relative to the prompt file); nonzero = object."""
    if not isinstance(v, str) or not v:
        fail(f'must be a path to a mask image, got {v!r}')
    full = v if os.path.isabs(v) else os.path.join(base, v)
    if not os.path.isfile(full):
        fail(f'mask file not found: {full!r}')
    img = cv2.imread(full, cv2.IMREAD_UNCHANGED)
    if img is None:
        fail(f'cannot read mask image {full!r} (not an image cv2 can decode)')
    m = (img[..., :3] != 0).any(axis=-1) if img.ndim == 3 else img != 0
    if not m.any():
        alpha = img.ndim == 3 and img.shape[-1] == 4 and (img[..., 3] != 0).any()
        fail(f'mask image {full!r} is empty (no nonzero pixel'
             + (' in its colour channels; the alpha channel is not read' if alpha else '')
             + ')')
    return full, m


def _check_inside(xy: np.ndarray, h: int, w: int, fail) -> None:
    bad = (xy[:, 0] < 0) | (xy[:, 0] > w) | (xy[:, 1] < 0) | (xy[:, 1] > h)
    if bad.any():
        x, y = xy[int(np.argmax(bad))]
        fail(f'({x:g}, {y:g}) is outside the {w}x{h} input frame')
