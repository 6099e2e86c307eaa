"""The opt-in fused group 'self_flash' on the CPU: its attention call is SDPA's there (the
FlashAttention path is for 16-bit CUDA calls of one head of one row; its GPU test is
test/gpu/test_self_flash_gpu.py), the group reaches the memory attention's self-attentions
only, is on by default and switched off as the other opt-in groups are; FlashAttention only
for one head of one row in 16-bit on CUDA, up to FLASH_ALONE_MAX_KEYS keys."""

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip('triton')

from conftest import shared_model  # noqa: E402
from sam2_ros.engine.config import DEFAULT_OPT_IN, FUSED_GROUPS, TrackerConfig  # noqa: E402
from sam2_ros.engine.cuda.kernels import fused  # noqa: E402
from sam2_ros.engine.cuda.kernels.memory_attention import FusedMemoryAttention  # noqa: E402
from sam2_ros.engine.cuda.kernels.rope_attention import (FLASH_ALONE_MAX_KEYS,  # noqa: E402
                                                         flash_alone, flash_applies)

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


def test_self_flash_is_on_by_default_and_switched_off_like_the_other_groups():
    default = TrackerConfig(random_weights=True).validate()
    assert 'self_flash' in DEFAULT_OPT_IN
    assert 'self_flash' in fused.enabled_groups(default, 'cuda')
    off = TrackerConfig(random_weights=True,
                        fused_opt_in=[g for g in DEFAULT_OPT_IN if g != 'self_flash']).validate()
    assert 'self_flash' not in fused.enabled_groups(off, 'cuda')
    # without the memory attention's group it changes nothing, so it is not on
    bare = TrackerConfig(random_weights=True, fused_opt_in=['self_flash'],
                         fused_kernels=tuple(g for g in FUSED_GROUPS
                                             if g != 'memory_attention')).validate()
    assert 'self_flash' not in fused.enabled_groups(bare, 'cuda')


def test_flash_applies_to_one_16bit_cuda_head_of_a_tiny_frame_only():
    def qk(b=1, h=1, lk=1024, dtype=torch.bfloat16, cuda=True):
        q, k = torch.empty(b, h, 1024, 8, dtype=dtype), torch.empty(b, h, lk, 8, dtype=dtype)
        if cuda:        # stand-ins that say they are on CUDA, the condition read off them
            q, k = (type('Cuda', (), {'is_cuda': True, 'dtype': t.dtype, 'shape': t.shape})()
                    for t in (q, k))
        return q, k
    assert flash_applies(*qk())
    assert flash_applies(*qk(lk=FLASH_ALONE_MAX_KEYS, dtype=torch.float16))
    assert not flash_applies(*qk(lk=FLASH_ALONE_MAX_KEYS + 1))    # large@1024's 4,096 keys
    assert not flash_applies(*qk(b=3)) and not flash_applies(*qk(h=2))
    assert not flash_applies(*qk(dtype=torch.float32)) and not flash_applies(*qk(cuda=False))
