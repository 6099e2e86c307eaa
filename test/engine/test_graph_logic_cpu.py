"""The CUDA-graph runner's bookkeeping, exercised on the CPU (CI has no GPU).

Capture is replaced by a stand-in whose replay re-runs the captured function on the static
input buffers and writes the static outputs in place, exactly the contract of a CUDA graph.
Everything else is the real runner: bucket choice, gathering each object's memories into the
static buffers (swap), stacking and padding objects (batched), copy-out, eager fallback for
warm-up frames. Results must equal the eager runner's.
"""

from types import SimpleNamespace

import pytest
import torch

from conftest import LEAN, shared_model, tracker_on_shared_model
from graph_standin import fake_capture_same_outputs, graphs_on_cpu
from scenarios import schedule, synthetic_frames
from sam2_ros.engine.cuda import capture, io_graphs, runner
from sam2_ros.engine.cuda.buckets import FrameInKey, MasksOutKey, StepKey
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.tracker import StreamingTracker
from sam2_ros.engine.types import FrameResult, ObjectResult, Prompt

# image size 64, the smallest sam2 builds at (4x4 memory maps): the bookkeeping under test does
# not depend on the size, and 64 runs this module in half the time of 128. One intra-op thread
# (conftest.one_thread): the ops are tiny, and two OpenMP threads on a loaded 2-core machine
# spin against other processes
pytestmark = pytest.mark.usefixtures('one_thread')


def graph_tracker(mode, monkeypatch, padded=True, steady='sam2', merge=True):
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


# The graph-only settings: the eager runner reads none of them (engine/eager.py), so one
# eager run of the stream below is the reference of every parametrization.
GRAPH_FIELDS = ('graph_mode', 'padded_graphs', 'steady_attention', 'merge_step_buckets')
STREAM_FRAMES = 40


def stream_events():
    return schedule(48, 64, add2=3, add3=5, fix=22, remove=30)


@pytest.fixture(scope='module')
def eager_stream():
    """The eager runner's results on the stream of test_graph_runner_logic_equals_eager, run
    once for the module: (its config, [per frame: (objects as (id, logits, mask, score),
    label mask)])."""
    cfg = TrackerConfig(model_size='tiny', image_size=64, device='cpu', precision='fp32',
                        random_weights=True, use_cuda_graphs=False, batch_buckets=(1, 2),
                        max_cond_frames=2, extra_hydra_overrides=list(LEAN))
    ref = tracker_on_shared_model(cfg)
    events, out = stream_events(), []
    for f, fr in enumerate(synthetic_frames(STREAM_FRAMES, h=48, w=64)):
        b = ref.track(fr)
        out.append(([SimpleNamespace(obj_id=o.obj_id, low_res_logits=o.low_res_logits.clone(),
                                     mask=o.mask.copy(), score=o.score) for o in b.objects],
                     b.label_mask().copy()))
        for kind, p in events.get(f, []):
            ref.remove_object(p) if kind == 'remove' else ref.add_prompt(p)
    return cfg, out


def step_replays(tr) -> int:
    graphs = {id(c): c for c in (*tr.runner.steps.values(), *tr.runner.padded_steps.values())}
    return sum(c.graph.replays for c in graphs.values())


@pytest.mark.parametrize('mode,padded,steady,merge', [('swap', True, 'flash', True),
                                                      ('batched', True, 'sam2', True),
                                                      ('batched', True, 'sam2', False),
                                                      ('batched', True, 'split', False),
                                                      ('swap', False, 'sam2', True)])
def test_graph_runner_logic_equals_eager(mode, padded, steady, merge, monkeypatch,
                                         eager_stream):
    tr, cfg = graph_tracker(mode, monkeypatch, padded, steady, merge)
    # steady_attention='flash' / 'split': every steady-state bucket replays that graph
    assert set(tr.runner.steady_choice.values()) == (set() if steady == 'sam2' else {steady})
    assert len(tr.runner.steady_choice) == (0 if steady == 'sam2' else len(tr.runner.steps))
    assert not padded or all(
        (tr.runner.steps[k] is tr.runner.padded_steps[k]) == (steady == 'flash')
        for k in tr.runner.steps)
    ref_cfg, ref_frames = eager_stream     # the eager run of this config (graph fields aside)
    assert tr.model is shared_model(ref_cfg.image_size, overrides=LEAN)
    assert ref_cfg.replace(**{k: getattr(cfg, k) for k in GRAPH_FIELDS}) == \
        cfg.replace(use_cuda_graphs=False)
    frames = synthetic_frames(STREAM_FRAMES, h=48, w=64)
    events = stream_events()
    worst = 0.0
    mixed = 0           # frames whose objects were in different buckets
    for f, fr in enumerate(frames):
        stream = tr.handle.stream
        sels = [tr.bank.select(o.slot, stream.frame + 1) for o in stream.objects.values()]
        buckets_now = {tr.runner.graphs.steps.bucket_of(sel) for sel in sels}
        before = step_replays(tr)
        a = tr.track(fr)
        if mode == 'batched' and merge and len(sels) > 0 and None not in buckets_now:
            # merge_step_buckets: objects of different buckets share one padded replay (two
            # with more objects than the largest batch bucket, 2)
            assert step_replays(tr) - before == -(-len(sels) // 2), (f, buckets_now)
            mixed += len(buckets_now) > 1
            assert tr.stats['buckets_merged_steps'] == mixed        # untimed: all merged
        b_objects, b_label = ref_frames[f]
        assert [o.obj_id for o in a.objects] == [o.obj_id for o in b_objects]
        for oa, ob in zip(a.objects, b_objects):
            assert oa.obj_id == ob.obj_id
            worst = max(worst, float((oa.low_res_logits - ob.low_res_logits).abs().max()))
            # masks and stats came out of the mask graph: equal to the eager postprocess
            assert oa.mask.shape == (48, 64) and (oa.mask == ob.mask).mean() > 0.999
            assert oa.score == pytest.approx(ob.score, abs=1e-4)
        # the label mask came out of the mask graph too: the one the host builds from the
        # same masks, and (nearly) the eager runner's
        assert (a.label_mask() == FrameResult(0, 48, 64, a.objects).label_mask()).all()
        assert (a.label_mask() == b_label).mean() > 0.999
        for kind, p in events.get(f, []):
            tr.remove_object(p) if kind == 'remove' else tr.add_prompt(p)
    assert worst <= 1e-4, worst
    if padded:   # every tracking step and prompt replayed a graph, after prompts included
        assert tr.stats['graph_steps'] >= 60 and tr.stats['eager_steps'] == 0, dict(tr.stats)
        assert tr.stats['prompt_graph_steps'] == tr.stats['prompt_steps'] > 0, dict(tr.stats)
        assert sum(c.graph.replays for c in tr.runner.padded_steps.values()) > 15
    else:        # steady frames replayed graphs; the first 15 after each prompt ran eagerly
        assert tr.stats['graph_steps'] >= 30 and tr.stats['eager_steps'] > 15, dict(tr.stats)
    assert a.mode in ('graph', 'mixed')
    replays = {k: c.graph.replays for k, c in tr.runner.steps.items()}
    if mode == 'batched':
        assert replays[StepKey(2, 1)] > 0, replays      # objects 1 and 3 stacked in one replay
    if mode == 'batched' and merge:
        assert mixed >= 5, mixed        # the stream has frames of objects in several buckets
        padded_replays = {k: c.graph.replays for k, c in tr.runner.padded_steps.items()}
        assert any(k.cond == 2 and v > 0 for k, v in padded_replays.items()), padded_replays
    else:       # after the correction, the corrected object's exact bucket of 2 cond frames
        assert any(k.cond == 2 and v > 0 for k, v in replays.items()), replays


def test_buckets_merge_only_where_the_configure_timings_say_it_pays(monkeypatch,
                                                                     eager_stream):
    """``merge_pays`` weighs one replay of the merged padded graph against a replay per
    bucket by the replay times of configure (per kind and batch size), merging unless the
    replays apart are MERGE_MARGIN faster: untimed, objects of several buckets always merge;
    timed so that the padded graphs are slow, each bucket replays its own graph, every mixed
    frame, with the results of the eager runner."""
    from sam2_ros.engine.cuda.buckets import StepBucket
    tr, _ = graph_tracker('batched', monkeypatch)
    steps = tr.runner.graphs.steps
    assert steps.replay_times == {}     # 'sam2': nothing timed
    one_each = {StepBucket(True, 1): 1, StepBucket(False, 1): 1}
    assert steps.merge_pays(one_each, StepBucket(True, 1), 2)
    steps.replay_times = {(False, 1): 1.0, (False, 2): 1.5, (True, 1): 1.2, (True, 2): 1.8}
    assert steps.merge_pays(one_each, StepBucket(True, 1), 2)          # 1.8 against 2.2
    assert steps.merge_pays(one_each, StepBucket(True, 1), 1)          # 2.4: within margin
    steps.replay_times[(True, 2)] = 3.0
    assert not steps.merge_pays(one_each, StepBucket(True, 1), 2)      # 3.0 against 2.2
    assert not steps.merge_pays({StepBucket(False, 1): 2, StepBucket(True, 2): 1},
                                StepBucket(True, 2), 2)     # 3.0 + 1.2 against 1.5 + 1.2
    _, ref_frames = eager_stream
    events, ran = stream_events(), {'merged': 0, 'apart': 0}
    for f, fr in enumerate(synthetic_frames(STREAM_FRAMES, h=48, w=64)):
        sels = [tr.bank.select(o.slot, tr.handle.stream.frame + 1)
                for o in tr.handle.stream.objects.values()]
        groups = {}
        for sel in sels:
            b = steps.bucket_of(sel)
            groups[b] = groups.get(b, 0) + 1
        before = step_replays(tr)
        a = tr.track(fr)
        if len(groups) > 1:     # per 2 objects (the largest batch) of each bucket or of all
            how = tr.runner.last_merge
            ran[how] += 1
            want = sum(-(-n // 2) for n in groups.values()) if how == 'apart' else \
                -(-len(sels) // 2)
            assert step_replays(tr) - before == want, (f, how)
        for oa, ob in zip(a.objects, ref_frames[f][0]):
            assert oa.obj_id == ob.obj_id
            assert float((oa.low_res_logits - ob.low_res_logits).abs().max()) <= 1e-4
        for kind, p in events.get(f, []):
            tr.remove_object(p) if kind == 'remove' else tr.add_prompt(p)
    # mixed frames of one padded and one exact object kept apart (3.0 against 1.2 + 1.0);
    # three objects need two replays either way, and merged they cost within the margin
    assert ran['apart'] >= 5, ran
    # the tracker counts the steps of objects in several buckets by what ran
    assert tr.stats['buckets_apart_steps'] == ran['apart']
    assert tr.stats['buckets_merged_steps'] == ran['merged']


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


def test_io_graphs_per_resolution_and_bucket(monkeypatch):
    """Frames and masks go through I/O graphs captured on first use: one input graph per
    source resolution, one mask graph per (object bucket, resolution); only the two most
    recently used resolutions are kept. Results equal the eager path's bit for bit."""
    tr, cfg = graph_tracker('swap', monkeypatch)
    ref = StreamingTracker(cfg.replace(use_cuda_graphs=False), model=tr.model)
    for h, w in ((48, 64), (64, 48), (48, 64), (40, 40)):     # A, B, A again, C
        frames = synthetic_frames(3, h=h, w=w)
        for t in (tr, ref):
            t.reset()
            t.track(frames[0])
            for p in (1, 2, 3):
                t.add_prompt(Prompt(p, box=(2 + p, 2 + p, w - 2 * p, h - 2 * p)))
        a, b = tr.track(frames[1]), ref.track(frames[1])
        assert [o.obj_id for o in a.objects] == [1, 2, 3]
        for oa, ob in zip(a.objects, b.objects):
            assert (oa.mask == ob.mask).all() and oa.box == ob.box and oa.area == ob.area
        assert FrameInKey(h, w) in tr.runner.io and MasksOutKey(4, h, w) in tr.runner.io
        # every object bucket's mask graph with the first: none captures mid-stream later
        assert {k.batch for k in tr.runner.io if isinstance(k, MasksOutKey) and k.hw == (h, w)} \
            == set(tr.runner.graphs.io.out_buckets)
    assert {k.hw for k in tr.runner.io} == {(48, 64), (40, 40)}   # B: least recently used
    assert tr.runner.io[FrameInKey(40, 40)].graph.replays == 2


def test_io_graph_results_are_not_overwritten_and_any_frame_layout_stages(monkeypatch):
    """The mask graph hands out fresh host buffers: a frame's masks, label and stats stay as
    they were after later frames (nothing is reused under a caller that keeps them). Frames
    that torch cannot wrap (read-only, reversed channels) are staged by numpy and give the
    results of the same pixels passed as a plain array."""
    tr, cfg = graph_tracker('swap', monkeypatch)
    frames = synthetic_frames(6, h=48, w=64)
    tr.track(frames[0])
    tr.add_prompt(Prompt(1, box=(5, 5, 40, 30)))
    tr.add_prompt(Prompt(2, box=(30, 10, 60, 40)))
    kept = [tr.track(fr) for fr in frames[1:3]]
    snap = [([o.mask.copy() for o in r.objects], r.label_mask().copy(),
             [(o.area, o.box) for o in r.objects]) for r in kept]
    readonly = frames[3].copy()
    readonly.flags.writeable = False
    reversed_view = frames[4][..., ::-1].copy()[..., ::-1]     # same pixels, negative stride
    assert min(reversed_view.strides) < 0
    ref = StreamingTracker(cfg.replace(use_cuda_graphs=False), model=tr.model)
    ref.track(frames[0])
    ref.add_prompt(Prompt(1, box=(5, 5, 40, 30)))
    ref.add_prompt(Prompt(2, box=(30, 10, 60, 40)))
    for fr in frames[1:3]:
        ref.track(fr)
    a = tr.track(readonly)
    b = ref.track(frames[3])
    for r, (masks, label, facts) in zip(kept, snap):
        assert all((o.mask == m).all() for o, m in zip(r.objects, masks))
        assert (r.label_mask() == label).all()
        assert [(o.area, o.box) for o in r.objects] == facts
    for oa, ob in zip(a.objects, b.objects):
        assert (oa.mask == ob.mask).all() and oa.area == ob.area
    tr.remove_object(2)
    ref.remove_object(2)
    a, b = tr.track(reversed_view), ref.track(frames[4])
    assert (a.objects[0].mask == b.objects[0].mask).all()


def test_io_graph_stages_tensor_frames(monkeypatch):
    """Tensor frames through the frame-in graph's staging: a contiguous [H, W, 3] tensor and
    the channels-last view of a [3, H, W] one (what nvJPEG's output is handed on as,
    engine/decode.py) give the results of the same pixels as numpy arrays."""
    tr, cfg = graph_tracker('swap', monkeypatch)
    ref, _ = graph_tracker('swap', monkeypatch)
    frames = synthetic_frames(3, h=48, w=64)
    given = [torch.from_numpy(frames[0].copy()),
             torch.from_numpy(frames[1]).permute(2, 0, 1).contiguous().permute(1, 2, 0),
             torch.from_numpy(frames[2]).permute(2, 0, 1).contiguous().permute(1, 2, 0)]
    assert not given[1].is_contiguous()
    for k, (t, fr) in enumerate(zip(given, frames)):
        a, b = tr.track(t), ref.track(fr)
        if k == 0:
            a = tr.add_prompt(Prompt(1, box=(5, 5, 40, 30)))
            b = ref.add_prompt(Prompt(1, box=(5, 5, 40, 30)))
        assert len(a.objects) == len(b.objects) == 1
        for oa, ob in zip(a.objects, b.objects):
            assert torch.equal(oa.low_res_logits, ob.low_res_logits)
            assert (oa.mask == ob.mask).all()
    assert tr.runner.io[FrameInKey(48, 64)].graph.replays == 3 == \
        ref.runner.io[FrameInKey(48, 64)].graph.replays


def test_io_graph_capture_failure_runs_io_eagerly(monkeypatch):
    tr, cfg = graph_tracker('swap', monkeypatch)
    ref = StreamingTracker(cfg.replace(use_cuda_graphs=False), model=tr.model)

    def broken(*a):
        raise RuntimeError('no I/O graph today')
    monkeypatch.setattr(io_graphs.GraphIO, 'capture_masks_out', broken)
    tr.runner.on_fallback = tr._count_fallback
    frames = synthetic_frames(20, h=48, w=64)
    p = schedule(48, 64, 1, 2, 3, 4)[0][0][1]
    for t in (tr, ref):
        t.track(frames[0])
        t.add_prompt(p)
    for fr in frames[1:]:
        a, b = tr.track(fr), ref.track(fr)
        assert (a.objects[0].mask == b.objects[0].mask).all()
    assert tr.stats['fallbacks'] == 1 and 'I/O graph capture failed' in \
        next(iter(tr.fallback_reasons))
    assert tr.stats['graph_steps'] > 0        # the model steps still replay graphs


def test_compiled_copy_shares_weights_and_leaves_the_model_alone():
    """compile_mode: the graphs capture a twin whose heavy modules are compiled; the eager
    fallback keeps the plain modules, and both read the same weights."""
    from sam2_ros.engine.model import COMPILED_MODULES, compiled_copy
    cfg = TrackerConfig(model_size='tiny', image_size=64, device='cpu', random_weights=True,
                        extra_hydra_overrides=list(LEAN))
    # compiled_copy must leave it alone: asserted below
    model = shared_model(cfg.image_size, overrides=LEAN)
    assert compiled_copy(model, None) is model
    twin = compiled_copy(model, 'default')
    for name in COMPILED_MODULES:
        plain, comp = getattr(model, name), getattr(twin, name)
        assert comp is not plain and comp._orig_mod is plain
        assert not hasattr(plain, '_orig_mod')
    assert twin.maskmem_tpos_enc is model.maskmem_tpos_enc
    with pytest.raises(ValueError, match='compile_mode'):
        cfg.replace(compile_mode='fastest').validate()


def test_io_graphs_of_a_known_resolution_are_captured_at_start(monkeypatch):
    """io_resolution: the frame-in graph and every mask bucket's graph exist after prepare
    (configure, for the node); the first frames capture nothing more and equal eager."""
    graphs_on_cpu(monkeypatch)
    cfg = TrackerConfig(model_size='tiny', image_size=64, device='cpu', precision='fp32',
                        random_weights=True, use_cuda_graphs=False, max_cond_frames=1,
                        max_objects=3, io_resolution=(64, 48), extra_hydra_overrides=list(LEAN))
    tr = tracker_on_shared_model(cfg)
    tr.runner = runner.GraphRunner(tr.model, cfg, print)
    with torch.inference_mode():
        tr.runner.prepare(tr.bank, tr.maskmem_pos, None)
    assert set(tr.runner.io) == {FrameInKey(48, 64), MasksOutKey(1, 48, 64),
                                 MasksOutKey(2, 48, 64), MasksOutKey(3, 48, 64)}
    captured = []
    monkeypatch.setattr(capture.Capturer, 'capture',
                        lambda self, fn, x: captured.append(fn) or
                        fake_capture_same_outputs(self, fn, x))
    ref = StreamingTracker(cfg.replace(use_cuda_graphs=False), model=tr.model)
    frames = synthetic_frames(4, h=48, w=64)
    for t in (tr, ref):
        t.track(frames[0])
        t.add_prompt(Prompt(1, box=(5, 5, 40, 30)))
        t.add_prompt(Prompt(2, box=(30, 10, 60, 40)))
    for fr in frames[1:]:
        a, b = tr.track(fr), ref.track(fr)
        assert [o.obj_id for o in a.objects] == [1, 2]
        for oa, ob in zip(a.objects, b.objects):
            assert (oa.mask == ob.mask).all() and oa.area == ob.area and oa.box == ob.box
    assert not captured
    assert tr.runner.io[FrameInKey(48, 64)].graph.replays == 4
    assert tr.runner.io[MasksOutKey(2, 48, 64)].graph.replays >= 3
    with pytest.raises(ValueError, match='io_resolution'):
        cfg.replace(io_resolution=(64,)).validate()


def test_label_graph_ignores_padding_rows(monkeypatch):
    """The mask graph of a bucket larger than the object count keeps stale logits in its
    padding rows (here of a removed object 4): their ids are zeroed, so they never reach the
    label mask, which equals the eager runner's for the same inputs."""
    tr, cfg = graph_tracker('swap', monkeypatch)
    h, w, s = 24, 32, tr.bank.logits.shape[-1]
    logits = torch.full((4, 1, s, s), -5.0)
    logits[:, :, : s // 2] = 5.0                     # every object: the top half of the image
    logits[3, :, s // 2:] = 5.0                      # object 4: the whole image
    scores = torch.ones(4)
    eager = runner.EagerRunner(tr.model, cfg)
    with torch.inference_mode():
        m4, _, l4 = tr.runner.results(logits, scores, h, w, [1, 2, 3, 4])
        assert (l4 == 4).all() and m4.shape == (4, h, w)
        m3, st3, l3 = tr.runner.results(logits[:3], scores[:3], h, w, [1, 2, 7])
        em3, est3, el3 = eager.results(logits[:3], scores[:3], h, w, [1, 2, 7])
    assert MasksOutKey(4, h, w) in tr.runner.io    # both calls used the batch-4 mask graph
    assert (l3[: h // 2] == 7).all() and (l3[h // 2:] == 0).all(), 'stale row 4 leaked'
    assert (l3 == el3).all() and (m3 == em3).all() and (st3 == est3).all()


def test_frame_result_label_is_rebuilt_when_objects_change():
    masks = [torch.zeros(6, 8, dtype=torch.bool).numpy() for _ in range(2)]
    masks[0][:3] = True
    masks[1][2:] = True
    objs = [ObjectResult(i + 1, m, 1.0, 'tracking', None, int(m.sum()), None, 0)
            for i, m in enumerate(masks)]
    res = FrameResult(0, 6, 8, list(objs))
    built = res.label_mask()
    assert (built[:2] == 1).all() and (built[2:] == 2).all()     # overlap: higher id wins
    given = built.copy()
    res.set_label(given, [1, 2])
    assert res.label_mask() is given                # the tracker's precomputed one, as is
    res.objects.pop()                               # objects changed: built from the masks
    assert (res.label_mask() == (masks[0] * 1).astype('uint8')).all()

