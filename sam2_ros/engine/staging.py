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
        return self._copy(values, None)

    def into(self, values: Union[Sequence[int], np.ndarray], dst: torch.Tensor) -> torch.Tensor:
        """Write ``values`` into ``dst`` ([len(values)] int64 on the device, e.g. a graph's
        static input): one host-to-device copy, no kernel and no stream sync on CUDA."""
        assert dst.dtype == torch.long and dst.shape == (len(values),), (dst.shape, dst.dtype)
        if not self.cuda or len(values) > self.capacity:
            return dst.copy_(torch.as_tensor(np.asarray(values, dtype=np.int64)))
        return self._copy(values, dst)

    def _copy(self, values, dst: Optional[torch.Tensor]) -> torch.Tensor:
        """values through the next pinned slot to dst (None: a new device tensor)."""
        n = len(values)
        i = self.i
        self.i = (i + 1) % len(self.events)
        if self.events[i] is not None:
            self.events[i].synchronize()          # long done: 64 copies ago
        self.host_np[i, :n] = np.asarray(values, dtype=np.int64)
        if dst is None:
            out = self.host[i, :n].to(self.device, non_blocking=True)
        else:
            out = dst.copy_(self.host[i, :n], non_blocking=True)
        ev = torch.cuda.Event()
        ev.record()
        self.events[i] = ev
        return out
