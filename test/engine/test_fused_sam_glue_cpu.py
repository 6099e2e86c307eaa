"""The 'sam_glue' group (sam2_ros/engine/cuda/kernels/sam_glue.py) against sam2's
``_forward_sam_heads`` and ``_encode_new_memory`` on the CPU, its kernels in Triton's
interpreter, at image size 64 (masks [B, M, 16, 16] -> [B, M, 64, 64], memories [B, 64, 4, 4]).

The heads are compared on copies whose other modules are sam2's (only the glue differs): the
low-res masks, IoUs and scores bitwise, an absent object's high-res masks too (all -1024); the
present objects' high-res masks (bilinear upsampling in float32 with torch's formula; torch's
CPU kernel rounds a little differently) within 2^-20 x max |sam2| (measured 1.0e-7 in fp32,
one ulp; 2.5e-8 in bf16); the object pointer (the projection ran on every mask token, not on
the best one alone: another GEMM shape) within 1e-6 x max(1, max |sam2|) in fp32 (measured
3.7e-8 with multimask, else bitwise) and 2^-8 in bf16 (measured bitwise).
The memory: the first stage reading logits through the prologue against the same stage
reading sam2's masks, bitwise under bf16 compute, within 1e-5 in fp32 (the interpreter's
sigmoid against torch's); out_proj's no-object epilogue bitwise; the whole method against
sam2's within the memory encoder's bounds (measured 3.4e-7 fp32, bitwise bf16).
"""

import copy

import pytest
import torch

pytest.importorskip('triton')

from conftest import LEAN, make_tracker, shared_model  # noqa: E402
from sam2_ros.engine import glue  # noqa: E402
from sam2_ros.engine.config import FUSED_GROUPS  # noqa: E402
from sam2_ros.engine.cuda.kernels import fused  # noqa: E402
from sam2_ros.engine.cuda.kernels.mask_downsampler import conv_stage  # noqa: E402
from sam2_ros.engine.cuda.kernels.mask_prologue import BINARIZE, SIGMOID, MaskPrologue  # noqa
from sam2_ros.engine.cuda.kernels.row_gemm import CONV, row_gemm  # noqa: E402
from sam2_ros.engine.cuda.kernels.sam_glue import FUSED_GLUE  # noqa: E402
from sam2_ros.engine.cuda.kernels.swap import with_children  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')
MEM_TOL = {False: 1e-4, True: 2.0 ** -6}      # vs sam2's whole encoder: its fused CPU test's


class SteeredDecoder(torch.nn.Module):
    """sam2's mask decoder with its object scores shifted per object (so that one is absent)
    and the IoUs of the last object tied (argmax takes the first maximum): the same outputs on
    both sides of a comparison."""

    def __init__(self, inner, shifts):
        super().__init__()
        self.inner, self.shifts = inner, shifts

    def forward(self, **kw):
        masks, ious, tokens, score = self.inner(**kw)
        score = score + self.shifts[:score.shape[0], None].to(score.dtype)
        if ious.shape[1] == 3:
            ious = ious.clone()
            ious[-1] = torch.tensor([0.25, 0.75, 0.75], dtype=ious.dtype)
        return masks, ious, tokens, score


@pytest.fixture(scope='module')
def model():
    """The shared tiny@64 model, copied: a steered decoder (objects 0, 2 present, 1 absent),
    random no-object pointer and embedding (sam2 initializes them to 0 or at random)."""
    base = copy.deepcopy(shared_model(64))
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        base.no_obj_ptr.normal_(generator=g)
        base.no_obj_embed_spatial.normal_(generator=g)
    return with_children(base, sam_mask_decoder=SteeredDecoder(
        base.sam_mask_decoder, torch.tensor([20.0, -20.0, 20.0])))


def _run(fn, autocast):
    with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        return fn()


def _rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _heads_inputs(batch=3):
    return dict(backbone_features=_rand(batch, 256, 4, 4, seed=1),
                high_res_features=[_rand(batch, 32, 16, 16, seed=2),
                                   _rand(batch, 64, 8, 8, seed=3)])


def _rel(out, ref):
    return (out.float() - ref.float()).abs().max().item() / max(
        1.0, ref.float().abs().max().item())


def _check_heads(ref, out, autocast, multimask):
    names = ('low_res_multimasks', 'high_res_multimasks', 'ious', 'low_res_masks',
             'high_res_masks', 'obj_ptr', 'object_score_logits')
    for name, r, o in zip(names, ref, out):
        assert (o.dtype, o.shape) == (r.dtype, r.shape), name
    for i in (0, 2, 3, 6):                              # where + cast: exact; decoder's own
        assert torch.equal(out[i], ref[i]), names[i]
    present = [0, 2]                     # (the absent object's -1024 would hide errors)
    for i in (1, 4):
        rel = _rel(out[i][present], ref[i][present])
        assert rel <= 2.0 ** -20 and torch.equal(out[i][1], ref[i][1]), (names[i], rel)
    assert _rel(out[5], ref[5]) <= (2.0 ** -8 if autocast else 1e-6), _rel(out[5], ref[5])
    if not multimask:                    # sam2 returns the multimasks as the masks
        assert out[3] is out[0] and out[4] is out[1]
    return _rel(out[1][present], ref[1][present]), _rel(out[5], ref[5])


@pytest.mark.parametrize('multimask', [True, False])
@pytest.mark.parametrize('autocast', [False, True])
def test_fused_heads_equal_sam2s(model, autocast, multimask):
    twin = fused.fused_model(model, ('sam_glue',))
    kw = dict(_heads_inputs(), multimask_output=multimask)
    ref = _run(lambda: model._forward_sam_heads(**kw), autocast)
    out = _run(lambda: glue.sam_heads(twin)(**kw), autocast)
    assert (ref[6].flatten() > 0).tolist() == [True, False, True]
    assert (ref[0][1] == -1024.0).all() and (ref[1][1] == -1024.0).all()   # absent object
    # the absent object's pointer is no_obj_ptr; the tied IoUs pick the first best (1)
    assert torch.allclose(out[5][1].float(), model.no_obj_ptr[0].float())
    if multimask:
        assert torch.equal(out[3][2, 0], out[0][2, 1])
    print('heads rel err (high res, pointer)', autocast, multimask,
          _check_heads(ref, out, autocast, multimask))


def test_fused_heads_with_points_and_a_mask_prompt_equal_sam2s(model):
    """A correction: two clicks and the previous logits (resized by the prompt encoder's
    antialiased interpolation first), multimask as sam2's rule decides for 2 points."""
    twin = fused.fused_model(model, ('sam_glue',))
    points = {'point_coords': 64 * torch.rand(3, 2, 2, generator=torch.Generator()
                                              .manual_seed(4)),
              'point_labels': torch.tensor([[1, 0], [1, 1], [0, 1]], dtype=torch.int32)}
    kw = dict(_heads_inputs(), point_inputs=points, mask_inputs=_rand(3, 1, 32, 32, seed=5),
              multimask_output=model._use_multimask(False, points))
    ref = _run(lambda: model._forward_sam_heads(**kw), False)
    _check_heads(ref, _run(lambda: glue.sam_heads(twin)(**kw), False), False,
                 kw['multimask_output'])


def _memory_inputs(batch=2, seed=6):
    return dict(current_vision_feats=[_rand(16, batch, 256, seed=seed)], feat_sizes=[(4, 4)],
                pred_masks_high_res=8 * _rand(batch, 1, 64, 64, seed=seed + 1),
                object_score_logits=torch.tensor([[1.5], [-2.0]]))


@pytest.mark.parametrize('from_points', [False, True])
@pytest.mark.parametrize('autocast', [False, True])
def test_fused_memory_encoding_equals_sam2s(model, autocast, from_points):
    """Sigmoid (a tracked frame's memory) or binarization (a prompted frame's, sam2's
    binarize_mask_from_pts_for_mem_enc), scale 20 and bias -10, the no-object embedding on
    the absent object (score -2): within the memory encoder's bounds of sam2's method (the
    glue alone: the two tests below)."""
    assert model.binarize_mask_from_pts_for_mem_enc
    twin = fused.fused_model(model, ('memory_encoder', 'sam_glue'))
    kw = dict(_memory_inputs(), is_mask_from_pts=from_points)
    ref, ref_pos = _run(lambda: model._encode_new_memory(**kw), autocast)
    out, pos = _run(lambda: glue.new_memory(twin)(**kw), autocast)
    assert out.dtype == ref.dtype and out.shape == ref.shape and out.is_contiguous()
    assert torch.equal(pos[0], ref_pos[0])
    rel = _rel(out, ref)
    assert rel <= MEM_TOL[autocast], rel
    print('memory rel err', autocast, from_points, rel)


def _mask_ops(logits, mode, scale, bias):
    """sam2's mask for the memory encoder, by its own ops."""
    x = (logits > 0).float() if mode == BINARIZE else torch.sigmoid(logits)
    return x * scale + bias


@pytest.mark.parametrize('mode, dtype, compute', [
    (SIGMOID, torch.float32, torch.float32), (SIGMOID, torch.float32, torch.bfloat16),
    (SIGMOID, torch.bfloat16, torch.bfloat16), (BINARIZE, torch.float32, torch.float32),
    (BINARIZE, torch.float32, torch.bfloat16)])
def test_first_stage_makes_sam2s_masks_from_the_logits(model, mode, dtype, compute):
    """conv_stage reading logits through the prologue = conv_stage reading the masks sam2
    computes from them (each op rounding in the logits' dtype, or float32 once binarized):
    bitwise under bf16 compute (the masks round to bf16 at the convolution), within 1e-5 in
    float32 (the interpreter's sigmoid against torch's: 1 ulp)."""
    conv, norm = model.memory_encoder.mask_downsampler.encoder[:2]
    logits = (8 * _rand(2, 1, 64, 64, seed=8)).to(dtype)
    logits[0, 0, :4] = 0.0                              # binarized: 0 is not > 0
    size = (2, 64, 64)
    out = conv_stage(logits, size, logits.stride(), conv, norm, compute,
                     prologue=MaskPrologue(mode, 20.0, -10.0))
    masks = _mask_ops(logits, mode, 20.0, -10.0)
    assert masks.dtype == (torch.float32 if mode == BINARIZE else dtype)
    ref = conv_stage(masks, size, masks.stride(), conv, norm, compute)
    rel = _rel(out, ref)
    assert rel <= (0.0 if compute == torch.bfloat16 else 1e-5), rel


@pytest.mark.parametrize('compute', [torch.float32, torch.bfloat16])
def test_out_proj_adds_the_no_object_embedding_as_sam2(model, compute):
    """row_gemm's CONV epilogue with no_object = its output, then sam2's in-place add of
    (1 - (score > 0)) * embedding: bitwise."""
    proj = model.memory_encoder.out_proj
    a = _rand(2 * 16, proj.in_channels, seed=9).to(compute)
    score = torch.tensor([[0.5], [-3.0]]).to(compute)
    emb = model.no_obj_embed_spatial
    shape = (2, proj.out_channels, 4, 4)

    def run(no_object):
        out = torch.empty(shape, dtype=compute)
        return row_gemm(a, proj.weight, proj.bias, CONV, compute, out, hw=16,
                        out_strides=(out.stride(0), 1, out.stride(1)), no_object=no_object)
    ref = run(None)
    ref += (1 - (score > 0).float()[..., None, None]) * emb[..., None, None].expand(*shape)
    out = run((score, emb.reshape(-1)))
    assert torch.equal(out, ref) and not torch.equal(out[1], run(None)[1])


def test_memory_encoding_without_the_fused_encoder_is_sam2s(model, monkeypatch):
    """'sam_glue' without 'memory_encoder': nothing to fold into, sam2's method runs."""
    twin = fused.fused_model(model, ('sam_glue',))
    kw = dict(_memory_inputs(), is_mask_from_pts=False)
    ref, _ = _run(lambda: model._encode_new_memory(**kw), False)
    out, _ = _run(lambda: glue.new_memory(twin)(**kw), False)
    assert torch.equal(out, ref)


def test_glue_is_one_kernel_and_none_in_the_memory_encoder(model, kernel_launches):
    names = kernel_launches
    twin = fused.fused_model(model, ('sam_glue', 'memory_encoder'))
    _run(lambda: glue.sam_heads(twin)(**_heads_inputs(1), multimask_output=True), True)
    assert names == ['_heads_glue_kernel'], names
    names.clear()
    kw = dict(_memory_inputs(batch=1), is_mask_from_pts=False)
    kw['object_score_logits'] = kw['object_score_logits'][:1]
    _run(lambda: glue.new_memory(twin)(**kw), True)
    assert len(names) == 11, names          # the memory encoder's eleven, nothing more


def test_unsupported_branches_run_sam2s_methods(model, monkeypatch, kernel_launches):
    """soft_no_obj_ptr, float16 autocast, a training model: sam2's methods (on the copy)."""
    from sam2.modeling.sam2_base import SAM2Base
    calls = []
    for name in ('_forward_sam_heads', '_encode_new_memory'):
        def spy(self, *args, _original=getattr(SAM2Base, name), _name=name, **kw):
            calls.append(_name)
            return _original(self, *args, **kw)
        monkeypatch.setattr(SAM2Base, name, spy)
    names = kernel_launches
    kw = dict(_heads_inputs(1), multimask_output=True)
    soft_model = with_children(model)
    soft_model.soft_no_obj_ptr = True
    soft = fused.fused_model(soft_model, ('sam_glue',))
    ref = _run(lambda: soft_model._forward_sam_heads(**kw), False)
    out = _run(lambda: glue.sam_heads(soft)(**kw), False)
    assert all(torch.equal(o, r) for o, r in zip(out, ref)) and names == []
    assert calls == ['_forward_sam_heads'] * 2
    twin = fused.fused_model(model, ('sam_glue', 'memory_encoder'))
    with torch.inference_mode(), torch.autocast('cpu', torch.float16):
        glue.sam_heads(twin)(**kw)
    assert names == [] and len(calls) == 3
    trained = fused.fused_model(with_children(model), ('sam_glue', 'memory_encoder'))
    trained.training = True
    _run(lambda: glue.new_memory(trained)(**_memory_inputs(), is_mask_from_pts=True), False)
    assert calls[-1] == '_encode_new_memory'
    calls.clear()
    names.clear()
    _run(lambda: glue.sam_heads(twin)(**kw), False)
    assert calls == [] and names == ['_heads_glue_kernel']      # the supported path


def test_group_off_keeps_sam2s_methods_and_copies_keep_the_glue():
    """The glue by composition: the copy carries FUSED_GLUE as an attribute and keeps sam2's
    class; the model keeps its methods; a later shallow copy keeps the glue, run on itself."""
    from sam2.modeling.sam2_base import SAM2Base
    model = shared_model(64)
    rest = tuple(g for g in FUSED_GROUPS if g != 'sam_glue')
    assert glue.glue_of(fused.fused_model(model, rest)) is None
    twin = fused.fused_model(model, FUSED_GROUPS)
    assert glue.glue_of(twin) is FUSED_GLUE and glue.glue_of(model) is None
    assert type(model)._forward_sam_heads is SAM2Base._forward_sam_heads
    assert '_forward_sam_heads' not in vars(twin) and '_encode_new_memory' not in vars(twin)
    assert glue.sam_heads(model) == model._forward_sam_heads       # sam2's bound methods
    assert glue.new_memory(model) == model._encode_new_memory
    heads = glue.sam_heads(twin)
    assert heads.func is FUSED_GLUE.sam_heads and heads.args == (twin,)
    later = with_children(twin, memory_encoder=model.memory_encoder)   # a later shallow copy
    assert glue.glue_of(later) is FUSED_GLUE and later.memory_encoder is model.memory_encoder
    assert glue.new_memory(later).args == (later,)                    # run on itself
    shared = {id(p) for p in model.parameters()}
    assert all(id(p) in shared for p in twin.parameters())


def test_fused_copies_keep_sam2s_class():
    """No dynamic subclass: every fused copy (each group alone, all of them) is of the model's
    own class, and the model's class and methods are sam2's."""
    from sam2.modeling.sam2_base import SAM2Base
    model = shared_model(64)
    before, children = dict(vars(model)), dict(model.named_children())
    for groups in [FUSED_GROUPS, ('sam_glue',), ('sam_glue', 'memory_encoder'),
                   *((g,) for g in FUSED_GROUPS)]:
        assert type(fused.fused_model(model, groups)) is type(model), groups
    assert isinstance(model, SAM2Base) and type(model).__module__.startswith('sam2.')
    assert vars(model).keys() == before.keys() and all(
        vars(model)[k] is v for k, v in before.items())
    assert dict(model.named_children()) == children and glue.glue_of(model) is None


def test_mask_as_output_runs_the_glues_heads(model, kernel_launches):
    """A mask prompt (sam2's _use_mask_as_output, whose pointer comes from
    self._forward_sam_heads): on the copy the glue's heads give it (one glue kernel), and its
    outputs are sam2's method's on the model (the pointer within the heads' bound)."""
    twin = fused.fused_model(model, ('sam_glue',))
    mask = torch.zeros(3, 1, 64, 64)
    mask[0, :, 8:40, 10:30] = 1.0
    mask[2, :, 30:60, 2:50] = 1.0             # object 1: an empty mask (absent)
    hires = _heads_inputs()['high_res_features']
    args = (_heads_inputs()['backbone_features'], hires, mask)
    ref = _run(lambda: model._use_mask_as_output(*args), False)
    assert kernel_launches == []
    out = _run(lambda: glue.mask_as_output(twin)(*args), False)
    assert kernel_launches == ['_heads_glue_kernel'], kernel_launches
    for i in (0, 1, 2, 3, 4, 6):
        assert torch.equal(out[i], ref[i]), i
    assert _rel(out[5], ref[5]) <= 1e-6, _rel(out[5], ref[5])
    assert glue.mask_as_output(model) == model._use_mask_as_output


def test_sam_glue_stream_equals_sam2s(kernel_launches):
    """fp32, eager runner: the model against its copy with 'sam_glue' and 'memory_encoder'
    over a stream with a click (frame 0), a mask (1) and a correction (2): prompted frames'
    binarized memories, tracked frames' sigmoid ones; the same logits within 1e-4 (the memory
    encoder's bound), and the glue ran on every frame."""
    from scenarios import schedule, synthetic_frames
    h, w, n = 48, 64, 4
    events = schedule(h, w, add2=n, add3=1, fix=2, remove=n)      # no box, no removal
    runs, glue = [], kernel_launches          # sam2's run launches none of ours
    for fuse in (False, True):
        tr = make_tracker(image_size=64, max_objects=3, extra_hydra_overrides=list(LEAN))
        if fuse:
            tr.runner.model = fused.fused_model(tr.runner.model, ('sam_glue', 'memory_encoder'))
        logits = []
        for f, frame in enumerate(synthetic_frames(n, h, w)):
            res = tr.track(frame)
            for _, prompt in events.get(f, []):
                res = tr.add_prompt(prompt)
            logits.append({o.obj_id: o.low_res_logits.clone() for o in res.objects})
        runs.append(logits)
    for ref, out in zip(*runs):
        assert ref.keys() == out.keys()
        for k in ref:
            assert _rel(out[k], ref[k]) <= 1e-4, (k, _rel(out[k], ref[k]))
    assert glue.count('_heads_glue_kernel') >= n, glue
