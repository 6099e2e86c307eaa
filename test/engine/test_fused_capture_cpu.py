"""The graph runner's fallback when fused kernels fail at capture: sam2's modules are captured
instead, and only when those fail too is every step eager (CPU, graph stand-in)."""

import pytest
import torch

from conftest import LEAN, tracker_on_shared_model
from graph_standin import fake_capture_same_outputs, graphs_on_cpu
from scenarios import schedule, synthetic_frames
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.cuda import runner

pytestmark = pytest.mark.usefixtures('one_thread')


class BrokenFusedCopy(torch.nn.Module):
    """Stands in for a fused copy of the model whose kernel fails to build or run."""

    def __init__(self, model):
        super().__init__()
        self.image_size = model.image_size

    def forward_image(self, image):
        raise RuntimeError('triton compile failed (test)')


def prepared(monkeypatch, capture_fn):
    """A tracker whose graph runner captured with a broken fused copy; (tracker, reports)."""
    monkeypatch.setattr(runner, 'fused_copy', lambda model, cfg: BrokenFusedCopy(model))
    graphs_on_cpu(monkeypatch, capture_fn)
    cfg = TrackerConfig(model_size='tiny', image_size=64, device='cpu', precision='fp32',
                        random_weights=True, use_cuda_graphs=False, batch_buckets=(1,),
                        max_cond_frames=1, steady_attention='sam2',
                        extra_hydra_overrides=list(LEAN))
    tr = tracker_on_shared_model(cfg)
    reports = []
    tr.runner = runner.GraphRunner(tr.model, cfg, reports.append)
    with torch.inference_mode():
        tr.runner.prepare(tr.bank, tr.maskmem_pos, None)
    return tr, reports


def test_failed_fused_capture_captures_sam2s_modules(monkeypatch):
    """A fused kernel that fails at capture costs the fused kernels only: sam2's modules are
    captured instead (reported once), and frames still replay graphs."""
    tr, reports = prepared(monkeypatch, fake_capture_same_outputs)
    assert len(reports) == 1 and 'fused kernels failed' in reports[0], reports
    assert tr.runner.graphs is not None and tr.runner.graphs.model is tr.model
    frames = synthetic_frames(3, h=48, w=64)
    tr.track(frames[0])
    tr.add_prompt(schedule(48, 64, 1, 2, 3, 4)[0][0][1])
    assert tr.track(frames[1]).mode == 'graph'


def test_capture_failing_with_and_without_fused_kernels_reports_once(monkeypatch):
    """When sam2's modules fail to capture too, the runner is eager throughout and says so in
    one report naming both failures."""
    def failing(self, fn, inputs):
        raise RuntimeError('capture failed (test)')

    tr, reports = prepared(monkeypatch, failing)
    assert len(reports) == 1 and 'eager throughout' in reports[0], reports
    assert 'with fused kernels' in reports[0] and tr.runner.graphs is None
