"""sam2_ros/engine/cuda/kernels/patch_embed.py in Triton's interpreter (small shapes): the
patch embedding kernel computes sam2's strided convolution and its bias add, channels last,
in float32 (any input strides, odd sizes, zero padding at every border) and in bf16 (operands,
sum and bias rounded as sam2's convolution and bias add round them), and the fused trunk with
it tracks as without it."""

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip('triton')

from sam2_ros.engine.cuda.kernels.patch_embed import (  # noqa: E402
    FusedPatchEmbed, pack, patch_embed)


class _Embed(torch.nn.Module):
    """sam2's ``PatchEmbed``: a Conv2d, then channels last."""

    def __init__(self, c, n, k, s, p, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.proj = torch.nn.Conv2d(c, n, k, stride=s, padding=p)

    def forward(self, x):
        return self.proj(x).permute(0, 2, 3, 1)


@pytest.mark.parametrize('c, n, k, s, p, h, w', [
    (3, 24, 7, 4, 3, 30, 22),        # Hiera's geometry, odd sizes
    (3, 16, 3, 2, 1, 17, 16),
    (4, 40, 5, 3, 2, 19, 23)])
def test_float32_equals_the_convolution_channels_last(c, n, k, s, p, h, w):
    embed = _Embed(c, n, k, s, p)
    x = torch.randn(2, h, w, c, generator=torch.Generator().manual_seed(1)).permute(0, 3, 1, 2)
    assert not x.is_contiguous()                    # strided: read as it is
    with torch.no_grad():
        ref = embed(x)
        out = patch_embed(x, *pack(embed.proj, torch.float32), (k, k), s, p)
    assert out.shape == ref.shape and out.is_contiguous()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_bf16_rounds_as_the_convolution_then_the_bias_add():
    """bf16: the float32 image and weights rounded to bf16, the sum rounded, then the bias
    added and rounded (sam2's convolution, then its bias add): against float64 math of those
    steps, within one bf16 step (another summation order may round the other way)."""
    embed = _Embed(3, 32, 7, 4, 3, seed=2)
    x = torch.randn(1, 3, 33, 29, generator=torch.Generator().manual_seed(3))
    conv = embed.proj
    with torch.no_grad():
        out = patch_embed(x, *pack(conv, torch.bfloat16), (7, 7), 4, 3)
        exact = F.conv2d(x.bfloat16().double(), conv.weight.bfloat16().double(), stride=4,
                         padding=3).bfloat16()
        ref = (exact.double() + conv.bias.bfloat16().double()[:, None, None]).bfloat16()
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref.permute(0, 2, 3, 1).float(), rtol=2 ** -7,
                               atol=2 ** -7)
    assert (out.float() == ref.permute(0, 2, 3, 1).float()).float().mean() > 0.95


def test_module_packs_once_per_dtype_and_takes_only_plain_convolutions():
    embed = _Embed(3, 24, 7, 4, 3)
    fused = FusedPatchEmbed(embed)
    assert FusedPatchEmbed.applicable(embed)
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), embed(x), rtol=1e-5, atol=1e-5)
        fused(x)
    assert list(fused.packed) == [(torch.float32, x.device)]
    for bad in (torch.nn.Conv2d(3, 8, 3, groups=1, bias=False),
                torch.nn.Conv2d(3, 8, 3, dilation=2), torch.nn.Conv2d(3, 8, 3, padding='same'),
                torch.nn.Conv2d(3, 8, 3, stride=(1, 2))):
        embed.proj = bad
        assert not FusedPatchEmbed.applicable(embed)


def test_fused_trunk_with_the_patch_kernel_equals_sam2s_trunk():
    """The fused Hiera trunk ('hiera' with 'patch_embed') = sam2's trunk, float32."""
    from conftest import assert_close_rel, shared_model
    from sam2_ros.engine.cuda.kernels.hiera import FusedHiera
    trunk = shared_model(64).image_encoder.trunk
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(9))
    with torch.inference_mode():
        ref = trunk(x)
        fused = FusedHiera(trunk, patch_embed=True)
        assert isinstance(fused.patch_embed, FusedPatchEmbed)
        out = fused(x)
    for o, r in zip(out, ref):
        assert o.shape == r.shape
        assert_close_rel(o, r, 1e-5)
