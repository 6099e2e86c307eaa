"""The CUDA-graph runner's bookkeeping, exercised on the CPU (CI has no GPU).

Capture is replaced by a stand-in whose replay re-runs the captured function on the static
input buffers and writes the static outputs in place, exactly the contract of a CUDA graph.
Everything else is the real runner: bucket choice, gathering each object's memories into the
static buffers (swap), stacking and padding objects (batched), copy-out, eager fallback for
warm-up frames. Results must equal the eager runner's. The I/O graphs (frame in, masks out):
test_io_graphs_cpu.py.
"""

from types import SimpleNamespace

import pytest

from conftest import LEAN, shared_model, tracker_on_shared_model
from graph_standin import graph_tracker
from scenarios import schedule, synthetic_frames
from sam2_ros.engine.cuda.buckets import StepKey
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.types import FrameResult

# image size 64, the smallest sam2 builds at (4x4 memory maps): the bookkeeping under test does
# not depend on the size, and 64 runs this module in half the time of 128. One intra-op thread
# (conftest.one_thread): the ops are tiny, and two OpenMP threads on a loaded 2-core machine
# spin against other processes
pytestmark = pytest.mark.usefixtures('one_thread')


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
    assert tr.bank.cond_frames(tr.objects[1].slot) == [0, 30]   # first kept, oldest evicted
    assert res.mode == 'graph'


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


def test_auto_keeps_each_candidates_best_of_interleaved_rounds(monkeypatch):
    """'auto' times its candidates in turn, AUTO_ROUNDS times, and keeps each one's least
    time: a slow moment of the host during one candidate's timing does not decide."""
    from sam2_ros.engine.cuda import step_graphs
    script = {'sam2': [5.0, 1.0, 1.5], 'split': [2.0, 2.1, 2.0]}     # sam2: a hiccup first
    calls = []

    def fake_replay_s(cap, n=5):
        calls.append(cap)
        return script[cap].pop(0)
    monkeypatch.setattr(step_graphs, 'replay_s', fake_replay_s)
    times = step_graphs.best_of({'sam2': 'sam2', 'split': 'split'}, 3)
    assert times == {'sam2': 1.0, 'split': 2.0}
    assert calls == ['sam2', 'split'] * 3 and step_graphs.AUTO_ROUNDS >= 2
