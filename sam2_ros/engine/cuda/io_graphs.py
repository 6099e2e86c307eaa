"""The frame-in and masks-out graphs, with pinned staging.

Captured on first use per source resolution (the masks' graphs of every object-count bucket
at once), or at start for ``TrackerConfig.io_resolution``:

* frame in: the uint8 frame goes through a pinned staging buffer into a static device buffer;
  one replay resizes and normalizes it into the encoder graph's static input;
* masks out: one replay upsamples all objects' logits to source resolution, reduces
  box/area/centroid and builds the label mask; pinned copies bring them to the host.

Why: they replace dozens of small kernel launches and two pageable copies per frame. With the
fused group 'io' (``TrackerConfig.fused_kernels``) the graphs capture our Triton kernels
(``kernels/io_frame.py``: 2 launches, ``kernels/io_masks.py``: 2 launches) instead of the
reference functions (about 50 launches each), which the eager runner keeps. A fused capture
that fails captures the reference instead; a failed capture makes that I/O eager (each
reported to ``on_fallback``); the graphs of the most recently used source resolutions are
kept, older ones dropped.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Set, Tuple

import numpy as np
import torch

from sam2_ros.engine import frame_in, masks_out, pil_resize
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.cuda import buckets
from sam2_ros.engine.cuda.buckets import FrameInKey, IOKey, MasksOutKey
from sam2_ros.engine.cuda.capture import CapturedGraph, Capturer
from sam2_ros.engine.cuda.kernels.fused import enabled_groups
from sam2_ros.engine.cuda.result_ring import ResultRing
from sam2_ros.engine.memory import MemoryBank

IO_RESOLUTIONS = 2      # source resolutions whose I/O graphs are kept (older ones dropped)
# Read-back buffer sets (masks, stats, label) of each masks-out bucket, allocated when its graph
# is captured and reused (``result_ring.py``): results still held downstream (the node's
# publisher and overlay threads, a caller's list) never make a frame wait for a fresh pinned
# allocation. Per camera (each camera of a step reads into a set of its own): RESULT_SETS,
# fewer where a set is large (many objects at a high resolution): RING_BYTES per bucket.
RESULT_SETS = 8
RING_BYTES = 32 * 2 ** 20


class GraphIO:
    """Frame-in graphs writing into ``image`` (the encoder graph's static input [N, 3, S, S],
    camera c's frame into row c) and masks-out graphs over the bank's rows, keyed by
    ``buckets.IOKey``."""

    def __init__(self, capturer: Capturer, cfg: TrackerConfig, bank: MemoryBank,
                 image: torch.Tensor, on_fallback: Callable[[str], None]):
        self.capturer, self.cfg, self.bank, self.image = capturer, cfg, bank, image
        self.on_fallback = on_fallback
        self.graphs: Dict[IOKey, CapturedGraph] = {}     # most recently used last
        self.rings: Dict[MasksOutKey, ResultRing] = {}   # each masks-out graph's read-backs
        self.failed: Set[IOKey] = set()
        self.cuda = torch.device(cfg.device).type == 'cuda'
        # our kernels (group 'io') rather than the reference functions
        self.fused = 'io' in enabled_groups(cfg)
        self.out_buckets = buckets.out_buckets(bank.capacity)
        # every camera may have a resolution of its own: keep at least one per camera
        self.resolutions = max(IO_RESOLUTIONS, image.shape[0])

    def prepare(self, w: int, h: int) -> None:
        """The I/O graphs of a known source resolution, now rather than on the first frame:
        frame in (under the caller's autocast, as ``track`` encodes), masks out for every
        object bucket (without autocast, as ``track`` builds its results). A failure makes
        that I/O eager, as on first use."""
        for camera in range(self.image.shape[0]):
            self.get(FrameInKey(h, w, camera))
        self._capture_buckets(h, w)

    # ---- frame in, masks out ------------------------------------------------------------
    def load_frame(self, frame: frame_in.Frame, camera: int = 0) -> bool:
        """Frame -> row ``camera`` of the encoder graph's static input (resized, normalized)
        by the frame-in graph; False when there is none for this resolution (the caller
        encodes eagerly)."""
        cap = self.get(FrameInKey(*frame_in.frame_size(frame), camera))
        if cap is None:
            return False
        self._stage_frame(frame, cap)
        cap.graph.replay()                 # resize + normalize into the encoder's input
        return True

    def _stage_frame(self, frame: frame_in.Frame, cap: CapturedGraph) -> None:
        """Frame -> the graph's static [H, W, 3] uint8 buffer via pinned memory, so the copy
        does not stall the stream; in ``staging_bands`` row bands, each band's copy to the
        device queued as soon as the host has staged it, so the two copies overlap."""
        if isinstance(frame, torch.Tensor) and frame.device.type != 'cpu':
            cap.inputs.copy_(frame)
            return
        if cap.event is not None:
            cap.event.synchronize()        # the previous frame's copy has read the buffer
        src = np.asarray(frame)
        view = frame_in.host_view(src)
        host_np = cap.host.numpy() if view is None else None
        for r0, r1 in row_bands(src.shape[0], self.cfg.staging_bands):
            if view is not None:
                # torch's copy runs on the intra-op threads, np.copyto on one core: host time
                # the GPU would otherwise wait for (tools/probes/host_probe.py); read-only
                # views (the node's received frames) included
                cap.host[r0:r1].copy_(view[r0:r1])
            else:                          # reversed views: torch cannot wrap
                np.copyto(host_np[r0:r1], src[r0:r1])
            cap.inputs[r0:r1].copy_(cap.host[r0:r1], non_blocking=True)
        cap.event = self._record()

    def results(self, logits: torch.Tensor, scores: torch.Tensor, h: int, w: int,
                ids: List[int], sync: bool = True
                ) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """As ``EagerRunner.results``, by the mask graph of the smallest bucket that holds the
        objects; None when there is none (the caller runs it eagerly). sync=False: the copies
        to the returned (pinned) arrays are queued, not waited for: the caller synchronizes
        the stream before reading them (several cameras' read-backs, one wait)."""
        n = logits.shape[0]
        batch = buckets.smallest_batch(self.out_buckets, n) if n else None
        key = None if batch is None else MasksOutKey(batch, h, w)
        cap = None if key is None else self.get(key)
        if cap is None:
            return None
        cap.inputs[0][:n].copy_(logits)
        cap.inputs[1][:n].copy_(scores)
        cap.inputs[2][:n].copy_(self.bank.stage(ids))
        cap.inputs[2][n:].zero_()          # padding rows (stale logits) stay out of the label
        cap.graph.replay()
        masks, stats, label = cap.outputs
        # a set of the bucket's pinned buffers that nothing downstream holds (result_ring.py);
        # the arrays handed out are cut to n objects, each a fresh ``numpy()`` so that every
        # view a caller takes keeps it, and so the set, alive
        ring = self.ring(key, cap)
        index, (host_m, host_s, host_l) = ring.take()
        host_m[:n].copy_(masks[:n], non_blocking=self.cuda)
        host_s[:n].copy_(stats[:n], non_blocking=self.cuda)
        host_l.copy_(label, non_blocking=self.cuda)
        if self.cuda and sync:
            torch.cuda.current_stream().synchronize()
        arrays = host_m[:n].numpy(), host_s[:n].numpy(), host_l[:].numpy()
        ring.hand_out(index, arrays)
        return arrays

    def ring(self, key: MasksOutKey, cap: CapturedGraph) -> ResultRing:
        """The read-back sets of ``key``'s graph ``cap``: ``ring_sets`` of them per camera,
        made when the graph is captured (pinned on CUDA), so no frame allocates while earlier
        results are held."""
        ring = self.rings.get(key)
        if ring is None:
            size = sum(t.numel() * t.element_size() for t in cap.outputs)
            sets = ring_sets(size) * self.image.shape[0]
            ring = self.rings[key] = ResultRing(cap.outputs, sets, pin=self.cuda)
        return ring

    # ---- capture ---------------------------------------------------------------------
    def get(self, key: IOKey) -> Optional[CapturedGraph]:
        """The I/O graph of ``key``, captured on first use; None when I/O graphs are off or
        its capture failed (that I/O then runs eagerly)."""
        if not self.cfg.graph_io:
            return None
        cap = self.graphs.pop(key, None)
        if cap is not None:
            self.graphs[key] = cap             # most recently used last
        elif key not in self.failed:
            self._drop_old_resolutions(key.hw)
            cap = self._capture(key)
            if cap is not None and isinstance(key, MasksOutKey):
                self._capture_buckets(key.h, key.w)
                self.graphs[key] = self.graphs.pop(key)      # most recently used last
        return cap

    def _capture_buckets(self, h: int, w: int) -> None:
        """The masks-out graphs of every object bucket at one source resolution (those not
        captured yet), without autocast, as ``track`` builds its results. All at once, at
        ``prepare`` or with a resolution's first: a later object-count bucket would otherwise
        capture mid-stream, and with the 'io' group compile its kernels then (the object
        count is a compile-time constant of the mask kernel): a frame of hundreds of ms.
        Each captured one's read-back sets are made with it (``ring``)."""
        with torch.autocast(torch.device(self.cfg.device).type, enabled=False):
            for b in self.out_buckets:
                key = MasksOutKey(b, h, w)
                if key not in self.graphs and key not in self.failed:
                    self._capture(key)
                if key in self.graphs:
                    self.ring(key, self.graphs[key])

    def _capture(self, key: IOKey) -> Optional[CapturedGraph]:
        """The graph of ``key`` with our kernels where ``fused``, else (or when that fails)
        of the reference functions; None (the I/O eager from now on) when that fails too."""
        capture = self.capture_frame_in if isinstance(key, FrameInKey) else \
            self.capture_masks_out
        first = None
        if self.fused:
            try:
                cap = capture(key, True)
                self.graphs[key] = cap
                return cap
            except Exception as exc:  # noqa: BLE001 - the reference functions instead
                first = exc
        try:
            cap = capture(key, False)
        except Exception as exc:  # noqa: BLE001 - this I/O runs eagerly from now on
            self.failed.add(key)
            also = '' if first is None else f' (with fused kernels: {first!r})'
            self.on_fallback(f'I/O graph capture failed for {key}, eager: {exc!r}{also}')
            return None
        if first is not None:
            self.on_fallback(f'I/O graph capture with fused kernels failed for {key}, '
                             f'captured the reference instead: {first!r}')
        self.graphs[key] = cap
        return cap

    def _drop_old_resolutions(self, hw: Tuple[int, int]) -> None:
        """Keep the I/O graphs of the ``resolutions`` most recently used source resolutions."""
        # resolutions in use order, least recent first
        seen = list(dict.fromkeys(k.hw for k in reversed(self.graphs)))[::-1]
        if hw in seen or len(seen) < self.resolutions:
            return
        for k in [k for k in self.graphs if k.hw == seen[0]]:
            del self.graphs[k]
            self.rings.pop(k, None)

    def capture_frame_in(self, key: FrameInKey, fused: bool = False) -> CapturedGraph:
        """The graph that resizes and normalizes a [H, W, 3] uint8 frame into row
        ``key.camera`` of ``image``; ``fused``: by our two kernels, written in place."""
        size, target = self.image.shape[-1], self.image[key.camera:key.camera + 1]
        frame = torch.zeros(key.h, key.w, 3, dtype=torch.uint8, device=target.device)
        if fused:
            from sam2_ros.engine.cuda.kernels.io_frame import frame_to_input
            fn = (lambda x: frame_to_input(x, size, out=target))           # noqa: E731
        else:
            fn = (lambda x: target.copy_(frame_in.normalize(x, size)))     # noqa: E731
        cap = self.capturer.capture(fn, frame)
        cap.host = self._host(key.h, key.w, 3, dtype=torch.uint8)
        cap.keep = pil_resize.tables_of(key.h, key.w, size, target.device)
        return cap

    def capture_masks_out(self, key: MasksOutKey, fused: bool = False) -> CapturedGraph:
        """The graph from ``key.batch`` objects' logits, scores and ids to masks, stats and
        the label mask at the source resolution; ``fused``: by our two kernels."""
        b, h, w = self.bank, key.h, key.w
        inputs = (b.logits.new_zeros(key.batch, *b.logits.shape[1:]),
                  b.scores.new_zeros(key.batch),
                  torch.zeros(key.batch, dtype=torch.uint8, device=b.logits.device))
        if fused:
            from sam2_ros.engine.cuda.kernels.io_masks import masks_label_stats
            return self.capturer.capture(
                lambda x: masks_label_stats(x[0], h, w, x[2], extra=x[1]), inputs)

        def out(x):
            masks, stats = masks_out.on_device(x[0], h, w, extra=x[1])
            return masks, stats, masks_out.label_on_device(masks, x[2])
        return self.capturer.capture(out, inputs)

    def _host(self, *shape, dtype) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype, pin_memory=self.cuda)

    def _record(self) -> Optional[torch.cuda.Event]:
        if not self.cuda:
            return None
        ev = torch.cuda.Event()
        ev.record()
        return ev


def row_bands(rows: int, bands: int) -> List[Tuple[int, int]]:
    """``bands`` consecutive row ranges [r0, r1) covering ``rows`` rows, as equal as integers
    allow (fewer where there are fewer rows)."""
    n = max(1, min(bands, rows))
    cuts = [rows * k // n for k in range(n + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def ring_sets(set_bytes: int) -> int:
    """Read-back sets of one bucket whose set is ``set_bytes``: RESULT_SETS, fewer where they
    would pass RING_BYTES, never under 2 (one held downstream, one being read)."""
    return max(2, min(RESULT_SETS, RING_BYTES // max(1, set_bytes)))
