"""Deferred prompts (CameraTracker.defer_prompt, sam2_ros/engine/multistream.py): a prompt on the
latest frame computed with the next track() call, before that frame's encode, is the same as
add_prompt then track, bitwise on the eager fp32 path: every result (logits, masks, scores,
states, frames since prompt), the whole bank and the object table. For a correction, a new
object, a mask, several deferred on one frame (the newest per id wins), add_prompt after a
deferred one, removal and reset dropping it, the occluded run a read-back would have ended,
two cameras (one absent or failing while its prompt waits). The graph path: test_deferred_
graphs_cpu.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import assert_unchanged, snapshot, tracker_on_shared_model
from test_multistream import H, W, cfg_of, frame, multi
from sam2_ros.engine.errors import CapacityError, FrameError, PromptError
from sam2_ros.engine.types import OCCLUDED, Prompt

pytestmark = pytest.mark.usefixtures('one_thread')


def click(obj_id, x=20.0, y=20.0, label=1):
    return Prompt(obj_id, points=np.array([[x, y]]), labels=np.array([label]))


def disc(cx, cy, r):
    yy, xx = np.mgrid[:H, :W]
    return (xx - cx) ** 2 + (yy - cy) ** 2 <= r * r


# After frame i: (calls on the deferring tracker, calls on the reference), each (name, arg).
SCRIPT = {
    0: ([('add_prompt', click(1)), ('add_prompt', Prompt(2, box=(35, 5, 60, 30)))],) * 2,
    1: ([('defer_prompt', click(1, 30.0, 25.0, 0))],                  # a correction
        [('add_prompt', click(1, 30.0, 25.0, 0))]),
    2: ([('defer_prompt', Prompt(3, box=(5, 25, 30, 45)))],             # a new object
        [('add_prompt', Prompt(3, box=(5, 25, 30, 45)))]),
    3: ([('defer_prompt', Prompt(2, mask=disc(45, 18, 9)))],            # a mask
        [('add_prompt', Prompt(2, mask=disc(45, 18, 9)))]),
    4: ([('defer_prompt', click(1, 10.0)), ('defer_prompt', click(2, 48.0, 15.0)),
         ('defer_prompt', click(1, 24.0, 18.0))],                      # newest per id wins
        [('add_prompt', click(2, 48.0, 15.0)), ('add_prompt', click(1, 24.0, 18.0))]),
    5: ([('defer_prompt', click(3, 12.0, 35.0)), ('add_prompt', click(1, 22.0, 22.0))],
        [('add_prompt', click(3, 12.0, 35.0)), ('add_prompt', click(1, 22.0, 22.0))]),
    6: ([('defer_prompt', click(2, 40.0, 10.0)), ('remove_object', 2)],  # dropped with it
        [('remove_object', 2)]),
    7: ([('defer_prompt', Prompt(4, box=(30, 20, 60, 45))), ('queue_prompt', click(3, 14.0))],
        [('add_prompt', Prompt(4, box=(30, 20, 60, 45))), ('queue_prompt', click(3, 14.0))]),
}
DEFERRED_RUNS = 1 + 1 + 1 + 2 + 1 + 0 + 1      # deferred prompts the script computes
FRAMES = 10


def drive(t, calls_of, script=SCRIPT, frames=FRAMES):
    """Track ``frames`` frames, after frame i the calls ``calls_of(script[i])``; returns the
    track results and {i: the result of the last add_prompt after frame i}."""
    tracked, prompted = [], {}
    for i in range(frames):
        tracked.append(t.track(frame(0, i)))
        for name, arg in calls_of(script.get(i, ([], []))):
            res = getattr(t, name)(arg)
            if name == 'add_prompt':
                prompted[i] = res
    return tracked, prompted


def same_result(a, b):
    assert (a.frame_index, a.height, a.width) == (b.frame_index, b.height, b.width)
    assert [o.obj_id for o in a.objects] == [o.obj_id for o in b.objects]
    for x, y in zip(a.objects, b.objects):
        assert torch.equal(x.low_res_logits, y.low_res_logits), (a.frame_index, x.obj_id)
        assert np.array_equal(x.mask, y.mask) and x.score == y.score
        assert (x.state, x.frames_since_prompt, x.box, x.area) == \
            (y.state, y.frames_since_prompt, y.box, y.area)


def same_state(a, b):
    """The same bank (every tensor and array, bitwise) and object table."""
    sa, sb = snapshot(a), snapshot(b)
    assert sa['objects'] == sb['objects'] and sa['frame'] == sb['frame']
    for k, v in sa['tensors'].items():
        assert torch.equal(v, sb['tensors'][k]), k
    for k, v in sa['arrays'].items():
        assert np.array_equal(v, sb['arrays'][k]), k


def cfg(**changes):
    return cfg_of(**{'max_objects': 4, **changes})


def test_deferred_equals_add_prompt_then_track():
    d, r = tracker_on_shared_model(cfg()), tracker_on_shared_model(cfg())
    got, want = drive(d, lambda s: s[0]), drive(r, lambda s: s[1])
    for a, b in zip(got[0], want[0]):
        same_result(a, b)
    for i in (0, 5):            # 5: add_prompt after a deferred prompt (which it runs first)
        same_result(got[1][i], want[1][i])
    same_state(d, r)
    assert d.stats['deferred_prompts'] == DEFERRED_RUNS and r.stats['deferred_prompts'] == 0
    assert d.stats['prompt_steps'] == r.stats['prompt_steps']
    # and not trivially: the corrected frame 1 became a conditioning frame of object 1, the
    # new object 3 started on frame 2, object 4 on frame 7, and object 2 is gone
    assert 1 in d.bank.cond_frames(d.objects[1].slot)
    assert d.objects[3].created_frame == 2 and d.objects[4].created_frame == 7
    assert d.object_ids == [1, 3, 4] and d.deferred_ids == []


def test_deferred_prompt_runs_before_the_next_encode(monkeypatch):
    """The order the graph path needs: the deferred step reads the previous frame's features
    (the encoder graph's outputs until the next encode overwrites them)."""
    t = tracker_on_shared_model(cfg())
    t.track(frame(0, 0))
    t.add_prompt(click(1))
    t.track(frame(0, 1))
    order = []
    for name in ('encode_frame', 'prompt'):
        real = getattr(t.runner, name)
        monkeypatch.setattr(t.runner, name, lambda *a, _r=real, _n=name, **k: (
            order.append(_n), _r(*a, **k))[1])
    t.defer_prompt(click(1, 30.0))
    assert order == [] and t.deferred_ids == [1]             # nothing computed yet
    res = t.track(frame(0, 2))
    assert order == ['prompt', 'encode_frame'] and res.by_id(1).frames_since_prompt == 1


def test_read_back_of_the_corrected_frame_ends_an_occluded_run(monkeypatch):
    """Tracking scores forced <= 0 (occluded), a correction whose score is > 0: add_prompt's
    read-back of the corrected frame ends the occluded run, so the next frame is occluded
    for 1 frame, not lost; the deferred prompt must give the same state without that
    read-back."""
    trackers = []
    for _ in range(2):
        t = tracker_on_shared_model(cfg(lost_after_frames=3))
        t.track(frame(0, 0))
        t.add_prompt(click(1))
        real_track, real_prompt = t.runner.track, t.runner.prompt

        def track(*a, _real=real_track, **k):
            out, modes = _real(*a, **k)
            out.score = -(out.score.abs() + 0.1)
            return out, modes

        def prompt(*a, _real=real_prompt, **k):
            out, mode = _real(*a, **k)
            out.score = out.score.abs() + 0.1
            return out, mode
        monkeypatch.setattr(t.runner, 'track', track)
        monkeypatch.setattr(t.runner, 'prompt', prompt)
        for i in (1, 2):
            assert t.track(frame(0, i)).by_id(1).state == OCCLUDED
        trackers.append(t)
    d, r = trackers
    d.defer_prompt(click(1, 30.0))
    r.add_prompt(click(1, 30.0))
    for i in (3, 4):
        a, b = d.track(frame(0, i)), r.track(frame(0, i))
        same_result(a, b)
        assert a.by_id(1).state == OCCLUDED         # hidden runs 1, 2 (3 would be lost)
    same_state(d, r)


def test_deferred_prompt_errors_change_nothing():
    t = tracker_on_shared_model(cfg(max_objects=3))
    t.track(frame(0, 0))
    t.add_prompt(click(1))
    t.add_prompt(click(2, 40.0))
    t.track(frame(0, 1))
    snap = snapshot(t)
    for bad in (click(1, x=float('nan')), click(1, x=500.0), Prompt(2, mask=np.ones((5, 5))),
                Prompt(3, box=(10, 10, 10, 10))):
        with pytest.raises(PromptError):
            t.defer_prompt(bad)
    assert_unchanged(t, snap)
    assert t.deferred_ids == []
    t.defer_prompt(click(3, 30.0))                  # the last slot, taken by the deferred one
    for call in (t.defer_prompt, t.add_prompt, t.queue_prompt):
        with pytest.raises(CapacityError):
            call(click(4))
    t.queue_prompt(click(3, 32.0))                  # the same (deferred) object: no new slot
    res = t.track(frame(0, 2))
    assert [o.obj_id for o in res.objects] == [1, 2, 3] and t.deferred_ids == []
    t.defer_prompt(click(1, 25.0))
    t.reset()                                       # dropped
    assert t.deferred_ids == [] and t.track(frame(0, 3)).objects == []
    t.defer_prompt(click(1))        # after a reset: the object it starts pins the frame size,
    with pytest.raises(FrameError):                 # as add_prompt's would
        t.track(frame(0, 4, 60, 80))
    assert t.deferred_ids == [1] and t.frame_index == 3
    assert [o.obj_id for o in t.track(frame(0, 4)).objects] == [1]


def test_before_the_first_frame_a_deferred_prompt_is_queued():
    t = tracker_on_shared_model(cfg())
    t.defer_prompt(click(1))
    assert t.queued_ids == [1] and t.deferred_ids == []
    assert [o.obj_id for o in t.track(frame(0, 0)).objects] == [1]


# ---- two cameras ------------------------------------------------------------------------------
# per step: the frames (None: absent; 'bad': not an image), then calls (camera, name, arg) on
# the deferring tracker; the reference makes add_prompt of each defer_prompt
CAMERA_STEPS = [
    ((0, 0), [(0, 'add_prompt', click(1)), (1, 'add_prompt', Prompt(1, box=(20, 8, 50, 40)))]),
    ((1, 1), [(0, 'defer_prompt', click(1, 30.0, 25.0, 0)),
              (1, 'defer_prompt', Prompt(2, box=(5, 25, 30, 45)))]),
    ((None, 2), [(1, 'defer_prompt', Prompt(1, mask=disc(35, 24, 10)))]),  # camera 0 absent
    ((2, 3), [(0, 'defer_prompt', click(2, 45.0, 30.0))]),
    (('bad', 4), []),                      # camera 0's frame fails; its prompt still waits
    ((3, None), [(1, 'defer_prompt', click(2, 12.0, 30.0))]),       # waits for camera 1
    ((4, 5), []), ((5, 6), []),
]


def drive_cameras(m, deferred: bool):
    out = []
    for idx, calls in CAMERA_STEPS:
        frames = [None if i is None else np.zeros((H, W, 3), np.float32) if i == 'bad'
                  else frame(c, i) for c, i in enumerate(idx)]
        res = m.track(frames)
        out.append(res)
        for cam, name, arg in calls:
            if not deferred and name == 'defer_prompt':
                name = 'add_prompt'
            getattr(m.stream(cam), name)(arg)
    return out


def same_camera_results(got, want):
    """Two ``drive_cameras`` runs step for step: per camera the same result or error type."""
    for a, b in zip(got, want):
        for c in range(2):
            assert (a.results[c] is None) == (b.results[c] is None)
            assert type(a.errors[c]) is type(b.errors[c])
            if a.results[c] is not None:
                same_result(a.results[c], b.results[c])


@pytest.mark.parametrize('batch', [False, True])
def test_two_cameras_deferred_equals_add_prompt(batch):
    d, r = multi(cfg(batch_streams=batch)), multi(cfg(batch_streams=batch))
    same_camera_results(drive_cameras(d, True), drive_cameras(r, False))
    for cam in range(2):
        sd, sr = d.streams[cam], r.streams[cam]
        assert sd.deferred == {} and sorted(sd.objects) == sorted(sr.objects)
        assert {i: vars(o) for i, o in sd.objects.items()} == \
            {i: vars(o) for i, o in sr.objects.items()}
    for name in ('feats', 'ptrs', 'logits', 'scores'):
        assert torch.equal(getattr(d.bank, name), getattr(r.bank, name)), name
    for name in ('cond_frame', 'ring_frame', 'ptr_frame'):
        assert np.array_equal(getattr(d.bank, name), getattr(r.bank, name)), name
    assert d.stats['deferred_prompts'] == 5
    # the mask deferred on camera 1's frame 2 became a conditioning frame there
    assert 2 in d.bank.cond_frames(d.streams[1].objects[1].slot)


def test_a_failing_deferred_prompt_fails_only_its_camera(monkeypatch):
    m = multi(cfg())
    for c in range(2):
        m.stream(c).queue_prompt(click(1))
    m.track([frame(0, 0), frame(1, 0)])
    m.stream(0).defer_prompt(click(1, 30.0))
    real = m.runner.prompt

    def broken(*a, **k):
        raise RuntimeError('out of memory')
    monkeypatch.setattr(m.runner, 'prompt', broken)
    out = m.track([frame(0, 1), frame(1, 1)])
    assert 'deferred on frame 0 failed' in str(out.errors[0]) and out.results[0] is None
    assert out.results[1].frame_index == 1
    monkeypatch.setattr(m.runner, 'prompt', real)
    assert m.stream(0).frame_index == 0 and m.streams[0].deferred == {}    # dropped
    assert m.track([frame(0, 1), None]).results[0].frame_index == 1        # pass it again


def test_apply_deferred_equals_add_prompt_on_the_latest_frame():
    """A camera that stopped (the node, after deferred_wait_ms): apply_deferred runs the
    deferred prompts on the latest frame now, in order (the newest per id), and returns that
    frame's results as add_prompt would have; the next frame then equals the reference's."""
    d, r = tracker_on_shared_model(cfg()), tracker_on_shared_model(cfg())
    for t in (d, r):
        t.track(frame(0, 0))
        t.add_prompt(click(1))
        t.add_prompt(Prompt(2, box=(35, 5, 60, 30)))
        t.track(frame(0, 1))
    assert d.apply_deferred() is None                     # nothing waits
    d.defer_prompt(click(1, 10.0))
    d.defer_prompt(click(2, 48.0, 15.0))
    d.defer_prompt(click(1, 30.0, 25.0, 0))               # replaces the first for object 1
    r.add_prompt(click(2, 48.0, 15.0))
    same_result(d.apply_deferred(), r.add_prompt(click(1, 30.0, 25.0, 0)))
    assert d.deferred_ids == []
    same_result(d.track(frame(0, 2)), r.track(frame(0, 2)))
    same_state(d, r)
