"""The CUDA-graph runner's I/O graphs (frame in, masks out, the label) on the CPU, with the
graph stand-in of test/graph_standin.py (CI has no GPU): captured per resolution and bucket on
first use or at start, results never overwritten by a later replay, any frame layout staged,
a failed capture run eagerly; every output equal to the eager runner's.
"""

import numpy as np
import pytest
import torch

from conftest import LEAN, tracker_on_shared_model
from graph_standin import fake_capture_same_outputs, graph_tracker, graphs_on_cpu
from scenarios import schedule, synthetic_frames
from sam2_ros.engine.cuda import capture, io_graphs, runner
from sam2_ros.engine.cuda.buckets import FrameInKey, MasksOutKey
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.tracker import StreamingTracker
from sam2_ros.engine.types import FrameResult, ObjectResult, Prompt

# one intra-op thread (conftest.one_thread): the ops are tiny
pytestmark = pytest.mark.usefixtures('one_thread')


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
    they were after later frames (nothing is reused under a caller that keeps them). A
    read-only frame (the node's received bytes: torch reads it through a view) and one torch
    cannot wrap (reversed channels: staged by numpy) give the results of the same pixels
    passed as a plain array."""
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
    # the graph holds the resize tables it reads (48 rows to 64; the width is the model's
    # size already): the bounded table cache may drop its own references
    keep = tr.runner.io[FrameInKey(48, 64)].keep
    assert [tuple(t.shape[1:]) for t, _ in keep] == [(64,)]


def test_io_graph_capture_failure_runs_io_eagerly(monkeypatch):
    tr, cfg = graph_tracker('swap', monkeypatch)
    ref = StreamingTracker(cfg.replace(use_cuda_graphs=False), model=tr.model)

    def broken(*a):
        raise RuntimeError('no I/O graph today')
    monkeypatch.setattr(io_graphs.GraphIO, 'capture_masks_out', broken)
    tr.runner.on_fallback = tr.core.count_fallback
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


def test_read_back_sets_are_reused_only_once_nothing_holds_their_arrays(monkeypatch):
    """Each masks-out bucket owns ``ring_sets`` read-back sets (masks, stats, label) of its
    shapes, made when its graph is captured: a frame's results are views of a set no earlier
    result still uses (a view a caller keeps, of one object's mask, keeps its set), so results
    held downstream are never overwritten and frames do not allocate; with every set held a
    frame gets a fresh one (counted)."""
    mb = 2 ** 20
    assert io_graphs.ring_sets(1) == io_graphs.RESULT_SETS
    assert io_graphs.ring_sets(9 * mb) == 3                   # 8 objects' masks at 720p
    assert io_graphs.ring_sets(io_graphs.RING_BYTES * 4) == 2
    tr, _ = graph_tracker('swap', monkeypatch)
    frames = synthetic_frames(3 + io_graphs.RESULT_SETS, h=48, w=64)
    tr.track(frames[0])
    tr.add_prompt(Prompt(1, box=(5, 5, 40, 30)))
    tr.add_prompt(Prompt(2, box=(30, 10, 60, 40)))
    gio = tr.runner.graphs.io
    key = MasksOutKey(2, 48, 64)
    ring = gio.rings[key]
    assert [(tuple(t.shape), t.dtype) for t in ring.sets[0]] == \
        [(tuple(t.shape), t.dtype) for t in gio.get(key).outputs]
    assert len(ring.sets) == io_graphs.RESULT_SETS
    held = tr.track(frames[1]).objects[0].mask                # one view, the rest dropped
    kept = held.copy()
    first = ring.sets[0][0].data_ptr()
    assert held.__array_interface__['data'][0] == first       # set 0
    for fr in frames[2:1 + io_graphs.RESULT_SETS]:            # sets 1.. in turn, each dropped
        res = tr.track(fr)
        assert res.objects[0].mask.__array_interface__['data'][0] != first
        del res
    assert (held == kept).all() and ring.misses == 0          # set 0 never written
    del held
    res = tr.track(frames[1 + io_graphs.RESULT_SETS])         # set 0 free again: reused
    assert res.objects[0].mask.__array_interface__['data'][0] == first
    results = [res]                                           # a caller keeping every result
    for fr in synthetic_frames(io_graphs.RESULT_SETS + 1, h=48, w=64):
        results.append(tr.track(fr))
    assert ring.misses == 2                                   # sets 1.. held, then fresh ones
    pointers = {r.objects[0].mask.__array_interface__['data'][0] for r in results}
    assert len(pointers) == len(results)                      # no two results share a buffer


def test_two_cameras_read_into_sets_of_their_own_and_held_results_stay(monkeypatch):
    """With two cameras each bucket has ``ring_sets`` read-back sets per camera: both cameras
    of a step read into sets of their own, and results a caller keeps (several steps of both
    cameras, and the previous step's while it calls the next) stay as they were read."""
    from conftest import LEAN
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.multistream import MultiStreamTracker
    graphs_on_cpu(monkeypatch)
    cfg = TrackerConfig(model_size='tiny', image_size=64, device='cpu', precision='fp32',
                        random_weights=True, use_cuda_graphs=False, graph_mode='batched',
                        batch_buckets=(1, 2, 4), max_cond_frames=2,
                        extra_hydra_overrides=list(LEAN))
    tr = MultiStreamTracker(cfg, cameras=2)
    tr.runner = runner.GraphRunner(tr.model, cfg, lambda reason: None, cameras=2)
    with torch.inference_mode():
        tr.runner.prepare(tr.bank, tr.maskmem_pos, None)
    frames = synthetic_frames(12, h=48, w=64)
    tr.track([frames[0], frames[0][::-1].copy()])
    for c in (0, 1):
        tr.stream(c).add_prompt(Prompt(1, box=(5, 5, 40, 30)))
        tr.stream(c).add_prompt(Prompt(2, box=(30, 10, 60, 40)))
    held, copies = [], []
    for t in range(1, 12):
        out = tr.track([frames[t], frames[t][::-1].copy()])
        assert not any(out.errors), out.errors
        if t % 3 == 0:
            held += out.results
            copies += [([o.mask.copy() for o in r.objects], r.label_mask().copy())
                       for r in out.results]
    ring = tr.runner.graphs.io.rings[MasksOutKey(2, 48, 64)]
    assert len(ring.sets) == 2 * io_graphs.RESULT_SETS and ring.misses == 0
    for r, (masks, label) in zip(held, copies):
        assert all((o.mask == m).all() for o, m in zip(r.objects, masks))
        assert (r.label_mask() == label).all()
    a, b = held[-2:]                                          # one step's two cameras
    assert a.objects[0].mask.__array_interface__['data'][0] != \
        b.objects[0].mask.__array_interface__['data'][0]


def test_frames_are_staged_in_row_bands_that_cover_every_row_once(monkeypatch):
    """``staging_bands``: a host frame reaches the frame-in graph's static buffer band by band
    (odd heights, fewer rows than 64 bands, a reversed view numpy copies, a read-only view),
    the same bytes as one copy, and the encoder input the reference normalization's."""
    from sam2_ros.engine import frame_in
    assert io_graphs.row_bands(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert io_graphs.row_bands(3, 4) == [(0, 1), (1, 2), (2, 3)]
    assert io_graphs.row_bands(7, 1) == [(0, 7)]
    tr, cfg = graph_tracker('batched', monkeypatch)
    gio = tr.runner.graphs.io
    rng = np.random.default_rng(3)
    for h, w in ((47, 64), (17, 20)):
        frame = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        read_only = frame.copy()
        read_only.flags.writeable = False
        for src in (frame, frame[:, ::-1], read_only):
            staged = []
            for bands in (1, 4, 64):
                gio.cfg = cfg.replace(staging_bands=bands)
                with torch.inference_mode():         # as the tracker loads frames
                    cap = gio.get(FrameInKey(h, w))
                    cap.inputs.zero_(), cap.host.zero_()        # nothing left of a run before
                    assert gio.load_frame(src)
                staged.append((cap.inputs.clone(), gio.image[0].clone()))
            for inputs, image in staged:
                assert np.array_equal(inputs.numpy(), np.ascontiguousarray(src))
                assert torch.equal(image, staged[0][1])
            ref = frame_in.normalize(torch.from_numpy(np.ascontiguousarray(src)),
                                     gio.image.shape[-1])
            assert torch.equal(staged[0][1], ref[0])
    with pytest.raises(ValueError, match='staging_bands'):
        cfg.replace(staging_bands=0).validate()
