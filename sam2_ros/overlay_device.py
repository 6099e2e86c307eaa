"""The overlay's shading (``overlay.shade``: masks blended with their colors, inner outlines)
with torch ops, on the device of the frame: the ROS node renders its overlays on the GPU.

Why: a 720p overlay is a dozen whole-image OpenCV passes on the host (color lookup, weighted
sum, masked copies, erosion, dilation), milliseconds of CPU per frame and per camera, beside
the tracking worker, the receivers and the publishers of the same process, which with two
60 Hz cameras showed in the one-node p99 (docs/performance.md). On the GPU it is a few
small kernels and two copies. The pixels equal OpenCV's at the overlay's alpha (0.5: the
weighted sum is exact in float32 and both round it half to even; at other alphas OpenCV's fused
multiply-add rounds a few sums one level the other way); erosion and dilation are max pools
whose padding never wins, as OpenCV's default border (``test/cli/test_overlay_device.py``).
The id labels are text, drawn on the host after the copy back (``overlay.put_labels``).
"""

from __future__ import annotations

from typing import Dict, Union

import numpy as np
import torch
import torch.nn.functional as F

from sam2_ros.engine.types import FrameResult
from sam2_ros.overlay import outline_kernel, palette, put_labels

_PALETTES: Dict[torch.device, torch.Tensor] = {}


def _palette(device: torch.device) -> torch.Tensor:
    if device not in _PALETTES:
        _PALETTES[device] = torch.from_numpy(np.ascontiguousarray(palette())).to(device)
    return _PALETTES[device]


def shade(rgb: torch.Tensor, label: torch.Tensor, alpha: float = 0.5,
          contours: bool = True) -> torch.Tensor:
    """rgb [H, W, 3] uint8, label [H, W] uint8 (0: background), on one device -> a new
    [H, W, 3] uint8 image: ``overlay.shade``'s pixels."""
    colored = _palette(rgb.device)[label.long()]                     # [H, W, 3]
    blend = torch.round(rgb.float() * (1.0 - alpha) + colored.float() * alpha)
    obj = (label > 0).unsqueeze(-1)                                  # [H, W, 1]
    out = torch.where(obj, blend.clamp_(0, 255).to(torch.uint8), rgb)
    if contours:
        k = outline_kernel(*label.shape)
        lab = label.float()[None, None]                              # [1, 1, H, W]
        dilated = F.max_pool2d(lab, k, stride=1, padding=k // 2)
        eroded = -F.max_pool2d(-lab, k, stride=1, padding=k // 2)
        edge = ((dilated != lab) | (eroded != lab))[0, 0].unsqueeze(-1) & obj
        out = torch.where(edge, colored, out)
    return out


class DeviceOverlay:
    """Overlays rendered on ``device`` on a CUDA stream of their own (the tracker's work is
    not queued behind them), from host or device frames, returned on the host with labels.

    Every copy between host and device goes through a pinned buffer of this instance: a copy
    from or to pageable memory is synchronous (the driver stages it and the calling thread
    waits, a host-to-device one after a stream synchronize), a few milliseconds per 720p
    overlay that the tracking worker of the same process shares the driver and the GIL with.
    One thread uses an instance (the node's overlay thread); the returned image is a view of
    its output buffer, valid until its next ``render`` (the publisher copies it out first)."""

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == 'cuda'
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        # host buffers by role ('frame', 'label', 'out'), reused while the shape holds (pinned
        # on a GPU)
        self.pinned: Dict[str, torch.Tensor] = {}

    def render(self, rgb: Union[np.ndarray, torch.Tensor], res: FrameResult) -> np.ndarray:
        """rgb [H, W, 3] uint8 (numpy on the host, or a tensor on any device), the frame's
        results -> the overlay [H, W, 3] uint8 on the host (``overlay.render_overlay``'s)."""
        if not res.objects and not isinstance(rgb, torch.Tensor):
            return np.array(rgb, copy=True)
        # everything on this thread's own stream: on the default one it would queue behind,
        # and hold up, the worker's frame in flight
        with torch.cuda.stream(self.stream):       # None (the CPU): no stream, a no-op
            frame = rgb.to(self.device) if isinstance(rgb, torch.Tensor) \
                else self._upload('frame', rgb)
            shaded = frame if not res.objects else \
                shade(frame, self._upload('label', res.label_mask()))   # [H, W, 3] uint8
            out = self._buffer('out', tuple(shaded.shape))
            out.copy_(shaded, non_blocking=self.cuda)
        if self.cuda:
            self.stream.synchronize()    # this stream's kernels and copies, no other's
        img = out.numpy()
        put_labels(img, res)
        return img

    def to_host(self, frame: torch.Tensor) -> np.ndarray:
        """A device frame [H, W, 3] uint8 -> a host view of it (valid until the next call),
        copied on this instance's stream through a pinned buffer: the host overlay of a frame
        decoded on the GPU, without waiting behind the worker's frame on the default stream."""
        with torch.cuda.stream(self.stream):
            host = self._buffer('host', tuple(frame.shape))
            host.copy_(frame, non_blocking=self.cuda)
        if self.cuda:
            self.stream.synchronize()
        return host.numpy()

    def _buffer(self, role: str, shape: tuple) -> torch.Tensor:
        """The uint8 host buffer of ``role`` with ``shape`` (a new one on a new shape), pinned
        when the overlay renders on a GPU.
        Reusing it is safe: every render waits for its stream before returning, so no copy of
        the previous render still reads or writes it."""
        buf = self.pinned.get(role)
        if buf is None or tuple(buf.shape) != shape:
            buf = torch.empty(shape, dtype=torch.uint8)
            buf = self.pinned[role] = buf.pin_memory() if self.cuda else buf
        return buf

    def _upload(self, role: str, arr) -> torch.Tensor:
        """A host uint8 array (any strides, read-only too: a received frame) -> a device copy,
        through the buffer of ``role``, queued on the current (this instance's) stream; on
        the CPU the buffer itself (``shade`` only reads it)."""
        arr = np.asarray(arr)
        buf = self._buffer(role, arr.shape)
        np.copyto(buf.numpy(), arr)
        return buf.to(self.device, non_blocking=True)
