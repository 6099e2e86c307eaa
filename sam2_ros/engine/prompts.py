"""Prompts into model space, on the model's device, with input validation.

Prompts in source pixels are scaled to the model's square input exactly as
``SAM2VideoPredictor.add_new_points_or_box`` / ``add_new_mask`` do.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from sam2_ros.engine.errors import PromptError
from sam2_ros.engine.types import Prompt

MAX_POINTS = 64


def check_obj_id(obj_id: object) -> int:
    if isinstance(obj_id, bool) or not isinstance(obj_id, (int, np.integer)):
        raise PromptError(f'object id must be an integer 1..255, got {obj_id!r}')
    if not 1 <= int(obj_id) <= 255:
        raise PromptError(f'object id must be in 1..255 (it is the label-mask value), '
                          f'got {obj_id}')
    return int(obj_id)


def upload(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device``. On a GPU the copy goes through pinned memory and is only
    queued: a copy from pageable memory waits for all work queued before it (a queued
    prompt's points wait out the frame's image encoder). The caching host allocator keeps the
    pinned block until the copy has read it."""
    dev = torch.device(device)
    if dev.type != 'cuda':
        return t.to(dev)
    return t.pin_memory().to(dev, non_blocking=True)


def prompt_points(prompt: Prompt, h: int, w: int, size: int,
                  device: torch.device) -> Optional[dict]:
    """sam2 point_inputs for a points/box prompt ({'point_coords': [1, P, 2] in model
    pixels, 'point_labels': [1, P] int32}), box first as labels 2/3; None for a mask prompt."""
    check_obj_id(prompt.obj_id)
    if prompt.mask is not None:
        _mask_alone(prompt)
        return None
    pts = None if prompt.points is None else _numbers(prompt.points, 'points')
    has_pts = pts is not None and pts.size > 0
    lab = _numbers(prompt.labels if prompt.labels is not None else [], 'labels').reshape(-1)
    if not has_pts and lab.size:
        # sam2's add_new_points_or_box refuses labels without points; labels beside a box
        # would otherwise be dropped silently (the box's corners get labels 2 and 3)
        raise PromptError(f'{_count(lab.size, "label")} but no points: labels go with points, '
                          f'one per point (1 positive, 0 negative); a box takes none')
    coords, labels = [], []
    if prompt.box is not None:
        box = _finite(_numbers(prompt.box, 'box').reshape(-1), 'box')
        if box.size != 4:
            raise PromptError(f'box must have 4 numbers (x0, y0, x1, y1), got {box.size}')
        x0, y0, x1, y1 = box.tolist()
        if not (x0 < x1 and y0 < y1):
            raise PromptError(f'box must have x0 < x1 and y0 < y1, got {box.tolist()}')
        _inside(np.array([[x0, y0], [x1, y1]]), h, w, 'box')
        coords += [[x0, y0], [x1, y1]]
        labels += [2, 3]
    if has_pts:
        pts = _finite(pts, 'points')
        if pts.ndim != 2 or pts.shape[1] != 2:
            raise PromptError(f'points must be [N, 2] (x, y), got shape {pts.shape}')
        if pts.shape[0] > MAX_POINTS:
            raise PromptError(f'at most {MAX_POINTS} points per prompt, got {pts.shape[0]}')
        if lab.shape[0] != pts.shape[0]:
            got = f'got {_count(pts.shape[0], "point")} and {_count(lab.shape[0], "label")}'
            if not lab.size:
                raise PromptError('labels are required with points: one per point (1 positive, '
                                  f'0 negative); {got}')
            raise PromptError(f'points need one label each (1 positive, 0 negative); {got}')
        if not np.all(np.isin(lab, (0, 1))):
            shown = ', '.join(f'{v:g}' for v in lab)           # 2, not numpy's 2.
            raise PromptError(f'labels must be 1 (positive) or 0 (negative), got [{shown}]')
        _inside(pts, h, w, 'point')
        coords += pts.tolist()
        labels += lab.astype(int).tolist()
    if not coords:
        raise PromptError('prompt has no points, box or mask')
    xy = torch.tensor(coords, dtype=torch.float32).unsqueeze(0)
    xy = xy / torch.tensor([w, h], dtype=torch.float32) * size    # as add_new_points_or_box
    lab_t = torch.tensor(labels, dtype=torch.int32).unsqueeze(0)
    return {'point_coords': upload(xy, device), 'point_labels': upload(lab_t, device)}


def prompt_mask(prompt: Prompt, h: int, w: int, size: int,
                device: torch.device) -> torch.Tensor:
    """A mask prompt [H, W] -> [1, 1, S, S] float {0, 1}, resized as add_new_mask does."""
    check_obj_id(prompt.obj_id)
    _mask_alone(prompt)
    try:
        m = np.asarray(prompt.mask)
    except (TypeError, ValueError, RuntimeError) as exc:   # ragged lists, CUDA tensors
        raise PromptError(f'mask must be an [H, W] array: {exc}') from None
    if m.shape != (h, w):
        raise PromptError(f"mask prompt must have the frame's size, {w}x{h} (width x height): "
                          f'an array of shape ({h}, {w}), got shape {m.shape}')
    if m.dtype != bool:
        m = _finite(_numbers(m, 'mask'), 'mask') != 0     # add_new_mask: nonzero is True
    if not m.any():
        raise PromptError('mask prompt is empty')
    t = upload(torch.from_numpy(np.ascontiguousarray(m)), device)[None, None].float()
    if (h, w) != (size, size):
        t = F.interpolate(t, size=(size, size), mode='bilinear', align_corners=False,
                          antialias=True)
        t = (t >= 0.5).float()
    return t


def _mask_alone(prompt: Prompt) -> None:
    if prompt.box is not None or _given(prompt.points, 'points') \
            or _given(prompt.labels, 'labels'):
        raise PromptError('a mask prompt cannot be combined with points, labels or a box')


def _given(a, what: str) -> bool:
    """A non-empty array (None and an empty one give nothing)."""
    return a is not None and _numbers(a, what).size > 0


def _numbers(a, what: str) -> np.ndarray:
    """``a`` as a float64 array; PromptError (not numpy's TypeError/ValueError) when it
    holds strings, ragged lists or other non-numbers."""
    try:
        return np.asarray(a, np.float64)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise PromptError(f'{what} must be numbers: {exc}') from None


def _finite(a: np.ndarray, what: str) -> np.ndarray:
    if not np.all(np.isfinite(a)):
        verb = 'contain' if what == 'points' else 'contains'   # the box, the mask
        raise PromptError(f'{what} {verb} NaN or inf')
    return a


def _inside(xy: np.ndarray, h: int, w: int, what: str) -> None:
    bad = (xy[:, 0] < 0) | (xy[:, 0] > w) | (xy[:, 1] < 0) | (xy[:, 1] > h)
    if bad.any():
        x, y = xy[np.argmax(bad)]
        raise PromptError(f'{what} ({x:g}, {y:g}) is outside the {w}x{h} frame (width x height)')


def _count(n: int, noun: str) -> str:
    """'1 point', '2 points', '0 labels'."""
    return f'{n} {noun}' + ('' if n == 1 else 's')
