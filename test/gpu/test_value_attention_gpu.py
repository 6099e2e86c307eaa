"""The opt-in 'memory_values' (``value_attention.py``: the memory cross-attention over the raw
64-channel memory, its value projection folded into the output projection) on the GPU (marked
gpu: CI has none).

* The kernel on the memory attention's shapes at tiny@512 and large@1024 (one head of 256
  channels, 64-channel values; whole and split), bf16: within bf16 rounding of float32 math
  on the same inputs (the probabilities are rounded to bf16 for the second product, as
  FlashAttention rounds them); the kernels' times beside FlashAttention's current call go to
  $OUT/gpu_fused_kernels.json (tools/probes/value_attention_probe.py times the choices).
* Tracker level, as test_fused_graphs_gpu.py: 60 frames, 3 objects (box mid-stream, mask,
  correction, removal), graphs with the group against graphs without and against the eager
  reference: logits within 1e-3 (fp32) and 0.5 (bf16), every step a replay, no fallback.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from gpu_common import (cuda_kernels, cuda_rand, record_fused, tiny_cuda_cfg, tracker_stream,
                        worst_logits)
from scenarios import schedule, synthetic_frames
from sam2_ros.engine.cuda.kernels.value_attention import attend

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]
BF16_TOL = 2.0 ** -6        # relative to the output's largest magnitude


@torch.inference_mode()
@pytest.mark.parametrize('b, lq, lk', [(1, 1024, 7 * 1024 + 64), (8, 1024, 7 * 1024 + 64),
                                       (1, 4096, 7 * 4096 + 64), (1, 4096, 4096)])
def test_kernel_within_bf16_rounding_of_float32_math_gpu(b, lq, lk):
    q = (cuda_rand(b, 1, lq, 256, seed=1) * 2).to(torch.bfloat16)
    k = (cuda_rand(b, 1, lk, 256, seed=2) * 2).to(torch.bfloat16)
    v = cuda_rand(b, 1, lk, 64, seed=3).to(torch.bfloat16)
    out = attend(q, k, v)
    s = q.float() @ k.float().transpose(-1, -2) / math.sqrt(256)
    exact = torch.softmax(s, -1) @ v.float()
    scale = max(1.0, exact.abs().max().item())
    err = (out.float() - exact).abs().max().item() / scale
    v_full = cuda_rand(b, 1, lk, 256, seed=4).to(torch.bfloat16)
    n_ours, us_ours = cuda_kernels(lambda: attend(q, k, v))
    n_flash, us_flash = cuda_kernels(lambda: F.scaled_dot_product_attention(q, k, v_full))
    record_fused(f'value_attention_{b}x{lq}x{lk}',
                 {'worst_rel_vs_fp32': err, 'kernels': n_ours, 'us': us_ours,
                  'kernels_sdpa_256_values': n_flash, 'us_sdpa_256_values': us_flash})
    assert err <= BF16_TOL, err


@pytest.mark.parametrize('steady', ['auto', 'split', 'flash'])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_memory_values_graphs_equal_graphs_without_and_eager(precision, steady):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    frames = synthetic_frames(60, h=360, w=640)
    events = schedule(360, 640, add2=10, add3=20, fix=30, remove=45)
    base = dict(precision=precision, steady_attention=steady)
    ours, stats, tr = tracker_stream(tiny_cuda_cfg(fused_opt_in=('memory_values',), **base),
                                     frames, events)
    ma = tr.runner.graphs.model.memory_attention
    assert ma.narrow_values is attend and ma.shared_kv.v is None
    plain, _, _ = tracker_stream(tiny_cuda_cfg(fused_opt_in=(), **base), frames, events)
    eager, _, _ = tracker_stream(tiny_cuda_cfg(use_cuda_graphs=False, **base), frames, events)
    worst = {'memory_values_vs_graphs': worst_logits(ours, plain),
             'memory_values_vs_eager': worst_logits(ours, eager)}
    record_fused(f'memory_values_tracker_{precision}_{steady}',
                 {'worst_logits': worst, 'stats': stats})
    assert stats.get('graph_steps', 0) > 100 and stats.get('eager_steps', 0) == 0, stats
    assert stats.get('fallbacks', 0) == 0, tr.fallback_reasons
    tol = 1e-3 if precision == 'fp32' else 0.5
    assert max(worst.values()) <= tol, worst
