"""A stand-in for torchvision's nvJPEG decoder on machines without a GPU or torchvision (CI):
``torchvision.io`` as sam2_ros/engine/decode.py calls it, decoding with cv2 on the CPU into
the [3, H, W] uint8 tensor nvJPEG returns, with CUDA reported available. The real decoder's
pixels are test/gpu/test_decode_gpu.py's."""

from __future__ import annotations

import sys
import types

import cv2
import numpy as np
import torch


def reference(data: bytes) -> np.ndarray:
    """cv2.imdecode(IMREAD_UNCHANGED), then to RGB: the host decoder's pixels."""
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    code = {2: cv2.COLOR_GRAY2RGB, 4: cv2.COLOR_BGRA2RGB}.get(
        img.ndim if img.ndim == 2 else img.shape[2], cv2.COLOR_BGR2RGB)
    return cv2.cvtColor(img, code)


class FakeNvjpeg:
    """torchvision.io's decode_jpeg on the CPU. ``fail`` makes every call raise as torchvision
    does on data nvJPEG refuses; ``calls`` records (mode, device, bytes) of each call."""

    def __init__(self) -> None:
        self.calls: list = []
        self.fail = False

    def module(self):
        io = types.ModuleType('torchvision.io')
        io.ImageReadMode = types.SimpleNamespace(RGB='RGB')
        io.decode_jpeg = self.decode_jpeg
        tv = types.ModuleType('torchvision')
        tv.io = io
        return tv, io

    def decode_jpeg(self, data, mode, device):
        assert isinstance(data, torch.Tensor) and data.dtype == torch.uint8 and data.ndim == 1
        self.calls.append((mode, str(device), data.numel()))
        if self.fail:
            raise RuntimeError('Error while decoding JPEG images: nvjpeg status 7')
        return torch.from_numpy(reference(data.numpy().tobytes())).permute(2, 0, 1).contiguous()


def install(monkeypatch) -> FakeNvjpeg:
    """The stand-in as ``torchvision`` and CUDA 'available' for the test (monkeypatch undoes
    both)."""
    fake = FakeNvjpeg()
    tv, io = fake.module()
    monkeypatch.setitem(sys.modules, 'torchvision', tv)
    monkeypatch.setitem(sys.modules, 'torchvision.io', io)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    return fake
