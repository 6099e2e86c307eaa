"""Stand-ins for CUDA graphs on the CPU: a "graph" whose replay re-runs the captured function
into the captured outputs, so the graph layer's bookkeeping (buckets, static buffers, fallbacks)
runs in CI without a GPU. Shared by the graph-logic tests of test/engine."""

import torch

from sam2_ros.engine.cuda import capture


class ReplayOnCpu:
    """Stands in for torch.cuda.CUDAGraph: replay() recomputes into the static outputs."""

    def __init__(self, fn, inputs, outputs):
        self.fn, self.inputs, self.outputs = fn, inputs, outputs
        self.replays = 0

    def replay(self):
        self.replays += 1
        new = self.fn(self.inputs)
        if isinstance(new, torch.Tensor):
            return self.outputs.copy_(new)
        if isinstance(new, tuple):       # the mask graph: (masks, stats)
            for dst, src in zip(self.outputs, new):
                dst.copy_(src)
            return
        for name in vars(new):
            dst, src = getattr(self.outputs, name), getattr(new, name)
            if dst is None:      # an optional output the function does not return
                continue
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
            else:   # Features: lists of tensors
                for d, s in zip(dst, src):
                    if isinstance(d, torch.Tensor):
                        d.copy_(s)


def fake_capture_same_outputs(self, fn, inputs):
    outputs = fn(inputs)
    return capture.CapturedGraph(ReplayOnCpu(fn, inputs, outputs), inputs, outputs)


def graphs_on_cpu(monkeypatch, capture_fn=fake_capture_same_outputs) -> None:
    """Route the graph layer's captures to ``capture_fn`` (the stand-in above by default) and
    make torch.cuda's pool handle and synchronize no-ops, so a GraphRunner runs on the CPU."""
    monkeypatch.setattr(capture.Capturer, 'capture', capture_fn)
    monkeypatch.setattr(torch.cuda, 'graph_pool_handle', lambda: None)
    monkeypatch.setattr(torch.cuda, 'synchronize', lambda *a: None)
