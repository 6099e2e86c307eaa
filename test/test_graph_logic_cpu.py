"""The CUDA-graph runner's bookkeeping, exercised on the CPU (CI has no GPU).

Capture is replaced by a stand-in whose replay re-runs the captured function on the static
input buffers and writes the static outputs in place, exactly the contract of a CUDA graph.
Everything else is the real runner: bucket choice, gathering each object's memories into the
static buffers (swap), stacking and padding objects (batched), copy-out, eager fallback for
warm-up frames. Results must equal the eager runner's.
"""

import pytest
import torch

from scenarios import schedule, synthetic_frames
from sam2_ros import graphs
from sam2_ros.config import TrackerConfig
from sam2_ros.tracker import StreamingTracker


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
        for name in vars(new):
            dst, src = getattr(self.outputs, name), getattr(new, name)
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)
            else:   # Features: lists of tensors
                for d, s in zip(dst, src):
                    if isinstance(d, torch.Tensor):
                        d.copy_(s)


def fake_capture(self, fn, inputs):
    return graphs._Captured(ReplayOnCpu(fn, inputs, fn(inputs)), inputs, fn(inputs))


def fake_capture_same_outputs(self, fn, inputs):
    outputs = fn(inputs)
    return graphs._Captured(ReplayOnCpu(fn, inputs, outputs), inputs, outputs)


def graph_tracker(mode, monkeypatch):
    monkeypatch.setattr(graphs.GraphRunner, '_capture', fake_capture_same_outputs)
    monkeypatch.setattr(torch.cuda, 'graph_pool_handle', lambda: None)
    monkeypatch.setattr(torch.cuda, 'synchronize', lambda *a: None)
    cfg = TrackerConfig(model_size='tiny', image_size=128, device='cpu', precision='fp32',
                        random_weights=True, use_cuda_graphs=False, graph_mode=mode,
                        batch_buckets=(1, 2), max_cond_frames=2)
    tr = StreamingTracker(cfg)
    reasons = []
    tr.runner = graphs.GraphRunner(tr.model, cfg, reasons.append)
    with torch.inference_mode():
        tr.runner.prepare(tr.bank, tr.maskmem_pos, None)
    assert not reasons, reasons
    return tr, cfg


@pytest.mark.parametrize('mode', ['swap', 'batched'])
def test_graph_runner_logic_equals_eager(mode, monkeypatch):
    tr, cfg = graph_tracker(mode, monkeypatch)
    ref = StreamingTracker(cfg.replace(use_cuda_graphs=False), model=tr.model)
    frames = synthetic_frames(40, h=48, w=64)
    events = schedule(48, 64, add2=3, add3=5, fix=22, remove=30)
    worst = 0.0
    for f, fr in enumerate(frames):
        a, b = tr.track(fr), ref.track(fr)
        for oa, ob in zip(a.objects, b.objects):
            assert oa.obj_id == ob.obj_id
            worst = max(worst, float((oa.low_res_logits - ob.low_res_logits).abs().max()))
        for kind, p in events.get(f, []):
            for t in (tr, ref):
                t.remove_object(p) if kind == 'remove' else t.add_prompt(p)
    assert worst <= 1e-4, worst
    # steady frames replayed graphs; the first 15 after each prompt ran eagerly
    assert tr.stats['graph_steps'] >= 30 and tr.stats['eager_steps'] > 15, dict(tr.stats)
    assert a.mode in ('graph', 'mixed')
    replays = {k: c.graph.replays for k, c in tr.runner.steps.items()}
    if mode == 'batched':
        assert replays[(2, 1)] > 0, replays      # objects 1 and 3 stacked in one replay
    assert any(k[1] == 2 and v > 0 for k, v in replays.items()), replays  # after correction


def test_more_cond_frames_than_captured_runs_eager(monkeypatch):
    tr, cfg = graph_tracker('swap', monkeypatch)
    frames = synthetic_frames(60, h=48, w=64)
    ev = schedule(48, 64, 1, 2, 3, 4)
    tr.track(frames[0])
    tr.add_prompt(ev[0][0][1])
    for f in range(1, 60):
        res = tr.track(frames[f])
        if f in (10, 20, 30):         # three corrections -> capped at max_cond_frames=2
            tr.add_prompt(ev[3][0][1])
    assert tr.bank.cond_frames(tr._objects[1].slot) == [0, 30]   # first kept, oldest evicted
    assert res.mode == 'graph'
