"""Deferred prompts beside the next frame's encode (``deferred_beside_encoder``,
sam2_ros/engine/cuda/kept_features.py), on the CPU stand-in for CUDA graphs: the prompt graphs
read their own copy of the features, taken before the encode is queued, so a deferred step
queued after the encode still reads its own frame. On against off (the deferred steps before
the encode): the same graphs on the same inputs, so the same results and bank, bitwise, for one
camera and two; the deferred steps really replay after the encoder graph; a deferred prompt
that fails gives its camera its frame back (features and encoder input row), so a prompt on
that frame later reads it, as if the failed step had never encoded it. The stream side (a
second CUDA stream) is in test/gpu/test_deferred_gpu.py. An encode that fails after the copy
still applies the prompts deferred beside it, as they would have run before it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from graph_standin import graph_tracker
from test_multistream_graphs_cpu import fail_next_encode, graph_and_eager
from test_deferred_prompts import (drive, drive_cameras, same_camera_results, same_result,
                                   same_state)
from test_multistream import frame
from sam2_ros.engine.errors import StepError
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')
CLICK = Prompt(1, points=np.array([[30.0, 20.0]]), labels=np.array([1]))


def beside_off(tr) -> None:
    tr.runner.cfg = dataclasses.replace(tr.runner.cfg, deferred_beside_encoder=False)


def replay_log(tr, log):
    """Record the encoder graph's and every prompt graph's replays in ``log``, in order."""
    g = tr.runner.graphs
    caps = [('encoder', g.encoder)] + [('prompt', c) for c in g.prompts.graphs.values()]
    for name, cap in caps:
        real = cap.graph.replay

        def replay(real=real, name=name):
            log.append(name)
            return real()
        cap.graph.replay = replay


def test_one_camera_beside_equals_before_the_encode(monkeypatch):
    (on, _), (off, _) = (graph_tracker('batched', monkeypatch) for _ in range(2))
    beside_off(off)
    logs = {id(on): [], id(off): []}
    for t in (on, off):
        replay_log(t, logs[id(t)])
    got, want = drive(on, lambda s: s[0]), drive(off, lambda s: s[0])
    for a, b in zip(got[0], want[0]):
        same_result(a, b)
    same_result(got[1][5], want[1][5])          # add_prompt running a deferred prompt first
    same_state(on, off)
    assert on.stats['deferred_prompts'] == off.stats['deferred_prompts'] == 7
    assert on.stats['eager_steps'] == off.stats['eager_steps'] == 0
    # on: a deferred prompt's graph replays after the encoder of the frame that runs it
    on_log, off_log = logs[id(on)], logs[id(off)]
    assert on_log != off_log and sorted(on_log) == sorted(off_log)
    assert 'encoder' in on_log and on.runner.graphs.kept.copies > 0


def test_two_cameras_beside_equals_before_the_encode(monkeypatch):
    on, _, reasons_on = graph_and_eager(monkeypatch)
    off, _, reasons_off = graph_and_eager(monkeypatch, deferred_beside_encoder=False)
    same_camera_results(drive_cameras(on, True), drive_cameras(off, True))
    for name in ('feats', 'ptrs', 'logits', 'scores', 'conditioned'):
        assert torch.equal(getattr(on.bank, name), getattr(off.bank, name)), name
    assert not reasons_on and not reasons_off
    assert on.stats['deferred_prompts'] == off.stats['deferred_prompts'] == 5


def test_a_prompt_on_the_latest_frame_reads_a_fresh_copy(monkeypatch):
    """An immediate prompt after a track copies that frame's features once, however many
    prompts follow on it, deferred ones too; the next encode makes the copy stale."""
    tr, _ = graph_tracker('batched', monkeypatch)
    kept = tr.runner.graphs.kept
    tr.track(frame(0, 0))
    tr.add_prompt(CLICK)
    tr.add_prompt(Prompt(2, box=(35, 5, 60, 30)))
    assert kept.copies == 1 and kept.of == tr.runner.encodes
    tr.track(frame(0, 1))
    assert kept.of != tr.runner.encodes
    tr.add_prompt(Prompt(1, points=np.array([[25.0, 22.0]]), labels=np.array([0])))
    assert kept.copies == 2 and kept.of == tr.runner.encodes
    # a prompt deferred on a frame whose copy exists: the next track copies nothing more
    tr.defer_prompt(Prompt(2, points=np.array([[45.0, 15.0]]), labels=np.array([1])))
    tr.track(frame(0, 2))
    assert kept.copies == 2 and tr.stats['deferred_prompts'] == 1
    tr.defer_prompt(CLICK)                          # on a frame without one: one copy
    tr.track(frame(0, 3))
    assert kept.copies == 3 and tr.stats['deferred_prompts'] == 2


def test_a_deferred_prompt_failing_beside_the_encode_gives_its_camera_its_frame_back(
        monkeypatch):
    """Camera 0's deferred prompt fails beside the encode of a paired step: camera 0 is not
    stepped, camera 1 is. On the next step camera 0 has no frame (its encoder input row
    replays): a prompt on its latest frame then equals one on a tracker where the failed step
    never happened, which reads camera 0's frame 0; without the restore it would read the
    frame the failed step encoded."""
    d, _, _ = graph_and_eager(monkeypatch)
    r, _, _ = graph_and_eager(monkeypatch)
    for t in (d, r):
        t.stream(0).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
        t.track([frame(0, 0), frame(1, 0)])
    d.stream(0).defer_prompt(CLICK)
    real, calls = d.runner.prompt, []

    def boom(*a, **k):
        calls.append(1)
        raise torch.cuda.OutOfMemoryError('injected: CUDA out of memory')
    monkeypatch.setattr(d.runner, 'prompt', boom)
    res = d.track([frame(0, 1), frame(1, 1)])
    monkeypatch.setattr(d.runner, 'prompt', real)
    assert calls and isinstance(res.errors[0], StepError) and 'deferred' in str(res.errors[0])
    assert res.results[1].frame_index == 1 and d.streams[0].frame == 0
    r.track([None, frame(1, 1)])
    for t in (d, r):
        t.track([None, frame(1, 2)])
    same_result(d.stream(0).add_prompt(CLICK), r.stream(0).add_prompt(CLICK))
    same_result(d.track([frame(0, 1), frame(1, 3)]).results[0],
                r.track([frame(0, 1), frame(1, 3)]).results[0])


def test_a_failed_encode_still_applies_the_prompts_deferred_beside_it(monkeypatch):
    """The encode fails after the copy: the deferred prompts still run (as they would have
    before the encode), the frame fails for both cameras, prompts on the lost features are
    refused; the next step equals that of a tracker whose prompts ran before the failed
    encode (``deferred_beside_encoder`` off)."""
    d, _, _ = graph_and_eager(monkeypatch)
    r, _, _ = graph_and_eager(monkeypatch, deferred_beside_encoder=False)
    for t in (d, r):
        t.stream(0).queue_prompt(Prompt(1, box=(5, 5, 30, 30)))
        t.track([frame(0, 0), frame(1, 0)])
        t.stream(0).defer_prompt(CLICK)
        fail_next_encode(monkeypatch, t)
        res = t.track([frame(0, 1), frame(1, 1)])
        assert all(isinstance(e, StepError) for e in res.errors), res.errors
        assert t.stats['deferred_prompts'] == 1 and not t.streams[0].deferred
        with pytest.raises(StepError, match='lost'):
            t.stream(0).add_prompt(CLICK)
    for name in ('feats', 'ptrs', 'logits', 'scores'):
        assert torch.equal(getattr(d.bank, name), getattr(r.bank, name)), name
    a, b = (t.track([frame(0, 1), frame(1, 1)]) for t in (d, r))
    for c in range(2):
        same_result(a.results[c], b.results[c])
