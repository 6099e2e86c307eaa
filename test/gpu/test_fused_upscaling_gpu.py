"""The mask decoder's output upscaling with the 'layernorm2d' group on, on the GPU (marked gpu:
CI has none): the residual add before its LayerNorm2d inside the norm's kernel and the last
add + GELU in one kernel (sam2_ros/engine/cuda/kernels/layernorm2d.py), against sam2's modules
at tiny@512 (image embedding [B, 256, 32, 32], feat_s1 [B, 64, 64, 64], feat_s0
[B, 32, 128, 128]), B = 1 and 3; the features contiguous or as the tracker passes them (views
of one frame's [HW, 1, C] features expanded to B).

fp32 (TF32 off) within 1e-4 x max |sam2|, bf16 autocast (weights and features in bf16, as the
tracker has them) within 2^-6: the adds round as torch's, the norm's bf16 intermediates and
the erf flip a bf16 rounding now and then (the CPU tests' bounds). The errors and the kernel
counts go to $OUT/gpu_fused_kernels.json.
"""

import copy

import pytest
import torch

from gpu_common import cuda_kernels, cuda_rand as _rand, fused_test_model
from gpu_common import record_fused as _record

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]
TOL = {'fp32': 1e-4, 'bf16': 2.0 ** -6}


@pytest.fixture(scope='module')
def model():
    return fused_test_model()


def _decoders(model, precision):
    """(sam2's decoder, the copy of the 'decoder_heads' and 'layernorm2d' groups) over the
    same weights: its upscaling's LayerNorm2d with a random affine (sam2's init, 1 and 0,
    would hide a wrong one) on a private copy; bf16: weights stored in bf16 as the tracker
    does."""
    from sam2_ros.engine.cuda.kernels.layernorm2d import fuses_upscaling, swap_layernorm2d
    from sam2_ros.engine.cuda.kernels.mask_decoder import FusedMaskDecoder
    from sam2_ros.engine.model import precast
    dec = copy.copy(model.sam_mask_decoder)
    dec._modules = dict(dec._modules)
    up = copy.deepcopy(dec.output_upscaling)
    with torch.no_grad():
        g = torch.Generator(device='cuda').manual_seed(3)
        up[1].weight.normal_(1.0, 0.2, generator=g)
        up[1].bias.normal_(0.0, 0.2, generator=g)
    dec._modules['output_upscaling'] = up
    if precision == 'bf16':
        dec = precast(dec)
    twin = swap_layernorm2d(FusedMaskDecoder(dec))     # the order fused.fused_model swaps in
    _, ln1, act1, _, act2 = twin.output_upscaling
    assert fuses_upscaling(ln1, act1, act2)
    return dec, twin


def _features(batch, layout, dtype):
    """[feat_s0, feat_s1] at tiny@512: contiguous, or 'tracker': views of [HW, 1, C]
    expanded to B (batch stride 0, channels last), as encoder.high_res_features passes them."""
    feats = []
    for seed, (c, s) in enumerate(((32, 128), (64, 64))):
        if layout == 'tracker':
            x = _rand(s * s, 1, c, seed=20 + seed).to(dtype).expand(-1, batch, -1)
            feats.append(x.permute(1, 2, 0).reshape(batch, c, s, s))
        else:
            feats.append(_rand(batch, c, s, s, seed=20 + seed).to(dtype))
    return feats


def _inputs(model, batch, layout, precision):
    dt = torch.bfloat16 if precision == 'bf16' else torch.float32
    return dict(image_embeddings=_rand(batch, 256, 32, 32, seed=11),
                image_pe=model.sam_prompt_encoder.get_dense_pe(),
                sparse_prompt_embeddings=_rand(batch, 2, 256, seed=12),
                dense_prompt_embeddings=_rand(batch, 256, 32, 32, seed=13), repeat_image=False,
                high_res_features=_features(batch, layout, dt))


def _rel(out, ref):
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1))


def _ctx(precision):
    return torch.autocast('cuda', torch.bfloat16, enabled=precision == 'bf16')


@pytest.mark.parametrize('layout', ['contiguous', 'tracker'])
@pytest.mark.parametrize('batch', [1, 3])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_upscaling_equals_sam2_gpu(model, precision, batch, layout):
    """The upscaling alone (a transformer output [B, 256, 32, 32] -> [B, 32, 128, 128]):
    sam2's modules in sam2's order against the norm with its residual and add_gelu."""
    from sam2_ros.engine.cuda.kernels.layernorm2d import add_gelu
    dec, twin = _decoders(model, precision)
    dc1, ln1, act1, dc2, act2 = dec.output_upscaling
    fln1 = twin.output_upscaling[1]
    src = _rand(batch, 256, 32, 32, seed=30)
    feat_s0, feat_s1 = _features(batch, layout, torch.bfloat16 if precision == 'bf16'
                                 else torch.float32)
    with torch.inference_mode(), _ctx(precision):
        ref = act2(dc2(act1(ln1(dc1(src) + feat_s1))) + feat_s0)
        out = add_gelu(dc2(fln1(dc1(src), residual=feat_s1)), feat_s0)
    assert out.dtype == ref.dtype and out.shape == ref.shape == (batch, 32, 128, 128)
    err = _rel(out, ref)
    _record(f'upscaling_b{batch}_{layout}_{precision}', {'rel_err': err})
    assert err <= TOL[precision], err


@pytest.mark.parametrize('batch', [1, 3])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_upscaling_predict_masks_equals_sam2_gpu(model, precision, batch):
    """predict_masks (masks, IoU, tokens, object score) of the copy against sam2's, the
    features as the tracker passes them; the heads' kernel rounds as in
    test_fused_kernels_gpu.py's decoder test, within the same bound."""
    dec, twin = _decoders(model, precision)
    kw = _inputs(model, batch, 'tracker', precision)
    with torch.inference_mode(), _ctx(precision):
        ref, out = dec.predict_masks(**kw), twin.predict_masks(**kw)
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype and o.shape == r.shape
    errs = [_rel(o, r) for o, r in zip(out, ref)]
    _record(f'upscaling_predict_masks_b{batch}_{precision}', {'rel_err': errs})
    assert max(errs) <= TOL[precision], errs


@pytest.mark.parametrize('batch', [1, 3])
def test_fused_upscaling_kernel_count_gpu(model, batch, monkeypatch):
    """CUDA kernels of one predict_masks call (bf16, weights in bf16): 2 fewer with the
    upscaling's adds fused than the same copy running sam2's upscaling."""
    from sam2_ros.engine.cuda.kernels import mask_decoder
    _, twin = _decoders(model, 'bf16')
    kw = _inputs(model, batch, 'tracker', 'bf16')
    with torch.inference_mode(), _ctx('bf16'):
        fused = cuda_kernels(lambda: twin.predict_masks(**kw))[0]
        monkeypatch.setattr(mask_decoder, 'fuses_upscaling', lambda *mods: False)
        unfused = cuda_kernels(lambda: twin.predict_masks(**kw))[0]
    _record(f'upscaling_predict_masks_kernels_bf16_b{batch}',
            {'unfused': unfused, 'fused': fused})
    assert fused == unfused - 2, (unfused, fused)
