"""Frames into model space, on the model's device, with input validation.

The official video predictor resizes frames with PIL (``Image.resize((S, S))``: bicubic,
8-bit fixed point) before dividing by 255 and normalizing. The same resize runs here on the
device in the same integer arithmetic (``pil_resize.py``), so the model input is bitwise the
official loader's and the host only copies the uint8 frame to the device. Prompts are scaled
in ``prompts.py``.
"""

from __future__ import annotations

import warnings
from typing import Optional, Tuple, Union

import numpy as np
import torch

from sam2_ros.engine import pil_resize
from sam2_ros.engine.errors import FrameError

IMG_MEAN = (0.485, 0.456, 0.406)
IMG_STD = (0.229, 0.224, 0.225)
MAX_SIDE = 8192
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
    check_size(h, w)
    return h, w


def check_size(h: int, w: int) -> None:
    """FrameError unless a frame of h x w pixels is one the tracker takes."""
    if not (16 <= h <= MAX_SIDE and 16 <= w <= MAX_SIDE):
        raise FrameError(f'frame size {w}x{h} outside 16..{MAX_SIDE} pixels per side')


def to_model_input(frame: Frame, size: int, device: torch.device) -> torch.Tensor:
    """[H, W, 3] uint8 -> [1, 3, S, S] float32 normalized, computed on ``device``."""
    return normalize(to_device(frame, device), size)


def to_device(frame: Frame, device: torch.device) -> torch.Tensor:
    """The raw frame [H, W, 3] uint8 on ``device`` (the only host-to-device copy)."""
    if isinstance(frame, np.ndarray):
        view = host_view(frame)
        if view is None or (torch.device(device).type == 'cpu' and not frame.flags.writeable):
            # torch cannot wrap it; or on the CPU, where the tensor is the frame itself from
            # here on, it is read-only (a received message's bytes): a copy
            return torch.from_numpy(np.array(frame)).to(device)
        return view.to(device, non_blocking=True)
    return frame.to(device, non_blocking=True)


def host_view(frame: np.ndarray) -> Optional[torch.Tensor]:
    """A torch tensor over a host frame's memory, for reading only (a copy to pinned memory
    or the device): read-only views too, e.g. a received message's bytes, which torch wraps
    with a warning that it does not support non-writable tensors (nothing writes to this one),
    given once per process: only the first such wrap needs it silenced, so the frames after it
    do not change the process's warning filters. None for views torch cannot wrap (negative
    strides, e.g. bgr[..., ::-1])."""
    global _read_only_wrapped
    if any(s < 0 for s in frame.strides):
        return None
    if frame.flags.writeable or _read_only_wrapped:
        return torch.from_numpy(frame)
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', 'The given NumPy array is not writable')
        view = torch.from_numpy(frame)
    _read_only_wrapped = True       # torch has given its one warning of the process
    return view


_read_only_wrapped = False


def normalize(x: torch.Tensor, size: int) -> torch.Tensor:
    """x [H, W, 3] uint8 on the device -> [1, 3, S, S] float32 normalized. Device work only
    (no host sync, no host-to-device copy once this source size was seen), so the graph
    runner can capture it. Same values as the official loader after PIL: x / 255 in float64
    rounded to float32 (numpy there; a 256-entry table here, since CUDA divides a tensor by a
    Python scalar as a multiplication by its reciprocal, which rounds differently), then the
    mean subtracted and the std divided, tensor by tensor, in float32."""
    x = pil_resize.resize_u8(x.permute(2, 0, 1), size).unsqueeze(0)   # [1, 3, S, S] int32
    unit, mean, std = _constants(x.device)
    return (unit.index_select(0, x.flatten()).view(x.shape) - mean) / std


def level_table(device: torch.device) -> torch.Tensor:
    """[3, 256] float32: the normalized value of each 8-bit level v in channel c, by the same
    float32 operations as ``normalize`` ((v / 255 - mean[c]) / std[c], elementwise), so a
    lookup in it is bitwise ``normalize``'s value (the fused frame-in kernel reads it).
    Computed once per device, like ``_constants``."""
    if device not in _LEVELS:
        unit, mean, std = _constants(device)
        _LEVELS[device] = ((unit.view(1, 256) - mean.view(3, 1)) / std.view(3, 1)).contiguous()
    return _LEVELS[device]


_CONSTANTS = {}
_LEVELS = {}


def _constants(device: torch.device):
    """The table of v / 255 for v in 0..255 and the normalization constants, uploaded once per
    device (an upload per frame would make CUDA synchronize the stream)."""
    if device not in _CONSTANTS:
        unit = torch.from_numpy((np.arange(256) / 255.0).astype(np.float32))
        _CONSTANTS[device] = (unit.to(device),
                              torch.tensor(IMG_MEAN, device=device).view(1, 3, 1, 1),
                              torch.tensor(IMG_STD, device=device).view(1, 3, 1, 1))
    return _CONSTANTS[device]

