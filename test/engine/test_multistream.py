"""MultiStreamTracker (sam2_ros/engine/multistream.py): N cameras on one model equal N
independent StreamingTrackers on that model, over a stream with prompts on each camera, a
correction, a removal, an unpaired step, a size change after a reset and a bad frame.

batch_streams=False (one encode and one track call per camera) is bitwise the independent
trackers. batch_streams=True (one encoder batch, one track call over every object of every
camera) differs only by the rounding of a batched encoder (the image encoder's GEMMs and
convolutions at batch 2): logits and pointers within 1e-4 after the whole stream, bf16 memories
within a unit of bf16 (on this CPU the batched encoder happens to be bitwise, so the stream is
too; the tolerance is what other kernels may give)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import LEAN, shared_model, small_cfg, textured_frame, tracker_on_shared_model
from sam2_ros.engine.errors import CapacityError, FrameError, PromptError, StepError
from sam2_ros.engine.multistream import MultiStreamTracker
from sam2_ros.engine.types import Prompt

H, W = 48, 64


def cfg_of(**changes):
    return small_cfg(**{'image_size': 64, 'max_objects': 3,
                        'extra_hydra_overrides': list(LEAN), **changes})


def multi(cfg, cameras=2):
    return MultiStreamTracker(cfg, cameras=cameras, model=shared_model(
        cfg.image_size, cfg.corrections_as_cond, cfg.extra_hydra_overrides))


def frame(cam, i, h=H, w=W):
    return textured_frame(h, w, seed=100 * cam + i)


class Pair:
    """The multi-stream tracker and one independent tracker per camera, driven alike."""

    def __init__(self, cfg):
        self.m = multi(cfg)
        self.refs = [tracker_on_shared_model(cfg), tracker_on_shared_model(cfg)]
        self.steps = []          # per step: [(multi result, ref result)] per camera

    def call(self, cam, name, *args):
        getattr(self.m.stream(cam), name)(*args)
        getattr(self.refs[cam], name)(*args)

    def step(self, frames):
        out = self.m.track(frames)
        pairs = []
        for cam, fr in enumerate(frames):
            if fr is None:
                assert out.results[cam] is None and out.errors[cam] is None
                continue
            try:
                ref = self.refs[cam].track(fr)
            except FrameError as exc:
                assert type(out.errors[cam]) is type(exc) and out.results[cam] is None
                continue
            assert out.errors[cam] is None, out.errors[cam]
            pairs.append((out.results[cam], ref))
        self.steps.append(pairs)
        return out


def run_scenario(cfg) -> Pair:
    p = Pair(cfg)
    p.call(0, 'queue_prompt', Prompt(1, box=(5, 5, 30, 30)))
    p.call(1, 'queue_prompt', Prompt(1, box=(20, 8, 50, 40)))     # the same id, other camera
    p.call(1, 'queue_prompt', Prompt(2, points=np.array([[12.0, 30.0]]), labels=np.array([1])))
    p.step([frame(0, 0), frame(1, 0)])
    p.step([frame(0, 1), frame(1, 1)])
    p.call(0, 'add_prompt', Prompt(1, points=np.array([[20.0, 20.0]]), labels=np.array([0])))
    p.call(1, 'add_prompt', Prompt(3, box=(30, 20, 60, 45)))       # a new object mid-stream
    p.step([frame(0, 2), frame(1, 2)])
    p.call(1, 'remove_object', 2)
    p.step([None, frame(1, 3)])                                    # unpaired: camera 1 alone
    p.step([frame(0, 3), frame(1, 4)])                             # counters now differ
    p.call(1, 'reset')
    p.call(1, 'queue_prompt', Prompt(4, box=(10, 10, 70, 50)))     # fits the new size only
    p.step([frame(0, 4), frame(1, 5, 60, 80)])                     # size change on camera 1
    p.step([np.zeros((H, W, 3), np.float32), frame(1, 6, 60, 80)])  # a bad frame on camera 0
    p.step([frame(0, 5), frame(1, 7, 60, 80)])
    p.step([frame(0, 6), None])
    return p


def compare(p: Pair, exact: bool):
    tol = {} if exact else dict(rtol=1e-4, atol=1e-4)
    for pairs in p.steps:
        for a, b in pairs:
            assert (a.frame_index, a.height, a.width) == (b.frame_index, b.height, b.width)
            assert [o.obj_id for o in a.objects] == [o.obj_id for o in b.objects]
            for oa, ob in zip(a.objects, b.objects):
                if exact:
                    assert oa.score == ob.score and (oa.mask == ob.mask).all()
                    assert torch.equal(oa.low_res_logits, ob.low_res_logits)
                else:
                    torch.testing.assert_close(oa.low_res_logits, ob.low_res_logits, **tol)
                    assert oa.score == pytest.approx(ob.score, rel=1e-4, abs=1e-4)
                assert oa.state == ob.state and oa.frames_since_prompt == ob.frames_since_prompt
    m, cap = p.m, p.m.cfg.max_objects
    for cam, ref in enumerate(p.refs):
        s = m.streams[cam]
        assert s.frame == ref.frame_index and sorted(s.objects) == ref.object_ids
        for obj_id, o in s.objects.items():
            r = ref.objects[obj_id]
            assert o.slot == cam * cap + r.slot          # camera c owns slots [c*M, (c+1)*M)
            for name in ('cond_frame', 'ring_frame', 'ptr_frame'):
                assert np.array_equal(getattr(m.bank, name)[o.slot],
                                      getattr(ref.bank, name)[r.slot])
            for name in ('ptrs', 'logits'):
                torch.testing.assert_close(getattr(m.bank, name)[o.slot],
                                           getattr(ref.bank, name)[r.slot], **tol)
            bf16 = {} if exact else dict(rtol=2 ** -7, atol=2 ** -9)
            torch.testing.assert_close(m.bank.feats[o.slot].float(),
                                       ref.bank.feats[r.slot].float(), **bf16)


def test_reference_path_is_bitwise_independent_trackers(one_thread):
    p = run_scenario(cfg_of(batch_streams=False))
    compare(p, exact=True)
    assert p.m.stats['frames'] == sum(len(s) for s in p.steps)
    # the scenario did what it says: camera 1 is a frame ahead (8 frames to camera 0's 7:
    # one unpaired each way, one bad), at its new size
    assert (p.m.stream(0).frame_index, p.m.stream(1).frame_index) == (6, 7)
    assert p.m.streams[1].hw == (60, 80) and p.m.stream(1).object_ids == [4]


def test_batched_streams_equal_independent_trackers(one_thread):
    p = run_scenario(cfg_of(batch_streams=True))
    compare(p, exact=False)
    # and not trivially: the cameras' objects of one id differ
    a = p.steps[1][0][0].by_id(1).low_res_logits
    b = p.steps[1][1][0].by_id(1).low_res_logits
    assert (a - b).abs().max() > 1e-2


def test_one_track_call_and_one_encode_per_step(one_thread, monkeypatch):
    m = multi(cfg_of())
    calls = {'encode': [], 'track': []}
    real_encode, real_track = m.runner.encode_batch, m.runner.track

    def encode(image):
        calls['encode'].append(image.shape[0])
        return real_encode(image)

    def track(features, bank, sels, pos):
        calls['track'].append(sorted(s.stream for s in sels))
        return real_track(features, bank, sels, pos)
    monkeypatch.setattr(m.runner, 'encode_batch', encode)
    monkeypatch.setattr(m.runner, 'track', track)
    m.stream(0).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    m.stream(1).queue_prompt(Prompt(1, box=(20, 8, 50, 40)))
    m.stream(1).queue_prompt(Prompt(2, box=(2, 2, 20, 20)))
    m.track([frame(0, 0), frame(1, 0)])
    m.track([frame(0, 1), frame(1, 1)])
    m.track([None, frame(1, 2)])
    assert calls['encode'] == [2, 2, 1]
    # stream: the camera's place in the batch (camera 1 alone is place 0)
    assert calls['track'] == [[0, 1, 1], [0, 0]]


def test_cameras_read_back_with_one_wait_prompts_at_once(one_thread, monkeypatch):
    """A step queues every camera's read-back (sync=False) and synchronizes once for all; a
    prompt's result is read back and waited for at once."""
    m = multi(cfg_of())
    syncs = []
    real = m.runner.results

    def results(logits, scores, h, w, ids, sync=True):
        syncs.append(sync)
        return real(logits, scores, h, w, ids, sync=sync)
    monkeypatch.setattr(m.runner, 'results', results)
    m.track([frame(0, 0), frame(1, 0)])
    assert syncs == [False, False]
    syncs.clear()
    m.stream(1).add_prompt(Prompt(1, box=(5, 5, 30, 30)))
    assert syncs == [True]
    syncs.clear()
    out = m.track([frame(0, 1), frame(1, 1)])
    assert syncs == [False, False] and len(out.results[1].objects) == 1


def test_capacity_and_ids_are_per_camera(one_thread):
    m = multi(cfg_of(max_objects=2))
    m.track([frame(0, 0), frame(1, 0)])
    for i in (1, 2):
        m.stream(0).add_prompt(Prompt(i, box=(5 + i, 5, 30, 30)))
    with pytest.raises(CapacityError):
        m.stream(0).add_prompt(Prompt(3, box=(5, 5, 30, 30)))
    with pytest.raises(CapacityError):
        m.stream(0).queue_prompt(Prompt(3, box=(5, 5, 30, 30)))
    for i in (1, 3):                    # camera 1 still has both of its slots
        m.stream(1).add_prompt(Prompt(i, box=(10, 5, 40, 30)))
    out = m.track([frame(0, 1), frame(1, 1)])
    assert [o.obj_id for o in out.results[0].objects] == [1, 2]
    assert [o.obj_id for o in out.results[1].objects] == [1, 3]
    assert {o.slot for o in m.streams[1].objects.values()} == {2, 3}
    m.stream(0).remove_object(2)
    m.stream(0).add_prompt(Prompt(3, box=(5, 5, 30, 30)))     # the freed slot
    assert m.streams[0].objects[3].slot == 1


def test_each_camera_shows_its_waiting_ids_objects_and_frame_size(one_thread):
    """rig.stream(c) has StreamingTracker's read-only views of that camera: queued_ids,
    deferred_ids, objects (a view of the table), frame_hw."""
    m = multi(cfg_of())
    cams = [m.stream(0), m.stream(1)]
    assert [c.frame_hw for c in cams] == [None, None]
    cams[0].queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    assert [c.queued_ids for c in cams] == [[1], []]
    m.track([frame(0, 0), frame(1, 0, 60, 80)])
    assert [c.frame_hw for c in cams] == [(H, W), (60, 80)]
    assert cams[0].queued_ids == [] and list(cams[0].objects) == [1] and not cams[1].objects
    cams[0].defer_prompt(Prompt(1, points=np.array([[20.0, 20.0]]), labels=np.array([0])))
    cams[1].defer_prompt(Prompt(2, box=(10, 5, 40, 30)))
    assert [c.deferred_ids for c in cams] == [[1], [2]]
    assert cams[0].objects[1].slot == 0
    with pytest.raises(TypeError):
        cams[0].objects[5] = cams[0].objects[1]        # read-only: the table is the tracker's
    m.track([frame(0, 1), frame(1, 1, 60, 80)])
    assert [c.deferred_ids for c in cams] == [[], []]
    assert list(cams[1].objects) == [2] and cams[1].objects[2].slot == 3


def test_one_cameras_bad_input_leaves_the_other_tracked(one_thread):
    m = multi(cfg_of())
    ref = tracker_on_shared_model(cfg_of())
    for t in (m.stream(0), m.stream(1), ref):
        t.queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    m.track([frame(0, 0), frame(1, 0)])
    ref.track(frame(1, 0))
    m.stream(0).reset()
    wide = Prompt(2, box=(50, 40, 75, 55))             # fits 80x60, not 64x48
    m.stream(0).queue_prompt(wide)
    # camera 0: a queued prompt that does not fit its frame, then a size change after its
    # reset, a size change while tracking, a frame that is not an image; camera 1 tracked
    cases = [(frame(0, 1), PromptError), (frame(0, 1, 60, 80), None),
             (frame(0, 2), FrameError), (np.zeros((H, W), np.uint8), FrameError)]
    for i, (f0, err) in enumerate(cases):
        if i == 1:
            m.stream(0).queue_prompt(wide)
        out = m.track([f0, frame(1, 1 + i)])
        res = ref.track(frame(1, 1 + i))
        if err is None:
            assert out.errors[0] is None and out.results[0].height == 60
            assert [o.obj_id for o in out.results[0].objects] == [2]
        else:
            assert isinstance(out.errors[0], err) and out.results[0] is None
        assert out.errors[1] is None
        assert torch.equal(out.results[1].by_id(1).low_res_logits, res.by_id(1).low_res_logits)
    assert m.stream(0).frame_index == 1 and m.stream(1).frame_index == 4
    with pytest.raises(FrameError, match='one frame'):
        m.track([frame(0, 5)])


@pytest.mark.parametrize('where', ['encode_batch', 'track'])
def test_a_failed_shared_computation_fails_the_step_for_its_cameras(one_thread, monkeypatch,
                                                                    where):
    m = multi(cfg_of())
    for c in (0, 1):
        m.stream(c).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    m.track([frame(0, 0), frame(1, 0)])
    real = getattr(m.runner, where)

    def boom(*a, **k):
        raise RuntimeError('injected')
    monkeypatch.setattr(m.runner, where, boom)
    out = m.track([frame(0, 1), frame(1, 1)])
    assert all(isinstance(e, StepError) and 'injected' in str(e) for e in out.errors)
    assert m.stats['failed_frames'] == 2
    monkeypatch.setattr(m.runner, where, real)
    out = m.track([frame(0, 2), frame(1, 2)])
    # an encoder failure changes nothing; a failed track step consumed the frame
    assert [r.frame_index for r in out.results] == ([1, 1] if where == 'encode_batch' else [2, 2])


def test_a_failed_prompt_fails_its_camera_only(one_thread, monkeypatch):
    m = multi(cfg_of())
    m.stream(1).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    m.track([frame(0, 0), frame(1, 0)])
    m.stream(0).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    real = m.runner.prompt

    def boom(*a, **k):
        raise RuntimeError('injected')
    monkeypatch.setattr(m.runner, 'prompt', boom)
    out = m.track([frame(0, 1), frame(1, 1)])
    assert isinstance(out.errors[0], StepError) and out.errors[1] is None
    assert [o.obj_id for o in out.results[1].objects] == [1]
    monkeypatch.setattr(m.runner, 'prompt', real)
    assert m.stream(0).object_ids == [] and m.stream(0).frame_index == 1


def test_one_camera_graph_runner_serves_several_cameras_eagerly(one_thread, monkeypatch):
    """A graph runner of one camera (a [1, 3, S, S] encoder graph, steps on expanded features;
    test_multistream_graphs_cpu has the graphs of several) given N > 1 cameras runs the encoder
    batch and the steps by the eager runner it holds (its graphs' static buffers untouched, so
    no camera reads another's features, the unpaired steps included) and its mask graphs per
    camera: equal to the eager runner. (The CUDA graph stand-in of graph_standin.py
    replays on the CPU.)"""
    from sam2_ros.engine.cuda import runner
    from graph_standin import graphs_on_cpu
    graphs_on_cpu(monkeypatch)
    cfg = cfg_of(batch_buckets=(1, 2), max_cond_frames=2)
    g, e = multi(cfg), multi(cfg)
    reasons = []
    g.runner = runner.GraphRunner(g.model, cfg, reasons.append)
    with torch.inference_mode():
        g.runner.prepare(g.bank, g.maskmem_pos, None)
    assert not reasons, reasons
    for t in (g, e):
        t.stream(0).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
        t.stream(1).queue_prompt(Prompt(1, box=(20, 8, 50, 40)))
    steps = [[frame(0, i), frame(1, i)] for i in range(4)] + [[None, frame(1, 4)],
                                                             [frame(0, 4), None]]
    for i, frames in enumerate(steps):
        a, b = g.track(frames), e.track(frames)
        if i == 2:
            for t in (g, e):
                t.stream(1).add_prompt(Prompt(1, points=np.array([[30.0, 20.0]]),
                                              labels=np.array([1])))
        for ra, rb in zip(a.results, b.results):
            assert (ra is None) == (rb is None)
            if ra is not None:
                assert ra.frame_index == rb.frame_index
                for oa, ob in zip(ra.objects, rb.objects):
                    assert torch.equal(oa.low_res_logits, ob.low_res_logits)
                    assert (oa.mask == ob.mask).all()
    assert g.stats['graph_steps'] == 0 and g.stats['eager_steps'] > 0 and not reasons
    assert g.runner.io       # the results went through the mask graphs


def test_a_failed_read_back_fails_its_camera_only(one_thread, monkeypatch):
    """One camera's masks cannot be read back (e.g. out of memory upsampling them): that
    camera's frame fails with a StepError saying its memory was written, the other camera's
    result goes out, and the next step tracks both (nothing raised out of track)."""
    m = multi(cfg_of())
    for c in (0, 1):
        m.stream(c).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
    m.track([frame(0, 0), frame(1, 0)])
    real = m.runner.results
    calls = []

    def second_fails(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError('CUDA out of memory (injected)')
        return real(*a, **k)
    monkeypatch.setattr(m.runner, 'results', second_fails)
    out = m.track([frame(0, 1), frame(1, 1)])
    assert out.errors[0] is None and out.results[0].frame_index == 1
    assert out.results[1] is None and isinstance(out.errors[1], StepError)
    assert 'memory written' in str(out.errors[1]) and 'injected' in str(out.errors[1])
    assert m.stats['failed_frames'] == 1
    monkeypatch.setattr(m.runner, 'results', real)
    out = m.track([frame(0, 2), frame(1, 2)])
    assert [r.frame_index for r in out.results] == [2, 2] and out.errors == [None, None]
