"""The 'fpn' group on the GPU (marked gpu: CI has none): the FPN neck with its top-down step in
one kernel (sam2_ros/engine/cuda/kernels/fpn.py) bitwise sam2's at tiny@512, alone and inside
forward_image, and its kernel count. Counts go to $OUT/gpu_fused_kernels.json."""

import pytest
import torch

from gpu_common import cuda_kernels, cuda_rand as _rand, fused_test_model
from gpu_common import record_fused as _record

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]


@pytest.fixture(scope='module')
def model():
    return fused_test_model()


def _fpn_inputs(neck, batch):
    """Hiera's outputs at tiny@512: [B, C_l, 128 / 2^l, ...] float32, channels-last views of
    [B, H, W, C] as the trunk returns them, finest first."""
    chans = neck.backbone_channel_list[::-1]
    return [_rand(batch, 128 >> i, 128 >> i, c, seed=30 + i).permute(0, 3, 1, 2)
            for i, c in enumerate(chans)]


@pytest.mark.parametrize('batch', [1, 2])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_fpn_neck_gpu(model, precision, batch):
    """'fpn': the neck (with the 'constants' group's stored sine encodings, as the graphs run
    it) bitwise sam2's, features and positions, dtypes and strides; bf16 with bf16 weights as
    the tracker stores them; 2 kernels fewer under bf16 (cast, upsampling, add -> 1), 1 in
    fp32."""
    from sam2_ros.engine.cuda.kernels import fused
    from sam2_ros.engine.cuda.kernels.fpn import FusedFpnNeck
    from sam2_ros.engine.model import precast
    base = fused.fused_model(precast(model) if precision == 'bf16' else model, ('constants',))
    ref = base.image_encoder.neck
    twin = fused.fused_model(base, ('fpn',)).image_encoder.neck
    assert isinstance(twin, FusedFpnNeck) and twin.inner is ref
    xs = _fpn_inputs(ref, batch)
    ctx = torch.autocast('cuda', torch.bfloat16, enabled=precision == 'bf16')
    with torch.inference_mode(), ctx:
        ref(xs)                                        # the stored encodings made
        ref_out, ref_pos = ref(xs)
        out, pos = twin(xs)
        counts = (cuda_kernels(lambda: ref(xs))[0], cuda_kernels(lambda: twin(xs))[0])
    for o, r in zip(out + pos, ref_out + ref_pos):
        assert (o.dtype, o.shape, o.stride()) == (r.dtype, r.shape, r.stride())
        assert torch.equal(o, r)
    _record(f'fpn_neck_b{batch}_{precision}', {'kernels_sam2': counts[0],
                                               'kernels_fused': counts[1]})
    assert counts[1] == counts[0] - (2 if precision == 'bf16' else 1), counts


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_fpn_image_encoder_gpu(model, precision):
    """forward_image at tiny@512 of the copy with every group but the trunk's ('hiera' rounds
    differently) = with 'constants' alone, bitwise: what the encoder graph returns."""
    from sam2_ros.engine.config import FUSED_GROUPS
    from sam2_ros.engine.cuda.kernels import fused
    from sam2_ros.engine.model import precast
    base = precast(model) if precision == 'bf16' else model
    ref_model = fused.fused_model(base, ('constants',))
    twin = fused.fused_model(base, tuple(g for g in FUSED_GROUPS if g != 'hiera'))
    image = _rand(1, 3, 512, 512, seed=40)
    ctx = torch.autocast('cuda', torch.bfloat16, enabled=precision == 'bf16')
    with torch.inference_mode(), ctx:
        ref_model.forward_image(image)
        ref, out = ref_model.forward_image(image), twin.forward_image(image)
    for r, o in zip([ref['vision_features'], *ref['vision_pos_enc'], *ref['backbone_fpn']],
                    [out['vision_features'], *out['vision_pos_enc'], *out['backbone_fpn']]):
        assert o.dtype == r.dtype and o.stride() == r.stride() and torch.equal(o, r)
