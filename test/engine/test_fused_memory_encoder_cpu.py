"""The 'memory_encoder' group (sam2_ros/engine/cuda/kernels/memory_encoder.py) against sam2's
MemoryEncoder on the CPU, its kernels in Triton's interpreter, at image size 64 (masks
[2, 1, 64, 64], pix_feat [2, 256, 4, 4]), with random LayerNorm2d affines and layer scales
(sam2's init, 1 / 0 and 1e-6, would hide errors).

fp32: within 1e-4 x max |sam2| (measured ~4e-7: another summation order; the bound leaves room
for the LayerNorm2d over 4 and 16 channels, which amplifies a rounding difference of the mean
where a pixel's channels are nearly equal). bf16 (CPU autocast): the kernels round where sam2's
ops do, so a stage's output is bitwise or one ulp off where a float32 sum lands near a rounding
boundary; through the 11 kernels within 2^-6 x max |sam2| (measured ~2^-8).
"""

import copy

import pytest
import torch

pytest.importorskip('triton')

from conftest import shared_model  # noqa: E402
from sam2_ros.engine.cuda.kernels import fused  # noqa: E402
from sam2_ros.engine.cuda.kernels.constants import ConstantSinePE, with_constants  # noqa: E402
from sam2_ros.engine.cuda.kernels.layernorm2d import FusedLayerNorm2d  # noqa: E402
from sam2_ros.engine.cuda.kernels.memory_encoder import (FusedMemoryEncoder,  # noqa: E402
                                                         fused_memory_encoder, unsupported)

pytestmark = pytest.mark.usefixtures('one_thread')
TOL = {False: 1e-4, True: 2.0 ** -6}


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _perturbed_model():
    """A copy of the shared random tiny@64 model whose memory encoder has random norm affines
    and layer scales (the shared model is left as it is)."""
    from sam2.modeling.memory_encoder import CXBlock
    from sam2.modeling.sam2_utils import LayerNorm2d
    model = copy.deepcopy(shared_model(64))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for mod in model.memory_encoder.modules():
            if isinstance(mod, LayerNorm2d):
                mod.weight.normal_(1.0, 0.3, generator=g)
                mod.bias.normal_(0.0, 0.3, generator=g)
            if isinstance(mod, CXBlock):
                mod.gamma.normal_(0.0, 0.5, generator=g)
    return model


@pytest.fixture(scope='module')
def model():
    return _perturbed_model()


def _run(fn, autocast):
    with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        return fn()


def _close(out, ref, rel):
    assert out.dtype == ref.dtype and out.shape == ref.shape
    err = (out.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    assert err <= rel * scale, (err, scale, err / scale)
    return err / scale


def _inputs(batch=2):
    """pix_feat as _encode_new_memory makes it (a [B, C, h, w] view of [h * w, B, C]) and
    masks in (0, 1) as after its sigmoid."""
    pix = _rand(16, batch, 256, seed=2).permute(1, 2, 0).view(batch, 256, 4, 4)
    masks = torch.sigmoid(4 * _rand(batch, 1, 64, 64, seed=3))
    return pix, masks


@pytest.mark.parametrize('autocast', [False, True])
def test_fused_memory_encoder_equals_sam2(model, autocast):
    mem = model.memory_encoder
    twin = FusedMemoryEncoder(mem)
    pix, masks = _inputs()
    ref = _run(lambda: mem(pix, masks, skip_mask_sigmoid=True), autocast)
    out = _run(lambda: twin(pix, masks, skip_mask_sigmoid=True), autocast)
    rel = _close(out['vision_features'], ref['vision_features'], TOL[autocast])
    print('memory encoder rel err', autocast, rel)
    assert out['vision_features'].is_contiguous()
    assert torch.equal(out['vision_pos_enc'][0], ref['vision_pos_enc'][0])


def test_fused_memory_encoder_applies_the_mask_sigmoid_as_sam2(model):
    """skip_mask_sigmoid=False: the first stage takes the sigmoid of the logits in (its
    padding stays 0, not sigmoid(0))."""
    mem = model.memory_encoder
    pix, _ = _inputs(batch=1)
    logits = 6 * _rand(1, 1, 64, 64, seed=4)
    ref = _run(lambda: mem(pix, logits)['vision_features'], False)
    _close(_run(lambda: FusedMemoryEncoder(mem)(pix, logits)['vision_features'], False), ref,
           TOL[False])


def test_fused_memory_encoder_is_eleven_kernel_launches(model, kernel_launches):
    launches = kernel_launches
    pix, masks = _inputs(batch=1)
    _run(lambda: FusedMemoryEncoder(model.memory_encoder)(pix, masks, True), True)
    assert len(launches) == 11, launches      # 4 downsampler stages, 2 x 3 CXBlock, out_proj


def test_other_memory_encoder_structures_keep_sam2s_module(model):
    mem = copy.copy(model.memory_encoder)
    mem._modules = dict(mem._modules, out_proj=torch.nn.Identity())    # out_dim == in_dim
    assert 'out_proj' in unsupported(mem)
    assert fused_memory_encoder(mem) is mem
    assert unsupported(model.memory_encoder) == ''
    fp16 = FusedMemoryEncoder(model.memory_encoder)
    with torch.autocast('cpu', torch.float16):       # no kernel for it: sam2's module runs
        assert fp16.compute_dtype(torch.zeros(1)) is None


def test_group_swaps_the_memory_encoder_only_when_on(model):
    from sam2.modeling.memory_encoder import MemoryEncoder
    twin = fused.fused_model(model, ('memory_encoder', 'layernorm2d', 'constants'))
    mem = twin.memory_encoder
    assert isinstance(mem, FusedMemoryEncoder) and isinstance(mem.position_encoding,
                                                              ConstantSinePE)
    # 'layernorm2d' does not wrap the norms inside (the kernels do them)
    assert not any(isinstance(m, FusedLayerNorm2d) for m in mem.modules())
    assert any(isinstance(m, FusedLayerNorm2d) for m in twin.sam_mask_decoder.modules())
    for groups in (('layernorm2d', 'constants'), ('hiera',)):
        assert type(fused.fused_model(model, groups).memory_encoder) is MemoryEncoder
    assert type(model.memory_encoder) is MemoryEncoder      # the model is left unchanged


def test_constants_group_applies_after_the_memory_encoder_group(model):
    """with_constants on a model whose memory encoder is already fused: the position encoding
    it replaces is the one the fused module calls."""
    twin = with_constants(fused.fused_model(model, ('memory_encoder',)))
    mem = twin.memory_encoder
    assert isinstance(mem, FusedMemoryEncoder) and isinstance(mem.position_encoding,
                                                              ConstantSinePE)
    pix, masks = _inputs(batch=1)
    out = _run(lambda: mem(pix, masks, True), False)
    ref = _run(lambda: model.memory_encoder(pix, masks, True), False)
    assert torch.equal(out['vision_pos_enc'][0], ref['vision_pos_enc'][0])
    assert len(mem.position_encoding.store.values) == 1


@pytest.mark.parametrize('autocast', [False, True])
def test_fused_model_encodes_a_new_memory_as_sam2(model, autocast):
    """sam2's _encode_new_memory (sigmoid, scale and bias of the masks, the no-object
    embedding) on the fused copy against the model itself."""
    twin = fused.fused_model(model, ('memory_encoder', 'constants'))
    batch = 2
    feats = [_rand(16, batch, 256, seed=5)]
    kw = dict(current_vision_feats=feats, feat_sizes=[(4, 4)],
              pred_masks_high_res=8 * _rand(batch, 1, 64, 64, seed=6),
              object_score_logits=torch.tensor([[1.5], [-2.0]]), is_mask_from_pts=False)
    ref, ref_pos = _run(lambda: model._encode_new_memory(**kw), autocast)
    out, out_pos = _run(lambda: twin._encode_new_memory(**kw), autocast)
    _close(out, ref, TOL[autocast])
    assert torch.equal(out_pos[0], ref_pos[0])


def test_float32_weights_under_bf16_compute_pipeline_one_stage():
    """precast_weights off leaves the convolutions' weights float32 under bf16 compute: three
    pipelined stages of such tiles overflow the H200's shared memory (OutOfResources, seen on
    the GPU as a fallback to sam2's modules), so the stage kernel runs one; bf16 weights (the
    default) run two (faster than three on the GPU), and the interpreter is never limited."""
    from sam2_ros.engine.cuda.kernels.mask_downsampler import pipeline_stages

    def conv(dtype):
        return torch.nn.Conv2d(4, 16, 3).to(dtype)
    narrow, wide = (conv(torch.bfloat16),) * 3, (conv(torch.bfloat16), conv(torch.float32))
    assert pipeline_stages(True, False, narrow) == 2
    assert pipeline_stages(True, False, wide) == 1
    assert pipeline_stages(False, False, (conv(torch.float32),)) == 1
    assert pipeline_stages(False, True, wide) == 3
