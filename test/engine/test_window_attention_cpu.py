"""Hiera's small-window attention kernel (``window_attention.py``, the opt-in group
'window_attention') on the CPU (Triton's interpreter): against SDPA in float64 on the same
bf16 q, k, v (each window attends within itself, per head), for the window sizes of
Hiera-T/-L (16, 49 and 64 tokens; 49 pads to a 64-row tile) and their head widths (72, 96); the
module against sam2's ``MultiScaleAttention`` under bf16 autocast (float32: sam2's own call,
bitwise); the fused trunk takes it only where opted in, for unpooled windows of <= 64 tokens.
Pooled queries (a stage change's first block) are pooled by the kernel itself, within each
window, as sam2's pooled-query attention pools them. The GPU test bounds the difference on the
real shapes (test/gpu/test_window_attention_gpu.py).
"""

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip('triton')

from sam2.modeling.backbones.hieradet import MultiScaleAttention  # noqa: E402

from conftest import shared_model  # noqa: E402
from sam2_ros.engine.config import FUSED_GROUPS  # noqa: E402
from sam2_ros.engine.cuda.kernels import fused  # noqa: E402
from sam2_ros.engine.cuda.kernels.hiera import FusedHiera  # noqa: E402
from sam2_ros.engine.cuda.kernels.q_pool import PooledQueryAttention  # noqa: E402
from sam2_ros.engine.cuda.kernels.window_attention import (WindowAttention,  # noqa: E402
                                                           takes, warps_for,
                                                           window_attention)

pytestmark = pytest.mark.usefixtures('one_thread')
# bf16 has 8 significant bits: one rounding of the probabilities and one of the output, in
# another summation order than the reference's
BF16_TOL = 2.0 ** -6


def _rand(*shape, seed=0, dtype=torch.float32, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _reference(qkv):
    q, k, v = (t.double().transpose(1, 2) for t in torch.unbind(qkv, 2))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2)      # [B, L, H, D]


@torch.no_grad()
@pytest.mark.parametrize('tokens, heads, d', [(16, 2, 72), (49, 3, 96), (64, 1, 96),
                                              (64, 2, 72)])
def test_each_window_attends_within_itself_per_head(tokens, heads, d):
    qkv = _rand(5, tokens, 3, heads, d, seed=tokens + d, dtype=torch.bfloat16, scale=2.0)
    out = window_attention(qkv)
    assert out.shape == (5, tokens, heads, d) and out.dtype == torch.bfloat16
    assert out.is_contiguous()
    ref = _reference(qkv)
    err = (out.double() - ref).abs().max().item()
    assert err <= BF16_TOL * max(1.0, ref.abs().max().item()), err
    # a window's output does not depend on another window's tokens
    other = qkv.clone()
    other[1:] = _rand(4, tokens, 3, heads, d, seed=99, dtype=torch.bfloat16)
    assert torch.equal(window_attention(other)[0], out[0])


@torch.no_grad()
def test_strided_qkv_is_read_where_the_projection_wrote_it():
    """q, k, v are slices of the projection's [B, L, 3 * H * D] output, as sam2 views it."""
    flat = _rand(3, 16, 3 * 2 * 72 + 8, seed=4, dtype=torch.bfloat16)[..., :3 * 2 * 72]
    qkv = flat.reshape(3, 16, 3, 2, 72)
    assert not qkv.is_contiguous()
    torch.testing.assert_close(window_attention(qkv), window_attention(qkv.contiguous()),
                               rtol=0, atol=0)


def _msa(dim=64, heads=2, seed=2):
    attn = MultiScaleAttention(dim, dim, num_heads=heads)
    torch.nn.init.normal_(attn.qkv.weight, std=0.2, generator=torch.Generator().manual_seed(seed))
    return attn.eval()


@torch.no_grad()
@pytest.mark.parametrize('ws', [4, 7, 8])
def test_the_module_is_sams_attention_within_bf16_rounding(ws):
    attn = _msa()
    x = _rand(6, ws, ws, 64, seed=ws)                       # [B * windows, ws, ws, C]
    with torch.autocast('cpu', torch.bfloat16):
        ref, out = attn(x), WindowAttention(attn)(x)
    assert out.dtype == ref.dtype == torch.bfloat16 and out.shape == ref.shape
    err = (out.float() - ref.float()).abs().max().item()
    assert err <= 4 * BF16_TOL * max(1.0, ref.float().abs().max().item()), err
    # float32: sam2's own call, bitwise
    assert torch.equal(WindowAttention(attn)(x), attn(x))


def test_only_unpooled_windows_of_at_most_64_tokens_are_taken():
    attn = _msa()
    assert takes(attn, 4) and takes(attn, 7) and takes(attn, 8)
    assert not takes(attn, 14) and not takes(attn, 16) and not takes(attn, 0)
    pooled = MultiScaleAttention(32, 64, num_heads=2, q_pool=torch.nn.MaxPool2d(2, 2))
    assert not takes(pooled, 8)
    assert not takes(torch.nn.Linear(2, 2), 8)


def test_the_fused_trunk_takes_it_only_where_opted_in():
    trunk = shared_model().image_encoder.trunk
    plain = FusedHiera(trunk)
    assert not any(isinstance(a, WindowAttention) for a in plain.attns)
    opted = FusedHiera(trunk, window_attention=True)
    kinds = [type(a) for a in opted.attns]
    small = [takes(blk.attn, blk.window_size) for blk in trunk.blocks]
    assert any(small) and not all(small)
    for blk, kind, s in zip(trunk.blocks, kinds, small):
        expected = WindowAttention if s else (
            PooledQueryAttention if blk.attn.q_pool is not None else type(blk.attn))
        assert kind is expected, (blk.window_size, kind)
    assert 'window_attention' not in FUSED_GROUPS
    copy = fused.fused_model(shared_model(), ('hiera', 'window_attention'))
    assert any(isinstance(a, WindowAttention) for a in copy.image_encoder.trunk.attns)


def _pooled_reference(qkv, w, sh, sw):
    """sam2's pooled-query attention on q, k, v in float64: q max-pooled in sh x sw blocks of
    the window (rows of w tokens), then each pooled query attends over every key."""
    q, k, v = (t.double() for t in torch.unbind(qkv, 2))                # [B, L, H, D]
    b, n, heads, d = q.shape
    grid = q.reshape(b, n // w, w, heads * d).permute(0, 3, 1, 2)       # [B, HD, h, w]
    pooled = F.max_pool2d(grid, (sh, sw)).permute(0, 2, 3, 1).reshape(b, -1, heads, d)
    out = F.scaled_dot_product_attention(pooled.transpose(1, 2), k.transpose(1, 2),
                                         v.transpose(1, 2))
    return out.transpose(1, 2)                                          # [B, Lq, H, D]


@torch.no_grad()
@pytest.mark.parametrize('ws, heads, d', [(8, 2, 72), (4, 4, 72), (8, 1, 96)])
def test_pooled_queries_are_pooled_in_the_window_then_attend(ws, heads, d):
    """The stage changes of Hiera-L (8x8 windows pooled to 4x4, 4x4 to 2x2) and Hiera-T."""
    qkv = _rand(3, ws * ws, 3, heads, d, seed=ws + d, dtype=torch.bfloat16, scale=2.0)
    out = window_attention(qkv, pool=(ws, 2, 2))
    assert out.shape == (3, ws * ws // 4, heads, d) and out.is_contiguous()
    ref = _pooled_reference(qkv, ws, 2, 2)
    err = (out.double() - ref).abs().max().item()
    assert err <= BF16_TOL * max(1.0, ref.abs().max().item()), err
    # the queries of one 2x2 block (tokens 0, 1, ws, ws + 1) pool to one: swapping two of
    # them changes nothing, swapping queries of two blocks does
    inside, across = qkv.clone(), qkv.clone()
    inside[:, [0, ws + 1], 0] = qkv[:, [ws + 1, 0], 0]
    across[:, [0, 2], 0] = qkv[:, [2, 0], 0]
    assert torch.equal(window_attention(inside, pool=(ws, 2, 2)), out)
    assert not torch.equal(window_attention(across, pool=(ws, 2, 2)), out)


@torch.no_grad()
@pytest.mark.parametrize('ws', [4, 8])
def test_pooled_module_is_sams_pooled_attention_within_bf16_rounding(ws):
    attn = MultiScaleAttention(32, 64, num_heads=2, q_pool=torch.nn.MaxPool2d(2, 2))
    torch.nn.init.normal_(attn.qkv.weight, std=0.2, generator=torch.Generator().manual_seed(ws))
    attn = attn.eval()
    x = _rand(5, ws, ws, 32, seed=ws)                        # [B * windows, ws, ws, C]
    on = PooledQueryAttention(attn, (2, 2), window_kernel=True)
    off = PooledQueryAttention(attn, (2, 2))
    with torch.autocast('cpu', torch.bfloat16):
        ref, out = attn(x), on(x)
        assert on.in_window_kernel(attn.qkv(x).reshape(5, ws * ws, 3, 2, -1), ws, ws)
    assert out.dtype == ref.dtype == torch.bfloat16 and out.shape == ref.shape
    err = (out.float() - ref.float()).abs().max().item()
    assert err <= 4 * BF16_TOL * max(1.0, ref.float().abs().max().item()), err
    # float32 (and the group off) keep the bitwise path
    assert torch.equal(on(x), off(x))


def test_the_fused_trunk_pools_small_windows_in_the_kernel_only_where_opted_in():
    trunk = shared_model().image_encoder.trunk
    pooled = [a for a in FusedHiera(trunk).attns if isinstance(a, PooledQueryAttention)]
    assert pooled and not any(a.window_kernel for a in pooled)
    opted = [a for a in FusedHiera(trunk, window_attention=True).attns
             if isinstance(a, PooledQueryAttention)]
    assert opted and all(a.window_kernel for a in opted)


def test_warps_follow_the_probed_shapes():
    """2 warps for unpooled 64-key windows and pooled queries over 16 keys, 4 elsewhere (the
    fastest of 2, 4, 8 per Hiera-L shape in the probe's timings)."""
    assert warps_for(64, pooled=False) == 2 and warps_for(16, pooled=True) == 2
    assert warps_for(16, pooled=False) == 4 and warps_for(64, pooled=True) == 4
