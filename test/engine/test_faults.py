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
        slot = tr._objects[1].slot
        assert 10 not in tr.bank.ring_frame[slot] and 10 not in tr.bank.ptr_frame[slot]
    for f in range(12, 30):
        res = tr.track(frames[f])
    assert res.objects[0].low_res_logits.isfinite().all()
