"""Hiera's query pooling kernel (``q_pool.py``) on the GPU (marked gpu: CI has none): bitwise
sam2's ``do_pool`` at tiny@512's stage changes (a maximum is exact), and one kernel where sam2
launches a pooling and a copy; the stage changes' shortcut pooling too. The whole fused trunk
against sam2's is ``test_fused_kernels_gpu.py::test_fused_hiera_gpu``."""

import pytest
import torch

from gpu_common import cuda_kernels, cuda_rand, record_fused
from sam2.modeling.backbones.hieradet import do_pool
from sam2_ros.engine.cuda.kernels.q_pool import max_pool_rows

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]


@torch.inference_mode()
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('windows, side, c', [(256, 8, 192), (256, 4, 384), (9, 14, 768)])
def test_query_pooling_is_bitwise_do_pool_gpu(dtype, windows, side, c):
    """tiny@512: block 1 (128x128 in 8x8 windows, 96 -> 192 channels), block 3 (64x64 in 4x4,
    -> 384), block 10 (32x32 padded to 42x42 in 14x14 windows, -> 768)."""
    qkv = cuda_rand(windows, side * side, 3, c).to(dtype)
    q = qkv[:, :, 0]
    pool = torch.nn.MaxPool2d(kernel_size=(2, 2), stride=(2, 2))
    ref = do_pool(q.reshape(windows, side, side, c), pool).reshape(windows, -1, c)
    out = max_pool_rows(q, side, side, (2, 2))
    assert torch.equal(out, ref)
    n_ours, _ = cuda_kernels(lambda: max_pool_rows(q, side, side, (2, 2)))
    n_sam2, _ = cuda_kernels(lambda: do_pool(q.reshape(windows, side, side, c), pool)
                             .reshape(windows, -1, c))
    record_fused(f'q_pool_{windows}x{side}x{c}_{str(dtype)[6:]}',
                 {'bitwise': True, 'kernels': n_ours, 'kernels_sam2': n_sam2})
    assert n_ours == 1 and n_sam2 >= 2, (n_ours, n_sam2)


@torch.inference_mode()
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('side, c', [(128, 192), (64, 384), (32, 768),
                                     (256, 288), (128, 576), (64, 1152)])
def test_shortcut_pooling_is_bitwise_do_pool_gpu(dtype, side, c):
    """A stage change's shortcut (the projection's [1, H, W, C] output) pooled by
    ``pool_grid``: tiny@512's three stage changes, then large@1024's; bitwise sam2's
    ``do_pool``, one kernel; the GPU time of each is recorded."""
    from sam2_ros.engine.cuda.kernels.q_pool import pool_grid
    x = cuda_rand(1, side, side, c).to(dtype)
    pool = torch.nn.MaxPool2d(kernel_size=(2, 2), stride=(2, 2))
    assert torch.equal(pool_grid(x, pool), do_pool(x, pool))
    n_ours, us_ours = cuda_kernels(lambda: pool_grid(x, pool))
    n_sam2, us_sam2 = cuda_kernels(lambda: do_pool(x, pool))
    record_fused(f'shortcut_pool_{side}x{c}_{str(dtype)[6:]}',
                 {'bitwise': True, 'kernels': n_ours, 'us': us_ours,
                  'kernels_sam2': n_sam2, 'us_sam2': us_sam2})
    assert n_ours == 1, n_ours
