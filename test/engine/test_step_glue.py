"""The glue of the track step around sam2's modules, reorganised for fewer kernels, is bitwise
what it replaced: the memory sequence written into one buffer per tensor (not cast and
concatenated piece by piece), in fp32 and under bf16 autocast, in both memory layouts; hole
filling with one scatter; a graph's memory tables as views of one index block. The references
below are the previous formulations, kept here verbatim as the specification.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sam2.modeling.sam2_utils import get_1d_sine_pe

from conftest import LEAN, shared_model
from sam2_ros.engine import step
from sam2_ros.engine.holes import fill_holes

pytestmark = pytest.mark.usefixtures('one_thread')


def cat_memory_tokens(model, mem, maskmem_pos, batch_major=False):
    """The previous ``step.memory_tokens``: torch.cat of the pieces."""
    n_s, batch = mem.feats.shape[:2]
    spatial = mem.feats.flatten(3).permute(0, 3, 1, 2)
    tpos = model.maskmem_tpos_enc.flatten(1)[mem.tpos_idx]
    spatial_pos = maskmem_pos.flatten(2).permute(2, 0, 1).unsqueeze(0) + tpos.unsqueeze(1)
    mem_dim, hidden = model.mem_dim, model.hidden_dim
    t_diff_max = model.max_obj_ptrs_in_encoder - 1
    tpos_dim = hidden if model.proj_tpos_enc_in_obj_ptrs else mem_dim
    ptr_pos = model.obj_ptr_tpos_proj(get_1d_sine_pe(mem.ptr_dist / t_diff_max, dim=tpos_dim))
    n_p = mem.ptrs.shape[0]
    split = hidden // mem_dim
    ptrs = mem.ptrs.reshape(n_p, batch, split, mem_dim).permute(0, 2, 1, 3).flatten(0, 1)
    ptr_pos = ptr_pos.repeat_interleave(split, dim=0)
    if batch_major:
        memory = torch.cat([x.transpose(0, 1) for x in (*spatial.unbind(0), ptrs)], dim=1)
        memory_pos = torch.cat([x.transpose(0, 1) for x in (*spatial_pos.unbind(0), ptr_pos)],
                               dim=1)
        return memory.transpose(0, 1), memory_pos.transpose(0, 1), ptrs.shape[0]
    memory = torch.cat([*spatial.unbind(0), ptrs], dim=0)
    memory_pos = torch.cat([*spatial_pos.unbind(0), ptr_pos], dim=0)
    return memory, memory_pos, ptrs.shape[0]


def random_memory(model, n_s, n_p, batch, ptr_dtype, seed):
    g = torch.Generator().manual_seed(seed)
    h = model.image_size // 16
    return step.Memory(
        feats=torch.randn(n_s, batch, model.mem_dim, h, h, generator=g).to(torch.bfloat16),
        tpos_idx=torch.randint(0, model.num_maskmem, (n_s, batch), generator=g),
        ptrs=torch.randn(n_p, batch, model.hidden_dim, generator=g).to(ptr_dtype),
        ptr_dist=torch.randint(1, 40, (n_p, batch), generator=g).float())


@pytest.mark.parametrize('constants', [False, True])
@pytest.mark.parametrize('autocast', [False, True])
@pytest.mark.parametrize('batch_major', [False, True])
@pytest.mark.parametrize('batch,ptr_dtype,pos_dtype', [
    (1, torch.float32, torch.float32), (3, torch.float32, torch.bfloat16),
    (3, torch.bfloat16, torch.bfloat16), (2, torch.bfloat16, torch.float32)])
@torch.inference_mode()
def test_memory_tokens_equal_the_cat(constants, autocast, batch_major, batch, ptr_dtype,
                                     pos_dtype):
    """Against the cat of sam2's pieces; with the graphs' stored constants (fused group
    'constants') too, whose tables hold the same values."""
    model = shared_model(64, overrides=LEAN)
    if constants:
        from sam2_ros.engine.cuda.kernels.constants import with_constants
        model = with_constants(model)
    h = model.image_size // 16
    g = torch.Generator().manual_seed(batch)
    maskmem_pos = torch.randn(1, model.mem_dim, h, h, generator=g).to(pos_dtype)
    for n_s, n_p, seed in ((7, 16, 0), (1, 1, 1), (3, 5, 2)):
        mem = random_memory(model, n_s, n_p, batch, ptr_dtype, seed)
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
            ref = cat_memory_tokens(model, mem, maskmem_pos, batch_major)
            out = step.memory_tokens(model, mem, maskmem_pos, batch_major)
        assert out[2] == ref[2]
        for a, b in zip(out[:2], ref[:2]):
            assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            assert torch.equal(a, b)


def loop_fill_holes(logits, max_area):
    """The previous ``holes.fill_holes``: two scatters (area, open pixels) into n + 1 slots."""
    batch, _, h, w = logits.shape
    n = h * w
    bg = logits <= 0
    big = float(n)
    idx = torch.arange(n, dtype=torch.float32).view(1, 1, h, w)
    neg = torch.where(bg, -idx, -big)
    for _ in range(max_area - 1):
        neg = torch.where(bg, F.max_pool2d(neg, 3, 1, 1), -big)
    smaller = F.max_pool2d(neg, 3, 1, 1) > neg
    larger = -F.max_pool2d(-torch.where(bg, neg, 1.0), 3, 1, 1) < neg
    open_px = bg & (smaller | larger)
    flat = (-neg).long().flatten(1)
    area = torch.zeros(batch, n + 1)
    area.scatter_add_(1, flat, torch.ones_like(flat, dtype=torch.float32))
    n_open = torch.zeros_like(area).scatter_add_(1, flat, open_px.flatten(1).float())
    small = (area.gather(1, flat) <= max_area) & (n_open.gather(1, flat) == 0)
    return torch.where(bg & small.view(batch, 1, h, w), 0.1, logits)


@pytest.mark.parametrize('max_area', [1, 2, 8])
def test_fill_holes_equals_the_two_scatter_formulation(max_area):
    """Decoder-like logits at the size of a 512-pixel model's (128 x 128) and sparse and
    dense random backgrounds with NaNs: the same output bit for bit."""
    rng = np.random.default_rng(max_area)
    g = torch.Generator().manual_seed(max_area)
    smooth = F.interpolate(torch.randn(3, 1, 16, 16, generator=g), size=(128, 128),
                           mode='bilinear') + 0.3 * torch.randn(3, 1, 128, 128, generator=g)
    noise = torch.from_numpy(rng.uniform(-1, 1, (4, 1, 40, 24)).astype(np.float32))
    noise[0] = noise[0].abs()                                  # no background at all
    noise[1] = -noise[1].abs()                                 # background only
    noise[2, 0, ::7, ::5] = float('nan')
    for x in (smooth, noise):
        ours = fill_holes(x, max_area)
        ref = loop_fill_holes(x, max_area)
        assert torch.equal(ours.isnan(), ref.isnan())
        assert torch.equal(ours.nan_to_num(), ref.nan_to_num())


@torch.inference_mode()
def test_graph_index_block_holds_what_the_eager_gather_returns():
    """A graph's static memory (step_graphs.static_memory: tables as views of one int64
    block, written by one host copy) holds the eager gather's memories, distances and flags,
    and the exact bucket's step on it is bitwise the eager step (int64 distances divide to
    the same float32 as float ones)."""
    from conftest import make_tracker
    from scenarios import synthetic_frames
    from sam2_ros.engine import encoder
    from sam2_ros.engine.cuda.buckets import MemoryCounts
    from sam2_ros.engine.cuda.step_graphs import static_memory
    from sam2_ros.engine.types import Prompt
    tr = make_tracker(image_size=64, max_cond_frames=2, extra_hydra_overrides=list(LEAN))
    frames = synthetic_frames(19, h=48, w=64)
    tr.track(frames[0])
    tr.add_prompt(Prompt(1, box=(4, 4, 30, 30)))
    for fr in frames[1:17]:
        tr.track(fr)
    tr.add_prompt(Prompt(2, box=(30, 10, 60, 40)))          # fewer memories: padded only
    tr.track(frames[17])
    f = tr.frame_index + 1
    sel1, sel2 = (tr.bank.select(tr.objects[i].slot, f) for i in (1, 2))
    counts = MemoryCounts.of(tr.model)
    assert sel1.key == counts.steady(1) and sel2.key != sel1.key
    feats = encoder.expand(tr.runner.encode_frame(frames[18]), 2)
    ref = tr.bank.gather([sel1, sel1])
    mem = tr.bank.gather([sel1, sel1], out=static_memory(tr.bank, counts, 2, 1, padded=False))
    assert mem.index is not None and mem.ptr_dist.dtype == torch.long
    for name in ('feats', 'tpos_idx', 'ptrs'):
        assert torch.equal(getattr(mem, name), getattr(ref, name)), name
    assert torch.equal(mem.ptr_dist.float(), ref.ptr_dist)
    a = step.track_step(tr.model, feats, ref, tr.maskmem_pos, batch_major=True)
    b = step.track_step(tr.model, feats, mem, tr.maskmem_pos, batch_major=True)
    for name in ('low_res_logits', 'obj_ptr', 'score', 'mem_feats'):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    pad = tr.bank.gather([sel1, sel2], out=static_memory(tr.bank, counts, 2, 1, padded=True))
    n2, p2 = sel2.key
    assert pad.feat_valid[:, 0].tolist() == [1] * counts.steady(1)[0]
    assert pad.feat_valid[:, 1].tolist() == [1] * n2 + [0] * (pad.feats.shape[0] - n2)
    assert pad.ptr_valid[:, 1].tolist() == [1] * p2 + [0] * (pad.ptrs.shape[0] - p2)
    assert pad.ptr_dist[:p2, 1].tolist() == sel2.ptr_dist
    assert torch.equal(pad.feats[:n2, 1], tr.bank.gather([sel2]).feats[:, 0])


@torch.inference_mode()
def test_fused_memory_attention_reads_the_frame_without_batch_major_copies(monkeypatch):
    """The fused memory attention's kernels read strided inputs, so the step hands it the
    shared frame as it is (no batch-major copies of the features and their positions): bit for
    bit what it computes on the copies (Triton's interpreter)."""
    pytest.importorskip('triton')
    from sam2_ros.engine.cuda.kernels.fused import fused_model
    from sam2_ros.engine.encoder import Features
    model = shared_model(64, overrides=LEAN)
    twin = fused_model(model, ('memory_attention', 'rope'))
    assert twin.memory_attention.strided_inputs
    g = torch.Generator().manual_seed(3)
    h = model.image_size // 16
    curr, pos = (torch.randn(h * h, 1, model.hidden_dim, generator=g).expand(-1, 3, -1)
                 for _ in range(2))
    feats = Features([curr] * 3, [pos] * 3, [(h, h)] * 3)
    mem = random_memory(model, 7, 16, 3, torch.float32, 4)
    maskmem_pos = torch.randn(1, model.mem_dim, h, h, generator=g)
    seen = []
    real = type(twin.memory_attention).forward

    def spy(self, curr, memory, curr_pos=None, memory_pos=None, num_obj_ptr_tokens=0):
        seen.append(curr[0].transpose(0, 1).is_contiguous())
        return real(self, curr, memory, curr_pos, memory_pos, num_obj_ptr_tokens)
    monkeypatch.setattr(type(twin.memory_attention), 'forward', spy)
    out = step.condition_on_memory(twin, feats, mem, maskmem_pos, batch_major=True)
    monkeypatch.setattr(twin.memory_attention, 'strided_inputs', False)     # as before
    ref = step.condition_on_memory(twin, feats, mem, maskmem_pos, batch_major=True)
    assert seen == [False, True] and torch.equal(out, ref)
