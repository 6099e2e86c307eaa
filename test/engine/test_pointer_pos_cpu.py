"""The fused copy's 'pointer_pos' group (``cuda/kernels/pointer_pos.py``) against sam2's ops,
on the CPU (Triton's interpreter): the object pointers' temporal encoding
``obj_ptr_tpos_proj(get_1d_sine_pe(dist / t_diff_max, dim))`` in one kernel writing memory_pos.

Distances: 0, 1..15 (within the pointer window), negative (reverse tracking), and far ones a
long stream's conditioning frames reach (3600, 100000 and their negatives).

fp32: max |fused - sam2| <= 1e-5 x max(1, max |sam2|): the same float32 divisions, sin and cos
within an ulp of torch's (numpy's here, CUDA's libdevice = torch's on the GPU), the projection
summed in another order.
bf16 (CPU autocast): per element |fused - sam2| <= 2^-7 |sam2| + 2^-8 max |W|: one bf16 ulp of
the value (its spacing is at most 2^-7 relative: the projection's output rounds to the other
neighbour when the float32 sums differ in the last bits), plus one bf16 ulp of one encoding
element times its weight (a float32 sine an ulp from torch's can round to the other bf16
neighbour before the GEMM); and fewer than 1% of the elements differ at all.
"""

import pytest
import torch

pytest.importorskip('triton')

from sam2.modeling.sam2_utils import get_1d_sine_pe  # noqa: E402

from conftest import shared_model  # noqa: E402
from sam2_ros.engine import step  # noqa: E402
from sam2_ros.engine.config import FUSED_GROUPS, TRITON_FREE_GROUPS  # noqa: E402
from sam2_ros.engine.cuda.kernels import fused  # noqa: E402
from sam2_ros.engine.cuda.kernels.pointer_pos import PointerPos, with_pointer_pos  # noqa: E402
from sam2_ros.engine.cuda.kernels.swap import with_children  # noqa: E402
from tools.probes.step_ops import count_step  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')
# [n_p, B] = [8, 3]: every distance once, the columns in different orders
DIST = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, -1, -2, -7, -15,
                     3600, 100000, -3600, -100000], dtype=torch.float32).view(3, 8).t()


def _ctx(autocast: bool):
    return torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast)


def _reference(model, dist: torch.Tensor) -> torch.Tensor:
    """sam2's ops on dist [n_p, B] -> [n_p, B, Cm] (call under the autocast state)."""
    t_diff_max = model.max_obj_ptrs_in_encoder - 1
    return model.obj_ptr_tpos_proj(get_1d_sine_pe(dist / t_diff_max, dim=model.hidden_dim))


def _check(out: torch.Tensor, ref: torch.Tensor, model, bf16: bool) -> float:
    """The module docstring's bounds; returns the max error relative to max |sam2|."""
    out, ref = out.float(), ref.float()
    assert out.shape == ref.shape
    err = (out - ref).abs()
    top = ref.abs().max().item()
    if bf16:
        w_max = model.obj_ptr_tpos_proj.weight.abs().max().item()
        assert (err <= 2.0 ** -7 * ref.abs() + 2.0 ** -8 * w_max).all(), err.max().item()
        assert (err > 0).float().mean().item() < 0.01
    else:
        assert err.max().item() <= 1e-5 * max(1.0, top), (err.max().item(), top)
    return err.max().item() / top


@pytest.fixture(scope='module')
def model():
    return shared_model(64)


@pytest.mark.parametrize('autocast', [False, True])
@pytest.mark.parametrize('dist_dtype', [torch.float32, torch.int64])
@pytest.mark.parametrize('out_dtype', [torch.float32, torch.bfloat16])
@torch.inference_mode()
def test_kernel_equals_sam2(model, autocast, dist_dtype, out_dtype):
    """Into memory_pos's pointer rows of a batch-major buffer ([B, N, Cm] storage viewed as
    [N, B, Cm]), each pointer's row into its split tokens, nothing else written; the distances
    as a graph stages them too (int64, a strided view)."""
    n_p, batch = DIST.shape
    split, cm = model.hidden_dim // model.mem_dim, model.mem_dim
    dist = DIST.to(dist_dtype)
    if dist_dtype == torch.int64:       # a column view of a wider block, as Memory.index's
        dist = torch.stack([dist, torch.zeros_like(dist)], -1)[..., 0]    # strides (6, 2)
    n_sp = 5
    buf = torch.full((batch, n_sp + n_p * split, cm), float('nan'), dtype=out_dtype)
    memory_pos = buf.transpose(0, 1)                                    # [N, B, Cm]
    out = memory_pos[n_sp:].view(n_p, split, batch, cm)
    enc = PointerPos()
    with _ctx(autocast):
        ref = _reference(model, DIST)
        assert enc.dtype(model, dist) == ref.dtype
        enc(model, dist, model.max_obj_ptrs_in_encoder - 1, out, ref.dtype)
    assert memory_pos[:n_sp].isnan().all()
    for s in range(split):      # sam2's value in the Linear's dtype, then memory_pos's
        _check(out[:, s], ref.to(out_dtype), model, bf16=autocast or out_dtype != torch.float32)
    assert len(enc.store.values) == 1           # the frequencies, once


def selecting(model) -> torch.nn.Module:
    """``model`` whose projection selects 64 of the encoding's 256 values (one-hot rows, no
    bias): its output is the encoding itself, exactly (every other product is 0)."""
    proj = torch.nn.Linear(model.hidden_dim, model.mem_dim)
    cols = torch.arange(model.mem_dim) * (model.hidden_dim // model.mem_dim)
    cols = cols + torch.arange(model.mem_dim) % (model.hidden_dim // model.mem_dim)
    with torch.no_grad():
        proj.weight.zero_()
        proj.weight[torch.arange(model.mem_dim), cols] = 1.0
        proj.bias.zero_()
    return with_children(model, obj_ptr_tpos_proj=proj.requires_grad_(False))


@pytest.mark.parametrize('autocast', [False, True])
@torch.inference_mode()
def test_encoding_equals_sam2s(model, autocast):
    """The sine encoding itself (a projection selecting its values, sin and cos of every
    frequency residue): float32 within 2^-22 (the values are <= 1; numpy's sin and cos, which
    the interpreter runs, and torch's are each within an ulp, the divisions are the same);
    bf16 one ulp (2^-8) where those differ across a rounding boundary."""
    sel = selecting(model)
    out = torch.empty(DIST.shape[0], 1, DIST.shape[1], model.mem_dim)
    with _ctx(autocast):
        ref = _reference(sel, DIST).float()
        enc = PointerPos()
        enc(sel, DIST, sel.max_obj_ptrs_in_encoder - 1, out, enc.dtype(sel, DIST))
    err = (out[:, 0] - ref).abs().max().item()
    assert err <= (2.0 ** -8 if autocast else 2.0 ** -22), err


def _memory(model, n_s, n_p, batch, seed, index_dist=False):
    g = torch.Generator().manual_seed(seed)
    h = model.image_size // 16
    dist = DIST.repeat(2, 2)[:n_p, :batch]
    if index_dist:      # a graph's static buffers: an int64 view of the index block
        dist = torch.cat([dist.long(), torch.zeros_like(dist.long())], 1)[:, :batch]
    return step.Memory(
        feats=torch.randn(n_s, batch, model.mem_dim, h, h, generator=g).to(torch.bfloat16),
        tpos_idx=torch.randint(0, model.num_maskmem, (n_s, batch), generator=g),
        ptrs=torch.randn(n_p, batch, model.hidden_dim, generator=g),
        ptr_dist=dist)


@pytest.mark.parametrize('constants', [False, True])
@pytest.mark.parametrize('autocast', [False, True])
@pytest.mark.parametrize('batch_major', [False, True])
@pytest.mark.parametrize('batch,n_p,index_dist', [(1, 16, False), (3, 5, True)])
@torch.inference_mode()
def test_memory_tokens_group_on_equals_off(model, constants, autocast, batch_major, batch, n_p,
                                           index_dist):
    """memory_tokens of the copy with 'pointer_pos' (and 'constants' or not) = without it: the
    memory and the spatial rows of memory_pos bitwise, the pointer rows within the kernel's
    bounds; the same dtypes, shapes and strides."""
    base = fused.fused_model(model, ('constants',)) if constants else model
    twin = fused.fused_model(model, ('constants', 'pointer_pos') if constants
                             else ('pointer_pos',))
    assert step.pointer_pos_of(twin) is not None and step.pointer_pos_of(base) is None
    h = model.image_size // 16
    maskmem_pos = torch.randn(1, model.mem_dim, h, h, generator=torch.Generator().manual_seed(9))
    mem = _memory(model, 2, n_p, batch, seed=batch, index_dist=index_dist)
    with _ctx(autocast):
        ref = step.memory_tokens(base, mem, maskmem_pos, batch_major)
        out = step.memory_tokens(twin, mem, maskmem_pos, batch_major)
    assert out[2] == ref[2]
    n_sp = out[0].shape[0] - ref[2]
    for a, b in zip(out[:2], ref[:2]):
        assert a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
    assert torch.equal(out[0], ref[0])
    assert torch.equal(out[1][:n_sp], ref[1][:n_sp])
    _check(out[1][n_sp:], ref[1][n_sp:], model, bf16=autocast)


@pytest.mark.parametrize('autocast', [False, True])
@torch.no_grad()
def test_group_launches_fewer_kernels(model, autocast):
    """memory_tokens' kernel-launching ops (``tools/probes/step_ops.py``'s count: aten ops
    below autocast, plus our Triton launches) on the graphs' memory layout: the division, the
    sine encoding's four, autocast's cast, the projection and the repeat's copy become one
    kernel (>= 5 fewer; 7 under autocast, 6 in float32)."""
    twin = fused.fused_model(model, ('constants', 'pointer_pos'))
    base = fused.fused_model(model, ('constants',))
    h = model.image_size // 16
    maskmem_pos = torch.randn(1, model.mem_dim, h, h)
    mem = _memory(model, 2, 16, 3, seed=0, index_dist=True)
    counts = {}
    for name, m in (('off', base), ('on', twin)):
        total, by_src = count_step(lambda _, m=m: step.memory_tokens(m, mem, maskmem_pos, True),
                                   None, lambda: _ctx(autocast))
        counts[name] = total
        launched = sum(c['triton _pointer_pos_kernel'] for c in by_src.values())
        assert launched == (name == 'on')
    assert counts['off'] - counts['on'] >= 5, counts


def test_group_is_in_the_copy_only_where_it_fits(model):
    """'pointer_pos' is a group of its own, needs Triton, leaves the model (the eager
    reference) unchanged and shares its weights; a model whose projection is an Identity
    (proj_tpos_enc_in_obj_ptrs off) keeps sam2's ops; calls it does not compute run them."""
    assert 'pointer_pos' in FUSED_GROUPS and 'pointer_pos' not in TRITON_FREE_GROUPS
    twin = fused.fused_model(model, ('pointer_pos',))
    assert twin is not model and step.pointer_pos_of(model) is None
    assert {id(p) for p in twin.parameters()} == {id(p) for p in model.parameters()}
    rest = tuple(g for g in FUSED_GROUPS if g != 'pointer_pos')
    assert step.pointer_pos_of(fused.fused_model(model, rest)) is None
    assert isinstance(step.pointer_pos_of(fused.fused_model(model, FUSED_GROUPS)), PointerPos)
    identity = with_children(model, obj_ptr_tpos_proj=torch.nn.Identity())
    identity.proj_tpos_enc_in_obj_ptrs = False
    assert with_pointer_pos(identity) is identity
    enc = step.pointer_pos_of(twin)
    assert enc.dtype(identity, DIST) is None
    assert enc.dtype(twin, DIST.double()) is None            # sam2 divides in float64
    with torch.enable_grad():
        assert enc.dtype(twin, DIST) is None                 # autograd records the weights
    with torch.no_grad():
        assert enc.dtype(twin, DIST) == torch.float32
        h = model.image_size // 16
        mem = _memory(model, 1, 3, 2, seed=3)
        pos = torch.zeros(1, model.mem_dim, h, h)
        out = step.memory_tokens(with_pointer_pos(identity), mem, pos)
        ref = step.memory_tokens(identity, mem, pos)
        assert all(torch.equal(a, b) for a, b in zip(out[:2], ref[:2]))
