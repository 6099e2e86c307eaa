"""The graph path of several cameras (sam2_ros/engine/cuda/, cameras > 1 with batch_streams),
exercised on the CPU by the CUDA-graph stand-in of test_graph_logic_cpu (a replay re-runs the
captured function on the static buffers): one [2, 3, S, S] encoder graph fed by per-camera
frame-in graphs, step graphs selecting each object's camera by a static stream_of buffer,
prompt graphs reading a static camera index, must equal the eager multi-stream runner.

Prompts and steps replay graphs, on paired and unpaired steps (an absent camera's row of the
encoder input replays its last frame, so a prompt on it after such a step still reads its own
features). Logits within 1e-4 (as test_graph_logic_cpu: batched step graphs and the encoder
at batch 2 where the eager runner encodes an unpaired frame alone round in another order).
At the end the memories a later step can read (scenarios.readable_rows: the same rows in both)
agree: pointers within 1e-4, memory features (bf16) within 1e-4 beyond one bf16 ulp, as the GPU
test measures them. batch_streams=False, the off switch, leaves graphs of one camera and steps
the cameras eagerly, bitwise the eager runner.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graph_standin import graphs_on_cpu
from reference import bf16_excess
from scenarios import readable_memory_diff, readable_rows
from test_multistream import H, W, cfg_of, frame, multi
from sam2_ros.engine import encoder, step
from sam2_ros.engine.cuda import runner
from sam2_ros.engine.cuda.buckets import FrameInKey, MaskPromptKey
from sam2_ros.engine.errors import PromptError, StepError
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')


def graph_and_eager(monkeypatch, **changes):
    """A two-camera tracker on a GraphRunner of two cameras (graphs replayed on the CPU) and
    one on the eager runner, same model and config; the fallback reasons heard."""
    graphs_on_cpu(monkeypatch)
    cfg = cfg_of(batch_buckets=(1, 2), max_cond_frames=2, **changes)
    g, e = multi(cfg), multi(cfg)
    reasons = []
    g.runner = runner.GraphRunner(g.model, cfg, reasons.append, cameras=2)
    with torch.inference_mode():
        g.runner.prepare(g.bank, g.maskmem_pos, None)
    assert not reasons, reasons
    return g, e, reasons


def disc(h, w, cx, cy, r):
    yy, xx = np.mgrid[:h, :w]
    return (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r


# per step: the frames, then the prompts added on each camera's latest frame
STEPS = [
    ((0, 0), [(0, Prompt(2, mask=disc(H, W, 40, 24, 8)))]),
    ((1, 1), [(1, Prompt(3, mask=disc(H, W, 20, 30, 7)))]),   # a mask on camera 1's frame
    ((2, 2), [(1, Prompt(1, points=np.array([[30.0, 20.0]]), labels=np.array([1])))]),
    ((3, 3), []),
    ((None, 4), [(0, Prompt(1, points=np.array([[12.0, 14.0]]), labels=np.array([0])))]),
    ((4, None), [(1, Prompt(3, box=(35, 5, 60, 30)))]),      # camera 1 absent: its own frame
    ((5, 5), []), ((6, 6), []), ((None, 7), []), ((7, 8), []),
]


def drive(t, steps=STEPS):
    """Run the scenario; [per step: per camera None or [(id, logits, mask, score)]]."""
    t.stream(0).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    t.stream(1).queue_prompt(Prompt(1, box=(20, 8, 50, 40)))
    t.stream(1).queue_prompt(Prompt(2, points=np.array([[12.0, 30.0]]), labels=np.array([1])))
    out = []
    for idx, prompts in steps:
        res = t.track([None if i is None else frame(c, i) for c, i in enumerate(idx)])
        assert not any(res.errors), res.errors
        for cam, p in prompts:
            t.stream(cam).add_prompt(p)
        out.append([None if r is None else
                     [(o.obj_id, o.low_res_logits.clone(), o.mask.copy(), o.score)
                      for o in r.objects] for r in res.results])
    return out


def compare(a, b, exact: bool):
    worst = 0.0
    for step_a, step_b in zip(a, b):
        for ra, rb in zip(step_a, step_b):
            assert (ra is None) == (rb is None)
            for (ia, la, ma, sa), (ib, lb, mb, sb) in zip(ra or [], rb or []):
                assert ia == ib
                if exact:
                    assert torch.equal(la, lb) and (ma == mb).all() and sa == sb
                worst = max(worst, float((la - lb).abs().max()))
                assert (ma == mb).mean() > 0.999 and sa == pytest.approx(sb, abs=1e-4)
            assert [o[0] for o in ra or []] == [o[0] for o in rb or []]
    assert worst <= 1e-4, worst


@pytest.mark.parametrize('mode', ['batched', 'swap'])
def test_graphs_of_two_cameras_equal_the_eager_runner(monkeypatch, mode):
    g, e, reasons = graph_and_eager(monkeypatch, graph_mode=mode)
    r = g.runner
    assert r.cameras == 2 and r.graphs.encoder.inputs.shape[0] == 2
    assert all(c.inputs.stream_of is not None for c in r.steps.values())
    assert r.graphs.prompts.camera is not None
    compare(drive(g), drive(e), exact=False)
    assert not reasons, reasons
    ptr, feat = readable_memory_diff(g, e)
    assert ptr <= 1e-4 and feat <= 1e-4, (ptr, feat)
    st = g.stats
    # every tracking step and every prompt replayed a graph (padded graphs after prompts)
    assert st['graph_steps'] > 30 and st['eager_steps'] == 0, dict(st)
    assert st['prompt_graph_steps'] == st['prompt_steps'] > 0, dict(st)
    assert r.graphs.prompts.graphs[MaskPromptKey()].graph.replays == 2   # camera 0 and 1
    # the three corrections of tracked objects (camera 1's click at step 2, camera 0's click
    # and camera 1's box each on its frame kept through the camera's absent step) started from
    # the features their track steps kept
    assert r.graphs.prompts.reused == 3
    assert r.graphs.encoder.graph.replays == len(STEPS)      # one encode per step
    # one frame-in graph per camera, each writing its own row (8 / 9 frames of its camera)
    assert r.io[FrameInKey(H, W, 0)].graph.replays == 8
    assert r.io[FrameInKey(H, W, 1)].graph.replays == 9
    if mode == 'batched':       # objects of both cameras stacked in one replay
        assert any(k.batch == 2 and c.graph.replays for k, c in r.steps.items())
    assert st['graph_steps'] == e.stats['eager_steps']


def test_batch_streams_off_steps_the_cameras_eagerly(monkeypatch):
    """The off switch: graphs of one camera (the encoder graph's input [1, 3, S, S]), each
    camera encoded and stepped by the eager runner the graph runner holds, bitwise the eager
    runner (the graphs untouched)."""
    g, e, reasons = graph_and_eager(monkeypatch, batch_streams=False)
    r = g.runner
    assert r.cameras == 1 and r.graphs.encoder.inputs.shape[0] == 1
    compare(drive(g), drive(e), exact=True)
    assert not reasons and g.stats['graph_steps'] == 0 and g.stats['eager_steps'] > 0
    assert r.graphs.encoder.graph.replays == 0


def test_readable_rows_are_the_entries_a_step_can_read():
    """What the memory comparison reads: every row whose bookkeeping holds a frame still in
    reach, none that is EMPTY (a correction at the latest frame drops that frame's ring entry:
    stale data, never read again) and nothing of a removed object."""
    e = multi(cfg_of(max_cond_frames=2))
    drive(e)
    e.stream(1).add_prompt(Prompt(1, points=np.array([[30.0, 20.0]]), labels=np.array([1])))
    e.stream(0).remove_object(2)
    b, k = e.bank, e.bank.max_cond
    n_f, n_p = b.feats.shape[1], b.ptrs.shape[1]
    rows = readable_rows(e)
    assert sorted(rows) == [(0, 1), (1, 1), (1, 2), (1, 3)]
    for (cam, obj_id), (f_rows, p_rows) in rows.items():
        s = e.streams[cam]
        slot, f = s.objects[obj_id].slot, s.frame
        ring = [t for t in b.ring_frame[slot] if t != -1 and f - t < b.num_maskmem]
        cond = [t for t in b.cond_frame[slot] if t != -1]
        assert all(r // n_f == slot for r in f_rows) and all(r // n_p == slot for r in p_rows)
        held = [int(b.cond_frame[slot, r % n_f]) if r % n_f < k else
                int(b.ring_frame[slot, r % n_f - k]) for r in f_rows]
        assert sorted(held) == sorted(cond + ring) and -1 not in held
    # the correction made camera 1's frame 8 conditioning for object 1: its ring row is out
    slot = e.streams[1].objects[1].slot
    assert e.streams[1].frame == 8 and 8 in b.cond_frame[slot]
    assert 8 not in b.ring_frame[slot]
    assert slot * n_f + k + 8 % b.ring_frame.shape[1] not in rows[(1, 1)][0]


def test_binarized_prompt_memory_is_discontinuous():
    """Why the GPU test turns sam2's binarize_mask_from_pts_for_mem_enc off: a clicked frame's
    memory is encoded from its mask binarized at 0, so logits 2e-6 apart (rounding) give
    memories far apart; from the sigmoid (tracked frames, or binarization off) they stay
    within rounding (one bf16 ulp of the stored memory)."""
    model = multi(cfg_of()).model
    with torch.inference_mode():
        feats = encoder.encode_image(model, torch.zeros(1, 3, 64, 64))
        score, hi = torch.ones(1, 1), torch.zeros(1, 1, 64, 64)
        lo = [torch.full((1, 1, 16, 16), sign * 1e-6) for sign in (1, -1)]
        binarized, sigmoid = ([step.encode_memory(model, feats, x, hi, score, from_points=p)
                               for x in lo] for p in (True, False))
    assert float((binarized[0].float() - binarized[1].float()).abs().max()) > 0.1
    assert bf16_excess(*sigmoid, 0.0) <= 1e-4


def fail_next_encode(monkeypatch, g):
    """The encoder graph's next replay raises (after the frame-in graphs loaded its rows)."""
    graph = g.runner.graphs.encoder.graph
    real = graph.replay

    def boom():
        monkeypatch.setattr(graph, 'replay', real)
        raise torch.cuda.OutOfMemoryError('injected: CUDA out of memory')
    monkeypatch.setattr(graph, 'replay', boom)


CLICK = Prompt(1, points=np.array([[12.0, 14.0]]), labels=np.array([0]))


def test_a_failed_encode_refuses_prompts_on_the_features_it_overwrote(monkeypatch):
    """The encoder graph's static outputs are every camera's latest features. An encode that
    fails after loading camera 0's row leaves that row holding a frame never counted, and a
    later step without camera 0 re-encodes it into camera 0's features: a prompt on camera 0's
    latest frame would read another frame's. Such prompts are refused with a StepError until
    camera 0's next frame; after it, prompts equal the eager tracker's, which never saw the
    failed step."""
    g, e, reasons = graph_and_eager(monkeypatch)
    for t in (g, e):
        t.stream(0).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
        t.track([frame(0, 0), frame(1, 0)])
        t.track([frame(0, 1), frame(1, 1)])
    fail_next_encode(monkeypatch, g)
    res = g.track([frame(0, 50), frame(1, 50)])     # rows loaded, then the replay fails
    assert all(isinstance(err, StepError) for err in res.errors), res.errors
    for t in (g, e):
        res = t.track([None, frame(1, 2)])           # re-encodes camera 0's stale row
        assert res.errors == [None, None], res.errors
    with pytest.raises(StepError, match='features of frame 1 were lost'):
        g.stream(0).add_prompt(CLICK)
    with pytest.raises(StepError, match='lost'):
        g.stream(0).defer_prompt(CLICK)
    with pytest.raises(PromptError):     # a bad prompt gets its own error first, as add_prompt
        g.stream(0).defer_prompt(Prompt(1, points=np.array([[1e6, 1.0]]), labels=np.array([1])))
    for t in (g, e):                    # camera 1's latest frame was encoded after the failure
        t.stream(1).add_prompt(Prompt(2, box=(20, 8, 50, 40)))
        t.track([frame(0, 2), None])
    got, want = (t.stream(0).add_prompt(CLICK).objects[0].low_res_logits for t in (g, e))
    assert float((got - want).abs().max()) <= 1e-4
    assert not reasons, reasons


def test_prompts_deferred_on_features_a_failed_encode_overwrote_are_dropped(monkeypatch):
    """A camera absent from the failed step keeps its deferred prompt until its next frame,
    when it would run on the overwritten features: that camera's frame fails with the reason
    (the prompt dropped, nothing else); the other camera is tracked, and so is camera 0 next."""
    g, _, reasons = graph_and_eager(monkeypatch)
    g.stream(0).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    g.track([frame(0, 0), frame(1, 0)])
    g.stream(0).defer_prompt(CLICK)
    fail_next_encode(monkeypatch, g)
    assert isinstance(g.track([None, frame(1, 1)]).errors[1], StepError)
    res = g.track([frame(0, 1), frame(1, 1)])
    assert isinstance(res.errors[0], StepError) and 'dropped: objects [1]' in str(res.errors[0])
    assert res.errors[1] is None and res.results[1].frame_index == 1
    assert not g.streams[0].deferred and g.streams[0].frame == 0
    res = g.track([frame(0, 1), frame(1, 2)])
    assert res.errors == [None, None] and res.results[0].frame_index == 1
    assert [o.obj_id for o in res.results[0].objects] == [1]
    assert not reasons, reasons


def test_a_failed_eager_encode_keeps_the_latest_features(monkeypatch):
    """The eager runner's encodes return new tensors: after a failed one, a prompt on the
    latest frame still reads that frame's features."""
    t = multi(cfg_of())
    t.stream(0).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    t.track([frame(0, 0), frame(1, 0)])
    assert not t.runner.encodes_in_place()

    def boom(*a, **k):
        raise torch.cuda.OutOfMemoryError('injected: CUDA out of memory')
    real = t.runner.encode_streams
    monkeypatch.setattr(t.runner, 'encode_streams', boom)
    assert all(isinstance(err, StepError) for err in t.track([frame(0, 1), frame(1, 1)]).errors)
    monkeypatch.setattr(t.runner, 'encode_streams', real)
    res = t.stream(0).add_prompt(Prompt(1, points=np.array([[12.0, 14.0]]), labels=np.array([1])))
    assert res.frame_index == 0 and res.objects[0].obj_id == 1
