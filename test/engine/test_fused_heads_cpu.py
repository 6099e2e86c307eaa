"""The fused mask decoder heads (kernels/mask_decoder.py, kernels/mlp_heads.py; fused group
'decoder_heads') against sam2's MaskDecoder on the CPU, where the one-kernel MLPs run in Triton's
interpreter (``launch.Kernel``).

fp32: max |fused - sam2| <= 1e-5 (absolute) on mask logits, IoU and object scores: the batched
MLP sums its dot products in another order than 4 + 2 separate GEMMs (measured: 1e-7 on IoU
and scores, 3e-6 on mask logits of magnitude 7, whose 32-term product scales the heads'
difference). bf16 (CPU autocast): each layer's output is rounded to bf16 as the GEMM
writes it, so a float32 sum that differs in its last bits flips a rounding now and then: within
2 bf16 ulps (2^-7) of max |sam2| (measured: bitwise equal at these sizes).
"""

import copy

import pytest
import torch

pytest.importorskip('triton')

from conftest import shared_model, top_level_ops  # noqa: E402
from sam2_ros.engine.cuda.kernels import fused  # noqa: E402
from sam2_ros.engine.cuda.kernels.mask_decoder import FusedMaskDecoder  # noqa: E402
from sam2_ros.engine.cuda.kernels.mlp_heads import FusedMLP, stackable  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')
FP32_TOL = 1e-5
# views, allocations and dtype queries: no kernel of their own on the GPU
NO_KERNEL = {'aten::promote_types', 'aten::view', 'aten::slice', 'aten::select', 'aten::expand',
             'aten::unsqueeze', 'aten::transpose', 'aten::permute', 'aten::flatten',
             'aten::reshape', 'aten::t', 'aten::empty', 'aten::empty_strided', 'aten::as_strided',
             'aten::alias', 'aten::_unsafe_view', 'aten::squeeze', 'aten::detach',
             'aten::lift_fresh'}


def _close(out, ref, tol):
    """fp32 (tol 1e-5): max abs diff <= tol; bf16: <= tol x max(1, max |ref|)."""
    out, ref = out.float(), ref.float()
    assert out.shape == ref.shape
    err = (out - ref).abs().max().item()
    scale = 1.0 if tol == FP32_TOL else max(1.0, ref.abs().max().item())
    assert err <= tol * scale, (err, ref.abs().max().item())
    return err


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _decoder(high_res=True, dynamic=True, bf16_weights=False):
    """The shared model's decoder (a shallow copy: the flags of the copy only) with every
    Linear perturbed off its init on a private deep copy of the heads; bf16_weights: its
    Linear/Conv weights stored in bf16 (``precast``, the tracker's default under bf16)."""
    dec = copy.copy(shared_model(64).sam_mask_decoder)
    dec._modules = dict(dec._modules)
    g = torch.Generator().manual_seed(5)
    for name in ('output_hypernetworks_mlps', 'iou_prediction_head', 'pred_obj_score_head'):
        dec._modules[name] = copy.deepcopy(dec._modules[name])
        with torch.no_grad():
            for p in dec._modules[name].parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    dec.use_high_res_features = high_res
    dec.dynamic_multimask_via_stability = dynamic
    if bf16_weights:
        from sam2_ros.engine.model import precast
        dec = precast(dec)
    return dec


def _inputs(bsz, repeat):
    pe = shared_model(64).sam_prompt_encoder.get_dense_pe()
    return dict(image_embeddings=_rand(1 if repeat else bsz, 256, 4, 4, seed=1), image_pe=pe,
                sparse_prompt_embeddings=_rand(bsz, 3, 256, seed=2),
                dense_prompt_embeddings=_rand(bsz, 256, 4, 4, seed=3), repeat_image=repeat)


def _hires(bsz):
    return [_rand(bsz, 32, 16, 16, seed=6), _rand(bsz, 64, 8, 8, seed=7)]


def _run(fn, autocast):
    with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        return fn()


@pytest.mark.parametrize('autocast, tol', [(False, 1e-5), (True, 2.0 ** -7)])
@pytest.mark.parametrize('bsz, repeat', [(1, False), (3, False), (3, True)])
@pytest.mark.parametrize('high_res', [True, False])
def test_fused_predict_masks_equals_sam2(autocast, tol, bsz, repeat, high_res):
    dec = _decoder(high_res)
    twin = FusedMaskDecoder(dec)
    assert twin.heads is not None and twin.obj_in_stack and twin.heads.n == 6
    kw = dict(_inputs(bsz, repeat), high_res_features=_hires(bsz) if high_res else None)
    ref = _run(lambda: dec.predict_masks(**kw), autocast)
    out = _run(lambda: twin.predict_masks(**kw), autocast)
    assert out[0].shape == (bsz, 4, 16, 16)
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype and o.shape == r.shape and o.is_contiguous() == \
            r.is_contiguous()
        _close(o, r, tol)


@pytest.mark.parametrize('autocast, tol', [(False, 1e-5), (True, 2.0 ** -7)])
@pytest.mark.parametrize('multimask', [True, False])
@pytest.mark.parametrize('dynamic', [True, False])
def test_fused_decoder_forward_equals_sam2(autocast, tol, multimask, dynamic):
    """sam2's forward (inherited) over the fused predict_masks: the mask selection, dynamic
    multimask via stability and the object-pointer tokens as sam2's, batch 3; under autocast
    with bf16 weights as the tracker stores them (the stacked copies are bf16 too)."""
    dec = _decoder(True, dynamic, bf16_weights=autocast)
    twin = FusedMaskDecoder(dec)
    assert twin.heads.w1.dtype == (torch.bfloat16 if autocast else torch.float32)
    kw = dict(_inputs(3, False), high_res_features=_hires(3), multimask_output=multimask)
    ref = _run(lambda: dec(**kw), autocast)
    out = _run(lambda: twin(**kw), autocast)
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype and o.shape == r.shape
        _close(o, r, tol)


def test_heads_group_swaps_decoder_and_obj_ptr_proj_sharing_weights():
    model = shared_model(64)
    twin = fused.fused_model(model, ('decoder', 'decoder_heads'))
    dec = twin.sam_mask_decoder
    assert isinstance(dec, FusedMaskDecoder) and dec.heads is not None
    assert type(dec.transformer).__name__ == 'FusedTwoWayTransformer'
    assert type(model.sam_mask_decoder).__name__ == 'MaskDecoder'      # the original intact
    assert isinstance(twin.obj_ptr_proj, FusedMLP)
    shared = {id(p) for p in model.parameters()}
    assert all(id(p) in shared for p in twin.parameters())
    # the stacked buffers are copies: nothing of sam2's modules is aliased
    params = {p.data_ptr() for p in model.parameters()}
    assert not any(b.data_ptr() in params for b in dec.heads.buffers())
    assert fused.fused_model(model, ('decoder',)).sam_mask_decoder.__class__.__name__ == \
        'MaskDecoder'
    kw = dict(_inputs(2, False), high_res_features=_hires(2), multimask_output=True)
    ref = _run(lambda: model.sam_mask_decoder(**kw), False)
    out = _run(lambda: dec(**kw), False)
    for o, r in zip(out, ref):
        _close(o, r, 1e-5)
    x = _rand(5, 256, seed=8)
    _close(_run(lambda: twin.obj_ptr_proj(x), False), _run(lambda: model.obj_ptr_proj(x), False),
           1e-5)


@pytest.mark.parametrize('autocast, tol', [(False, 1e-5), (True, 2.0 ** -7)])
def test_fused_mlp_equals_sam2_mlp(autocast, tol):
    from sam2.modeling.sam2_utils import MLP
    torch.manual_seed(0)
    mlp = MLP(64, 32, 20, 3, sigmoid_output=True)
    assert stackable(mlp, 64, 32) and not stackable(MLP(64, 32, 20, 2), 64, 32)
    assert not stackable(MLP(64, 48, 20, 3), 64, 48)        # hid not a power of two
    x = _rand(2, 17, 64, seed=9)[:, ::2]                      # strided rows, 18 > one block
    _close(_run(lambda: FusedMLP(mlp)(x), autocast), _run(lambda: mlp(x), autocast), tol)


def _unstackable_decoder():
    dec = _decoder(True)
    dec.iou_prediction_head = copy.deepcopy(dec.iou_prediction_head)
    dec.iou_prediction_head.act = torch.nn.GELU()
    return dec


def test_decoder_with_unstackable_heads_runs_sam2s_predict_masks():
    dec = _unstackable_decoder()
    twin = FusedMaskDecoder(dec)
    assert twin.heads is None
    kw = dict(_inputs(2, False), high_res_features=_hires(2))
    for o, r in zip(_run(lambda: twin.predict_masks(**kw), False),
                    _run(lambda: dec.predict_masks(**kw), False)):
        assert torch.equal(o, r)


def _op_counts(fn):
    """(top-level aten ops + Triton kernels, those of them that are not views or
    allocations) run by fn."""
    top = [e.name for e in top_level_ops(fn)]
    return len(top), sum(n not in NO_KERNEL for n in top)


@pytest.mark.parametrize('autocast', [False, True])
def test_fused_predict_masks_runs_fewer_ops(autocast, triton_ranges, record_property):
    """Top-level aten ops of predict_masks outside the two-way transformer (counted alone and
    subtracted), batch 1: sam2's against the fused path's (its Triton kernel counted as one);
    bf16 with bf16 weights, as the tracker runs."""
    dec = _decoder(True, bf16_weights=autocast)
    twin = FusedMaskDecoder(dec)
    kw = dict(_inputs(1, False), high_res_features=_hires(1))
    src = kw['image_embeddings'] + kw['dense_prompt_embeddings']
    tokens = torch.cat((twin.output_tokens[None], kw['sparse_prompt_embeddings']), dim=1)
    counts = {}
    for name, d in (('sam2', dec), ('fused', twin)):
        with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16, enabled=autocast):
            whole = _op_counts(lambda: d.predict_masks(**kw))
            tf = _op_counts(lambda: d.transformer(src, kw['image_pe'], tokens))
        counts[name] = (whole[0] - tf[0], whole[1] - tf[1])
    record_property('aten_ops_outside_transformer', counts)
    print('aten ops outside the transformer (all, not views):', counts)
    # the heads' GEMMs, ReLUs, casts, the stack and the token cat/repeat are gone
    assert counts['fused'][1] <= counts['sam2'][1] - 25, counts
