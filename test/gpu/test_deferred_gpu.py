"""Deferred prompts on real CUDA graphs (marked gpu; the CPU stand-in is
test/engine/test_deferred_graphs_cpu.py): defer_prompt then track equals add_prompt then track,
the deferred prompted steps replaying the prompt graphs on the previous frame's features before
the next frame-in and encoder graphs overwrite them. Both sides replay the same graphs on the
same inputs, so the expected difference is 0; the tolerance only absorbs a nondeterministic
kernel, far below what a step on the wrong frame gives (logits differing by whole units). One
camera (swap and batched, fp32 and bf16) and two cameras; every prompt a prompt graph, no eager
step, no fallback."""

import numpy as np
import pytest
import torch

from gpu_common import record_equivalence, tiny_cuda_cfg
from scenarios import schedule, synthetic_frames
from sam2_ros.engine.model import build_model
from sam2_ros.engine.multistream import MultiStreamTracker
from sam2_ros.engine.tracker import StreamingTracker
from sam2_ros.engine.types import Prompt

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]
H, W, N = 360, 640, 60
TOL = 1e-4


def events():
    """After frame f: prompts on it (a box, a mask, corrections of objects 1 and 2)."""
    ev = schedule(H, W, add2=10, add3=20, fix=30, remove=10**9)
    ev[45] = [('add', Prompt(2, points=np.array([[W * 0.75, H * 0.3]]), labels=np.array([0])))]
    return {f: [p for kind, p in e if kind == 'add'] for f, e in ev.items()
            if any(kind == 'add' for kind, _ in e)}


def worst(a, b) -> float:
    assert [o.obj_id for o in a.objects] == [o.obj_id for o in b.objects]
    return max([float((x.low_res_logits - y.low_res_logits).abs().max())
                for x, y in zip(a.objects, b.objects)], default=0.0)


def check_stats(t):
    st = dict(t.stats)
    assert st.get('eager_steps', 0) == 0 and st.get('fallbacks', 0) == 0, \
        (st, dict(t.fallback_reasons))
    assert st.get('prompt_graph_steps', 0) == st['prompt_steps'] > 0, st


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
@pytest.mark.parametrize('graph_mode', ['swap', 'batched'])
def test_deferred_equals_immediate_on_graphs(precision, graph_mode):
    cfg = tiny_cuda_cfg(precision=precision, graph_mode=graph_mode)
    model = build_model(cfg)
    d, r = StreamingTracker(cfg, model=model), StreamingTracker(cfg, model=model)
    ev, frames, w = events(), synthetic_frames(N, h=H, w=W), 0.0
    with torch.inference_mode():
        for f, fr in enumerate(frames):
            w = max(w, worst(d.track(fr), r.track(fr)))
            for p in ev.get(f, []):
                (d.add_prompt if f == 0 else d.defer_prompt)(p)
                r.add_prompt(p)
    record_equivalence(f'deferred_vs_immediate_{graph_mode}_{precision}', w)
    assert w <= TOL, w
    for t in (d, r):
        check_stats(t)
    assert d.stats['deferred_prompts'] == len(ev) - 1
    assert d.stats['prompt_steps'] == r.stats['prompt_steps']


def test_two_cameras_deferred_equals_immediate_on_graphs():
    cfg = tiny_cuda_cfg(precision='bf16', graph_mode='batched')
    model = build_model(cfg)
    d, r = (MultiStreamTracker(cfg, cameras=2, model=model) for _ in range(2))
    ev, w = events(), 0.0
    frames = [synthetic_frames(N, h=H, w=W, seed=s) for s in (0, 1)]
    with torch.inference_mode():
        for f in range(N):
            # camera 1 misses every 7th step: its deferred prompts wait for its next frame
            step = [frames[0][f], None if f % 7 == 6 else frames[1][f]]
            a, b = d.track(step), r.track(step)
            for c in range(2):
                assert (a.results[c] is None) == (b.results[c] is None)
                if a.results[c] is not None:
                    w = max(w, worst(a.results[c], b.results[c]))
            for p in ev.get(f, []):
                for c in range(2):
                    (d.stream(c).add_prompt if f == 0 else d.stream(c).defer_prompt)(p)
                    r.stream(c).add_prompt(p)
    record_equivalence('deferred_vs_immediate_two_cameras_bf16', w)
    assert w <= TOL, w
    for t in (d, r):
        check_stats(t)


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_reused_corrections_equal_corrections_rerunning_attention(precision):
    """corrections_reuse_attention on against off (the correction re-runs memory attention,
    as sam2 does), immediate and deferred corrections: the same logits within the graphs'
    tolerance against eager (test_graphs_gpu.TOLS: the kept features come from the batched
    track step, the re-run from a batch-1 padded one), and every correction on a tracked
    frame replayed the reused graph (``PromptGraphs.reused``: a CUDA graph counts no
    replays)."""
    tol = {'fp32': 1e-3, 'bf16': 0.5}[precision]
    cfgs = [tiny_cuda_cfg(precision=precision, graph_mode='batched',
                          corrections_reuse_attention=on) for on in (True, False)]
    model = build_model(cfgs[0])
    on, off = (StreamingTracker(c, model=model) for c in cfgs)
    ev, frames, w = events(), synthetic_frames(N, h=H, w=W), 0.0
    with torch.inference_mode():
        for f, fr in enumerate(frames):
            w = max(w, worst(on.track(fr), off.track(fr)))
            for p in ev.get(f, []):
                for t in (on, off):
                    (t.add_prompt if f % 2 == 0 else t.defer_prompt)(p)
    record_equivalence(f'reused_vs_rerun_corrections_{precision}', w)
    assert w <= tol, w
    for t in (on, off):
        check_stats(t)
    corrections = sum(1 for f, ps in ev.items() if f >= 30 for _ in ps)
    assert on.runner.graphs.prompts.reused == corrections > 0
    assert off.runner.graphs.prompts.reused == 0
    # the same prompt graph steps on both: off, the corrections replayed CorrectionKey graphs
    assert on.stats['prompt_graph_steps'] == off.stats['prompt_graph_steps']


@pytest.mark.parametrize('cameras', [1, 2])
def test_deferred_beside_the_encoder_equals_before_it(cameras):
    """deferred_beside_encoder on (the deferred steps queued after the next frame's encode, on
    a second CUDA stream, from the prompt graphs' copy of their frame's features) against off
    (before the encode, one stream): the same graphs on the same inputs, so the same logits
    (TOL); a deferred step that raced the encode would read the new frame's features."""
    cfgs = [tiny_cuda_cfg(precision='bf16', graph_mode='batched', deferred_beside_encoder=on)
            for on in (True, False)]
    model = build_model(cfgs[0])
    on, off = (MultiStreamTracker(c, cameras=cameras, model=model) for c in cfgs)
    ev, w = events(), 0.0
    frames = [synthetic_frames(N, h=H, w=W, seed=s) for s in range(cameras)]
    with torch.inference_mode():
        for f in range(N):
            step = [frames[c][f] for c in range(cameras)]
            a, b = on.track(step), off.track(step)
            for c in range(cameras):
                w = max(w, worst(a.results[c], b.results[c]))
            for p in ev.get(f, []):
                for t in (on, off):
                    for c in range(cameras):
                        (t.stream(c).add_prompt if f == 0 else t.stream(c).defer_prompt)(p)
    record_equivalence(f'deferred_beside_vs_before_{cameras}cam_bf16', w)
    assert w <= TOL, w
    for t in (on, off):
        check_stats(t)
    kept = on.runner.graphs.kept
    assert kept.side is not None and kept.copies >= len(ev) - 1
    assert on.stats['deferred_prompts'] == off.stats['deferred_prompts'] > 0
