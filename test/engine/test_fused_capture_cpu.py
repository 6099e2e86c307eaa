"""The graph runner's fallback when fused kernels fail at capture: sam2's modules are captured
instead, and only when those fail too is every step eager (CPU, graph stand-in)."""

import re

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
    # where in the engine it failed (a Triton error such as OutOfResources names no kernel)
    assert re.search(r'\(at \w+\.py:\d+ in \w+', reports[0]), reports
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


def test_capture_warms_up_captures_in_thread_local_error_mode_then_uploads(monkeypatch):
    """Capturer.capture runs the function once eagerly on a side stream, then captures it with
    capture_error_mode='thread_local': a graph captured while the node runs (a new
    resolution's I/O graphs, image mode's first call) must not be invalidated by the overlay
    thread's CUDA calls, which global mode forbids process-wide; then replays it once
    (``REPLAY_AT_CAPTURE``: CUDA uploads a graph on its first launch, at configure instead of
    in a frame). torch.cuda's calls are recorded by stand-ins here (no GPU)."""
    import contextlib

    from sam2_ros.engine.cuda import capture

    seen = []

    class Stream:
        def wait_stream(self, other):
            seen.append('wait_stream')

    @contextlib.contextmanager
    def graph(g, pool=None, **kw):
        seen.append(('graph', pool, kw))
        yield

    monkeypatch.setattr(torch.cuda, 'graph_pool_handle', lambda: 'pool')
    monkeypatch.setattr(torch.cuda, 'Stream', Stream)
    monkeypatch.setattr(torch.cuda, 'current_stream', lambda *a: Stream())
    monkeypatch.setattr(torch.cuda, 'stream', lambda s: contextlib.nullcontext())
    class Graph:
        def replay(self):
            seen.append('replay')

    monkeypatch.setattr(torch.cuda, 'CUDAGraph', Graph)
    monkeypatch.setattr(torch.cuda, 'graph', graph)
    calls = []
    cap = capture.Capturer().capture(lambda x: calls.append(x) or x + 1, 41)
    assert calls == [41, 41] and cap.outputs == 42 and isinstance(cap.graph, Graph)
    # warm-up, capture, then one replay: the graph's upload to the device, at capture
    assert seen[-2:] == [('graph', 'pool', {'capture_error_mode': 'thread_local'}), 'replay']
    monkeypatch.setattr(capture, 'REPLAY_AT_CAPTURE', False)      # uploaded on first use
    capture.Capturer().capture(lambda x: x + 1, 41)
    assert seen[-1] == ('graph', 'pool', {'capture_error_mode': 'thread_local'})


def test_step_outputs_of_several_replays_keep_float32_scores():
    """When a frame's objects run in several replays their outputs are gathered into the
    runner's buffers: the scores stay float32 (the bank's) even where the object pointers
    are stored in bf16, as they are when one replay runs every object."""
    from types import SimpleNamespace

    bank = SimpleNamespace(capacity=4, logits=torch.zeros(4, 1, 16, 16),
                           ptrs=torch.zeros(4, 7, 8, dtype=torch.bfloat16),
                           scores=torch.zeros(4), feats=torch.zeros(4, 7, 2, 4, 4))
    out = runner.GraphRunner.out_rows(SimpleNamespace(out=None), 3, bank)
    assert out.score.dtype == torch.float32 and out.obj_ptr.dtype == torch.bfloat16
    assert tuple(out.score.shape) == (3, 1) and tuple(out.mem_feats.shape) == (3, 2, 4, 4)


def test_failure_site_names_the_innermost_engine_frames_not_the_launcher():
    from sam2_ros.engine.errors import failure_site

    def launch():     # stands in for a kernel launch inside the engine
        raise RuntimeError('OutOfResources (test)')
    code = compile('def fused_forward(f):\n    f()\n', 'sam2_ros/engine/cuda/kernels/x.py',
                   'exec')
    scope = {}
    exec(code, scope)
    try:
        scope['fused_forward'](launch)
    except RuntimeError as exc:
        assert failure_site(exc) == 'x.py:2 in fused_forward'
    assert failure_site(RuntimeError('raised nowhere')) == ''
