"""Deferred prompts on the graph path (sam2_ros/engine/cuda/), on the CPU stand-in for CUDA
graphs (graph_standin: a replay re-runs the captured function on the static buffers): the
deferred prompted steps replay the prompt graphs on the previous frame's features, which live
in the encoder graph's static outputs until the next encode overwrites them, so they must run
before it. Deferred equals add_prompt then track, bitwise (the same graphs replayed on the same
inputs), for one camera (test_deferred_prompts.SCRIPT) and two (CAMERA_STEPS); a deferred step
run after the encode would read the new frame and differ."""

from __future__ import annotations

import pytest
import torch

from test_deferred_prompts import (drive, drive_cameras, same_camera_results, same_result,
                                   same_state)
from graph_standin import graph_tracker
from test_multistream_graphs_cpu import graph_and_eager

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.mark.parametrize('mode', ['swap', 'batched'])
def test_one_camera_deferred_equals_immediate_on_graphs(monkeypatch, mode):
    (d, _), (r, _) = graph_tracker(mode, monkeypatch), graph_tracker(mode, monkeypatch)
    got, want = drive(d, lambda s: s[0]), drive(r, lambda s: s[1])
    for a, b in zip(got[0], want[0]):
        same_result(a, b)
    same_result(got[1][5], want[1][5])          # add_prompt running a deferred prompt first
    same_state(d, r)
    for t in (d, r):   # every prompt replayed a graph, every tracking step too
        assert t.stats['prompt_graph_steps'] == t.stats['prompt_steps'] > 0, dict(t.stats)
        assert t.stats['eager_steps'] == 0 and t.stats['fallbacks'] == 0, dict(t.stats)
    assert d.stats['prompt_steps'] == r.stats['prompt_steps']
    assert d.stats['graph_steps'] == r.stats['graph_steps']
    # one encode per frame on both; the deferring tracker read no corrected frame back
    enc = [t.runner.graphs.encoder.graph.replays for t in (d, r)]
    assert enc[0] == enc[1] == len(got[0])
    assert d.stats['deferred_prompts'] == 7


def test_two_cameras_deferred_equals_immediate_on_graphs(monkeypatch):
    d, _, reasons_d = graph_and_eager(monkeypatch)
    r, _, reasons_r = graph_and_eager(monkeypatch)
    same_camera_results(drive_cameras(d, True), drive_cameras(r, False))
    for name in ('feats', 'ptrs', 'logits', 'scores'):
        assert torch.equal(getattr(d.bank, name), getattr(r.bank, name)), name
    assert not reasons_d and not reasons_r
    for t in (d, r):
        assert t.stats['prompt_graph_steps'] == t.stats['prompt_steps'] > 0, dict(t.stats)
        assert t.stats['eager_steps'] == 0, dict(t.stats)
    assert d.stats['deferred_prompts'] == 5
    # corrections of both cameras started from the kept conditioned features (the reused
    # graph reads the prompted camera's frame), deferred as immediate
    assert d.runner.graphs.prompts.reused == r.runner.graphs.prompts.reused > 0
