"""The frame-in and masks-out CUDA graphs of the graph runner, with pinned staging.

Captured on first use per source resolution (and per object-count bucket for the masks), or
at start for ``TrackerConfig.io_resolution``:

* frame in: the uint8 frame goes through a pinned staging buffer into a static device buffer;
  one replay resizes and normalizes it into the encoder graph's static input;
* masks out: one replay upsamples all objects' logits to source resolution, reduces
  box/area/centroid and builds the label mask; pinned copies bring them to the host.

They replace some 40 small kernel launches and two pageable copies per frame. A failed capture
makes that I/O eager (reported to the runner's ``on_fallback``). ``GraphIO`` belongs to a
``GraphRunner`` (``cuda/runner.py``): it captures with the runner's ``_capture`` (same memory
pool), writes into the runner's encoder graph and is on only while the runner's graphs are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import numpy as np
import torch

from sam2_ros.engine import frame_in, masks_out

if TYPE_CHECKING:
    from sam2_ros.engine.cuda.runner import GraphRunner, _Captured

IO_RESOLUTIONS = 2      # source resolutions whose I/O graphs are kept (older ones dropped)


class GraphIO:
    """Frame-in and masks-out graphs of one ``GraphRunner``, keyed ('in', H, W) and
    ('out', batch, H, W)."""

    def __init__(self, runner: GraphRunner):
        self.runner = runner
        self.graphs: Dict[tuple, _Captured] = {}    # ('in', H, W) / ('out', batch, H, W)
        self.failed: set = set()
        self.cuda = runner.cuda

    def prepare(self, w: int, h: int) -> None:
        """The I/O graphs of a known source resolution, now rather than on the first frame:
        frame in (under the caller's autocast, as ``track`` encodes), masks out for every
        object bucket (without autocast, as ``track`` builds its results). A failure makes
        that I/O eager, as on first use."""
        self.get(('in', h, w))
        with torch.autocast(torch.device(self.runner.cfg.device).type, enabled=False):
            for b in self.out_buckets():
                self.get(('out', b, h, w))

    # ---- frame in, masks out ------------------------------------------------------------
    def load_frame(self, frame: frame_in.Frame) -> bool:
        """Frame -> the encoder graph's static input (resized, normalized) by the frame-in
        graph; False when there is none for this resolution (the caller encodes eagerly)."""
        cap = self.get(('in', *frame_in.frame_size(frame)))
        if cap is None:
            return False
        self._stage_frame(frame, cap)
        cap.graph.replay()                 # resize + normalize into the encoder's input
        return True

    def _stage_frame(self, frame: frame_in.Frame, cap: _Captured) -> None:
        """Frame -> the graph's static [H, W, 3] uint8 buffer via pinned memory, so the copy
        does not stall the stream."""
        if isinstance(frame, torch.Tensor) and frame.device.type != 'cpu':
            cap.inputs.copy_(frame)
            return
        if cap.event is not None:
            cap.event.synchronize()        # the previous frame's copy has read the buffer
        src = np.asarray(frame)
        if src.flags.writeable and min(src.strides) >= 0:
            # torch's copy runs on the intra-op threads: 2.7 MB (720p) in 0.02 ms against
            # 0.25 ms for np.copyto on one core (H200 host, host_probe.py), time the GPU
            # otherwise waits for
            cap.host.copy_(torch.from_numpy(src))
        else:                              # read-only or reversed views: torch cannot wrap
            np.copyto(cap.host.numpy(), src)
        cap.inputs.copy_(cap.host, non_blocking=True)
        cap.event = self._record()

    def results(self, logits: torch.Tensor, scores: torch.Tensor, h: int, w: int,
                ids: List[int]) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """As ``EagerRunner.results``, by the mask graph of the smallest bucket that holds the
        objects; None when there is none (the caller runs it eagerly)."""
        n = logits.shape[0]
        batch = next((b for b in self.out_buckets() if b >= n), None) if n else None
        cap = None if batch is None else self.get(('out', batch, h, w))
        if cap is None:
            return None
        cap.inputs[0][:n].copy_(logits)
        cap.inputs[1][:n].copy_(scores)
        cap.inputs[2][:n].copy_(self.runner.bank.stage(ids))
        cap.inputs[2][n:].zero_()          # padding rows (stale logits) stay out of the label
        cap.graph.replay()
        masks, stats, label = cap.outputs
        # fresh pinned buffers from torch's caching host allocator (about a microsecond
        # each), handed out as they are: no host copy after the sync, which the caller waits
        # for (0.9 MB per object and the label at 720p). A block returns to the cache when
        # the last array viewing it is gone.
        host_m, host_s, host_l = (self._host(*t.shape, dtype=t.dtype)
                                  for t in (masks[:n], stats[:n], label))
        host_m.copy_(masks[:n], non_blocking=self.cuda)
        host_s.copy_(stats[:n], non_blocking=self.cuda)
        host_l.copy_(label, non_blocking=self.cuda)
        if self.cuda:
            torch.cuda.current_stream().synchronize()
        return host_m.numpy(), host_s.numpy(), host_l.numpy()

    def out_buckets(self) -> List[int]:
        """Object-count buckets of the mask graphs: powers of two, and the capacity."""
        cap = self.runner.bank.capacity
        return sorted({min(2 ** i, cap) for i in range(cap.bit_length() + 1)})

    # ---- capture ---------------------------------------------------------------------
    def get(self, key: tuple) -> Optional[_Captured]:
        """The I/O graph of ``key``, captured on first use; None when I/O graphs are off or
        its capture failed (that I/O then runs eagerly)."""
        r = self.runner
        if not (r.enabled and r.cfg.graph_io and r.encoder is not None):
            return None
        cap = self.graphs.pop(key, None)
        if cap is not None:
            self.graphs[key] = cap             # most recently used last
        elif key not in self.failed:
            self._drop_old_resolutions(key[-2:])
            try:
                cap = self._capture_in(*key[1:]) if key[0] == 'in' else \
                    self._capture_out(*key[1:])
                self.graphs[key] = cap
            except Exception as exc:  # noqa: BLE001 - this I/O runs eagerly from now on
                self.failed.add(key)
                r.on_fallback(f'I/O graph capture failed for {key}, eager: {exc!r}')
        return cap

    def _drop_old_resolutions(self, hw: tuple) -> None:
        """Keep the I/O graphs of the IO_RESOLUTIONS most recently used source resolutions."""
        # resolutions in use order, least recent first
        seen = list(dict.fromkeys(k[-2:] for k in reversed(self.graphs)))[::-1]
        if tuple(hw) in seen or len(seen) < IO_RESOLUTIONS:
            return
        for k in [k for k in self.graphs if k[-2:] == seen[0]]:
            del self.graphs[k]

    def _capture_in(self, h: int, w: int) -> _Captured:
        size, target = self.runner.model.image_size, self.runner.encoder.inputs
        frame = torch.zeros(h, w, 3, dtype=torch.uint8, device=target.device)
        cap = self.runner._capture(lambda x: target.copy_(frame_in.normalize(x, size)), frame)
        cap.host = self._host(h, w, 3, dtype=torch.uint8)
        return cap

    def _capture_out(self, batch: int, h: int, w: int) -> _Captured:
        b = self.runner.bank
        inputs = (b.logits.new_zeros(batch, *b.logits.shape[1:]), b.scores.new_zeros(batch),
                  torch.zeros(batch, dtype=torch.uint8, device=b.logits.device))

        def out(x):
            masks, stats = masks_out.on_device(x[0], h, w, extra=x[1])
            return masks, stats, masks_out.label_on_device(masks, x[2])
        return self.runner._capture(out, inputs)

    def _host(self, *shape, dtype) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype, pin_memory=self.cuda)

    def _record(self) -> Optional[torch.cuda.Event]:
        if not self.cuda:
            return None
        ev = torch.cuda.Event()
        ev.record()
        return ev
