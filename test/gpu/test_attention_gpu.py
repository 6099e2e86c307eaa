"""Padded-memory attention in key chunks on the GPU (marked gpu; run through the device tool).

``attention.varlen_split_attention`` (the frames after a prompt and the corrections, with
``padded_split_attention``) against the one variable-length FlashAttention call it replaces
and an fp32 reference of each row's own attention: FlashAttention's log-sum-exp layout, empty
chunks and the merge, at tiny@512's shapes (one head of 1,024 queries, 7,232 memory tokens).
bf16 bound: both bf16 paths round q, k, v and the output to bf16 (2^-8 relative) and differ
only in the summation order of the softmax; 2e-2 absolute on outputs of magnitude ~1 is a few
bf16 steps.
"""

import pytest
import torch
import torch.nn.functional as F

from gpu_common import record_equivalence
from sam2_ros.engine import attention

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]


@pytest.mark.parametrize('b', [1, 3])
def test_split_padded_attention_equals_one_varlen_call(b):
    g = torch.Generator(device='cuda').manual_seed(b)
    h, lq, lk, d = 1, 1024, 7232, 256
    q, k, v = (torch.randn(b, h, n, d, generator=g, device='cuda') for n in (lq, lk, lk))
    valid = torch.zeros(b, lk, dtype=torch.long, device='cuda')
    valid[0] = 1                                    # steady: every slot
    if b > 1:
        valid[1, :3000] = 1                         # a few frames after a prompt
        valid[2, [5, 4000]] = 1                     # fewer keys than chunks
    keys = attention.KeyPacking(valid)
    splits = attention.kv_splits(b, h, lq, lk, dividing=False)
    assert splits > 1
    qb, kb, vb = (x.bfloat16() for x in (q, k, v))
    out = attention.varlen_split_attention(qb, kb, vb, keys, splits)
    one = attention.varlen_attention(qb, kb, vb, keys)
    ref = torch.cat([F.scaled_dot_product_attention(
        qb[i:i + 1].float(), kb[i:i + 1, :, m].float(), vb[i:i + 1, :, m].float())
        for i, m in enumerate(valid.bool())])
    worst = float((out.float() - ref).abs().max())
    record_equivalence(f'split_padded_attention_b{b}_bf16',
                       {'worst_vs_fp32': worst,
                        'one_call_vs_fp32': float((one.float() - ref).abs().max())})
    assert out.dtype == torch.bfloat16 and out.shape == (b, h, lq, d)
    assert worst <= 2e-2
    assert float((out.float() - one.float()).abs().max()) <= 2e-2
