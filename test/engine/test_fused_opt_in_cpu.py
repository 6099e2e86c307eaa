"""The opt-in fused groups (config.FUSED_OPT_IN). 'gelu_epilogue': Hiera's MLP with its GELU in the
first GEMM's epilogue (``dtypes.gelu_mlp``, ``torch._addmm_activation``). On the GPU that is
cuBLASLt's bias + GELU epilogue, the tanh approximation, so not bitwise sam2's exact GELU and
not in ``fused_kernels: true``; its difference from sam2 is bounded on the GPU
(test/gpu/test_fused_kernels_gpu.py). torch's CPU kernel applies the exact GELU, so here the
function is checked for what it computes (sam2's MLP, one GEMM call with the activation),
which MLPs take it, that the fused trunk routes every block's MLP through it under bf16 (not
in float32), and the opt-in.
"""

import pytest
import torch

pytest.importorskip('triton')

from sam2.modeling.sam2_utils import MLP  # noqa: E402

from conftest import assert_close_rel, shared_model  # noqa: E402
from sam2_ros.engine.config import (  # noqa: E402
    DEFAULT_OPT_IN, FUSED_GROUPS, FUSED_OPT_IN, TrackerConfig)
from sam2_ros.engine.cuda.kernels import fused  # noqa: E402
from sam2_ros.engine.cuda.kernels.dtypes import gelu_mlp, is_gelu_mlp  # noqa: E402
from sam2_ros.engine.cuda.kernels.hiera import FusedHiera  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')


def _mlp(c=32, hidden=96, seed=0, **kw):
    torch.manual_seed(seed)
    return MLP(c, hidden, c, num_layers=2, activation=torch.nn.GELU, **kw).eval()


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_gelu_mlp_computes_sam2s_mlp_with_one_activated_gemm(dtype, monkeypatch):
    mlp = _mlp().to(dtype)
    x = torch.randn(2, 50, 32, generator=torch.Generator().manual_seed(1)).to(dtype)
    calls = _spy(monkeypatch)
    with torch.no_grad():
        got, exact = gelu_mlp(mlp, x), mlp(x)
    assert calls == [(100, 32, True)]             # [B*L, C] rows, the GELU epilogue asked for
    assert got.shape == exact.shape == (2, 50, 32) and got.dtype == dtype
    # the CPU's activated GEMM is exact GELU: equal up to the GEMM's summation order
    assert_close_rel(got, exact, 1e-5 if dtype == torch.float32 else 2.0 ** -7)


def _spy(monkeypatch):
    """Records (rows, cols, use_gelu) of each torch._addmm_activation call."""
    calls, real = [], torch._addmm_activation

    def spy(bias, mat1, mat2, *args, use_gelu=False, **kw):
        calls.append((mat1.shape[0], mat1.shape[1], use_gelu))
        return real(bias, mat1, mat2, *args, use_gelu=use_gelu, **kw)
    monkeypatch.setattr(torch, '_addmm_activation', spy)
    return calls


def test_only_plain_gelu_mlps_take_the_epilogue():
    assert is_gelu_mlp(_mlp())
    assert not is_gelu_mlp(_mlp(sigmoid_output=True))
    relu = MLP(8, 16, 8, num_layers=2)
    assert not is_gelu_mlp(relu)
    assert not is_gelu_mlp(MLP(8, 16, 8, num_layers=3, activation=torch.nn.GELU))
    tanh = MLP(8, 16, 8, num_layers=2, activation=torch.nn.GELU)
    tanh.act = torch.nn.GELU(approximate='tanh')
    assert not is_gelu_mlp(tanh)


@pytest.mark.parametrize('autocast, tol', [(False, 1e-5), (True, 2.0 ** -5)])
def test_fused_hiera_runs_every_blocks_mlp_through_the_epilogue(autocast, tol, monkeypatch):
    trunk = shared_model(64).image_encoder.trunk
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(9))
    with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        ref = trunk(x)
        calls = _spy(monkeypatch)
        out = FusedHiera(trunk, gelu_epilogue=True)(x)
    # under bf16 every block's MLP; float32 keeps sam2's MLP (exact GELU on the GPU too)
    assert len(calls) == (len(trunk.blocks) if autocast else 0) and all(c[2] for c in calls)
    for o, r in zip(out, ref):                    # the fused Hiera's bounds (exact GELU here)
        assert o.dtype == r.dtype and o.shape == r.shape
        assert_close_rel(o, r, tol)


def test_gelu_epilogue_has_its_own_switch():
    assert 'gelu_epilogue' in FUSED_OPT_IN and 'gelu_epilogue' not in FUSED_GROUPS
    TrackerConfig(fused_kernels=FUSED_GROUPS + ('gelu_epilogue',), random_weights=True).validate()
    with pytest.raises(ValueError, match='fused_kernels'):
        TrackerConfig(fused_kernels=('gelu_epilog',), random_weights=True).validate()
    model = shared_model(64)
    on = fused.fused_model(model, ('hiera', 'gelu_epilogue'))
    off = fused.fused_model(model, ('hiera',))
    assert on.image_encoder.trunk.gelu_epilogue and not off.image_encoder.trunk.gelu_epilogue



def test_fused_opt_in_adds_its_groups_where_fused_kernels_is_on():
    """``fused_opt_in`` (the node's parameter: ``fused_kernels`` is a bool there) adds the named
    opt-in groups to the fused ones, every one by default, none with []; an opt-in group
    whose modules are off (``OPT_IN_NEEDS``) is left out, and nothing is on where fused
    kernels are off."""
    pytest.importorskip('triton')
    default = TrackerConfig(random_weights=True).validate()
    assert default.fused_opt_in == list(DEFAULT_OPT_IN) and 'patch_embed' in DEFAULT_OPT_IN
    assert set(fused.enabled_groups(default, 'cuda')) == set(FUSED_GROUPS) | set(DEFAULT_OPT_IN)
    every = TrackerConfig(fused_opt_in=list(FUSED_OPT_IN), random_weights=True).validate()
    assert set(fused.enabled_groups(every, 'cuda')) == set(FUSED_GROUPS) | set(FUSED_OPT_IN)
    none = TrackerConfig(fused_opt_in=[], random_weights=True).validate()
    assert fused.enabled_groups(none, device='cuda') == FUSED_GROUPS
    on = TrackerConfig(fused_opt_in=['window_attention'], random_weights=True).validate()
    groups = fused.enabled_groups(on, device='cuda')
    assert set(groups) == set(FUSED_GROUPS) | {'window_attention'}
    assert 'gelu_epilogue' not in groups
    some = TrackerConfig(fused_kernels=('hiera',), random_weights=True).validate()
    assert fused.enabled_groups(some, device='cuda') == ('hiera', 'gelu_epilogue',
                                                          'window_attention', 'patch_embed')
    rope = TrackerConfig(fused_kernels=('rope',), random_weights=True).validate()
    assert fused.enabled_groups(rope, device='cuda') == ('rope',)
    off = TrackerConfig(fused_kernels=False, fused_opt_in=['window_attention'],
                        random_weights=True).validate()
    assert fused.enabled_groups(off, device='cuda') == ()
    assert fused.enabled_groups(on, device='cpu') == ()          # no graphs on the CPU
    for bad in (['window'], ['window_attention', 'window_attention'], 'window_attention'):
        with pytest.raises(ValueError, match='fused_opt_in takes distinct groups'):
            TrackerConfig(fused_opt_in=bad, random_weights=True).validate()
