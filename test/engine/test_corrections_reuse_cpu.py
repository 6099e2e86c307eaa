"""A correction of the latest tracked frame from the conditioned features its track step kept
(``TrackerConfig.corrections_reuse_attention``), on the CPU stand-in for CUDA graphs
(graph_standin: a replay re-runs the captured function on the static buffers).

The correction reads the memories that frame's tracking step read, so memory attention gives
the same features: the reused graph (``ReusedCorrectionKey``) runs only the SAM heads with the
click and the memory encoder, and its results equal the eager runner's (which re-runs memory
attention, as sam2 does) and the graphs' with the switch off. Where the object's memories
changed since its tracking step (a second correction on that frame, an eager step, a reset)
the correction re-runs memory attention instead.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import LEAN, tracker_on_shared_model
from graph_standin import graphs_on_cpu
from scenarios import synthetic_frames
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.cuda import runner
from sam2_ros.engine.cuda.buckets import CorrectionKey, ReusedCorrectionKey
from sam2_ros.engine.memory import EMPTY
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')
H, W = 48, 64
TOL = 1e-4      # fp32 on the CPU: attention over the same memories, another batch layout


def config(reuse: bool, **kw) -> TrackerConfig:
    base = dict(model_size='tiny', image_size=64, device='cpu', precision='fp32',
                random_weights=True, use_cuda_graphs=False, graph_mode='batched',
                batch_buckets=(1, 2), max_cond_frames=2, corrections_reuse_attention=reuse,
                extra_hydra_overrides=list(LEAN))
    return TrackerConfig(**{**base, **kw})


def tracker(monkeypatch, reuse: bool = True, graphs: bool = True, **kw):
    """A tracker on the stand-in graphs (or the eager runner with graphs=False)."""
    cfg = config(reuse, **kw)
    tr = tracker_on_shared_model(cfg)
    if graphs:
        graphs_on_cpu(monkeypatch)
        reasons = []
        tr.runner = runner.GraphRunner(tr.model, cfg, reasons.append)
        with torch.inference_mode():
            tr.runner.prepare(tr.bank, tr.maskmem_pos, None)
        assert not reasons, reasons
    return tr


def replays(tr, kind) -> int:
    """Replays of the prompt graphs of ``kind`` (the stand-in counts them); the reused ones
    must be what ``PromptGraphs.reused`` counts (the GPU tests read that)."""
    n = sum(c.graph.replays for k, c in tr.runner.graphs.prompts.graphs.items()
            if isinstance(k, kind))
    if kind is ReusedCorrectionKey:
        assert n == tr.runner.graphs.prompts.reused
    return n


def click(obj_id: int, x: float, y: float, neg: bool = False) -> Prompt:
    pts = [[x, y]] + ([[W - x, H - y]] if neg else [])
    return Prompt(obj_id, points=np.array(pts), labels=np.array([1] + [0] * neg))


def run(tr, script):
    """Track 16 frames: two objects (a click, a box) on frame 0, then ``script[f]``'s
    calls after frame f's track; the logits of every result, in order."""
    out = []
    for f, fr in enumerate(synthetic_frames(16, h=H, w=W)):
        out.append([o.low_res_logits.clone() for o in tr.track(fr).objects])
        if f == 0:
            tr.add_prompt(click(1, W * 0.15, H * 0.4))
            tr.add_prompt(Prompt(2, box=(W * 0.6, H * 0.15, W * 0.9, H * 0.45)))
        for call in script.get(f, ()):
            res = call(tr)
            if res is not None:
                out.append([o.low_res_logits.clone() for o in res.objects])
    return out


def worst(a, b) -> float:
    assert [len(x) for x in a] == [len(x) for x in b]
    return max(float((x - y).abs().max()) for xs, ys in zip(a, b) for x, y in zip(xs, ys))


SCRIPT = {
    5: [lambda t: t.add_prompt(click(1, W * 0.3, H * 0.4))],
    8: [lambda t: t.add_prompt(click(2, W * 0.7, H * 0.3, neg=True)),
        lambda t: t.add_prompt(click(2, W * 0.75, H * 0.35))],     # twice on one frame
    11: [lambda t: t.defer_prompt(click(1, W * 0.2, H * 0.5))],
}


def test_corrections_reuse_the_tracked_frames_attention_and_equal_eager(monkeypatch):
    reused = tracker(monkeypatch, reuse=True)
    off = tracker(monkeypatch, reuse=False)
    eager = tracker(monkeypatch, graphs=False)
    got, want_off, want = run(reused, SCRIPT), run(off, SCRIPT), run(eager, SCRIPT)
    assert worst(got, want) <= TOL and worst(got, want_off) <= TOL
    # frames 5 and 11 (deferred) and both clicks of frame 8 start from the kept features: a
    # second click reads the memories as tracked (sam2: not the first click's), the same
    assert replays(reused, ReusedCorrectionKey) == 4
    assert replays(reused, CorrectionKey) == 0
    assert replays(off, CorrectionKey) == 4 and ReusedCorrectionKey(1) not in \
        off.runner.graphs.prompts.graphs
    for t in (reused, off):
        assert t.stats['prompt_graph_steps'] == t.stats['prompt_steps'] == 6, dict(t.stats)
        assert t.stats['eager_steps'] == 0 and t.stats['fallbacks'] == 0, dict(t.stats)
    assert off.bank.conditioned is None        # the switch off keeps nothing


def test_the_kept_features_are_the_frames_memory_attention(monkeypatch):
    """What the track-step graph keeps for each object is memory attention's output of that
    frame: the eager step's pix_feat on the same memories."""
    from sam2_ros.engine import step
    tr = tracker(monkeypatch)
    run(tr, {})
    bank, f = tr.bank, tr.frame_index
    with torch.inference_mode():
        for obj in tr.objects.values():
            sel = bank.select(obj.slot, f)
            assert bank.conditioned_frame[obj.slot] == f and not bank.holds_conditioned(
                bank.select(obj.slot, f + 1))
            mem = bank.gather([sel])
            pix = step.condition_on_memory(tr.model, tr.handle.stream.step_features, mem,
                                           tr.maskmem_pos)
            assert torch.allclose(bank.conditioned[obj.slot], pix[0], atol=TOL)


def test_an_eager_step_or_a_reset_keeps_no_features(monkeypatch):
    """A frame whose step ran eagerly kept nothing for it: a correction there re-runs memory
    attention (the kept features are of an older frame); a reset forgets them."""
    tr = tracker(monkeypatch)
    frames = synthetic_frames(6, h=H, w=W)
    tr.track(frames[0])
    tr.add_prompt(click(1, W * 0.15, H * 0.4))
    for fr in frames[1:4]:
        tr.track(fr)
    slot = tr.objects[1].slot
    assert tr.bank.conditioned_frame[slot] == 3
    steps = tr.runner.graphs.steps
    with monkeypatch.context() as m:     # no bucket for this frame's step: it runs eagerly
        m.setattr(steps, 'bucket_of', lambda sel: None)
        tr.track(frames[4])
    assert tr.stats['eager_steps'] == 1
    assert tr.bank.conditioned_frame[slot] == 3 and tr.frame_index == 4
    tr.add_prompt(click(1, W * 0.3, H * 0.4))
    assert replays(tr, ReusedCorrectionKey) == 0 and replays(tr, CorrectionKey) == 1
    tr.track(frames[5])
    assert tr.bank.conditioned_frame[slot] == 5
    tr.reset()
    assert (tr.bank.conditioned_frame == EMPTY).all()


def test_a_reused_correction_on_the_fused_copy(monkeypatch):
    """The graphs' fused copy (every group; Triton's interpreter on the CPU): the correction
    from the kept features replays the reused graph on the fused heads and equals the eager
    runner on sam2's modules (fp32, the fused stream's bound)."""
    pytest.importorskip('triton')
    from sam2_ros.engine.config import FUSED_GROUPS
    from sam2_ros.engine.cuda.kernels import fused
    monkeypatch.setattr(runner, 'fused_copy',
                        lambda model, cfg: fused.fused_model(model, FUSED_GROUPS))
    small = dict(graph_mode='swap', batch_buckets=(1,), max_cond_frames=1,
                 prompt_point_buckets=(1,))
    tr = tracker(monkeypatch, **small)
    assert tr.runner.graphs.prompts.model is tr.runner.graphs.model is not tr.model
    eager = tracker(monkeypatch, graphs=False, **small)
    got, want = [], []
    for f, fr in enumerate(synthetic_frames(5, h=H, w=W)):
        for t, out in ((tr, got), (eager, want)):
            out.append([o.low_res_logits.clone() for o in t.track(fr).objects])
            if f == 0:
                t.add_prompt(click(1, W * 0.15, H * 0.4))
            if f == 2:
                out.append([o.low_res_logits.clone()
                            for o in t.add_prompt(click(1, W * 0.3, H * 0.4)).objects])
    assert replays(tr, ReusedCorrectionKey) == 1 and tr.stats['eager_steps'] == 0
    assert worst(got, want) <= TOL


def test_without_prompt_graphs_nothing_is_kept(monkeypatch):
    """prompt_graphs off: corrections run eagerly (re-running attention), so the step graphs
    keep no features (no kernel, no buffer)."""
    tr = tracker(monkeypatch, prompt_graphs=False)
    run(tr, {5: [lambda t: t.add_prompt(click(1, W * 0.3, H * 0.4))]})
    assert tr.bank.conditioned is None and not tr.runner.graphs.steps.keep
    assert tr.stats['prompt_eager_steps'] == tr.stats['prompt_steps'] == 3, dict(tr.stats)


def test_a_click_on_a_queued_objects_first_frame_runs_attention_on_graphs(monkeypatch):
    """An object a queued prompt started inside frame 6's track had no tracking step there:
    a click on frame 6 afterwards is a correction that runs memory attention (nothing kept to
    reuse), on the prompt graphs as eagerly."""
    script = {5: [lambda t: t.queue_prompt(Prompt(3, box=(W * 0.3, H * 0.6, W * 0.5, H * 0.9)))],
              6: [lambda t: t.add_prompt(click(3, W * 0.4, H * 0.75))]}
    graphs, eager = tracker(monkeypatch), tracker(monkeypatch, graphs=False)
    got, want = run(graphs, script), run(eager, script)
    assert worst(got, want) <= TOL
    assert replays(graphs, ReusedCorrectionKey) == 0 and replays(graphs, CorrectionKey) == 1
    assert graphs.stats['eager_steps'] == 0 and graphs.stats['fallbacks'] == 0
