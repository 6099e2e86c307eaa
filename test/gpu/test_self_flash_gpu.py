"""The opt-in fused group 'self_flash' (``rope_attention.flash_alone``: one object's memory
self-attention by FlashAttention instead of SDPA's choice, cuDNN) on the GPU (marked gpu: CI
has none; the CPU twin is test/engine/test_self_flash_cpu.py).

tiny@512's memory attention (fused module, random LayerNorm affines, TF32 off), bf16 autocast:
with the group, one object's output stays within the fused module's bf16 bound of sam2's
module (2^-6 of max |sam2|, test_fused_kernels_gpu.py) and differs from the output without it
(another kernel ran: one cuDNN attention call fewer per layer in the profile, FlashAttention's
kernels more); three objects and float32 are bitwise the output without it (the group leaves
those calls to SDPA).
The measured error goes to $OUT/gpu_fused_kernels.json.
"""

import pytest
import torch

from gpu_common import cuda_events, cuda_rand as _rand, fused_test_model
from gpu_common import record_fused as _record

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]


@pytest.fixture(scope='module')
def model():
    return fused_test_model()


def _inputs(batch, dt):
    n_mem = 7 * 1024 + 4 * 16
    return dict(curr=[_rand(1024, batch, 256, seed=2).to(dt)],
                curr_pos=[_rand(1024, batch, 256, seed=3)],
                memory=_rand(n_mem, batch, 64, seed=4).to(dt),
                memory_pos=_rand(n_mem, batch, 64, seed=5), num_obj_ptr_tokens=64)


def _kernel_names(fn):
    return [e.name for e in cuda_events(fn)]


def test_one_objects_self_attention_by_flash_within_bf16_bound_gpu(model):
    from sam2_ros.engine.cuda.kernels.memory_attention import FusedMemoryAttention
    ma = model.memory_attention
    kw = _inputs(1, torch.bfloat16)
    on, off = FusedMemoryAttention(ma, self_flash=True), FusedMemoryAttention(ma)
    with torch.inference_mode(), torch.autocast('cuda', torch.bfloat16):
        ref, got, without = ma(**kw), on(**kw), off(**kw)
        names = _kernel_names(lambda: on(**kw))
        names_off = _kernel_names(lambda: off(**kw))
    err = float((got.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1))
    _record('self_flash_bf16', {'rel_err': err})
    assert err <= 2.0 ** -6, err
    assert not torch.equal(got, without)
    # each layer's self-attention left cuDNN's kernel for FlashAttention's
    def cudnn(ns):
        return sum('cudnn' in n and 'sdpa' in n for n in ns)
    assert cudnn(names_off) - cudnn(names) == len(ma.layers), (names_off, names)
    assert sum('flash' in n.lower() for n in names) > sum('flash' in n.lower() for n in names_off)


@pytest.mark.parametrize('batch,dt', [(3, torch.bfloat16), (1, torch.float32)])
def test_other_calls_stay_sdpas_bitwise_gpu(model, batch, dt):
    from sam2_ros.engine.cuda.kernels.memory_attention import FusedMemoryAttention
    ma = model.memory_attention
    kw = _inputs(batch, dt)
    with torch.inference_mode(), torch.autocast('cuda', torch.bfloat16,
                                                enabled=dt == torch.bfloat16):
        got = FusedMemoryAttention(ma, self_flash=True)(**kw)
        without = FusedMemoryAttention(ma)(**kw)
    assert torch.equal(got, without)
