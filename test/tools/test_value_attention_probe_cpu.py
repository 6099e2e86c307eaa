"""tools/probes/value_attention_probe.py: its Triton kernel (run in Triton's interpreter on the
CPU, small shapes) attends each row over its first klen keys with values narrower than the
keys, as float32 math does, whole or in key chunks merged by their log-sum-exps (uneven and
empty chunks included)."""

import pytest
import torch

from tools.probes.value_attention_probe import attention_values, reference


@pytest.mark.parametrize('splits', [1, 3, 8])
def test_kernel_matches_float32_math_with_narrow_values(splits):
    g = torch.Generator().manual_seed(0)
    b, lq, lk, d, dv = 3, 20, 37, 32, 16
    q = torch.randn(b, lq, d, generator=g)
    k = torch.randn(b, lk, d, generator=g)
    v = torch.randn(b, lk, dv, generator=g)
    klen = torch.tensor([37, 5, 18], dtype=torch.int32)   # row 1: fewer keys than 8 chunks
    out, lse = attention_values(q, k, v, klen, splits, config=(16, 16, 4, 2))
    ref_out, ref_lse = reference(q, k, v, klen)
    assert out.shape == (b, lq, dv)
    torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-5)
    if splits == 1:
        torch.testing.assert_close(lse, ref_lse, rtol=1e-4, atol=1e-5)
    else:        # the chunks' log-sum-exps: their log-sum-exp is the whole row's
        lse = lse[..., 0]                                          # [B, S, Lq]
        total = torch.logsumexp(lse, dim=1)
        torch.testing.assert_close(total, ref_lse, rtol=1e-4, atol=1e-5)
        assert torch.isneginf(lse[1, 5:]).all()           # 5 keys in 8 chunks: 3 are empty


def test_keys_past_a_rows_length_take_no_part():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 16, 32, generator=g), torch.randn(1, 40, 32, generator=g)
    v = torch.randn(1, 40, 16, generator=g)
    klen = torch.tensor([23], dtype=torch.int32)
    out = attention_values(q, k, v, klen, 1, config=(16, 16, 4, 2))[0]
    k2, v2 = k.clone(), v.clone()
    k2[:, 23:] = 1e4                       # would dominate the softmax if it were attended
    v2[:, 23:] = float('nan')
    torch.testing.assert_close(attention_values(q, k2, v2, klen, 1,
                                                config=(16, 16, 4, 2))[0], out)
