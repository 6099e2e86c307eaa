"""Hiera's small-window attention kernel (``window_attention.py``, opt-in 'window_attention')
on the GPU (marked gpu: CI has none), on the shapes it takes in Hiera-L at 1024 px (8x8 windows
of 2 heads, 4x4 of 4, 8x8 of 16; 72-channel heads) and Hiera-T at 512 px (8x8 of 1 head, 4x4
of 2, 7x7 of 8; 96 channels): against SDPA in float32 on the same bf16 q, k, v, within the
tolerance the module docstring states (bf16 rounding of the probabilities and the output), and
against sam2's own bf16 call (whatever backend torch picks) within twice that. The kernel
times beside sam2's call are recorded (the benchmark rows ``*_winattn`` judge the frame)."""

import pytest
import torch
import torch.nn.functional as F

from gpu_common import cuda_kernels, cuda_rand, record_fused
from sam2_ros.engine.cuda.kernels.window_attention import window_attention

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]
BF16_TOL = 2.0 ** -6        # as the CPU test: relative to the output's largest magnitude


def _sdpa(qkv, dtype=None):
    q, k, v = (t.transpose(1, 2) if dtype is None else t.to(dtype).transpose(1, 2)
               for t in torch.unbind(qkv, 2))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2)


@torch.inference_mode()
@pytest.mark.parametrize('windows, tokens, heads, d', [
    (1024, 64, 2, 72), (1024, 16, 4, 72), (16, 64, 16, 72),        # Hiera-L @ 1024
    (256, 64, 1, 96), (256, 16, 2, 96), (9, 49, 8, 96)])          # Hiera-T @ 512
def test_window_attention_within_bf16_rounding_of_sdpa_gpu(windows, tokens, heads, d):
    qkv = (cuda_rand(windows, tokens, 3, heads, d) * 2).to(torch.bfloat16)
    out = window_attention(qkv)
    exact = _sdpa(qkv, torch.float32)
    sam2 = _sdpa(qkv)
    scale = max(1.0, exact.abs().max().item())
    err = (out.float() - exact).abs().max().item() / scale
    err_sam2 = (out.float() - sam2.float()).abs().max().item() / scale
    n_ours, us_ours = cuda_kernels(lambda: window_attention(qkv))
    n_sam2, us_sam2 = cuda_kernels(lambda: _sdpa(qkv))
    record_fused(f'window_attention_{windows}x{tokens}x{heads}x{d}',
                 {'worst_rel_vs_fp32': err, 'worst_rel_vs_sam2_bf16': err_sam2,
                  'kernels': n_ours, 'us': us_ours, 'kernels_sam2': n_sam2, 'us_sam2': us_sam2})
    assert err <= BF16_TOL, err
    assert err_sam2 <= 2 * BF16_TOL, err_sam2


def _pooled_q(qkv, ws):
    """sam2's query pooling (2x2 max within each ws x ws window) of qkv's q: [B, L/4, H, D]."""
    q = qkv[:, :, 0]                                                   # [B, L, H, D]
    b, n, heads, d = q.shape
    grid = q.reshape(b, ws, ws, heads * d).permute(0, 3, 1, 2)
    return F.max_pool2d(grid, 2).permute(0, 2, 3, 1).reshape(b, n // 4, heads, d)


@torch.inference_mode()
@pytest.mark.parametrize('windows, ws, heads, d', [
    (1024, 8, 4, 72), (1024, 4, 8, 72),                              # Hiera-L @ 1024
    (256, 8, 2, 96), (256, 4, 4, 96)])                               # Hiera-T @ 512
def test_pooled_window_attention_within_bf16_rounding_of_sdpa_gpu(windows, ws, heads, d):
    """A stage change's first block: the queries max-pooled in the kernel (exact), then
    attention over the window's keys, against SDPA on sam2's pooled queries."""
    qkv = (cuda_rand(windows, ws * ws, 3, heads, d) * 2).to(torch.bfloat16)
    out = window_attention(qkv, pool=(ws, 2, 2))
    q = _pooled_q(qkv, ws)
    k, v = qkv[:, :, 1], qkv[:, :, 2]
    exact = F.scaled_dot_product_attention(
        *(t.float().transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
    sam2 = F.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
    scale = max(1.0, exact.abs().max().item())
    err = (out.float() - exact).abs().max().item() / scale
    err_sam2 = (out.float() - sam2.float()).abs().max().item() / scale
    n_ours, us_ours = cuda_kernels(lambda: window_attention(qkv, pool=(ws, 2, 2)))
    n_sam2, us_sam2 = cuda_kernels(lambda: F.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in (_pooled_q(qkv, ws), k, v))))
    record_fused(f'window_attention_pooled_{windows}x{ws * ws}x{heads}x{d}',
                 {'worst_rel_vs_fp32': err, 'worst_rel_vs_sam2_bf16': err_sam2,
                  'kernels': n_ours, 'us': us_ours, 'kernels_sam2': n_sam2, 'us_sam2': us_sam2})
    assert err <= BF16_TOL, err
    assert err_sam2 <= 2 * BF16_TOL, err_sam2
