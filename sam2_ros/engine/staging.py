"""Small host-to-device copies (row indices, distances) that do not stall the GPU.

A copy from pageable host memory makes CUDA synchronize the stream first, so every index
tensor built with ``torch.tensor(...).to('cuda')`` would wait for all queued kernels (the
image encoder, the previous object's step) and leave the GPU idle while the host catches up.
Copies from pinned memory are truly asynchronous; a ring of pinned buffers, each reused only
after the copy that last read it has completed (a CUDA event), keeps them safe.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Union

import numpy as np
import torch


class IndexStager:
    """stage(values) -> int64 device tensor, without a stream sync on CUDA."""

    def __init__(self, device: torch.device, slots: int = 64, capacity: int = 8192):
        self.device = torch.device(device)
        self.cuda = self.device.type == 'cuda'
        self.capacity = capacity
        self.i = 0
        if self.cuda:
            self.host = torch.empty(slots, capacity, dtype=torch.long).pin_memory()
            self.host_np = self.host.numpy()
            self.events: List[Optional[torch.cuda.Event]] = [None] * slots

    def __call__(self, values: Union[Sequence[int], np.ndarray]) -> torch.Tensor:
        n = len(values)
        if not self.cuda or n > self.capacity:
            return torch.tensor(values, dtype=torch.long).to(self.device)
        i = self.i
        self.i = (i + 1) % len(self.events)
        if self.events[i] is not None:
            self.events[i].synchronize()          # long done: 64 copies ago
        self.host_np[i, :n] = np.asarray(values, dtype=np.int64)
        out = self.host[i, :n].to(self.device, non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        self.events[i] = ev
        return out
