"""Fused Triton kernels (TrackerConfig.fused_kernels) on the GPU, module by module (marked gpu:
CI has none); the groups in captured graphs and the function-level kernels (I/O, hole filling,
constants) are in test_fused_graphs_gpu.py, the FPN neck's in test_fused_fpn_gpu.py.

Module level, tiny@512 shapes, against the sam2 module each replaces: fp32 (TF32 matmuls off)
within 1e-4 x max |sam2| (TF32 off for matmuls and cuDNN), except the memory encoder
('layernorm2d' and 'memory_encoder'): its LayerNorm2d over
4 and 16 channels divides by sqrt(var + 1e-6), which multiplies a float32 rounding difference
of the channel mean by up to 1/sqrt(1e-6) = 1000 where a pixel's channels are nearly equal
(random masks hit that): 1e-3;
bf16 autocast within the CPU tests' bounds one step looser (the GPU also runs other GEMM
kernels: the fused q/k/v projection), relative to max |sam2|: 2^-5 Hiera, 2^-6 memory
attention, two-way transformer, memory encoder (its LayerNorm2d alone, and the whole module
in 11 kernels, B = 1, 3, 8) and the decoder heads (tl.dot against cuBLAS:
a bf16 rounding of a hidden layer flips now and then). The measured errors go to
$OUT/gpu_fused_kernels.json (docs/design.md quotes them).
"""

import pytest
import torch

from gpu_common import cuda_kernels, cuda_rand as _rand, fused_test_model
from gpu_common import record_fused as _record
from sam2_ros.engine import glue

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]
FP32 = {'layernorm2d': 1e-3, 'memory_encoder': 1e-3}
BF16 = {'hiera': 2.0 ** -5, 'memory_attention': 2.0 ** -6, 'decoder': 2.0 ** -6,
        'decoder_heads': 2.0 ** -6, 'layernorm2d': 2.0 ** -6, 'memory_encoder': 2.0 ** -6}


@pytest.fixture(scope='module')
def model():
    return fused_test_model()


def _rel(out, ref):
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1))


def _compare(name, group, fn_ref, fn_out, precision):
    ctx = torch.autocast('cuda', torch.bfloat16, enabled=precision == 'bf16')
    with torch.inference_mode(), ctx:
        ref, out = fn_ref(), fn_out()
    ref = ref if isinstance(ref, (list, tuple)) else [ref]
    out = out if isinstance(out, (list, tuple)) else [out]
    errs = [_rel(o, r) for o, r in zip(out, ref)]
    assert all(o.dtype == r.dtype and o.shape == r.shape for o, r in zip(out, ref))
    _record(f'{name}_{precision}', {'rel_err': errs})
    assert max(errs) <= (FP32.get(group, 1e-4) if precision == 'fp32' else BF16[group]), errs


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_hiera_gpu(model, precision):
    from sam2_ros.engine.cuda.kernels.hiera import FusedHiera
    trunk = model.image_encoder.trunk
    x = _rand(1, 3, 512, 512, seed=1)
    _compare('hiera', 'hiera', lambda: trunk(x), lambda: FusedHiera(trunk)(x), precision)


def test_fused_hiera_gelu_epilogue_gpu(model):
    """The opt-in 'gelu_epilogue' (cuBLASLt's tanh GELU in the MLP's first GEMM) under bf16
    stays within the fused Hiera's bf16 bound of sam2's trunk, and differs from it (the
    epilogue ran); its measured error goes to gpu_fused_kernels.json."""
    from sam2_ros.engine.cuda.kernels.hiera import FusedHiera
    trunk = model.image_encoder.trunk
    x = _rand(1, 3, 512, 512, seed=1)
    _compare('hiera_gelu_epilogue', 'hiera', lambda: trunk(x),
             lambda: FusedHiera(trunk, gelu_epilogue=True)(x), 'bf16')
    with torch.inference_mode(), torch.autocast('cuda', torch.bfloat16):
        on, off = FusedHiera(trunk, gelu_epilogue=True)(x), FusedHiera(trunk)(x)
    assert any(not torch.equal(a, b) for a, b in zip(on, off))


@pytest.mark.parametrize('batch', [1, 3])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_memory_attention_gpu(model, precision, batch):
    from sam2_ros.engine.cuda.kernels.memory_attention import FusedMemoryAttention
    ma = model.memory_attention
    dt = torch.bfloat16 if precision == 'bf16' else torch.float32
    n_mem = 7 * 1024 + 4 * 16
    kw = dict(curr=[_rand(1024, batch, 256, seed=2).to(dt)],
              curr_pos=[_rand(1024, batch, 256, seed=3)],
              memory=_rand(n_mem, batch, 64, seed=4).to(dt),
              memory_pos=_rand(n_mem, batch, 64, seed=5), num_obj_ptr_tokens=64)
    _compare(f'memory_attention_b{batch}', 'memory_attention', lambda: ma(**kw),
             lambda: FusedMemoryAttention(ma)(**kw), precision)


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_two_way_transformer_gpu(model, precision):
    from sam2_ros.engine.cuda.kernels.two_way import FusedTwoWayTransformer
    tw = model.sam_mask_decoder.transformer
    img, pe, pts = _rand(3, 256, 32, 32, seed=6), _rand(1, 256, 32, 32, seed=7), \
        _rand(3, 7, 256, seed=8)
    _compare('two_way', 'decoder', lambda: tw(img, pe, pts),
             lambda: FusedTwoWayTransformer(tw)(img, pe, pts), precision)


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_layernorm2d_memory_encoder_gpu(model, precision):
    from sam2_ros.engine.cuda.kernels.layernorm2d import swap_layernorm2d
    twin = swap_layernorm2d(model)
    pix, masks = _rand(3, 256, 32, 32, seed=9), _rand(3, 1, 512, 512, seed=10)

    def run(m):
        return m.memory_encoder(pix, masks, skip_mask_sigmoid=True)['vision_features']
    _compare('memory_encoder_layernorm2d', 'layernorm2d', lambda: run(model), lambda: run(twin),
             precision)


def _memory_encoder(model, precision):
    """(sam2's memory encoder with random norm affines and layer scales, its fused twin);
    bf16: weights stored in bf16 as the tracker does."""
    import copy

    from sam2.modeling.memory_encoder import CXBlock
    from sam2.modeling.sam2_utils import LayerNorm2d

    from sam2_ros.engine.cuda.kernels.memory_encoder import FusedMemoryEncoder
    from sam2_ros.engine.model import precast
    mem = copy.deepcopy(model.memory_encoder)
    g = torch.Generator(device='cuda').manual_seed(1)
    with torch.no_grad():
        for mod in mem.modules():
            if isinstance(mod, LayerNorm2d):
                mod.weight.normal_(1.0, 0.2, generator=g)
                mod.bias.normal_(0.0, 0.2, generator=g)
            if isinstance(mod, CXBlock):
                mod.gamma.normal_(0.0, 0.5, generator=g)
    mem = precast(mem) if precision == 'bf16' else mem
    return mem, FusedMemoryEncoder(mem)


def _memory_inputs(batch):
    """pix_feat as _encode_new_memory makes it (a view of [HW, B, C]), masks in (0, 1)."""
    pix = _rand(32 * 32, batch, 256, seed=17).permute(1, 2, 0).view(batch, 256, 32, 32)
    return pix, torch.sigmoid(4 * _rand(batch, 1, 512, 512, seed=18))


@pytest.mark.parametrize('batch', [1, 3, 8])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_memory_encoder_gpu(model, precision, batch):
    mem, twin = _memory_encoder(model, precision)
    pix, masks = _memory_inputs(batch)

    def run(m):
        out = m(pix, masks, skip_mask_sigmoid=True)
        return [out['vision_features'], out['vision_pos_enc'][0]]
    _compare(f'memory_encoder_b{batch}', 'memory_encoder', lambda: run(mem), lambda: run(twin),
             precision)


@pytest.mark.parametrize('batch', [1, 8])
def test_fused_memory_encoder_kernel_count_gpu(model, batch):
    """CUDA kernels and GPU time of one memory-encoder call (bf16, weights in bf16; the
    position encoding sam2's in both): sam2's ~48 kernels become 11 (+ the encoding's)."""
    mem, twin = _memory_encoder(model, 'bf16')
    pix, masks = _memory_inputs(batch)
    with torch.inference_mode(), torch.autocast('cuda', torch.bfloat16):
        pe = cuda_kernels(lambda: mem.position_encoding(pix[:, :64]))
        sam2 = cuda_kernels(lambda: mem(pix, masks, skip_mask_sigmoid=True))
        fused = cuda_kernels(lambda: twin(pix, masks, skip_mask_sigmoid=True))
    counts = {'sam2': sam2[0], 'fused': fused[0], 'position_encoding': pe[0],
              'sam2_us': sam2[1], 'fused_us': fused[1]}
    _record(f'memory_encoder_kernels_bf16_b{batch}', counts)
    print('memory encoder kernels', batch, counts)
    assert counts['fused'] <= 11 + pe[0] + 1, counts      # + the encoding's cast
    assert counts['fused'] <= counts['sam2'] - 30, counts


def _decoder_inputs(model, batch):
    return dict(image_embeddings=_rand(batch, 256, 32, 32, seed=11),
                image_pe=model.sam_prompt_encoder.get_dense_pe(),
                sparse_prompt_embeddings=_rand(batch, 2, 256, seed=12),
                dense_prompt_embeddings=_rand(batch, 256, 32, 32, seed=13), repeat_image=False,
                high_res_features=[_rand(batch, 32, 128, 128, seed=14),
                                   _rand(batch, 64, 64, 64, seed=15)])


def _heads_decoder(model, precision):
    """(sam2's decoder, the fused one); bf16: weights stored in bf16 as the tracker does."""
    from sam2_ros.engine.cuda.kernels.mask_decoder import FusedMaskDecoder
    from sam2_ros.engine.model import precast
    dec = precast(model.sam_mask_decoder) if precision == 'bf16' else model.sam_mask_decoder
    twin = FusedMaskDecoder(dec)
    assert twin.heads is not None and twin.obj_in_stack
    return dec, twin


@pytest.mark.parametrize('batch', [1, 3])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_mask_decoder_heads_gpu(model, precision, batch):
    """predict_masks (masks, iou, tokens, object score) and sam2's forward over it, with
    and without multimask output (dynamic multimask via stability as the model has it)."""
    dec, twin = _heads_decoder(model, precision)
    kw = _decoder_inputs(model, batch)
    _compare(f'mask_decoder_heads_b{batch}', 'decoder_heads', lambda: dec.predict_masks(**kw),
             lambda: twin.predict_masks(**kw), precision)
    for mm in (True, False):
        _compare(f'mask_decoder_forward_b{batch}_multimask{int(mm)}', 'decoder_heads',
                 lambda: dec(multimask_output=mm, **kw), lambda: twin(multimask_output=mm, **kw),
                 precision)


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_obj_ptr_proj_gpu(model, precision):
    from sam2_ros.engine.cuda.kernels.mlp_heads import FusedMLP
    proj = model.obj_ptr_proj
    x = _rand(5, 256, seed=16)
    _compare('obj_ptr_proj', 'decoder_heads', lambda: proj(x), lambda: FusedMLP(proj)(x),
             precision)


@pytest.mark.parametrize('batch', [1, 3])
def test_fused_mask_decoder_heads_kernel_count_gpu(model, batch):
    """CUDA kernels of one decoder call (bf16, weights in bf16, sam2's two-way transformer in
    both): the heads' 40-odd kernels and predict_masks' concatenations, repeats and stack
    become one kernel (at least 30 fewer)."""
    dec, twin = _heads_decoder(model, 'bf16')
    kw = dict(_decoder_inputs(model, batch), multimask_output=False)
    with torch.inference_mode(), torch.autocast('cuda', torch.bfloat16):
        counts = {'sam2': cuda_kernels(lambda: dec(**kw))[0],
                  'fused': cuda_kernels(lambda: twin(**kw))[0]}
    _record(f'mask_decoder_kernels_bf16_b{batch}', counts)
    print('mask decoder kernels', batch, counts)
    assert counts['fused'] <= counts['sam2'] - 30, counts


class _Steered(torch.nn.Module):
    """sam2's mask decoder with its object scores shifted per object (+, -, +, ...: every
    other object absent): the same outputs on both sides of a comparison."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, **kw):
        masks, ious, tokens, score = self.inner(**kw)
        sign = 1.0 - 2.0 * (torch.arange(score.shape[0], device=score.device) % 2)
        return masks, ious, tokens, score + (20.0 * sign)[:, None].to(score.dtype)


def _glue_models(model, precision, groups=()):
    """(sam2's methods, the 'sam_glue' copy) over the same modules: a steered decoder,
    ``groups`` fused in both; bf16: weights stored in bf16 as the tracker does."""
    from sam2_ros.engine.cuda.kernels import fused
    from sam2_ros.engine.cuda.kernels.swap import with_children
    from sam2_ros.engine.model import precast
    base = precast(model) if precision == 'bf16' else model
    base = fused.fused_model(base, groups) if groups else base
    base = with_children(base, sam_mask_decoder=_Steered(base.sam_mask_decoder))
    return base, fused.fused_model(base, ('sam_glue',))


def _heads_kw(batch, multimask=True):
    return dict(backbone_features=_rand(batch, 256, 32, 32, seed=19), point_inputs=None,
                mask_inputs=None, high_res_features=[_rand(batch, 32, 128, 128, seed=20),
                                                     _rand(batch, 64, 64, 64, seed=21)],
                multimask_output=multimask)


@pytest.mark.parametrize('multimask', [True, False])
@pytest.mark.parametrize('batch', [1, 3, 8])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_sam_heads_gpu(model, precision, batch, multimask):
    """'sam_glue' _forward_sam_heads against sam2's on the same (sam2's) decoder: the low-res
    masks bitwise (a where and a cast), an absent object's high-res masks too; the present
    ones' high-res masks within 2^-20 x max |sam2| (the kernel's float32 bilinear arithmetic
    against torch's, each free to contract into FMAs); the pointer (its projection on every
    mask token: another GEMM shape) within 1e-4 fp32, 2^-6 bf16; IoUs and scores as sam2's."""
    ref_model, twin = _glue_models(model, precision)
    kw = _heads_kw(batch, multimask)
    ctx = torch.autocast('cuda', torch.bfloat16, enabled=precision == 'bf16')
    with torch.inference_mode(), ctx:
        ref, out = ref_model._forward_sam_heads(**kw), glue.sam_heads(twin)(**kw)
    assert all(o.dtype == r.dtype and o.shape == r.shape for o, r in zip(out, ref))
    assert torch.equal(out[0], ref[0]) and torch.equal(out[3], ref[3])
    present = list(range(0, batch, 2))
    errs = {'high_res': max(_rel(out[i][present], ref[i][present]) for i in (1, 4)),
            'obj_ptr': _rel(out[5], ref[5]), 'ious': _rel(out[2], ref[2]),
            'score': _rel(out[6], ref[6])}
    _record(f'sam_heads_b{batch}_multimask{int(multimask)}_{precision}', errs)
    if batch > 1:
        assert (ref[1][1] == -1024.0).all() and torch.equal(out[1][1], ref[1][1])
    tol = 1e-4 if precision == 'fp32' else 2.0 ** -6
    assert errs['high_res'] <= 2.0 ** -20 and errs['obj_ptr'] <= tol, errs
    assert errs['ious'] <= tol and errs['score'] <= tol, errs


def _memory_kw(batch, from_points):
    """A tracked frame's features ([HW, B, C]), mask logits, scores of alternating sign."""
    sign = 1.0 - 2.0 * (torch.arange(batch, device='cuda') % 2)
    return dict(current_vision_feats=[_rand(32 * 32, batch, 256, seed=22)],
                feat_sizes=[(32, 32)],
                pred_masks_high_res=8 * _rand(batch, 1, 512, 512, seed=23),
                object_score_logits=(1.5 * sign)[:, None], is_mask_from_pts=from_points)


@pytest.mark.parametrize('from_points', [False, True])
@pytest.mark.parametrize('batch', [1, 3, 8])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_fused_encode_new_memory_gpu(model, precision, batch, from_points):
    """'sam_glue' _encode_new_memory (sigmoid or binarization, scale, bias, no-object
    embedding folded into the 'memory_encoder' kernels) against sam2's method on the same
    fused memory encoder (random norm affines and layer scales), within the memory encoder's
    bounds: a sigmoid an ulp off (Triton's against torch's) before its LayerNorm2d over 4
    channels (fp32 1e-3, see the module doc), a bf16 rounding flipped by it (2^-6)."""
    from sam2_ros.engine.cuda.kernels.swap import with_children
    mem, _ = _memory_encoder(model, precision)
    ref_model, twin = _glue_models(with_children(model, memory_encoder=mem), precision,
                                   ('memory_encoder',))
    kw = _memory_kw(batch, from_points)

    def encode(m):
        feats, pos = glue.new_memory(m)(**kw)
        return [feats, pos[0]]
    _compare(f'encode_new_memory_b{batch}_pts{int(from_points)}', 'memory_encoder',
             lambda: encode(ref_model), lambda: encode(twin), precision)


@pytest.mark.parametrize('batch', [1, 8])
def test_sam_glue_kernel_count_gpu(model, batch):
    """CUDA kernels of a tracked frame's _forward_sam_heads + _encode_new_memory (bf16, weights
    in bf16, the decoder heads and memory encoder fused in both): sam2's glue, ~15 kernels
    around the heads and 8 around the memory encoder, becomes one kernel; at least 15 fewer."""
    ref_model, twin = _glue_models(model, 'bf16', ('decoder_heads', 'memory_encoder',
                                                   'constants'))
    feat = _rand(32 * 32, batch, 256, seed=24)
    kw = _heads_kw(batch)
    kw['backbone_features'] = feat.permute(1, 2, 0).reshape(batch, 256, 32, 32)

    def frame(m):
        out = glue.sam_heads(m)(**kw)
        return glue.new_memory(m)(current_vision_feats=[feat], feat_sizes=[(32, 32)],
                                  pred_masks_high_res=out[4], object_score_logits=out[6],
                                  is_mask_from_pts=False)
    with torch.inference_mode(), torch.autocast('cuda', torch.bfloat16):
        sam2, ours = cuda_kernels(lambda: frame(ref_model)), cuda_kernels(lambda: frame(twin))
    counts = {'sam2': sam2[0], 'fused': ours[0], 'sam2_us': sam2[1], 'fused_us': ours[1]}
    _record(f'sam_glue_kernels_bf16_b{batch}', counts)
    print('sam glue kernels', batch, counts)
    assert counts['fused'] <= counts['sam2'] - 15, counts
