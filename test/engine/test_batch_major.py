"""Batch-major memory attention inputs (``TrackerConfig.batch_major_memory``) and the default
object-batch buckets of the batched step graphs.

sam2's memory attention takes [L, B, C] tensors and transposes them to [B, L, C]; with several
objects on the batch axis every op of its layers then reads strided tensors. The batch-major
path hands it views of [B, L, C] storage instead. It must change the layout only: the same
values, so on the CPU in fp32 the whole track step is bitwise the sequence-major one.
"""

import pytest
import torch

from conftest import make_tracker
from scenarios import padded_buffers, synthetic_frames
from sam2_ros.engine import encoder, step
from sam2_ros.engine.cuda import buckets
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.types import Prompt

FIELDS = ('low_res_logits', 'obj_ptr', 'score', 'mem_feats')


def _three_objects(frames_after_prompt: int):
    """A tracker with three boxed objects after ``frames_after_prompt`` frames, the next
    frame's features and the three objects' selections (all with the same memory key)."""
    tr = make_tracker(max_cond_frames=2)
    frames = synthetic_frames(frames_after_prompt + 2, h=48, w=64)
    tr.track(frames[0])
    for i, box in enumerate([(4, 4, 30, 30), (30, 10, 60, 40), (10, 20, 40, 46)]):
        tr.add_prompt(Prompt(i + 1, box=box))
    for fr in frames[1:frames_after_prompt + 1]:
        tr.track(fr)
    feats = tr.runner.encode_frame(frames[-1])
    f = tr.frame_index + 1
    sels = [tr.bank.select(tr.objects[i].slot, f) for i in (1, 2, 3)]
    assert len({s.key for s in sels}) == 1
    return tr, feats, sels


def _assert_layouts_bitwise(tr, feats, mem: step.Memory) -> None:
    """The step of the stacked objects of ``mem`` in both layouts: bit for bit the same."""
    batched = encoder.expand(feats, mem.feats.shape[1])
    ref = step.track_step(tr.model, batched, mem, tr.maskmem_pos, batch_major=False)
    out = step.track_step(tr.model, batched, mem, tr.maskmem_pos, batch_major=True)
    for name in FIELDS:
        x, y = getattr(out, name), getattr(ref, name)
        assert x.shape == y.shape and torch.equal(x, y), name


@pytest.mark.parametrize('frames_after_prompt', [2, 12])
@torch.inference_mode()
def test_batch_major_step_is_bitwise_the_sam2_layout(frames_after_prompt):
    """Three objects stacked on the batch axis: the step with batch-major attention inputs
    equals sam2's layout bit for bit, at the steady-state shape and before it."""
    tr, feats, sels = _three_objects(frames_after_prompt)
    _assert_layouts_bitwise(tr, feats, tr.bank.gather(sels))


@torch.inference_mode()
def test_batch_major_padded_step_is_bitwise_the_sam2_layout():
    """The same in a padded bucket (masked memory attention, validity flags): the graphs of
    the frames after a prompt."""
    tr, feats, sels = _three_objects(3)
    n_s, n_p = 2 + 6, 2 + 15                       # the largest bucket of max_cond_frames=2
    mem = tr.bank.gather(sels, out=padded_buffers(tr.bank, n_s, n_p, batch=3))
    assert int(mem.feat_valid[:, 0].sum()) < n_s        # padding present
    _assert_layouts_bitwise(tr, feats, mem)


@torch.inference_mode()
def test_batch_major_memory_is_contiguous_once_transposed():
    """What the path is for: the tensors sam2's attention sees after its transpose to
    [B, L, C] are contiguous (sam2's layout: strided), with the same values."""
    tr, feats, sels = _three_objects(12)
    mem = tr.bank.gather(sels)
    seq = step.memory_tokens(tr.model, mem, tr.maskmem_pos, batch_major=False)
    bm = step.memory_tokens(tr.model, mem, tr.maskmem_pos, batch_major=True)
    assert seq[2] == bm[2]
    for a, b in zip(seq[:2], bm[:2]):
        assert a.shape == b.shape and torch.equal(a, b)
        assert b.transpose(0, 1).is_contiguous() and not a.transpose(0, 1).is_contiguous()


@torch.inference_mode()
def test_batch_major_attention_sees_batch_major_inputs(monkeypatch):
    """The step hands sam2's memory attention the batch-major views (the switch reaches it)
    and sam2's layout when off, or with one object."""
    tr, feats, sels = _three_objects(12)
    seen = []
    real = type(tr.model.memory_attention).forward

    def spy(self, curr, memory, curr_pos=None, memory_pos=None, num_obj_ptr_tokens=0):
        seen.append((curr[0].transpose(0, 1).is_contiguous(),
                     memory.transpose(0, 1).is_contiguous()))
        return real(self, curr, memory, curr_pos, memory_pos, num_obj_ptr_tokens)
    monkeypatch.setattr(type(tr.model.memory_attention), 'forward', spy)
    mem = tr.bank.gather(sels)
    for flag in (True, False):
        step.track_step(tr.model, encoder.expand(feats, 3), mem, tr.maskmem_pos,
                        batch_major=flag)
    one = tr.bank.gather(sels[:1])
    step.track_step(tr.model, feats, one, tr.maskmem_pos, batch_major=True)
    assert seen == [(True, True), (False, False), (True, True)]


@pytest.mark.parametrize('max_objects,mode,given,expected', [
    (8, 'batched', None, (1, 2, 4, 8)),
    (10, 'batched', None, (1, 2, 4, 8, 10)),       # 10 objects: one replay, not 8 + 2
    (3, 'batched', None, (1, 2, 3)),
    (10, 'batched', (8, 2, 2), (2, 8)),            # given buckets, sorted and deduplicated
    (10, 'swap', None, (1,)),
])
def test_default_batch_buckets(max_objects, mode, given, expected):
    """The step graphs' batch sizes and keys follow from the configuration and the bank's
    capacity alone (``buckets.py``: no runner needed)."""
    cfg = TrackerConfig(random_weights=True, device='cpu', max_objects=max_objects,
                        graph_mode=mode, batch_buckets=given)
    assert buckets.batch_sizes(cfg, cfg.max_objects) == expected
    keys = buckets.step_keys(cfg, cfg.max_objects)
    assert {k.batch for k in keys} == set(expected)
    assert {k.cond for k in keys} == set(range(1, cfg.max_cond_frames + 1))
