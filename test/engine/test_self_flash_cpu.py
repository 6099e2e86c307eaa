"""The opt-in fused group 'self_flash' on the CPU: its attention call is SDPA's there (the
FlashAttention path is for 16-bit CUDA calls of one head of one row; its GPU test is
test/gpu/test_self_flash_gpu.py), the group reaches the memory attention's self-attentions
only, is off by default and switched on as the other opt-in groups are."""

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip('triton')

from conftest import shared_model  # noqa: E402
from sam2_ros.engine.config import DEFAULT_OPT_IN, FUSED_GROUPS, TrackerConfig  # noqa: E402
from sam2_ros.engine.cuda.kernels import fused  # noqa: E402
from sam2_ros.engine.cuda.kernels.memory_attention import FusedMemoryAttention  # noqa: E402
from sam2_ros.engine.cuda.kernels.rope_attention import flash_alone  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.mark.parametrize('batch', [1, 3])
def test_flash_alone_is_sdpa_off_cuda(batch):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, 1, 64, 32, generator=g) for _ in range(3))
    assert torch.equal(flash_alone(q, k, v), F.scaled_dot_product_attention(q, k, v))


def test_self_flash_reaches_the_self_attentions_only():
    ma = shared_model().memory_attention
    on, off = FusedMemoryAttention(ma, self_flash=True), FusedMemoryAttention(ma)
    for lon, loff in zip(on.layers, off.layers):
        assert lon.self_attn.attend is flash_alone and loff.self_attn.attend is not flash_alone
        assert lon.cross_attn_image.attend is loff.cross_attn_image.attend


def test_self_flash_is_off_by_default_and_switched_on_like_the_other_groups():
    default = TrackerConfig(random_weights=True).validate()
    assert 'self_flash' not in DEFAULT_OPT_IN
    assert 'self_flash' not in fused.enabled_groups(default, 'cuda')
    on = TrackerConfig(random_weights=True,
                       fused_opt_in=list(DEFAULT_OPT_IN) + ['self_flash']).validate()
    assert 'self_flash' in fused.enabled_groups(on, 'cuda')
    # without the memory attention's group it changes nothing, so it is not on
    bare = TrackerConfig(random_weights=True, fused_opt_in=['self_flash'],
                         fused_kernels=tuple(g for g in FUSED_GROUPS
                                             if g != 'memory_attention')).validate()
    assert 'self_flash' not in fused.enabled_groups(bare, 'cuda')
