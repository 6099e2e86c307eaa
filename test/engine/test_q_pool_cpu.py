"""Hiera's pooled-query attention (``q_pool.py``) against sam2's on the CPU (Triton's
interpreter): the pooling kernel is a maximum, so it is bitwise sam2's ``do_pool`` in any
dtype, NaN included; the attention module equals sam2's ``MultiScaleAttention`` bitwise too
(the same projections and attention call on the same values)."""

import pytest
import torch

pytest.importorskip('triton')

from sam2.modeling.backbones.hieradet import MultiScaleAttention, do_pool  # noqa: E402

from conftest import shared_model  # noqa: E402
from sam2_ros.engine.cuda.kernels.hiera import FusedHiera  # noqa: E402
from sam2_ros.engine.cuda.kernels.q_pool import (PooledQueryAttention,  # noqa: E402
                                                 max_pool_rows, pool_grid, pool_stride)

pytestmark = pytest.mark.usefixtures('one_thread')


def _rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@torch.no_grad()
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('h, w, stride', [(8, 8, (2, 2)), (7, 5, (2, 2)), (6, 9, (3, 3))])
def test_query_pooling_is_bitwise_sams_do_pool_on_a_strided_slice(dtype, h, w, stride):
    qkv = _rand(3, h * w, 3, 40, seed=1, dtype=dtype)        # q is a strided slice of this
    qkv[1, 4, 0, 7] = float('nan')                            # NaN propagates, as torch's
    q = qkv[:, :, 0]
    pool = torch.nn.MaxPool2d(kernel_size=stride, stride=stride, ceil_mode=False)
    ref = do_pool(q.reshape(3, h, w, 40), pool)               # [B, H', W', C]
    out = max_pool_rows(q, h, w, stride)
    assert out.is_contiguous() and out.dtype == dtype
    assert torch.equal(out.view(ref.shape).isnan(), ref.isnan())
    assert torch.equal(out.view(ref.shape).nan_to_num(), ref.nan_to_num())


@torch.no_grad()
@pytest.mark.parametrize('autocast', [False, True])
def test_pooled_query_attention_equals_sams_multiscale_attention(autocast):
    pool = torch.nn.MaxPool2d(kernel_size=(2, 2), stride=(2, 2), ceil_mode=False)
    attn = MultiScaleAttention(32, 64, num_heads=2, q_pool=pool)
    torch.nn.init.normal_(attn.qkv.weight, generator=torch.Generator().manual_seed(2))
    x = _rand(4, 8, 8, 32, seed=3)                            # [B * windows, ws, ws, C]
    with torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        ref = attn(x)
        out = PooledQueryAttention(attn, pool_stride(attn))(x)
    assert out.dtype == ref.dtype and torch.equal(out, ref)


@torch.no_grad()
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_shortcut_pooling_is_bitwise_sams_do_pool(dtype):
    """A stage change's shortcut (the projection's [B, H, W, C] output) pooled by the kernel
    is bitwise sam2's ``do_pool``, NaN included; a layout the kernel cannot read (a permuted
    grid) and a pooling that is not plain take sam2's."""
    x = _rand(2, 6, 10, 24, seed=4, dtype=dtype)
    x[1, 3, 7, 5] = float('nan')
    pool = torch.nn.MaxPool2d(kernel_size=(2, 2), stride=(2, 2), ceil_mode=False)
    for grid in (x, x.transpose(1, 2)):                       # the second: sam2's path
        ref, out = do_pool(grid, pool), pool_grid(grid, pool)
        assert out.shape == ref.shape and out.dtype == dtype
        assert torch.equal(out.isnan(), ref.isnan())
        assert torch.equal(out.nan_to_num(), ref.nan_to_num())
    ceil = torch.nn.MaxPool2d(kernel_size=2, stride=2, ceil_mode=True)
    assert torch.equal(pool_grid(x[:, :5], ceil).nan_to_num(),
                       do_pool(x[:, :5], ceil).nan_to_num())
    assert pool_grid(x, None) is x


def test_only_plain_max_pooling_takes_the_kernel():
    def stride_of(**kw):
        return pool_stride(MultiScaleAttention(8, 8, 1, q_pool=torch.nn.MaxPool2d(**kw)))
    assert stride_of(kernel_size=2, stride=2) == (2, 2)
    assert stride_of(kernel_size=2) == (2, 2)
    assert stride_of(kernel_size=3, stride=2) is None
    assert stride_of(kernel_size=2, stride=2, ceil_mode=True) is None
    assert stride_of(kernel_size=2, stride=2, padding=1) is None
    assert pool_stride(MultiScaleAttention(8, 8, 1)) is None


def test_fused_trunk_pools_queries_and_shortcuts_without_sams_pooling_and_copies():
    """The stage changes' query and shortcut poolings run the kernel: none of the trunk's
    max poolings is left."""
    from torch.utils._python_dispatch import TorchDispatchMode

    trunk = shared_model(64).image_encoder.trunk
    x = _rand(1, 3, 64, 64, seed=9)
    pooled = sum(pool_stride(b.attn) is not None for b in trunk.blocks)

    class Count(TorchDispatchMode):
        pools = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.pools += func.__name__.startswith('max_pool2d')
            return func(*args, **(kwargs or {}))
    counts = []
    for m in (trunk, FusedHiera(trunk)):
        with torch.no_grad(), torch.autocast('cpu', torch.bfloat16):
            m(x)
            with Count() as c:
                m(x)
        counts.append(c.pools)
    assert pooled >= 1 and counts == [2 * pooled, 0], (pooled, counts)
