"""Stand-ins for CUDA graphs on the CPU: a "graph" whose replay re-runs the captured function
into the captured outputs, so the graph layer's bookkeeping (buckets, static buffers, fallbacks)
runs in CI without a GPU. Shared by the graph-logic tests of test/engine, with
``graph_tracker``, a tracker whose runner captured every graph with the stand-in."""

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


def graph_tracker(mode, monkeypatch, padded=True, steady='sam2', merge=True):
    """A tiny 64 px tracker on the shared model whose GraphRunner captured its graphs with
    the stand-in (batch buckets 1 and 2, two conditioning frames): (tracker, config)."""
    from conftest import LEAN, tracker_on_shared_model
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.cuda import runner
    graphs_on_cpu(monkeypatch)
    cfg = TrackerConfig(model_size='tiny', image_size=64, device='cpu', precision='fp32',
                        random_weights=True, use_cuda_graphs=False, graph_mode=mode,
                        batch_buckets=(1, 2), max_cond_frames=2, padded_graphs=padded,
                        steady_attention=steady, merge_step_buckets=merge,
                        extra_hydra_overrides=list(LEAN))
    tr = tracker_on_shared_model(cfg)
    reasons = []
    tr.runner = runner.GraphRunner(tr.model, cfg, reasons.append)
    with torch.inference_mode():
        tr.runner.prepare(tr.bank, tr.maskmem_pos, None)
    assert not reasons, reasons
    return tr, cfg
