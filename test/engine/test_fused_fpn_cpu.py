"""The 'fpn' group (sam2_ros/engine/cuda/kernels/fpn.py) against sam2's ``FpnNeck`` on the CPU,
its kernel in Triton's interpreter: the top-down step (cast, nearest 2x upsampling, add) in one
kernel, bitwise torch's ops for every input dtype and layout it takes; the whole neck bitwise
sam2's (features, position encodings, dtypes and strides) in fp32 and under bf16 autocast,
with and without the 'constants' group, on Hiera-shaped inputs (channels-last views, as the
trunk returns them) at image size 64 and 128; and fewer ops than sam2's neck.
"""

import copy

import pytest
import torch

pytest.importorskip('triton')

from conftest import shared_model, top_level_ops  # noqa: E402
from sam2_ros.engine.config import FUSED_GROUPS  # noqa: E402
from sam2_ros.engine.cuda.kernels import fpn, fused  # noqa: E402
from sam2_ros.engine.cuda.kernels.swap import with_children  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')
NO_KERNEL = {'aten::view', 'aten::slice', 'aten::select', 'aten::expand', 'aten::unsqueeze',
             'aten::transpose', 'aten::permute', 'aten::flatten', 'aten::reshape', 'aten::t',
             'aten::empty', 'aten::empty_strided', 'aten::empty_like', 'aten::as_strided',
             'aten::alias', 'aten::_unsafe_view', 'aten::squeeze', 'aten::detach',
             'aten::lift_fresh', 'aten::contiguous'}


def _rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _run(fn, autocast):
    with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        return fn()


def _same(out, ref):
    assert (out.dtype, out.shape, out.stride()) == (ref.dtype, ref.shape, ref.stride())
    assert torch.equal(out, ref)


def _layout(x, channels_last):
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x.contiguous()


@pytest.mark.parametrize('channels_last', [True, False])
@pytest.mark.parametrize('lat_dtype, prev_dtype', [
    (torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
    (torch.bfloat16, torch.float32), (torch.float16, torch.float16),
    (torch.float32, torch.bfloat16)])
@pytest.mark.parametrize('batch', [1, 2])
def test_top_down_add_is_torchs_bitwise(batch, lat_dtype, prev_dtype, channels_last,
                                        kernel_launches):
    """One kernel = sam2's cast + nearest upsampling + add: values, dtype, layout; values of
    every magnitude (large ones too: an add that rounds)."""
    prev = _layout(_rand(batch, 24, 3, 5, seed=1) * 1e3, channels_last).to(prev_dtype)
    lateral = _layout(_rand(batch, 24, 6, 10, seed=2), channels_last).to(lat_dtype)
    assert fpn.kernel_takes(lateral, prev)
    out = _run(lambda: fpn.top_down_add(lateral, prev), False)
    assert kernel_launches == ['_top_down_kernel']
    _same(out, fpn.reference_top_down_add(lateral, prev))


def test_top_down_add_falls_back_to_sam2s_ops(kernel_launches):
    """Inputs of two layouts, an odd size, gradients: torch's ops, no kernel."""
    prev, lateral = _rand(1, 8, 3, 3, seed=3), _rand(1, 8, 6, 6, seed=4)
    cases = [(lateral.contiguous(memory_format=torch.channels_last), prev),
             (lateral[..., :5], prev[..., :3]),
             (lateral.requires_grad_(), prev)]
    for lat, pre in cases[:2]:
        assert not fpn.kernel_takes(lat, pre)
    for lat, pre in cases[:1]:
        _same(fpn.top_down_add(lat, pre), fpn.reference_top_down_add(lat, pre))
    assert not fpn.kernel_takes(*cases[2])
    assert kernel_launches == []


def _trunk_outputs(neck, size, batch, seed=5):
    """Hiera's outputs at image size ``size``: [B, C_l, S/4/2^l, ...] float32, channels-last
    views of [B, H, W, C] as the trunk (and FusedHiera) return them, finest first."""
    chans = neck.backbone_channel_list[::-1]                         # finest first
    return [_rand(batch, size // 4 >> l, size // 4 >> l, c, seed=seed + l).permute(0, 3, 1, 2)
            for l, c in enumerate(chans)]


@pytest.fixture(scope='module')
def neck():
    """The tiny model's neck (768/384/192/96 -> 256, top-down on levels 2 and 3, nearest),
    random non-zero biases."""
    neck = copy.deepcopy(shared_model(64).image_encoder.neck)
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for seq in neck.convs:
            seq.conv.bias.normal_(generator=g)
    return neck


@pytest.mark.parametrize('size, batch', [(64, 1), (128, 2)])
@pytest.mark.parametrize('constants', [False, True])
@pytest.mark.parametrize('autocast', [False, True])
def test_fused_neck_equals_sam2s_bitwise(neck, autocast, constants, size, batch,
                                         kernel_launches):
    from sam2_ros.engine.cuda.kernels.constants import ConstantSinePE
    ref_neck = with_children(neck, position_encoding=ConstantSinePE(neck.position_encoding)) \
        if constants else neck
    twin = fpn.fused_fpn_neck(ref_neck)
    assert isinstance(twin, fpn.FusedFpnNeck) and twin.inner is ref_neck
    xs = _trunk_outputs(neck, size, batch)
    # sam2's sine encoding returns a permuted grid on its first call per size, a repeat of it
    # (another layout) on later ones: compare later calls
    _run(lambda: ref_neck(xs), autocast)
    ref_out, ref_pos = _run(lambda: ref_neck(xs), autocast)
    out, pos = _run(lambda: twin(xs), autocast)
    assert kernel_launches == ['_top_down_kernel']         # level 2 (level 3 is the top)
    assert out[2].dtype == torch.float32 and out[1].dtype == ref_out[1].dtype
    for o, r in zip(out + pos, ref_out + ref_pos):
        _same(o, r)


def _top_level_ops(fn):
    """Top-level aten ops run by fn that compute (no views, allocations or no-op casts),
    a Triton launch counted as one (the aten ops its interpreter runs are not counted)."""
    return [e.name for e in top_level_ops(fn) if e.name not in NO_KERNEL and not (
        e.name == 'aten::to' and not any(c.name == 'aten::_to_copy' for c in e.cpu_children))]


@pytest.mark.parametrize('autocast', [False, True])
def test_fused_neck_runs_fewer_ops(neck, autocast, triton_ranges):
    """sam2's top-down step is a cast (bf16 only), an upsampling and an add; the fused neck's
    one kernel: 2 ops fewer under bf16 autocast, 1 in float32; the rest is the same ops."""
    twin = fpn.fused_fpn_neck(neck)
    xs = _trunk_outputs(neck, 64, 1)
    _run(lambda: neck(xs), autocast)                 # sam2's sine grids cached
    ref = _run(lambda: _top_level_ops(lambda: neck(xs)), autocast)
    ours = _run(lambda: _top_level_ops(lambda: twin(xs)), autocast)
    assert ours.count('triton_kernel') == 1 and 'aten::upsample_nearest2d' in ref
    assert 'aten::upsample_nearest2d' not in ours and 'aten::add' not in ours
    assert len(ours) == len(ref) - (2 if autocast else 1), (ref, ours)


def test_group_swaps_the_neck_and_keeps_sam2s_modules():
    """'fpn' in the fused copy: the neck is a FusedFpnNeck over sam2's (or the 'constants'
    group's) neck, the model and its neck unchanged, no weight copied; another neck kind
    stays sam2's; the group is on by default."""
    from sam2.modeling.backbones.image_encoder import FpnNeck
    model = shared_model(64)
    assert 'fpn' in FUSED_GROUPS
    twin = fused.fused_model(model, ('fpn',))
    assert type(twin) is type(model) and type(model.image_encoder.neck) is FpnNeck
    assert twin.image_encoder.neck.inner is model.image_encoder.neck
    assert twin.image_encoder.trunk is model.image_encoder.trunk
    every = fused.fused_model(model, FUSED_GROUPS)
    assert isinstance(every.image_encoder.neck, fpn.FusedFpnNeck)
    assert type(every.image_encoder.neck.inner.position_encoding).__name__ == 'ConstantSinePE'
    shared = {id(p) for p in model.parameters()}
    assert all(id(p) in shared for p in every.parameters())
    avg = with_children(model.image_encoder.neck)
    avg.fuse_type = 'avg'
    assert fpn.fused_fpn_neck(avg) is avg
    assert type(fused.fused_model(model, tuple(g for g in FUSED_GROUPS if g != 'fpn'))
                .image_encoder.neck) is not fpn.FusedFpnNeck


@pytest.mark.parametrize('autocast', [False, True])
def test_image_encoder_with_the_group_equals_sam2s(autocast):
    """forward_image of the copy with 'fpn' (and with every group but the trunk's, whose
    kernels round differently) = the model's, bitwise: what the encoder graph returns."""
    model = shared_model(64)
    image = _rand(1, 3, 64, 64, seed=9)
    _run(lambda: model.forward_image(image), autocast)    # sam2's sine grids cached (above)
    ref = _run(lambda: model.forward_image(image), autocast)
    for groups in [('fpn',), tuple(g for g in FUSED_GROUPS if g != 'hiera')]:
        out = _run(lambda: fused.fused_model(model, groups).forward_image(image), autocast)
        for key in ('vision_features', 'vision_pos_enc', 'backbone_fpn'):
            o, r = out[key], ref[key]
            for a, b in zip(o if isinstance(o, list) else [o], r if isinstance(r, list) else [r]):
                _same(a, b)
