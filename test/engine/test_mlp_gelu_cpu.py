"""The 'hiera_mlp' group (sam2_ros/engine/cuda/kernels/mlp_gelu.py) on the CPU: ``linear_gelu``
in Triton's interpreter (small, ragged shapes) against torch, ``GeluMLP`` against sam2's MLP,
its fallbacks, and the group's swap in the fused model copy (the original model untouched).

fp32: within 1e-5 x max(1, max |ref|) (another summation order only). bf16: the kernel rounds
where sam2's ops do (operands, fc1's output, the GELU's), so against an emulation of those
roundings (exact bf16 products summed in float32) every element is bitwise or one bf16 ulp
off, the ulp where the float32 sum lands within its rounding error of a bf16 rounding
boundary (a fraction of a percent); against torch's own bf16 Linear + GELU the same holds.
A whole MLP (fc2 sums the hidden's flips) within 2^-7 x max(1, max |sam2|). Through a Hiera
trunk (CPU autocast, tiny@64) the flips propagate: within Hiera's bound of the other fused
tests, 2^-5 x max |sam2| (measured 2^-6.4, as with 'hiera' alone; fp32 8e-7).
"""

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip('triton')

from sam2.modeling.sam2_utils import MLP  # noqa: E402

from conftest import shared_model  # noqa: E402
from sam2_ros.engine.cuda.kernels import fused, mlp_gelu  # noqa: E402
from sam2_ros.engine.cuda.kernels.hiera import FusedHiera  # noqa: E402
from sam2_ros.engine.cuda.kernels.mlp_gelu import (GeluMLP, linear_gelu,  # noqa: E402
                                                   supported, with_gelu_mlps)

pytestmark = pytest.mark.usefixtures('one_thread')
KERNEL = '_linear_gelu_kernel'


def _rand(*shape, seed=0, scale=1.0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=g)).to(dtype)


def _close(out, ref, rel):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    err = (out.float() - ref.float()).abs().max().item()
    scale = max(1.0, ref.float().abs().max().item())
    assert err <= rel * scale, (err, scale, err / scale)


def _ulps(out, ref):
    """|out - ref| per element in bf16 ulps of ref (the spacing at |ref|; 2^-133 near 0)."""
    r = ref.float()
    exp = torch.floor(torch.log2(r.abs().clamp(min=2.0 ** -126)))
    return (out.float() - r).abs() / torch.exp2(exp - 7)


def _operands(m, k, n, dtype=torch.float32):
    x = _rand(m, k, seed=1, dtype=dtype)
    w = _rand(n, k, seed=2, scale=k ** -0.5, dtype=dtype)      # sam2-like fan-in scale
    return x, w, _rand(n, seed=3, dtype=dtype)


# M, K, N against 32 x 32 x 32 blocks: ragged in each, K below one block and over several
# (ragged and even), several M and N tiles; and once in the interpreter's default blocks
SHAPES = [(37, 48, 70), (64, 96, 96), (100, 144, 33), (5, 20, 40), (70, 128, 150)]


@pytest.fixture(params=['small_blocks', 'default_blocks'])
def blocks(request, monkeypatch):
    if request.param == 'small_blocks':
        monkeypatch.setattr(mlp_gelu, 'INTERPRETED', (32, 32, 32, 4, 1))
    return request.param


@torch.no_grad()
@pytest.mark.parametrize('m, k, n', SHAPES)
def test_linear_gelu_fp32_equals_torch(m, k, n, blocks):
    x, w, b = _operands(m, k, n)
    out = linear_gelu(x, w, b)
    _close(out, F.gelu(F.linear(x, w, b)), 1e-5)


@torch.no_grad()
@pytest.mark.parametrize('m, k, n', SHAPES)
@pytest.mark.parametrize('stored', [torch.bfloat16, torch.float32])
def test_linear_gelu_bf16_rounds_as_sam2(m, k, n, stored, blocks):
    """Operands stored in bf16, or in float32 and cast by the kernel as autocast would."""
    x, w, b = _operands(m, k, n, stored)
    out = linear_gelu(x, w, b, torch.bfloat16)
    assert out.dtype == torch.bfloat16
    xb, wb, bb = x.bfloat16(), w.bfloat16(), b.bfloat16()
    linear = (xb.float() @ wb.float().t() + bb.float()).bfloat16()   # cuBLAS's one rounding
    emulated = F.gelu(linear.float()).bfloat16()                      # torch's bf16 GELU
    for ref in (emulated, F.gelu(F.linear(xb, wb, bb))):
        ulps = _ulps(out, ref)
        assert ulps.max() <= 1.0, ulps.max()
        assert (ulps > 0).float().mean() < 0.01


@torch.no_grad()
def test_linear_gelu_reads_strided_rows_and_writes_into_out():
    x, w, b = _operands(40, 64, 50)
    wide = torch.cat([x, _rand(40, 16, seed=4)], dim=1)[:, :64]      # rows at stride 80
    out = torch.full((40, 50), float('nan'))
    assert linear_gelu(wide, w, b, out=out) is out
    _close(out, F.gelu(F.linear(x, w, b)), 1e-5)


def _mlp(c=48, act=torch.nn.GELU, layers=2, sigmoid=False, seed=0):
    torch.manual_seed(seed)
    return MLP(c, 4 * c, c, num_layers=layers, activation=act, sigmoid_output=sigmoid).eval()


@pytest.mark.parametrize('autocast, dtype', [(False, torch.float32), (True, torch.float32),
                                             (True, torch.bfloat16), (False, torch.bfloat16)])
def test_gelu_mlp_equals_sam2s_mlp(autocast, dtype, kernel_launches):
    """[B, H, W, C] input as sam2's Hiera block feeds it (a [B, HW, C] one from FusedHiera is
    the same rows); float32 or bf16 input under CPU autocast, or a model run in bf16."""
    mlp = _mlp()
    if dtype == torch.bfloat16 and not autocast:
        mlp = mlp.to(torch.bfloat16)
    x = _rand(2, 5, 7, 48, seed=5, dtype=dtype)
    with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        ref, out = mlp(x), GeluMLP(mlp)(x)
    assert kernel_launches == [KERNEL]               # fc1 + GELU one launch, fc2 cuBLAS's
    _close(out, ref, 1e-5 if ref.dtype == torch.float32 else 2.0 ** -7)
    if ref.dtype == torch.bfloat16:     # an ulp flip in the hidden layer, summed over 4C
        assert (out != ref).float().mean() < 0.2


def _fallback_cases():
    yield 'three layers', _mlp(layers=3), {}
    yield 'relu', _mlp(act=torch.nn.ReLU), {}
    yield 'tanh gelu', _mlp(act=lambda: torch.nn.GELU(approximate='tanh')), {}
    yield 'sigmoid output', _mlp(sigmoid=True), {}
    yield 'training', _mlp().train(), {}
    yield 'autograd', _mlp(), {'grad': True}
    yield 'float64', _mlp().double(), {'dtype': torch.float64}
    yield 'float16 autocast', _mlp(), {'autocast': torch.float16}


@pytest.mark.parametrize('name, mlp, how', list(_fallback_cases()),
                         ids=[c[0] for c in _fallback_cases()])
def test_gelu_mlp_falls_back_to_sam2s_mlp(name, mlp, how, kernel_launches):
    x = _rand(3, 48, seed=6, dtype=how.get('dtype', torch.float32))
    auto = how.get('autocast')
    ctx = torch.enable_grad() if how.get('grad') else torch.inference_mode()
    with ctx, torch.autocast('cpu', auto or torch.bfloat16, enabled=auto is not None):
        ref, out = mlp(x), GeluMLP(mlp)(x)
    assert kernel_launches == [] and torch.equal(out, ref)
    if how.get('grad'):
        assert out.requires_grad       # sam2's autograd graph, which ours would not have


def test_gelu_mlp_falls_back_on_mixed_dtypes_without_autocast():
    """x bf16 on float32 weights, no autocast: sam2's F.linear refuses it, and so do we."""
    gm = GeluMLP(_mlp())
    x = _rand(3, 48, seed=7, dtype=torch.bfloat16)
    with torch.inference_mode():
        assert gm.compute_dtype(x) is None
        with pytest.raises(RuntimeError):
            gm(x)


def test_only_hiera_mlps_are_supported():
    trunk = shared_model(64).image_encoder.trunk
    assert all(supported(b.mlp) for b in trunk.blocks)
    structure = {'three layers', 'relu', 'tanh gelu', 'sigmoid output'}
    for name, mlp, _ in _fallback_cases():
        assert supported(mlp) == (name not in structure), name    # the rest: per call


def _trunk_mlps(twin):
    trunk = twin.image_encoder.trunk
    return [b.mlp for b in (trunk.trunk if isinstance(trunk, FusedHiera) else trunk).blocks]


@pytest.mark.parametrize('groups', [('hiera_mlp',), ('hiera', 'hiera_mlp'),
                                    ('constants', 'hiera', 'hiera_mlp')])
def test_group_swaps_every_block_mlp_and_leaves_the_model_unchanged(groups):
    model = shared_model(64)
    trunk = model.image_encoder.trunk
    before = [(b, b.mlp) for b in trunk.blocks]
    twin = fused.fused_model(model, groups)
    mlps = _trunk_mlps(twin)
    assert len(mlps) == len(before) and all(isinstance(m, GeluMLP) for m in mlps)
    assert [m.inner for m in mlps] == [mlp for _, mlp in before]     # sam2's, not copies
    assert isinstance(twin.image_encoder.trunk, FusedHiera) == ('hiera' in groups)
    # the original: the same trunk, blocks and sam2 MLPs (the eager reference runs them)
    assert model.image_encoder.trunk is trunk
    assert [(b, b.mlp) for b in trunk.blocks] == before
    assert all(type(b.mlp) is MLP for b in trunk.blocks)
    shared = {id(p) for p in model.parameters()}
    assert all(id(p) in shared for p in twin.parameters())       # the same weights


def test_group_off_keeps_sam2s_mlps():
    model = shared_model(64)
    assert all(type(m) is MLP for m in _trunk_mlps(fused.fused_model(model, ('hiera',))))
    assert with_gelu_mlps(model.memory_encoder) is model.memory_encoder     # no blocks


def test_with_gelu_mlps_takes_a_model_encoder_or_trunk():
    model = shared_model(64)
    enc = model.image_encoder
    for module, trunk_of in ((model, lambda t: t.image_encoder.trunk),
                             (enc, lambda t: t.trunk), (enc.trunk, lambda t: t),
                             (FusedHiera(enc.trunk), lambda t: t.trunk)):
        twin = with_gelu_mlps(module)
        assert twin is not module and type(twin) is type(module)
        assert all(isinstance(b.mlp, GeluMLP) for b in trunk_of(twin).blocks)
    assert all(type(b.mlp) is MLP for b in enc.trunk.blocks)


@pytest.mark.parametrize('groups', [('hiera_mlp',), ('hiera', 'hiera_mlp')])
@pytest.mark.parametrize('autocast, tol', [(False, 1e-5), (True, 2.0 ** -5)])
def test_fused_trunk_equals_sam2s_trunk(groups, autocast, tol, kernel_launches):
    """The whole trunk at 64 x 64 (12 blocks): each block's MLP one launch of our kernel."""
    model = shared_model(64)
    x = _rand(1, 3, 64, 64, seed=8)
    twin = fused.fused_model(model, groups)
    with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        ref = model.image_encoder.trunk(x)
        del kernel_launches[:]
        out = twin.image_encoder.trunk(x)
    assert kernel_launches.count(KERNEL) == len(model.image_encoder.trunk.blocks)
    if groups == ('hiera_mlp',):
        assert kernel_launches == [KERNEL] * len(model.image_encoder.trunk.blocks)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        _close(o, r, tol)


def test_autotune_keeps_the_fastest_config_that_builds(monkeypatch):
    """``pick`` (the CUDA path's choice, here with stand-in timings): the fastest of those
    that build, timed once per key; none building is an error."""
    monkeypatch.setattr(mlp_gelu, '_TUNED', {})
    configs = [(1,), (2,), (3,)]
    timed = []

    def time_ms(cfg):
        timed.append(cfg)
        if cfg == (1,):
            raise RuntimeError('out of shared memory')
        return {(2,): 0.5, (3,): 0.2}[cfg]
    key = ('cuda:0', 'bf16', 768, 192, 4096)
    assert mlp_gelu.pick(key, configs, False, time_ms) == (3,)
    assert mlp_gelu.pick(key, configs, False, time_ms) == (3,) and len(timed) == 3
    with pytest.raises(RuntimeError, match='no block configuration'):
        mlp_gelu.pick(key[:-1] + (64,), [(1,)], False, time_ms)


def test_autotune_times_nothing_inside_a_capture(monkeypatch):
    """Capturing a key not timed yet: the config kept for another M bucket of the same
    shape (compiled already), else the first; nothing timed, nothing kept."""
    monkeypatch.setattr(mlp_gelu, '_TUNED', {('cuda:0', 768, 192, 4096): (3,)})

    def never(cfg):
        raise AssertionError('timed inside a capture')
    assert mlp_gelu.pick(('cuda:0', 768, 192, 256), [(1,), (3,)], True, never) == (3,)
    assert mlp_gelu.pick(('cuda:0', 384, 96, 256), [(1,), (3,)], True, never) == (1,)
    assert len(mlp_gelu._TUNED) == 1
