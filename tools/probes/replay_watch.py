"""Per-frame counters of the host work a frame's graph replays and pinned buffers cost.

Why: the interaction stream's slow frames (after a prompt, a correction or a new object) ran
the same kernels as their neighbours, so their time is host time. Two suspects leave no trace
in a kernel census: a graph's first replay (CUDA uploads the executable graph then, inside
``cudaGraphLaunch``) and a pinned host block the caching host allocator must create
(``cudaHostAlloc``, milliseconds) when none of its cached blocks is free. ``ReplayWatch``
wraps ``torch.cuda.CUDAGraph.replay`` and ``capture_end`` while it is active and counts, per frame,
the replays, the first replays of a graph and the host ms spent in them, and the graphs
captured then (an I/O graph is captured on a resolution's first use), and reads the host
allocator's counters (``torch.cuda.host_memory_stats``) around the frame. Probe only: never
installed.
"""

from __future__ import annotations

import time
import weakref
from typing import Dict

import torch


def _host_allocs() -> Dict[str, float]:
    """The pinned allocator's cumulative block creations and their µs (zeros without CUDA)."""
    if not torch.cuda.is_available():
        return {'n': 0.0, 'us': 0.0}
    s = torch.cuda.host_memory_stats()
    return {'n': float(s.get('num_host_alloc', 0)),
            'us': float(s.get('host_alloc_time.total', 0))}


class ReplayWatch:
    """A context manager active for a whole stream; ``frame()`` returns and resets the counts
    since the last call."""

    def __init__(self) -> None:
        # graphs replayed before, by reference: a freed graph's address may be reused
        self.seen: weakref.WeakSet = weakref.WeakSet()
        self.counts: Dict[str, float] = {}
        self.originals: Dict[str, object] = {}
        self.allocs = _host_allocs()
        self.reset()

    def reset(self) -> None:
        self.counts = {'replays': 0, 'first_replays': 0, 'replay_host_ms': 0.0,
                       'first_replay_host_ms': 0.0, 'captures': 0}
        self.allocs = _host_allocs()

    def __enter__(self) -> ReplayWatch:
        cls = torch.cuda.CUDAGraph
        self.originals = {'replay': cls.replay, 'capture_end': cls.capture_end}
        watch, replay0, capture_end0 = self, cls.replay, cls.capture_end

        def replay(graph, *args, **kwargs):
            first = graph not in watch.seen
            watch.seen.add(graph)
            t0 = time.perf_counter()
            out = replay0(graph, *args, **kwargs)
            ms = (time.perf_counter() - t0) * 1e3
            watch.counts['replays'] += 1
            watch.counts['replay_host_ms'] += ms
            if first:
                watch.counts['first_replays'] += 1
                watch.counts['first_replay_host_ms'] += ms
            return out

        def capture_end(graph, *args, **kwargs):
            watch.counts['captures'] += 1
            return capture_end0(graph, *args, **kwargs)
        cls.replay, cls.capture_end = replay, capture_end
        return self

    def __exit__(self, *exc) -> None:
        for name, fn in self.originals.items():
            setattr(torch.cuda.CUDAGraph, name, fn)

    def frame(self) -> Dict[str, float]:
        """This frame's counts: replays, first replays and their host ms, graphs captured,
        pinned blocks created (``host_allocs``) and the ms ``cudaHostAlloc`` took."""
        now = _host_allocs()
        out = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.counts.items()}
        out['host_allocs'] = int(now['n'] - self.allocs['n'])
        out['host_alloc_ms'] = round((now['us'] - self.allocs['us']) / 1e3, 3)
        self.reset()
        return out
