"""The mask decoder's output upscaling with the 'layernorm2d' group on (kernels/layernorm2d.py,
kernels/mask_decoder.py) against sam2's ops, on the CPU (Triton's interpreter).

sam2 runs ``act2(dc2(act1(ln1(dc1(src) + feat_s1))) + feat_s0)``: with the group on, the first
add runs inside the norm's kernel (``FusedLayerNorm2d(x, residual=...)``) and the last add with
its GELU in one kernel (``add_gelu``): two kernels fewer per call.

Bounds. Each add rounds as torch's (an fp32 add, then round to the promoted dtype), so the
norm of ``x + r`` is bitwise the norm of torch's sum. The GELU computes erf in float32 as
torch does, but torch's vectorized CPU erf is a polynomial a few float32 ulps from the
correctly rounded erf of the interpreter: bitwise against the same formula with a correctly
rounded erf, and within 1e-6 x max(1, max |torch|) (fp32) or one bf16 ulp of each value (a
float32 difference in the last bits flips a bf16 rounding now and then; in the negative tail,
where 1 + erf cancels, the erf's last float32 bit is all of it) of torch's GELU on the same
sum, which needs no tolerance of its own. predict_masks: 1e-5 x max(1,
max |sam2|) in fp32, 2^-6 under CPU bf16 autocast (the decoder tests' bounds: the heads and
the norm round bf16 intermediates).
"""

import contextlib
import copy

import pytest
import torch

pytest.importorskip('triton')

from conftest import assert_close_rel  # noqa: E402
from conftest import shared_model  # noqa: E402
from sam2_ros.engine.cuda.kernels import fused, mask_decoder  # noqa: E402
from sam2_ros.engine.cuda.kernels.layernorm2d import (FusedLayerNorm2d, add_gelu,  # noqa: E402
                                                      fuses_upscaling)
from sam2_ros.engine.cuda.kernels.swap import with_children  # noqa: E402
from tools.probes.step_ops import count_step  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')


def _rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _norm2d(c, seed=0):
    """A sam2 LayerNorm2d with a random affine (its init, 1 and 0, would hide a wrong one)."""
    from sam2.modeling.sam2_utils import LayerNorm2d
    n = LayerNorm2d(c, eps=1e-6)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        n.weight.normal_(1.0, 0.3, generator=g)
        n.bias.normal_(0.0, 0.3, generator=g)
    return n


def _residual(layout, bsz, c, h, w, seed, dtype):
    """[B, C, H, W] of ``layout``: contiguous; 'tracker': a view of one frame's [HW, 1, C]
    features expanded to B (batch stride 0, channels last), as encoder.high_res_features
    passes them; 'broadcast': [1, C, H, W], which torch's add broadcasts."""
    if layout == 'tracker':
        x = _rand(h * w, 1, c, seed=seed, dtype=dtype).expand(-1, bsz, -1)
        return x.permute(1, 2, 0).reshape(bsz, c, h, w)
    return _rand(1 if layout == 'broadcast' else bsz, c, h, w, seed=seed, dtype=dtype)


DTYPES = [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
          (torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16)]


@torch.no_grad()
@pytest.mark.parametrize('dtypes', DTYPES)
@pytest.mark.parametrize('layout', ['contiguous', 'tracker', 'broadcast'])
@pytest.mark.parametrize('gelu', [False, True])
def test_layernorm2d_residual_equals_norm_of_torch_add(dtypes, layout, gelu):
    """The norm of x + residual: bitwise the kernel's norm of torch's sum (the add rounds as
    torch's), and as sam2's LayerNorm2d (+ GELU) of it: bitwise for bf16 sums without the
    GELU (each op rounds to bf16 as torch's), else within 1e-5 (the mean's summation order,
    the erf)."""
    n = _norm2d(24, seed=1)
    x = (3 * _rand(2, 24, 5, 7, seed=2) + 1).to(dtypes[0])
    r = _residual(layout, 2, 24, 5, 7, seed=3, dtype=dtypes[1])
    ln = FusedLayerNorm2d(n, gelu=gelu)
    out = ln(x, residual=r)
    s = x + r
    assert torch.equal(out, ln(s))
    ref = torch.nn.functional.gelu(n(s)) if gelu else n(s)
    assert out.dtype == ref.dtype
    if s.dtype == torch.bfloat16 and not gelu:
        assert torch.equal(out, ref)
    assert_close_rel(out, ref, 1e-5)
    with torch.autocast('cpu', torch.bfloat16):      # its consumer is a conv: written in bf16
        assert ln(x, residual=r).dtype == torch.bfloat16


def _gelu_correctly_rounded_erf(s):
    """torch's GELU formula on float32 values with erf computed in float64 and rounded to
    float32 (the interpreter's erf), rounded to s's dtype."""
    f = s.float()
    e = torch.erf((f * 0.7071067811865476).double()).float()
    return (f * 0.5 * (1.0 + e)).to(s.dtype)


@torch.no_grad()
@pytest.mark.parametrize('dtypes', DTYPES)
@pytest.mark.parametrize('layout', ['contiguous', 'tracker', 'broadcast'])
def test_add_gelu_equals_torch_add_then_gelu(dtypes, layout):
    x = (2 * _rand(3, 12, 6, 5, seed=4)).to(dtypes[0])
    r = _residual(layout, 3, 12, 6, 5, seed=5, dtype=dtypes[1])
    out = add_gelu(x, r)
    s = x + r                                                   # torch's add and rounding
    ref = torch.nn.GELU()(s)
    assert out.dtype == ref.dtype and out.shape == ref.shape and out.is_contiguous()
    assert torch.equal(out, _gelu_correctly_rounded_erf(s))
    if ref.dtype == torch.float32:
        assert_close_rel(out, ref, 1e-6)
    else:
        # one bf16 ulp of each value (at most 2^-7 of it) where torch's erf flips a rounding,
        # plus, in the negative tail where 1 + erf cancels, a float32 ulp of erf near -1
        # (2^-24) times |s| / 2, twice
        err = (out.float() - ref.float()).abs()
        assert (err <= 2.0 ** -7 * ref.float().abs() + s.float().abs() * 2.0 ** -24).all()


def _model(act2=None):
    """The shared 64 px model (a shallow copy) whose decoder upscaling has its own deep copy
    with a random LayerNorm2d affine; ``act2``: the last activation replaced."""
    model = shared_model(64)
    dec = copy.copy(model.sam_mask_decoder)
    dec._modules = dict(dec._modules)
    up = copy.deepcopy(dec.output_upscaling)
    with torch.no_grad():
        g = torch.Generator().manual_seed(7)
        up[1].weight.normal_(1.0, 0.3, generator=g)
        up[1].bias.normal_(0.0, 0.3, generator=g)
    if act2 is not None:
        up[4] = act2
    dec._modules['output_upscaling'] = up
    return with_children(model, sam_mask_decoder=dec)


def _inputs(model, bsz, layout='tracker', feat_dtype=torch.float32):
    """predict_masks' arguments at 64 px: embeddings [B, 256, 4, 4], feat_s0 [B, 32, 16, 16],
    feat_s1 [B, 64, 8, 8]."""
    return dict(image_embeddings=_rand(bsz, 256, 4, 4, seed=11),
                image_pe=model.sam_prompt_encoder.get_dense_pe(),
                sparse_prompt_embeddings=_rand(bsz, 2, 256, seed=12),
                dense_prompt_embeddings=_rand(bsz, 256, 4, 4, seed=13), repeat_image=False,
                high_res_features=[_residual(layout, bsz, 32, 16, 16, 14, feat_dtype),
                                   _residual(layout, bsz, 64, 8, 8, 15, feat_dtype)])


def _run(fn, autocast):
    with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        return fn()


@pytest.mark.parametrize('autocast, tol, feat_dtype', [
    (False, 1e-5, torch.float32), (True, 2.0 ** -6, torch.bfloat16),
    (True, 2.0 ** -6, torch.float32)])
@pytest.mark.parametrize('bsz, layout', [(1, 'contiguous'), (3, 'tracker')])
def test_fused_upscaling_predict_masks_equals_sam2(autocast, tol, feat_dtype, bsz, layout):
    """The copy of the 'decoder_heads' and 'layernorm2d' groups fuses the upscaling's adds;
    its predict_masks (masks, IoU, tokens, object score) equals sam2's. Under autocast the
    features are bf16 as the tracker's (conv outputs) or float32 (the first add promotes)."""
    model = _model()
    twin = fused.fused_model(model, ('decoder_heads', 'layernorm2d'))
    _, ln1, act1, _, act2 = twin.sam_mask_decoder.output_upscaling
    assert fuses_upscaling(ln1, act1, act2)
    kw = _inputs(model, bsz, layout, feat_dtype)
    ref = _run(lambda: model.sam_mask_decoder.predict_masks(**kw), autocast)
    out = _run(lambda: twin.sam_mask_decoder.predict_masks(**kw), autocast)
    assert out[0].shape == (bsz, 4, 16, 16)
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype and o.shape == r.shape
        assert_close_rel(o, r, tol)


def _counted(decoder, kw, autocast):
    """(launches, {source function: Counter of ops}) of one predict_masks call, counted as the
    step-ops probe counts a step (after one uncounted call)."""
    def ctx():
        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())
        stack.enter_context(torch.autocast('cpu', torch.bfloat16, enabled=autocast))
        return stack
    return count_step(lambda a: decoder.predict_masks(**a), kw, ctx)


def _ops(decoder, kw, autocast):
    """{aten op or 'triton <kernel>': launches} of one predict_masks call."""
    total, by_src = _counted(decoder, kw, autocast)
    ops = {}
    for counter in by_src.values():
        for name, n in counter.items():
            ops[name] = ops.get(name, 0) + n
    assert sum(ops.values()) == total
    return ops


@pytest.mark.parametrize('autocast', [False, True])
def test_fused_upscaling_launches_two_kernels_fewer(autocast, monkeypatch):
    """With the upscaling fused, predict_masks launches 2 kernels fewer than the same copy
    running sam2's upscaling: its two residual adds and the GELU (3 ops) become one kernel
    (the first add goes into the norm's kernel, which runs either way)."""
    model = _model()
    dec = fused.fused_model(model, ('decoder_heads', 'layernorm2d')).sam_mask_decoder
    kw = _inputs(model, 3, 'tracker', torch.bfloat16 if autocast else torch.float32)
    after = _ops(dec, kw, autocast)
    monkeypatch.setattr(mask_decoder, 'fuses_upscaling', lambda *mods: False)
    before = _ops(dec, kw, autocast)
    assert sum(after.values()) == sum(before.values()) - 2, (before, after)
    changed = {op: (before.get(op, 0), after.get(op, 0)) for op in set(before) | set(after)
               if before.get(op, 0) != after.get(op, 0)}
    assert changed == {'add': (before['add'], before['add'] - 2), 'gelu': (1, 0),
                       'triton _add_gelu_kernel': (0, 1)}, changed
    assert before['triton _ln2d_kernel'] == after['triton _ln2d_kernel'] == 1


@pytest.mark.parametrize('groups, act2', [
    (('decoder_heads',), None),
    (('decoder_heads', 'layernorm2d'), torch.nn.GELU(approximate='tanh'))])
def test_upscaling_runs_sam2_ops_without_the_group_or_exact_gelu(groups, act2):
    """The 'layernorm2d' group is the off switch: without it (or with another last
    activation) the upscaling is sam2's ops, its adds and GELU in aten, equal to sam2's."""
    model = _model(act2)
    dec = fused.fused_model(model, groups).sam_mask_decoder
    _, ln1, act1, _, act2 = dec.output_upscaling
    assert not fuses_upscaling(ln1, act1, act2)
    kw = _inputs(model, 2, 'tracker')
    ops = _ops(dec, kw, False)
    assert ops.get('triton _add_gelu_kernel') is None, ops
    assert ops.get('gelu') == (1 if 'layernorm2d' in groups else 2), ops   # act1 in the norm
    ref = _run(lambda: model.sam_mask_decoder.predict_masks(**kw), False)
    out = _run(lambda: dec.predict_masks(**kw), False)
    for o, r in zip(out, ref):
        assert_close_rel(o, r, 1e-5)


@torch.no_grad()
@pytest.mark.parametrize('dtypes', [(torch.float32, torch.float32, torch.float32),
                                    (torch.bfloat16, torch.bfloat16, torch.float32),
                                    (torch.float32, torch.bfloat16, torch.bfloat16)])
def test_sum_key_value_inputs_equal_add_then_add_and_cast(dtypes):
    """The keys' kernel of the two-way transformer with the dense embedding added in it: the
    sum as torch's add (promoted dtype), keys + pe and the keys cast to bf16 as before;
    a broadcast addend (stride 0 over the batch, as the no-mask embedding) too. Bitwise."""
    from sam2_ros.engine.cuda.kernels.elementwise import sum_key_value_inputs
    x = _rand(3, 16, 256, seed=21, dtype=dtypes[0])
    pos = _rand(1, 16, 256, seed=23, dtype=dtypes[2]).expand(3, -1, -1)
    for add in (_rand(3, 16, 256, seed=22, dtype=dtypes[1]),
                _rand(1, 1, 256, seed=24, dtype=dtypes[1]).expand(3, 16, -1)):
        s, k, v = sum_key_value_inputs(x, add, pos, torch.bfloat16)
        ref = x + add
        assert s.dtype == ref.dtype and torch.equal(s, ref)
        assert torch.equal(k, (ref + pos).to(torch.bfloat16))
        assert torch.equal(v, ref.to(torch.bfloat16))


@pytest.mark.parametrize('autocast, tol', [(False, 1e-5), (True, 2.0 ** -6)])
@pytest.mark.parametrize('repeat', [False, True])
def test_fused_decoder_adds_the_dense_embedding_in_its_keys_kernel(autocast, tol, repeat):
    """With the fused two-way transformer ('decoder'), predict_masks no longer adds the dense
    prompt embedding to the image embedding itself: the transformer's keys kernel does (no
    add left in predict_masks), with outputs equal to sam2's, one image embedding repeated
    over the prompts (repeat_image) too."""
    model = _model()
    dec = fused.fused_model(model, ('decoder', 'decoder_heads', 'layernorm2d')).sam_mask_decoder
    kw = _inputs(model, 3, 'tracker', torch.bfloat16 if autocast else torch.float32)
    if repeat:
        kw.update(image_embeddings=kw['image_embeddings'][:1], repeat_image=True)
    ref = _run(lambda: model.sam_mask_decoder.predict_masks(**kw), autocast)
    out = _run(lambda: dec.predict_masks(**kw), autocast)
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype and o.shape == r.shape
        assert_close_rel(o, r, tol)
    _, by_src = _counted(dec, kw, autocast)
    adds = sum(c.get('add', 0) for src, c in by_src.items() if 'predict_masks' in src)
    assert adds == 0, by_src
