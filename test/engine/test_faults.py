"""Injected faults inside a frame's computation: the frame is reported failed (StepError),
nothing half-written is read later, and tracking continues on the next frame."""

import pytest
import torch

from conftest import make_tracker
from scenarios import schedule, synthetic_frames
from sam2_ros.engine.errors import StepError


def _stream(tr, frames, start, stop):
    return [tr.track(frames[f]) for f in range(start, stop)]


@pytest.mark.parametrize('where', ['encode', 'track'])
def test_exception_in_a_step_fails_that_frame_only(where, monkeypatch):
    frames = synthetic_frames(30, h=48, w=64)
    ev = schedule(48, 64, 1, 2, 3, 4)
    tr = make_tracker(image_size=64)
    tr.track(frames[0])
    tr.add_prompt(ev[0][0][1])
    _stream(tr, frames, 1, 10)
    real = getattr(tr.runner, where)

    def boom(*a, **k):
        raise torch.cuda.OutOfMemoryError('injected: CUDA out of memory')
    monkeypatch.setattr(tr.runner, where, boom)
    with pytest.raises(StepError, match='out of memory'):
        tr.track(frames[10])
    monkeypatch.setattr(tr.runner, where, real)
    assert tr.stats['failed_frames'] == 1
    res = tr.track(frames[11])                     # the next frame works
    assert [o.obj_id for o in res.objects] == [1]
    if where == 'encode':
        # nothing changed: frame indices continue as if frame 10 never came
        assert res.frame_index == 10
    else:
        # frame 10 was consumed without memory: later steps skip it, like a dropped frame
        assert res.frame_index == 11
        slot = tr.objects[1].slot
        assert 10 not in tr.bank.ring_frame[slot] and 10 not in tr.bank.ptr_frame[slot]
    for f in range(12, 30):
        res = tr.track(frames[f])
    assert res.objects[0].low_res_logits.isfinite().all()


def _boom_once(monkeypatch, runner, where, calls):
    """runner.<where> raises an injected OOM on its first call only."""
    real = getattr(runner, where)

    def boom(*a, **k):
        calls.append(where)
        if len(calls) == 1:
            raise torch.cuda.OutOfMemoryError('injected: CUDA out of memory')
        return real(*a, **k)
    monkeypatch.setattr(runner, where, boom)


def _started(frames):
    from sam2_ros.engine.types import Prompt
    tr = make_tracker(image_size=64, max_objects=4)
    tr.track(frames[0])
    ev = schedule(48, 64, 1, 2, 3, 4)
    tr.add_prompt(ev[0][0][1])
    tr.track(frames[1])
    two = Prompt(2, box=(30.0, 5.0, 55.0, 25.0))
    three = Prompt(3, box=(5.0, 25.0, 25.0, 45.0))
    return tr, ev[3][0][1], two, three


def test_a_failed_deferred_prompt_keeps_the_ones_deferred_after_it(monkeypatch):
    frames = synthetic_frames(6, h=48, w=64)
    tr, corr, two, _ = _started(frames)
    tr.defer_prompt(corr)
    tr.defer_prompt(two)
    calls = []
    _boom_once(monkeypatch, tr.runner, 'prompt', calls)
    with pytest.raises(StepError, match='deferred'):
        tr.track(frames[2])
    assert tr.deferred_ids == [2] and tr.object_ids == [1]      # the correction is dropped
    res = tr.track(frames[2])                                   # passed again: object 2 starts
    assert [o.obj_id for o in res.objects] == [1, 2] and res.frame_index == 2


def test_a_failed_queued_prompt_queues_the_later_ones_again(monkeypatch):
    frames = synthetic_frames(6, h=48, w=64)
    tr, _, two, three = _started(frames)
    tr.queue_prompt(two)
    tr.queue_prompt(three)
    calls = []
    _boom_once(monkeypatch, tr.runner, 'prompt', calls)
    with pytest.raises(StepError, match=r'object 2 failed.*1 after it queued again'):
        tr.track(frames[2])
    assert tr.object_ids == [1] and tr.queued_ids == [3]
    slot = tr.objects[1].slot
    assert 2 not in tr.bank.ring_frame[slot]        # the tracked object wrote nothing there
    res = tr.track(frames[3])
    assert [o.obj_id for o in res.objects] == [1, 3]


def test_a_failed_add_prompt_is_a_step_error_and_changes_nothing(monkeypatch):
    frames = synthetic_frames(6, h=48, w=64)
    tr, corr, two, _ = _started(frames)
    slot = tr.objects[1].slot
    before = (tr.bank.cond_frames(slot), tr.object_ids)
    calls = []
    _boom_once(monkeypatch, tr.runner, 'prompt', calls)
    with pytest.raises(StepError, match='object 1 on frame 1 failed.*not applied'):
        tr.add_prompt(corr)
    assert (tr.bank.cond_frames(slot), tr.object_ids) == before
    res = tr.add_prompt(two)                                    # the next prompt works
    assert [o.obj_id for o in res.objects] == [1, 2]
