"""sam2_ros/engine/cuda/kernels/value_attention.py in Triton's interpreter (small shapes): the
kernel attends each row over its own keys with values narrower than the keys as float32 math
does, whole or in key chunks merged by their log-sum-exps (uneven and empty chunks), and
``attend`` restricted to the runner's packed valid keys equals attention over those keys."""

import copy
import math

import pytest
import torch

pytest.importorskip('triton')

from sam2_ros.engine import attention  # noqa: E402
from sam2_ros.engine.cuda.kernels.value_attention import attend, values_attention  # noqa: E402

CONFIG = (16, 16, 4, 2)


def _rand(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _math(q, k, v):
    """float32 attention of q [Lq, D] over k [n, D], v [n, Dv]: (out, log-sum-exp)."""
    s = q @ k.t() / math.sqrt(q.shape[-1])
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


@pytest.mark.parametrize('splits', [1, 3, 8])
def test_rows_over_their_own_keys_whole_or_in_chunks(splits):
    b, lq, d, dv = 3, 20, 32, 16
    counts = [37, 5, 18]                            # row 1: fewer keys than 8 chunks
    cu = torch.tensor([0, 37, 42, 60], dtype=torch.int32)
    q, k, v = _rand(b, lq, d, seed=0), _rand(60, d, seed=1), _rand(60, dv, seed=2)
    # the chunks that hold keys, as the runner's packing flags them for the same table
    full = attention.chunk_bounds(cu, splits)[1] > 0
    out, lse = values_attention(q, k, v, cu, max(counts), splits, full, CONFIG)
    assert out.shape == (b, lq, dv) and lse.shape == (b, splits, lq, 1)
    for r in range(b):
        ref, ref_lse = _math(q[r], k[cu[r]:cu[r + 1]], v[cu[r]:cu[r + 1]])
        torch.testing.assert_close(out[r], ref, rtol=1e-4, atol=1e-5)
        # the chunks' log-sum-exps make the row's; an empty chunk has -inf (no share)
        torch.testing.assert_close(torch.logsumexp(lse[r, :, :, 0], 0), ref_lse,
                                   rtol=1e-4, atol=1e-5)
    if splits == 8:
        assert torch.isneginf(lse[1, 5:]).all()


@pytest.mark.parametrize('splits', [1, 3])
def test_dense_rows_without_a_table_whole_or_in_chunks(splits):
    """cu None: row b's keys are the max_keys rows from b * max_keys (the unpadded memory),
    its chunks merged as split-KV heads."""
    b, lq, lk, d, dv = 2, 20, 29, 32, 16
    q, k, v = _rand(b, lq, d, seed=40), _rand(b * lk, d, seed=41), _rand(b * lk, dv, seed=42)
    out, lse = values_attention(q, k, v, None, lk, splits, config=CONFIG)
    for r in range(b):
        ref, ref_lse = _math(q[r], k[r * lk:(r + 1) * lk], v[r * lk:(r + 1) * lk])
        torch.testing.assert_close(out[r], ref, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(torch.logsumexp(lse[r, :, :, 0], 0), ref_lse,
                                   rtol=1e-4, atol=1e-5)


def test_long_chunks_take_the_128_query_configuration_and_agree():
    """config_for: 128-query blocks where chunks are long (large@1024's one object: 28,736
    keys in 4 chunks; 8 tiny objects: 7,232 in 2), 64 where one tiny object's 7,232 keys are
    split 16 ways, float32's small tiles always; the long configuration computes what the
    short one does (bf16 in the interpreter, a chunk of a few blocks)."""
    from sam2_ros.engine.cuda.kernels import value_attention as va
    assert va.config_for(torch.bfloat16, -(-28736 // 4)) == va.CONFIG_LONG
    assert va.config_for(torch.bfloat16, -(-7232 // 2)) == va.CONFIG_LONG
    assert va.config_for(torch.bfloat16, -(-7232 // 16)) == va.CONFIG
    assert va.config_for(torch.float32, 28736) == va.CONFIG_FP32
    q, k, v = (_rand(*s, seed=i).bfloat16() for i, s in
               enumerate(((1, 130, 32), (200, 32), (200, 16)), start=50))
    longer = values_attention(q, k, v, None, 200, 2, config=(128, 64, 8, 3))[0]
    short = values_attention(q, k, v, None, 200, 2, config=CONFIG)[0]
    ref = _math(q[0].float(), k.float(), v.float())[0]
    torch.testing.assert_close(longer[0].float(), ref, rtol=2 ** -6, atol=2 ** -6)
    torch.testing.assert_close(longer.float(), short.float(), rtol=2 ** -7, atol=2 ** -7)


def test_bf16_output_is_the_float32_result_rounded():
    q, k, v = _rand(1, 16, 32, seed=3), _rand(24, 32, seed=4), _rand(24, 16, seed=5)
    cu = torch.tensor([0, 24], dtype=torch.int32)
    ref = values_attention(q, k, v, cu, 24, 1, config=CONFIG)[0]
    out = values_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), cu, 24, 1,
                           config=CONFIG)[0]
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=2 ** -6, atol=2 ** -6)


@pytest.mark.parametrize('scattered', [False, True])
def test_attend_over_all_keys_or_the_runners_valid_ones(scattered):
    """``attend`` takes the memory attention's [B, 1, L, C] tensors; with ``keys`` (padded
    memories) each row attends only to its valid keys, as sam2 over those keys would."""
    b, lq, lk, d, dv = 2, 12, 40, 32, 16
    q, k, v = _rand(b, 1, lq, d, seed=6), _rand(b, 1, lk, d, seed=7), _rand(b, 1, lk, dv, seed=8)
    valid = torch.ones(b, lk, dtype=torch.bool)
    if scattered:
        valid[0, 10:25] = False
        valid[1, ::3] = False
    keys = attention.KeyPacking(valid) if scattered else None
    out = attend(q, k, v, keys)
    assert out.shape == (b, 1, lq, dv)
    for r in range(b):
        m = valid[r]
        ref = _math(q[r, 0], k[r, 0, m], v[r, 0, m])[0]
        torch.testing.assert_close(out[r, 0], ref, rtol=1e-4, atol=1e-5)


def _memory_inputs(bsz, length, n_s, n_p, bf16):
    dt = torch.bfloat16 if bf16 else torch.float32
    mem = _rand(n_s * length + 4 * n_p, bsz, 64, seed=12).to(dt)
    return dict(curr=[_rand(length, bsz, 256, seed=10).to(dt)],
                curr_pos=[_rand(length, bsz, 256, seed=11)], memory=mem,
                memory_pos=_rand(*mem.shape, seed=13), num_obj_ptr_tokens=4 * n_p)


def _run(fn, autocast):
    with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        return fn()


@pytest.mark.parametrize('autocast, tol', [(False, 1e-5), (True, 2.0 ** -6)])
def test_folded_memory_attention_equals_sam2(autocast, tol):
    """'memory_values': every cross-attention over the raw memory, its value projection in the
    output projection; the same function as sam2's memory attention (float32: up to the
    summation order; bf16: the values and the attention output are rounded elsewhere)."""
    from conftest import assert_close_rel, shared_model
    from sam2_ros.engine.cuda.kernels.memory_attention import FusedMemoryAttention
    ma = shared_model(64).memory_attention
    kw = _memory_inputs(2, 16, 3, 5, autocast)
    ref = _run(lambda: ma(**kw), autocast)
    folded = FusedMemoryAttention(ma, rope=True, fold_values=True)
    assert folded.narrow_values is attend and folded.shared_kv.v is None
    assert all(ly.cross_attn_image.folded is not None for ly in folded.layers)
    out = _run(lambda: folded(**kw), autocast)
    assert out.dtype == ref.dtype
    assert_close_rel(out, ref, tol)


@pytest.mark.parametrize('swap', ['split', 'masked'])
def test_folded_memory_attention_takes_the_runners_attention_swaps(swap):
    """The runner's swaps (attention.split_kv, attention.masked_memory) reach the kernel for
    the narrow values: padded memories attend only to their valid tokens, as sam2 does."""
    from conftest import assert_close_rel, shared_model
    from sam2_ros.engine.cuda.kernels import fused
    model = shared_model(64)
    twin = fused.fused_model(model, ('memory_attention', 'rope', 'memory_values'))
    kw = _memory_inputs(2, 16, 16, 5, False)
    valid = torch.ones(2, kw['memory'].shape[0], dtype=torch.bool)
    valid[1, 20:40] = False
    ctx = (lambda m: attention.split_kv(m)) if swap == 'split' else \
        (lambda m: attention.masked_memory(m, valid))
    calls = []
    real = twin.memory_attention.narrow_values
    twin.memory_attention.narrow_values = lambda *a: calls.append(len(a)) or real(*a)
    with torch.inference_mode():
        with ctx(model):
            ref = model.memory_attention(**kw)
        with ctx(twin):
            out = twin.memory_attention(**kw)
    assert calls == [4 if swap == 'masked' else 3] * len(model.memory_attention.layers)
    assert_close_rel(out, ref, 1e-5)


def test_only_one_head_attentions_fold():
    from sam2.modeling.sam.transformer import RoPEAttention

    from sam2_ros.engine.cuda.kernels.rope_attention import FoldedValues
    one = RoPEAttention(embedding_dim=64, num_heads=1, kv_in_dim=16, rope_k_repeat=True,
                        feat_sizes=(4, 4))
    two = RoPEAttention(embedding_dim=64, num_heads=2, kv_in_dim=16, rope_k_repeat=True,
                        feat_sizes=(4, 4))
    assert FoldedValues.applicable(one) and not FoldedValues.applicable(two)
    f = FoldedValues(one)
    x = _rand(2, 5, 16, seed=30)
    with torch.no_grad():
        torch.testing.assert_close(f(x), one.out_proj(one.v_proj(x)), rtol=1e-5, atol=1e-6)
    # weights cast to bf16 once (precast_weights) fold to the bits the float32 ones fold to
    # in bf16: the graphs with and without precasting stay bitwise alike
    cast = copy.deepcopy(one).to(torch.bfloat16)
    for w, c in zip(f.folded(torch.bfloat16), FoldedValues(cast).folded(torch.bfloat16)):
        assert w.dtype == torch.bfloat16 and torch.equal(w, c)


def test_a_stream_with_folded_values_tracks_as_sam2_does():
    """End to end, fp32: a tracker's eager runner on the fused copy with 'memory_values'
    (every memory attention of a stream: after a click, a box, a mask, a correction and a
    removal) against one on sam2's modules: the same logits up to the summation order."""
    from conftest import LEAN, assert_close_rel, make_tracker
    from scenarios import schedule, stream_logits, synthetic_frames
    from sam2_ros.engine.cuda.kernels import fused
    h, w, n = 48, 64, 8
    events = schedule(h, w, add2=2, add3=4, fix=5, remove=6)
    runs, calls = [], []
    for fold in (False, True):
        tr = make_tracker(image_size=64, max_objects=3, extra_hydra_overrides=list(LEAN))
        if fold:
            tr.runner.model = fused.fused_model(
                tr.runner.model, ('memory_attention', 'rope', 'memory_values'))
            for ly in tr.runner.model.memory_attention.layers:
                ly.cross_attn_image.attend = lambda *a: calls.append(a[2].shape) or attend(*a)
        runs.append(stream_logits(tr, synthetic_frames(n, h, w), events))
    for ref, out in zip(*runs):
        assert ref.keys() == out.keys()
        for k in ref:
            assert_close_rel(out[k], ref[k], 1e-4)
    assert calls and all(shape[-1] == 64 for shape in calls)     # the raw memory as values
