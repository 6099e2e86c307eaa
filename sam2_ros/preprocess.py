"""Frames and prompts into model space, on the model's device, with input validation.

The official video predictor resizes frames with PIL (bicubic, antialiased, rounded to uint8)
before normalizing; the same is done here with torch on the device, so the host only uploads
the uint8 frame. Prompts in source pixels are scaled to the model's square input exactly as
``SAM2VideoPredictor.add_new_points_or_box`` / ``add_new_mask`` do.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F

from sam2_ros.errors import FrameError, PromptError
from sam2_ros.types import Prompt

IMG_MEAN = (0.485, 0.456, 0.406)
IMG_STD = (0.229, 0.224, 0.225)
MAX_SIDE = 8192
MAX_POINTS = 64
Frame = Union[np.ndarray, torch.Tensor]


def frame_size(frame: Frame) -> Tuple[int, int]:
    """(H, W) of a valid frame [H, W, 3] uint8 (numpy or torch); FrameError otherwise."""
    if not isinstance(frame, (np.ndarray, torch.Tensor)):
        raise FrameError(f'frame must be a numpy array or torch tensor, got {type(frame)}')
    if frame.dtype not in (np.uint8, torch.uint8):
        raise FrameError(f'frame must be uint8 RGB, got dtype {frame.dtype}')
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise FrameError(f'frame must be [H, W, 3] RGB, got shape {tuple(frame.shape)}')
    h, w = int(frame.shape[0]), int(frame.shape[1])
    if not (16 <= h <= MAX_SIDE and 16 <= w <= MAX_SIDE):
        raise FrameError(f'frame size {w}x{h} outside 16..{MAX_SIDE} pixels per side')
    return h, w


def to_model_input(frame: Frame, size: int, device: torch.device) -> torch.Tensor:
    """[H, W, 3] uint8 -> [1, 3, S, S] float32 normalized, computed on ``device``."""
    return normalize(upload(frame, device), size)


def upload(frame: Frame, device: torch.device) -> torch.Tensor:
    """The raw frame [H, W, 3] uint8 on ``device`` (the only host-to-device copy)."""
    if isinstance(frame, np.ndarray) and any(s < 0 for s in frame.strides):
        frame = np.ascontiguousarray(frame)     # a view such as bgr[..., ::-1]: torch refuses
    return torch.as_tensor(frame).to(device, non_blocking=True)


def normalize(x: torch.Tensor, size: int) -> torch.Tensor:
    """x [H, W, 3] uint8 on the device -> [1, 3, S, S] float32 normalized. Device work only
    (no host sync, no upload), so the graph runner can capture it."""
    x = x.permute(2, 0, 1).unsqueeze(0).float()                 # [1, 3, H, W] in 0..255
    # PIL resizes in two passes, horizontal then vertical, each rounded and clipped to uint8
    # (a vertical pass alone if only the height changes, and vice versa).
    h, w = x.shape[-2:]
    if w != size:
        x = _bicubic_u8(x, (h, size))
    if h != size:
        x = _bicubic_u8(x, (size, size))
    mean, std = _mean_std(x.device)
    return (x / 255.0 - mean) / std


_MEAN_STD = {}


def _mean_std(device: torch.device):
    """Normalization constants, uploaded once per device (an upload per frame would make
    CUDA synchronize the stream)."""
    if device not in _MEAN_STD:
        _MEAN_STD[device] = (torch.tensor(IMG_MEAN, device=device).view(1, 3, 1, 1),
                             torch.tensor(IMG_STD, device=device).view(1, 3, 1, 1))
    return _MEAN_STD[device]


def _bicubic_u8(x: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    x = F.interpolate(x, size=size, mode='bicubic', align_corners=False, antialias=True)
    return x.round_().clamp_(0, 255)


def check_obj_id(obj_id) -> int:
    if isinstance(obj_id, bool) or not isinstance(obj_id, (int, np.integer)):
        raise PromptError(f'object id must be an integer 1..255, got {obj_id!r}')
    if not 1 <= int(obj_id) <= 255:
        raise PromptError(f'object id must be in 1..255 (it is the label-mask value), '
                          f'got {obj_id}')
    return int(obj_id)


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
        lab = _numbers(prompt.labels if prompt.labels is not None else [], 'labels')
        lab = lab.reshape(-1)
        if lab.shape[0] != pts.shape[0]:
            raise PromptError(f'{pts.shape[0]} points but {lab.shape[0]} labels')
        if not np.all(np.isin(lab, (0, 1))):
            raise PromptError(f'labels must be 1 (positive) or 0 (negative), got {lab}')
        _inside(pts, h, w, 'point')
        coords += pts.tolist()
        labels += lab.astype(int).tolist()
    if not coords:
        raise PromptError('prompt has no points, box or mask')
    xy = torch.tensor(coords, dtype=torch.float32).unsqueeze(0)
    xy = xy / torch.tensor([w, h], dtype=torch.float32) * size    # as add_new_points_or_box
    lab_t = torch.tensor(labels, dtype=torch.int32).unsqueeze(0)
    return {'point_coords': xy.to(device), 'point_labels': lab_t.to(device)}


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
        raise PromptError(f'mask prompt must be {h}x{w} (the frame), got {m.shape}')
    if m.dtype != bool:
        m = _finite(_numbers(m, 'mask'), 'mask') != 0     # add_new_mask: nonzero is True
    if not m.any():
        raise PromptError('mask prompt is empty')
    t = torch.from_numpy(np.ascontiguousarray(m)).to(device)[None, None].float()
    if (h, w) != (size, size):
        t = F.interpolate(t, size=(size, size), mode='bilinear', align_corners=False,
                          antialias=True)
        t = (t >= 0.5).float()
    return t


def _mask_alone(prompt: Prompt) -> None:
    if prompt.box is not None or (prompt.points is not None and
                                  _numbers(prompt.points, 'points').size > 0):
        raise PromptError('a mask prompt cannot be combined with points or a box')


def _numbers(a, what: str) -> np.ndarray:
    """``a`` as a float64 array; PromptError (not numpy's TypeError/ValueError) when it
    holds strings, ragged lists or other non-numbers."""
    try:
        return np.asarray(a, np.float64)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise PromptError(f'{what} must be numbers: {exc}') from None


def _finite(a: np.ndarray, what: str) -> np.ndarray:
    if not np.all(np.isfinite(a)):
        raise PromptError(f'{what} contain NaN or inf')
    return a


def _inside(xy: np.ndarray, h: int, w: int, what: str) -> None:
    bad = (xy[:, 0] < 0) | (xy[:, 0] > w) | (xy[:, 1] < 0) | (xy[:, 1] > h)
    if bad.any():
        x, y = xy[np.argmax(bad)]
        raise PromptError(f'{what} ({x:g}, {y:g}) is outside the {w}x{h} frame')
