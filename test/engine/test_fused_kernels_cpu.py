"""Our Triton kernels (sam2_ros/engine/cuda/kernels) against the sam2 modules they replace, on
the CPU: each launch on CPU tensors runs in Triton's interpreter (``launch.Kernel``), in any
test order and whatever imported triton first.

fp32: max |fused - sam2| <= 1e-5 x max(1, max |sam2|) (another summation order only).
bf16 (CPU autocast): the kernels round as the GPU does (``rounding.py``), so single kernels are
bitwise or one bf16 ulp (2^-8 relative) off where a float32 norm lands near a rounding
boundary; through a stack of blocks those flips propagate, relative to max |sam2|: 2 ulps
(2^-7) through the memory attention's 4 layers, 4 (2^-6) through the two-way transformer,
8 (2^-5) through Hiera's 12 blocks (a failure prints the error it saw).
"""

import numpy as np
import pytest
import torch

pytest.importorskip('triton')

from sam2.modeling.backbones.utils import window_partition, window_unpartition  # noqa: E402
from sam2.modeling.position_encoding import apply_rotary_enc, compute_axial_cis  # noqa: E402

from conftest import LEAN, perturb_norms, shared_model, small_cfg  # noqa: E402
from conftest import assert_close_rel  # noqa: E402
from sam2_ros.engine import glue  # noqa: E402
from sam2_ros.engine.config import FUSED_GROUPS  # noqa: E402
from sam2_ros.engine.cuda.kernels import fused  # noqa: E402
from sam2_ros.engine.cuda.kernels.elementwise import key_value_inputs  # noqa: E402
from sam2_ros.engine.cuda.kernels.hiera import (FusedHiera, partition_rows,  # noqa: E402
                                                unpartition_rows)
from sam2_ros.engine.cuda.kernels.layernorm import add_layernorm  # noqa: E402
from sam2_ros.engine.cuda.kernels.memory_attention import FusedMemoryAttention  # noqa: E402
from sam2_ros.engine.cuda.kernels.rope import rope_tables, rotary_qk  # noqa: E402
from sam2_ros.engine.cuda.kernels.two_way import FusedTwoWayTransformer  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')
BF16_ULP = 2.0 ** -8


def _norm(c, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = torch.nn.LayerNorm(c, eps=1e-6)
    with torch.no_grad():
        n.weight.normal_(1.0, 0.3, generator=g)
        n.bias.normal_(0.0, 0.3, generator=g)
    return n


def _rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@torch.no_grad()
@pytest.mark.parametrize('dtypes', [(torch.float32, torch.float32),
                                    (torch.bfloat16, torch.float32),
                                    (torch.bfloat16, torch.bfloat16)])
def test_add_layernorm_equals_add_then_norm(dtypes):
    n = _norm(96)
    a, b = _rand(2, 37, 96, seed=1, dtype=dtypes[0]), _rand(2, 37, 96, seed=2, dtype=dtypes[1])
    pe = _rand(2, 37, 96, seed=3)
    out = add_layernorm(n, a, b, store_sum=True, y_dtype=torch.float32, pe=pe,
                        pe_dtype=torch.bfloat16, yc_dtype=torch.bfloat16)
    s = a + b
    assert out.s.dtype == s.dtype and torch.equal(out.s, s)       # the add rounds as torch's
    y = n(s.float())
    assert_close_rel(out.y, y, 1e-5)
    # bf16 outputs: torch's cast of (nearly) the same float32 values, at most one ulp apart
    assert_close_rel(out.yc, y.bfloat16(), BF16_ULP)
    assert_close_rel(out.yp, (y + pe).bfloat16(), BF16_ULP)
    assert (out.yc != y.bfloat16()).float().mean() < 0.01


@torch.no_grad()
def test_add_layernorm_scale_and_strided_output():
    n = _norm(64)
    a = _rand(5, 3, 64, seed=1).transpose(0, 1)             # [3, 5, 64] strided, as [L, B, C].T
    b = _rand(5, 3, 64, seed=2).transpose(0, 1)
    out = torch.full((3, 64, 5), float('nan'))
    add_layernorm(n, a, b, b_scale=0.1, y=out.transpose(1, 2))
    assert_close_rel(out.transpose(1, 2), n(a + 0.1 * b), 1e-5)


@torch.no_grad()
@pytest.mark.parametrize('hw, ws', [((10, 13), 4), ((8, 8), 4), ((7, 7), 7)])
def test_window_maps_equal_sam2_partition(hw, ws):
    h, w = hw
    x = _rand(1, h, w, 32, seed=4)
    windows, pad_hw = window_partition(x, ws)
    rows = partition_rows(h, w, ws, 'cpu')
    flat = x.reshape(h * w, 32)
    gathered = torch.where(rows[:, None] >= 0, flat[rows.clamp(min=0).long()], 0.0)
    assert torch.equal(gathered, windows.reshape(-1, 32))
    back = windows.reshape(-1, 32)[unpartition_rows(h, w, ws, 'cpu').long()]
    assert torch.equal(back, window_unpartition(windows, ws, pad_hw, hw).reshape(-1, 32))
    # the kernel: partitioned norm of a + b, padding rows zero, the sum at the source rows
    n = _norm(32)
    out = add_layernorm(n, x.reshape(1, h * w, 32), x.reshape(1, h * w, 32), a_rows=rows,
                        store_sum=True)
    ref, _ = window_partition(n(x + x), ws)
    assert_close_rel(out.y.reshape(ref.shape), ref, 1e-5)
    assert torch.equal(out.s, (x + x).reshape(1, h * w, 32))


@torch.no_grad()
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('heads, n_ex, repeat', [(1, 0, False), (2, 8, True), (1, 12, True)])
def test_rotary_qk_equals_apply_rotary_enc(dtype, heads, n_ex, repeat):
    d, side, bsz = 32, 4, 2
    lq = side * side
    lk = (3 if repeat else 1) * lq + n_ex
    freqs = compute_axial_cis(dim=d, end_x=side, end_y=side)
    q = _rand(bsz, lq, heads * d, seed=5, dtype=dtype)
    k = _rand(bsz, lk, heads * d, seed=6, dtype=dtype)
    qo, ko = rotary_qk(q, k, heads, *rope_tables(freqs), n_ex, repeat)
    qh = q.reshape(bsz, lq, heads, d).transpose(1, 2)
    kh = k.reshape(bsz, lk, heads, d).transpose(1, 2).clone()
    rq, rk = apply_rotary_enc(qh, kh[:, :, :lk - n_ex], freqs_cis=freqs, repeat_freqs_k=repeat)
    kh[:, :, :lk - n_ex] = rk
    assert qo.is_contiguous() and ko.is_contiguous()
    assert torch.equal(qo, rq) and torch.equal(ko, kh)


@torch.no_grad()
@pytest.mark.parametrize('dtypes', [(torch.bfloat16, torch.float32),
                                    (torch.bfloat16, torch.bfloat16)])
def test_key_value_inputs_equal_add_then_cast(dtypes):
    m = _rand(40, 2, 64, seed=7, dtype=dtypes[0]).transpose(0, 1)     # [B, L, C] strided
    p = _rand(40, 2, 64, seed=8, dtype=dtypes[1]).transpose(0, 1)
    k, v = key_value_inputs(m, p, torch.bfloat16)
    assert torch.equal(k, (m + p).bfloat16()) and torch.equal(v, m.bfloat16())


def _perturbed(module, seed=0):
    """``module`` with random norm affines (sam2's init has weight 1, bias 0, which would hide
    a wrong affine) - on a private copy of the norms, the shared model stays untouched."""
    import copy
    module = copy.deepcopy(module)
    perturb_norms(module, torch.Generator().manual_seed(seed))
    return module


def _both(fn, autocast):
    with torch.inference_mode(), torch.autocast('cpu', torch.bfloat16, enabled=autocast):
        return fn()


@pytest.mark.parametrize('autocast, tol', [(False, 1e-5), (True, 2.0 ** -5)])
def test_fused_hiera_equals_sam2_trunk(autocast, tol):
    trunk = _perturbed(shared_model(64).image_encoder.trunk)
    with torch.no_grad():
        trunk.pos_embed.normal_(generator=torch.Generator().manual_seed(3))
    x = _rand(1, 3, 64, 64, seed=9)
    ref = _both(lambda: trunk(x), autocast)
    out = _both(lambda: FusedHiera(trunk)(x), autocast)
    assert len(out) == len(ref) == 4
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype
        assert_close_rel(o, r, tol)


def test_fused_hiera_partitions_windows_in_its_norms():
    """Every block's window partition is the first norm's own store, the stage changes'
    too (they write y in the grid for the pooled projection and in windows for attention):
    no pad or copy kernel of sam2's ``window_partition`` is left."""
    trunk = shared_model(64).image_encoder.trunk
    x = _rand(1, 3, 64, 64, seed=9)

    def run(m):         # no_grad: composite ops reach the counter decomposed, as they launch
        with torch.no_grad(), torch.autocast('cpu', torch.bfloat16):
            return m(x)
    copies = []
    for m in (trunk, FusedHiera(trunk)):
        run(m)          # the first call computes what is kept (the positional embedding)
        copies.append(_ops(lambda: run(m), ('clone', 'constant_pad_nd')))
    assert copies[0] >= 4 and copies[1] == 0, copies


def _memory_inputs(bsz, length, n_s, n_p, bf16):
    curr = _rand(length, bsz, 256, seed=10, dtype=torch.bfloat16 if bf16 else torch.float32)
    mem = _rand(n_s * length + 4 * n_p, bsz, 64, seed=12,
                dtype=torch.bfloat16 if bf16 else torch.float32)
    return dict(curr=[curr], curr_pos=[_rand(length, bsz, 256, seed=11)], memory=mem,
                memory_pos=_rand(*mem.shape, seed=13), num_obj_ptr_tokens=4 * n_p)


@pytest.mark.parametrize('autocast, tol', [(False, 1e-5), (True, 2.0 ** -7)])
@pytest.mark.parametrize('rope', [True, False])
def test_fused_memory_attention_equals_sam2(autocast, tol, rope):
    ma = _perturbed(shared_model(64).memory_attention)
    kw = _memory_inputs(2, 16, 3, 5, autocast)
    ref = _both(lambda: ma(**kw), autocast)
    out = _both(lambda: FusedMemoryAttention(ma, rope=rope)(**kw), autocast)
    assert out.dtype == ref.dtype
    assert_close_rel(out, ref, tol)


@torch.no_grad()
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_merge_splits_equals_split_attention_merge(dtype):
    from sam2_ros.engine.attention import split_attention
    from sam2_ros.engine.cuda.kernels.split_merge import merge_splits
    q, k, v = (_rand(2, 2, n, 16, seed=s, dtype=dtype) for s, n in ((17, 10), (18, 512),
                                                                       (19, 512)))
    ref = split_attention(q, k, v, 4)
    out = split_attention(q, k, v, 4, merge=merge_splits)
    assert out.dtype == ref.dtype and out.is_contiguous()
    assert_close_rel(out, ref, 1e-6 if dtype == torch.float32 else BF16_ULP)


@torch.no_grad()
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_merge_varlen_equals_varlen_split_attention_merge(dtype):
    """Padded memories in key chunks: rows full, scattered and of fewer keys than chunks (empty
    chunks have no share), merged by the kernel as by PyTorch's ops."""
    from sam2_ros.engine import attention
    from sam2_ros.engine.cuda.kernels.split_merge import merge_varlen
    q, k, v = (_rand(3, 2, n, 16, seed=s, dtype=dtype) for s, n in ((21, 10), (22, 300),
                                                                       (23, 300)))
    valid = torch.zeros(3, 300, dtype=torch.bool)
    valid[0] = True
    valid[1, ::3] = True
    valid[2, [7, 100, 299]] = True                         # 3 keys for 8 chunks
    keys = attention.KeyPacking(valid)
    for splits in (2, 8):
        ref = attention.varlen_split_attention(q, k, v, keys, splits)
        out = attention.varlen_split_attention(q, k, v, keys, splits, merge=merge_varlen)
        assert out.dtype == ref.dtype == dtype and out.shape == ref.shape == (3, 2, 10, 16)
        assert_close_rel(out, ref, 1e-6 if dtype == torch.float32 else BF16_ULP)
    assert keys.chunks(10, 8) is keys.chunks(10, 8)      # bounds once for all layers


@pytest.mark.parametrize('swap', ['split', 'masked'])
def test_fused_memory_attention_takes_the_runners_attention_swaps(swap):
    """The graph runner swaps the attention call of every memory-attention layer
    (attention.split_kv, attention.masked_memory); the fused layers take the same swaps."""
    from sam2_ros.engine import attention
    model = shared_model(64)
    twin = fused.fused_model(model, ('memory_attention', 'rope'))
    kw = _memory_inputs(2, 16, 16, 5, False)     # 276 keys: split in two (attention.kv_splits)
    valid = torch.ones(2, kw['memory'].shape[0], dtype=torch.bool)
    valid[1, 20:40] = False
    ctx = (lambda m: attention.split_kv(m)) if swap == 'split' else \
        (lambda m: attention.masked_memory(m, valid))
    with torch.inference_mode():
        with ctx(model):
            ref = model.memory_attention(**kw)
        with ctx(twin):
            assert all(type(ly.cross_attn_image).__name__ == 'FusedRoPEAttention'
                       for ly in twin.memory_attention.layers)
            out = twin.memory_attention(**kw)
    assert_close_rel(out, ref, 1e-5)
    assert type(model.memory_attention).__name__ == 'MemoryAttention'   # the original intact


@pytest.mark.parametrize('autocast', [False, True])
def test_fused_memory_attention_projects_every_layers_keys_and_values_in_two_gemms(autocast):
    """The cross-attentions of all layers read the same memory: their key projections run as
    one GEMM and their value projections as another (``SharedKeyValues``), so n layers run
    6n + 2 GEMMs (self q/k/v and output, cross q and output, the MLP's two) where sam2 runs
    10n, and the fused layers would run 8n with a key and value GEMM each."""
    ma = _perturbed(shared_model(64).memory_attention)
    kw = _memory_inputs(2, 16, 3, 5, autocast)
    n = len(ma.layers)
    counts = [_gemms(lambda: _both(lambda: m(**kw), autocast))
              for m in (ma, FusedMemoryAttention(ma, rope=True))]
    assert n >= 2 and counts == [10 * n, 6 * n + 2], (n, counts)


def _gemms(fn) -> int:
    """The matrix products (GEMM launches) fn runs."""
    return _ops(fn, ('linear', 'addmm', 'mm', 'bmm', '_addmm_activation'))


def _ops(fn, names) -> int:
    """How many of the aten ops ``names`` fn runs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func.__name__.split('.')[0])
            return func(*args, **(kwargs or {}))

    with Count() as c:
        fn()
    return sum(c.ops.count(op) for op in names)


@pytest.mark.parametrize('autocast, tol', [(False, 1e-5), (True, 2.0 ** -6)])
def test_fused_two_way_transformer_equals_sam2(autocast, tol):
    tw = _perturbed(shared_model(64).sam_mask_decoder.transformer)
    img, pe = _rand(3, 256, 4, 4, seed=14), _rand(1, 256, 4, 4, seed=15)
    pts = _rand(3, 7, 256, seed=16)
    ref = _both(lambda: tw(img, pe, pts), autocast)
    out = _both(lambda: FusedTwoWayTransformer(tw)(img, pe, pts), autocast)
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype
        assert_close_rel(o, r, tol)


@pytest.mark.parametrize('autocast', [False, True])
def test_fused_two_way_self_attention_projects_shared_inputs_in_one_gemm(autocast):
    """The first block's self-attention (q = k = v) projects in one GEMM, the second's (q = k)
    in two: 29 GEMMs for the transformer instead of sam2's 32, and under autocast one cast of
    the point embeddings instead of three."""
    tw = _perturbed(shared_model(64).sam_mask_decoder.transformer)
    img, pe = _rand(3, 256, 4, 4, seed=14), _rand(1, 256, 4, 4, seed=15)
    pts = _rand(3, 7, 256, seed=16)
    counts = [_gemms(lambda: _both(lambda: m(img, pe, pts), autocast))
              for m in (tw, FusedTwoWayTransformer(tw))]
    assert counts == [32, 29], counts


@torch.no_grad()
@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
@pytest.mark.parametrize('gelu', [False, True])
def test_fused_layernorm2d_equals_sam2(dtype, gelu):
    """LayerNorm2d rounds each of its ops to the input dtype: with bf16 input (a conv's output
    under autocast) the kernel does the same roundings, so bitwise; fp32 within 1e-5."""
    from sam2.modeling.sam2_utils import LayerNorm2d
    from sam2_ros.engine.cuda.kernels.layernorm2d import FusedLayerNorm2d
    n = LayerNorm2d(64, eps=1e-6)
    n.weight.normal_(generator=torch.Generator().manual_seed(1))
    n.bias.normal_(generator=torch.Generator().manual_seed(2))
    x = (3 * _rand(2, 64, 9, 7, seed=20) + 1).to(dtype)
    ref = n(x)
    ref = torch.nn.functional.gelu(ref) if gelu else ref
    out = FusedLayerNorm2d(n, gelu=gelu)(x)
    if dtype == torch.bfloat16 and not gelu:
        assert torch.equal(out, ref)
    assert_close_rel(out, ref, 1e-5)
    with torch.autocast('cpu', torch.bfloat16):      # consumers are convs: written in bf16
        assert FusedLayerNorm2d(n, gelu=gelu)(x).dtype == torch.bfloat16


@pytest.mark.parametrize('autocast, tol', [(False, 1e-5), (True, 2.0 ** -6)])
def test_swapped_layernorm2d_memory_encoder_and_decoder_equal_sam2(autocast, tol):
    from sam2_ros.engine.cuda.kernels.layernorm2d import FusedLayerNorm2d, swap_layernorm2d
    model = shared_model(64)
    twin = swap_layernorm2d(model)
    fused_mods = [m for m in twin.modules() if isinstance(m, FusedLayerNorm2d)]
    assert len(fused_mods) == 9 and sum(m.gelu for m in fused_mods) == 7   # 4 + 2 + 2 + 1
    assert not any(isinstance(m, FusedLayerNorm2d) for m in model.modules())
    pix = _rand(2, 256, 4, 4, seed=21)
    masks = _rand(2, 1, 64, 64, seed=22)
    run = (lambda m: m.memory_encoder(pix, masks, skip_mask_sigmoid=True)['vision_features'])
    assert_close_rel(_both(lambda: run(twin), autocast), _both(lambda: run(model), autocast), tol)


def test_fused_groups_are_off_on_the_cpu_and_validated():
    cfg = small_cfg()
    assert fused.enabled_groups(cfg) == ()                 # device cpu: sam2's modules
    model = shared_model(64)
    assert fused.fused_copy(model, cfg) is model
    assert fused.enabled_groups(small_cfg(fused_kernels=False), 'cuda') == ()
    with pytest.raises(ValueError, match='fused_kernels'):
        small_cfg(fused_kernels=('hiera', 'nope')).validate()
    twin = fused.fused_model(model, FUSED_GROUPS)
    assert twin is not model and twin.image_encoder.trunk is not model.image_encoder.trunk
    shared = {id(p) for p in model.parameters()}
    assert all(id(p) in shared for p in twin.parameters())    # the same weights, no copies


def test_fused_model_runs_a_stream_as_sam2_does():
    """End to end, fp32: a tracker's eager runner on the fused copy (every group) against one
    on sam2's modules, over a stream with a click, a box, a mask, a correction and a removal:
    the same logits on every frame of every object."""
    from conftest import make_tracker
    from scenarios import schedule, stream_logits, synthetic_frames
    h, w, n = 48, 64, 8
    events = schedule(h, w, add2=2, add3=4, fix=5, remove=6)
    runs = []
    for fuse in (False, True):
        tr = make_tracker(image_size=64, max_objects=3, extra_hydra_overrides=list(LEAN))
        if fuse:
            tr.runner.model = fused.fused_model(tr.runner.model, FUSED_GROUPS)
            assert glue.glue_of(tr.runner.model) is not None     # 'sam_glue': fused glue
        runs.append(stream_logits(tr, synthetic_frames(n, h, w), events))
    for ref, out in zip(*runs):
        assert ref.keys() == out.keys()
        for k in ref:
            assert_close_rel(out[k], ref[k], 1e-4)
    assert np.isfinite([v.abs().max().item() for f in runs[1] for v in f.values()]).all()
