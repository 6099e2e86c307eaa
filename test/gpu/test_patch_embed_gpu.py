"""The fused group 'patch_embed' (``patch_embed.py``: Hiera's patch embedding, convolution and
bias add and channels last, in one implicit-GEMM kernel) on the GPU (marked gpu: CI has none).

* The kernel against sam2's ``PatchEmbed`` of Hiera-T (96 channels) at 512 px and Hiera-L
  (144) at 1024 px, on the float32 image the frame-in graph writes: float32 (no TF32 on either
  side) within 1e-5 of the largest magnitude, bf16 under autocast within one bf16 step (another
  summation order may round the other way); its kernels and time beside sam2's module's go to
  $OUT/gpu_fused_kernels.json.
* Tracker level, as test_value_attention_gpu.py: graphs with the group against graphs without
  and against the eager reference, 60 frames with a box, a mask, a correction and a removal:
  logits within 1e-3 (fp32) and 0.5 (bf16), every step a replay, no fallback.
"""

import pytest
import torch

from gpu_common import (cuda_kernels, cuda_rand, record_fused, tiny_cuda_cfg, tracker_stream,
                        worst_logits)
from scenarios import schedule, synthetic_frames
from sam2_ros.engine.config import DEFAULT_OPT_IN
from sam2_ros.engine.cuda.kernels.patch_embed import FusedPatchEmbed

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]


def _embed(channels: int, seed: int) -> torch.nn.Module:
    """sam2's PatchEmbed of Hiera (7x7, stride 4, padding 3) with ``channels`` outputs."""
    from sam2.modeling.backbones.utils import PatchEmbed
    torch.manual_seed(seed)
    return PatchEmbed(kernel_size=(7, 7), stride=(4, 4), padding=(3, 3), in_chans=3,
                      embed_dim=channels).cuda().eval()


@torch.inference_mode()
@pytest.mark.parametrize('channels, size', [(96, 512), (144, 1024)])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_kernel_equals_sam2s_patch_embedding_gpu(channels, size, precision):
    torch.backends.cudnn.allow_tf32 = False
    embed = _embed(channels, seed=channels)
    fused = FusedPatchEmbed(embed)
    x = cuda_rand(1, 3, size, size, seed=size)
    ctx = torch.autocast('cuda', torch.bfloat16, enabled=precision == 'bf16')
    with ctx:
        ref, out = embed(x), fused(x)
        n_ref, us_ref = cuda_kernels(lambda: embed(x).flatten(1, 2).contiguous())
        n_ours, us_ours = cuda_kernels(lambda: fused(x))
    assert out.shape == ref.shape and out.dtype == ref.dtype and out.is_contiguous()
    scale = ref.float().abs().max().item()
    err = (out.float() - ref.float()).abs().max().item() / scale
    exact = (out == ref).float().mean().item()
    record_fused(f'patch_embed_{channels}x{size}_{precision}',
                 {'worst_rel': err, 'exact_fraction': exact, 'kernels': n_ours, 'us': us_ours,
                  'kernels_sam2': n_ref, 'us_sam2': us_ref})
    assert err <= (1e-5 if precision == 'fp32' else 2.0 ** -7), err
    if precision == 'bf16':
        assert exact > 0.9, exact


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_patch_embed_graphs_equal_graphs_without_and_eager(precision):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    frames = synthetic_frames(60, h=360, w=640)
    events = schedule(360, 640, add2=10, add3=20, fix=30, remove=45)
    with_it = list(DEFAULT_OPT_IN)                       # 'patch_embed' among them
    without = [g for g in with_it if g != 'patch_embed']
    ours, stats, tr = tracker_stream(tiny_cuda_cfg(precision=precision, fused_opt_in=with_it),
                                     frames, events)
    assert isinstance(tr.runner.graphs.model.image_encoder.trunk.patch_embed, FusedPatchEmbed)
    plain, _, _ = tracker_stream(tiny_cuda_cfg(precision=precision, fused_opt_in=without),
                                 frames, events)
    eager, _, _ = tracker_stream(tiny_cuda_cfg(precision=precision, use_cuda_graphs=False),
                                 frames, events)
    worst = {'patch_embed_vs_graphs': worst_logits(ours, plain),
             'patch_embed_vs_eager': worst_logits(ours, eager)}
    record_fused(f'patch_embed_tracker_{precision}', {'worst_logits': worst, 'stats': stats})
    assert stats.get('graph_steps', 0) > 100 and stats.get('eager_steps', 0) == 0, stats
    assert stats.get('fallbacks', 0) == 0, tr.fallback_reasons
    assert max(worst.values()) <= (1e-3 if precision == 'fp32' else 0.5), worst
