"""The fused copy's 'pointer_pos' kernel (``cuda/kernels/pointer_pos.py``) against sam2's ops on
the GPU (marked gpu: CI has none; the CPU twin is test/engine/test_pointer_pos_cpu.py).

``obj_ptr_tpos_proj(get_1d_sine_pe(dist / t_diff_max, dim))`` of tiny@512 (float32 weights,
TF32 off), distances 0, 1..15, negative and far (3600, 100000 and their negatives):
fp32 within 1e-4 x max(1, max |sam2|) (IEEE divisions and libdevice's sinf / cosf, as torch's
kernels: the same encoding; the projection summed in another order than cuBLAS's);
bf16 autocast per element within 2^-7 |sam2| + 2^-8 max |W| (one bf16 ulp of the value where
the float32 sums round to the other neighbour, plus one bf16 ulp of an encoding element times
its weight; on the GPU the encoding is torch's, so only the first can happen); the encoding
alone (a selecting projection) bitwise torch's in both.
The measured errors and memory_tokens' kernel counts with the group off and on go to
$OUT/gpu_fused_kernels.json.
"""

import pytest
import torch
from sam2.modeling.sam2_utils import get_1d_sine_pe

from gpu_common import cuda_kernels, fused_test_model
from gpu_common import record_fused as _record
from sam2_ros.engine import step

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]
DIST = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, -1, -2, -7, -15,
        3600, 100000, -3600, -100000]


@pytest.fixture(scope='module')
def model():
    return fused_test_model()


def _dist(dtype: torch.dtype) -> torch.Tensor:
    """[n_p, B] = [8, 3] on the GPU; int64 as a graph stages it (a strided view)."""
    d = torch.tensor(DIST, dtype=torch.float32, device='cuda').view(3, 8).t()
    if dtype == torch.int64:
        d = torch.stack([d.long(), torch.zeros_like(d.long())], -1)[..., 0]
    return d


@pytest.mark.parametrize('dist_dtype', [torch.float32, torch.int64])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_pointer_pos_kernel_gpu(model, precision, dist_dtype):
    from sam2_ros.engine.cuda.kernels.pointer_pos import PointerPos
    dist = _dist(dist_dtype)
    n_p, batch = dist.shape
    split, cm = model.hidden_dim // model.mem_dim, model.mem_dim
    t_diff_max = model.max_obj_ptrs_in_encoder - 1
    buf = torch.full((batch, 3 + n_p * split, cm), float('nan'), device='cuda')
    out = buf.transpose(0, 1)[3:].view(n_p, split, batch, cm)    # batch-major memory_pos
    enc = PointerPos()
    bf16 = precision == 'bf16'
    with torch.inference_mode(), torch.autocast('cuda', torch.bfloat16, enabled=bf16):
        ref = model.obj_ptr_tpos_proj(get_1d_sine_pe(dist / t_diff_max, dim=model.hidden_dim))
        assert enc.dtype(model, dist) == ref.dtype
        enc(model, dist, t_diff_max, out, ref.dtype)
    assert buf[:, :3].isnan().all()
    ref = ref.float()
    err = (out - ref.unsqueeze(1)).abs()
    top = ref.abs().max().item()
    rel = err.max().item() / top
    differ = (err > 0).float().mean().item()
    _record(f'pointer_pos_{precision}_{str(dist_dtype).split(".")[1]}',
            {'rel_err': rel, 'abs_err': err.max().item(), 'differing': differ})
    if bf16:
        w_max = model.obj_ptr_tpos_proj.weight.abs().max().item()
        bound = 2.0 ** -7 * ref.abs() + 2.0 ** -8 * w_max
        assert (err <= bound.unsqueeze(1)).all(), rel
        assert differ < 0.01, differ
    else:
        assert err.max().item() <= 1e-4 * max(1.0, top), rel


@pytest.mark.parametrize('dist_dtype', [torch.float32, torch.int64])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_pointer_pos_encoding_bitwise_gpu(model, precision, dist_dtype):
    """The sine encoding itself (a projection selecting 64 of its values, one-hot rows, no
    bias: exact in either precision) is torch's bit for bit: the same division by the Python
    number (times its float32 reciprocal on CUDA), IEEE division by the frequencies,
    libdevice's sinf / cosf, autocast's round-to-nearest-even cast."""
    from sam2_ros.engine.cuda.kernels.pointer_pos import PointerPos
    from sam2_ros.engine.cuda.kernels.swap import with_children
    k = model.hidden_dim // model.mem_dim
    rows = torch.arange(model.mem_dim, device='cuda')
    proj = torch.nn.Linear(model.hidden_dim, model.mem_dim, device='cuda').requires_grad_(False)
    proj.weight.zero_()
    proj.weight[rows, rows * k + rows % k] = 1.0
    proj.bias.zero_()
    sel = with_children(model, obj_ptr_tpos_proj=proj)
    dist = _dist(dist_dtype)
    t_diff_max = model.max_obj_ptrs_in_encoder - 1
    out = torch.empty(dist.shape[0], 1, dist.shape[1], model.mem_dim, device='cuda')
    with torch.inference_mode(), torch.autocast('cuda', torch.bfloat16,
                                                enabled=precision == 'bf16'):
        ref = proj(get_1d_sine_pe(dist / t_diff_max, dim=model.hidden_dim)).float()
        enc = PointerPos()
        enc(sel, dist, t_diff_max, out, enc.dtype(sel, dist))
    differ = int((out[:, 0] != ref).sum())
    _record(f'pointer_pos_encoding_{precision}_{str(dist_dtype).split(".")[1]}',
            {'differing': differ, 'abs_err': float((out[:, 0] - ref).abs().max())})
    assert differ == 0


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_pointer_pos_kernel_count_gpu(model, precision):
    """memory_tokens on the graphs' layout (batch-major, int64 distances) with 'constants'
    alone and with 'pointer_pos' too: the CUDA kernels one call launches."""
    from sam2_ros.engine.cuda.kernels import fused
    base = fused.fused_model(model, ('constants',))
    twin = fused.fused_model(model, ('constants', 'pointer_pos'))
    g = torch.Generator(device='cuda').manual_seed(0)
    h = model.image_size // 16
    n_s, n_p, batch = 7, 16, 3
    mem = step.Memory(
        feats=torch.randn(n_s, batch, model.mem_dim, h, h, device='cuda',
                          generator=g).to(torch.bfloat16),
        tpos_idx=torch.randint(0, model.num_maskmem, (n_s, batch), device='cuda', generator=g),
        ptrs=torch.randn(n_p, batch, model.hidden_dim, device='cuda', generator=g),
        ptr_dist=_dist(torch.int64).repeat(2, 1)[:n_p])
    pos = torch.randn(1, model.mem_dim, h, h, device='cuda', generator=g)
    bf16 = precision == 'bf16'

    def call(m):
        with torch.inference_mode(), torch.autocast('cuda', torch.bfloat16, enabled=bf16):
            return step.memory_tokens(m, mem, pos, batch_major=True)
    counts = {name: cuda_kernels(lambda m=m: call(m))[0]
              for name, m in (('off', base), ('on', twin))}
    ref, out = call(base), call(twin)
    assert torch.equal(out[0], ref[0])
    n_sp = n_s * h * h
    assert torch.equal(out[1][:n_sp], ref[1][:n_sp])
    _record(f'pointer_pos_memory_tokens_kernels_{precision}', counts)
    assert counts['off'] - counts['on'] >= 5, counts
