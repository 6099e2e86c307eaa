"""A test-only stand-in for the three torchvision transforms sam2's image predictor imports.

``sam2/utils/transforms.py`` imports ``ToTensor``, ``Resize`` and ``Normalize`` from
torchvision, and no torchvision build for the CPU-only torch of CI can be installed beside it
(test/tools/test_image_mode_cpu.py says why). So that CI can run ``SAM2ImagePredictor`` itself, end
to end, this module registers a minimal ``torchvision.transforms`` offering those three with
torchvision's tensor semantics (torchvision >= 0.17, whose tensor ``Resize`` antialiases by
default), and nothing else:

* ``ToTensor()(HWC uint8 array)``: ``from_numpy(a.transpose(2, 0, 1)).contiguous()``, to
  float32, divided by 255;
* ``Resize((h, w))`` of a float [C, H, W] tensor: the tensor itself when it has that size
  already, else ``F.interpolate`` of it as [1, C, H, W] (bilinear, align_corners=False,
  antialias=True);
* ``Normalize(mean, std)``: a copy minus mean, divided by std (float32 [C, 1, 1] tensors).

It is installed only where torchvision is missing (``install()``). On the GPU machine, where
the real torchvision exists, test/gpu/test_image_gpu.py compares our path with the real
transforms and the real predictor, which checks this stand-in too.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import List

import numpy as np
import torch
import torch.nn.functional as F


class ToTensor:
    def __call__(self, pic: np.ndarray) -> torch.Tensor:
        img = torch.from_numpy(pic.transpose((2, 0, 1))).contiguous()
        return img.to(dtype=torch.float32).div(255)


class Resize(torch.nn.Module):
    def __init__(self, size):
        super().__init__()
        self.size: List[int] = [int(s) for s in size]

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        if [img.shape[-2], img.shape[-1]] == self.size:
            return img
        out = F.interpolate(img.unsqueeze(0), size=self.size, mode='bilinear',
                            align_corners=False, antialias=True)
        return out.squeeze(0)


class Normalize(torch.nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean: List[float] = [float(m) for m in mean]
        self.std: List[float] = [float(s) for s in std]

    def forward(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.clone()
        mean = torch.tensor(self.mean, dtype=tensor.dtype, device=tensor.device).view(-1, 1, 1)
        std = torch.tensor(self.std, dtype=tensor.dtype, device=tensor.device).view(-1, 1, 1)
        return tensor.sub_(mean).div_(std)


def install() -> bool:
    """Register the stand-in as ``torchvision.transforms`` unless torchvision is installed;
    True when the stand-in is in use."""
    if 'torchvision' in sys.modules and not getattr(sys.modules['torchvision'], 'STANDIN', 0):
        return False
    if 'torchvision' not in sys.modules and importlib.util.find_spec('torchvision') is not None:
        return False
    tv = types.ModuleType('torchvision')
    tv.STANDIN = True
    tr = types.ModuleType('torchvision.transforms')
    tr.ToTensor, tr.Resize, tr.Normalize = ToTensor, Resize, Normalize
    tv.transforms = tr
    sys.modules['torchvision'] = tv
    sys.modules['torchvision.transforms'] = tr
    return True
