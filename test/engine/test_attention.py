"""Padded memory with masked attention (engine/attention.py) equals sam2's attention over the
unpadded memory, on the CPU in fp32.

The GPU kernels (FlashAttention / memory-efficient variable-length) are compared against the
eager path on the GPU machine (test_graphs_gpu.py); here the packing logic is proven: which
tokens are valid, that padding anywhere (garbage values, large magnitudes) contributes nothing,
that objects of one batch with different memory counts each see only their own, and that the
module swap is undone.
"""

import pytest
import torch
import torch.nn.functional as F

from conftest import make_tracker, shared_model
from scenarios import padded_buffers, synthetic_frames
from sam2_ros.engine import attention, step
from sam2_ros.engine.types import Prompt

HW = 64          # 8x8 memory maps at image size 128


def _rand(*shape, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


def test_token_mask_order():
    fv = torch.tensor([[1, 0], [0, 1]], dtype=torch.bool)          # [n_s=2, B=2]
    pv = torch.tensor([[1, 1], [0, 1], [1, 0]], dtype=torch.bool)  # [n_p=3, B=2]
    m = attention.token_mask(fv, pv, hw=3, ptr_tokens=2)
    assert m.shape == (2, 2 * 3 + 3 * 2)
    assert m[0].tolist() == [1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 1, 1]
    assert m[1].tolist() == [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 0]


@torch.inference_mode()
def test_masked_memory_attention_equals_unpadded_per_object():
    model = shared_model(128)
    n_s, n_p, batch = 9, 18, 2
    curr, cpos = _rand(HW, batch, 256, seed=1), _rand(HW, batch, 256, seed=2)
    # padding slots hold garbage of a large magnitude: any leak would show
    sp = _rand(n_s, HW, batch, 64, scale=8, seed=3)
    spp = _rand(n_s, HW, batch, 64, scale=8, seed=4)
    pt, ptp = _rand(n_p, 4, batch, 64, scale=8, seed=5), _rand(n_p, 4, batch, 64, seed=6)
    picks = {0: ([0, 1, 2, 4, 5, 6, 8], list(range(16))),        # steady state, holes anywhere
             1: ([1, 3], [0, 5, 17])}                            # two frames after a prompt
    fv = torch.zeros(n_s, batch, dtype=torch.bool)
    pv = torch.zeros(n_p, batch, dtype=torch.bool)
    refs = []
    for b, (si, pi) in picks.items():
        fv[si, b], pv[pi, b] = True, True
        mem = torch.cat([sp[si, :, b].flatten(0, 1), pt[pi, :, b].flatten(0, 1)])[:, None]
        pos = torch.cat([spp[si, :, b].flatten(0, 1), ptp[pi, :, b].flatten(0, 1)])[:, None]
        refs.append(model.memory_attention(
            curr=curr[:, b:b + 1], curr_pos=cpos[:, b:b + 1], memory=mem, memory_pos=pos,
            num_obj_ptr_tokens=4 * len(pi)))
    inner = [layer.cross_attn_image for layer in model.memory_attention.layers]
    with attention.masked_memory(model, attention.token_mask(fv, pv, HW, 4)):
        out = model.memory_attention(
            curr=curr, curr_pos=cpos, memory=torch.cat([sp.flatten(0, 1), pt.flatten(0, 1)]),
            memory_pos=torch.cat([spp.flatten(0, 1), ptp.flatten(0, 1)]),
            num_obj_ptr_tokens=4 * n_p)
    assert [layer.cross_attn_image for layer in model.memory_attention.layers] == inner
    diff = float((out - torch.cat(refs, 1)).abs().max())
    assert diff <= 1e-5, diff


@pytest.mark.parametrize('frames_after_prompt', [1, 3, 20])
@torch.inference_mode()
def test_padded_step_equals_eager_step(frames_after_prompt):
    """A whole track step on memories gathered into a larger, padded bucket equals the step
    on the object's own memories (logits, pointer, score, new memory)."""
    tr = make_tracker(max_cond_frames=2)
    frames = synthetic_frames(frames_after_prompt + 2, h=48, w=64)
    tr.track(frames[0])
    tr.add_prompt(Prompt(1, box=(10, 8, 40, 30)))
    for fr in frames[1:frames_after_prompt + 1]:
        tr.track(fr)
    f = tr.frame_index + 1
    feats = tr.runner.encode_frame(frames[-1])
    sel = tr.bank.select(tr.objects[1].slot, f)
    ref = step.track_step(tr.model, feats, tr.bank.gather([sel]), tr.maskmem_pos)
    n_s, n_p = 2 + 6, 2 + 15                       # the largest bucket of max_cond_frames=2
    mem = tr.bank.gather([sel], out=padded_buffers(tr.bank, n_s, n_p))
    assert int(mem.feat_valid.sum()) == sel.key[0] < n_s
    assert int(mem.ptr_valid.sum()) == sel.key[1] < n_p
    out = step.track_step(tr.model, feats, mem, tr.maskmem_pos)
    for name in ('low_res_logits', 'obj_ptr', 'score', 'mem_feats'):
        a, r = getattr(out, name).float(), getattr(ref, name).float()
        # memory features are stored in bf16 (as sam2 stores them): a rounding difference of
        # the fp32 value before the cast moves them by one bf16 step (2^-8 relative)
        rtol = 2 ** -8 if name == 'mem_feats' else 0.0
        torch.testing.assert_close(a, r, rtol=rtol, atol=1e-4, msg=name)


@pytest.mark.parametrize('b,h,lq,lk,splits', [(1, 1, 64, 512, 4), (2, 2, 50, 96, 2),
                                              (3, 1, 16, 1024, 8)])
def test_split_attention_equals_one_call(b, h, lq, lk, splits):
    """Split-KV merged by log-sum-exp is the same softmax over the same keys as one call."""
    g = torch.Generator().manual_seed(lk)
    q, k, v = (torch.randn(b, h, n, 32, generator=g) * 3 for n in (lq, lk, lk))
    out = attention.split_attention(q, k, v, splits)
    assert out.shape == (b, h, lq, 32)
    assert (out - F.scaled_dot_product_attention(q, k, v)).abs().max() <= 1e-5


def test_kv_splits_fill_the_gpu_and_divide_the_keys():
    # one 1,024-query head over tiny@512's 7,232 memory tokens: 16 chunks of 452
    assert attention.kv_splits(1, 1, 1024, 7232) == 16
    assert attention.kv_splits(10, 1, 1024, 7232) == 2      # ten objects fill it nearly
    assert attention.kv_splits(16, 1, 1024, 7232) == 1
    assert attention.kv_splits(1, 1, 1024, 7233) == 1       # odd key count: one call
    assert attention.kv_splits(1, 1, 64, 256) == 2          # chunks keep >= 128 keys
    for args in [(1, 1, 1024, 7232), (2, 1, 256, 28736), (1, 2, 64, 384)]:
        s = attention.kv_splits(*args)
        assert args[3] % s == 0 and (s == 1 or args[3] // s >= 128)


@torch.inference_mode()
def test_split_kv_memory_attention_equals_sam2():
    """The memory attention with split_kv equals sam2's own (every layer's self- and
    cross-attention swapped, the cross-attention calls actually split), and the swap is
    undone afterwards."""
    model = shared_model(128)
    n_s, n_p, batch = 9, 16, 2                     # 9 * 64 + 16 * 4 = 640 keys: 4 chunks
    curr, cpos = _rand(HW, batch, 256, seed=1), _rand(HW, batch, 256, seed=2)
    mem, pos = _rand(n_s * HW + 4 * n_p, batch, 64, seed=3), _rand(n_s * HW + 4 * n_p, batch, 64,
                                                                   seed=4)

    def run():
        return model.memory_attention(curr=curr, curr_pos=cpos, memory=mem, memory_pos=pos,
                                      num_obj_ptr_tokens=4 * n_p)
    ref = run()
    calls, real = [], attention.split_attention
    inner = [(layer.self_attn, layer.cross_attn_image) for layer in model.memory_attention.layers]
    try:
        attention.split_attention = lambda *a: calls.append(a[3]) or real(*a)
        with attention.split_kv(model):
            out = run()
    finally:
        attention.split_attention = real
    assert calls == [4] * len(inner), calls       # cross-attention split, self-attention not
    assert [(layer.self_attn, layer.cross_attn_image)
            for layer in model.memory_attention.layers] == inner
    diff = float((out - ref).abs().max())
    assert diff <= 1e-5, diff


def test_varlen_split_attention_equals_each_rows_own_attention():
    """Padded memories in key chunks (rows of every valid count, also fewer keys than chunks:
    empty chunks) merged by log-sum-exp equal each row attending over its valid keys."""
    g = torch.Generator().manual_seed(5)
    b, h, lq, lk = 3, 2, 20, 300
    q, k, v = (torch.randn(b, h, n, 16, generator=g) * 3 for n in (lq, lk, lk))
    valid = torch.zeros(b, lk, dtype=torch.long)
    valid[0] = 1                                           # full
    valid[1, torch.randperm(lk, generator=g)[:140]] = 1    # scattered
    valid[2, [7, 100, 299]] = 1                            # 3 keys for 8 chunks
    want = torch.cat([F.scaled_dot_product_attention(q[i:i + 1], k[i:i + 1, :, m],
                                                     v[i:i + 1, :, m])
                      for i, m in enumerate(valid.bool())])
    for splits in (2, 8):
        out = attention.varlen_split_attention(q, k, v, attention.KeyPacking(valid), splits)
        assert out.shape == (b, h, lq, 16)
        assert (out - want).abs().max() <= 1e-5, splits


def test_chunk_bounds_cover_each_row_in_order():
    cu_k = torch.tensor([0, 10, 13, 14], dtype=torch.int32)      # rows of 10, 3 and 1 keys
    cu, lengths = attention.chunk_bounds(cu_k, 4)
    assert cu.tolist() == [0, 3, 6, 9, 10, 11, 12, 13, 13, 14, 14, 14, 14]
    assert lengths.tolist() == [[3, 3, 3, 1], [1, 1, 1, 0], [1, 0, 0, 0]]
    # variable-length rows need no chunk count dividing the keys
    assert attention.kv_splits(1, 1, 1024, 7233, dividing=False) == 16
