"""Capturing a function into a CUDA graph: warm-up, capture, one memory pool.

A captured graph replays fixed kernels on fixed buffers: its inputs are written in place before
each replay and its outputs read in place after it. Before a capture the function runs eagerly
on a side stream, so that whatever it initialises lazily (cuBLAS/cuDNN handles and plans,
sam2's RoPE tables) is not recorded into the graph. All graphs of one ``Capturer`` share one
memory pool: a tracker never runs two of them concurrently, so their intermediates can share
memory, while each graph's static outputs stay allocated and are never reused.

The step, I/O and prompt graphs (``step_graphs``, ``io_graphs``, ``prompt_graphs``) and the
graph runner's encoder graph all capture through the runner's one ``Capturer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

# Eager runs of a function before its capture. One suffices for lazy initialisation (graphs
# equal eager on the GPU tests); each more lengthens configure by a run of every graph
# (``python -m tools.bench.startup --warmup-iters`` measures it).
WARMUP_ITERS = 1
CAPTURE_ERROR_MODE = 'thread_local'
# One replay of each graph right after its capture: CUDA uploads an executable graph to the
# device on its first launch, host time that would otherwise land in the frame that first
# needs the graph (a first correction, a new bucket: tools/probes/replay_watch.py). It runs
# what the warm-up ran, on the same inputs, so what it writes is what the warm-up wrote.
# False: uploaded on first use (``python -m tools.bench.startup --replay-at-capture 0``).
REPLAY_AT_CAPTURE = True


@dataclass
class CapturedGraph:
    """One captured graph with its static inputs and outputs; frame-in graphs also keep a
    pinned host staging buffer, the event of the last copy that read it and the resize's
    tables."""

    graph: Any                      # torch.cuda.CUDAGraph, or anything with replay()
    inputs: Any                     # written in place before each replay
    outputs: Any                    # read in place after it
    host: Optional[torch.Tensor] = None         # pinned staging buffer
    event: Optional[torch.cuda.Event] = None    # the last copy out of ``host``
    keep: Any = None            # tensors the graph reads that a bounded cache may drop


class Capturer:
    """Warms up and captures functions into graphs of one memory pool (created on the first
    capture)."""

    def __init__(self):
        self.pool: Optional[tuple] = None

    def capture(self, fn: Callable[[Any], Any], inputs: Any,
                warm_up: bool = True) -> CapturedGraph:
        """Warm up ``fn(inputs)`` on a side stream, then capture it into a graph.
        warm_up=False: capture at once, for a caller whose earlier capture already ran the same
        modules eagerly (nothing left to initialise lazily) and whose eager run would be its
        memory peak."""
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_ITERS if warm_up else 0):
                fn(inputs)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # thread_local: a graph captured while the node runs (a new resolution's I/O, image
        # mode's first call) must not fail because another thread (the GPU overlay's) makes a
        # CUDA call that global capture mode forbids process-wide; this thread's own unsafe
        # calls still raise
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode=CAPTURE_ERROR_MODE):
            outputs = fn(inputs)
        if REPLAY_AT_CAPTURE:
            graph.replay()
        return CapturedGraph(graph, inputs, outputs)
