"""sam2's 3-layer ReLU MLPs (``sam2_utils.MLP``) on tokens, several at once, in one kernel.

The SAM mask decoder ends in six such MLPs, each reading one output token of the two-way
transformer: four hypernetworks (one per mask token, 256 -> 256 -> 256 -> 32), the IoU head
(-> 4, sigmoid) and the object-score head (-> 1); sam2 runs them one after another, and per
MLP under autocast: a cast of its token (a strided slice), three GEMMs, two ReLUs, then a
stack of the hypernetworks' outputs: 40-odd kernels per frame. The object-pointer projection
(256 -> 256 -> 256 -> 256) is one more MLP.

Here their weights are stacked once into [H, K, HID], [H, HID, HID], [H, HID, OUT] tensors (the
last zero-padded to the widest output; copies: nothing is shared with sam2's modules) and one
program per (MLP, block of rows) computes all three layers in registers: h1 = relu(x W1 + b1)
in full, then per block of HID columns h2 = relu(h1 W2 + b2) and out += h2 W3. Each MLP's
output goes to its own place (a [B, 4, 32] hyper_in, a [B, 4] IoU, a [B, 1] score, all
contiguous), so nothing is sliced, stacked or copied afterwards.

Numerics are sam2's: the token cast to the compute dtype (autocast's), every layer's output
rounded to it before the next (as a bf16 GEMM writes it), the sigmoid on the rounded logits,
float32 accumulation. In float32 the sums run in another order than cuBLAS's (within 1e-5
relative); in bf16 that difference flips a rounding now and then (an ulp, propagated).
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch
import triton
import triton.language as tl

from sam2_ros.engine.cuda.kernels.dtypes import linear_input
from sam2_ros.engine.cuda.kernels.launch import jit, next_pow2
from sam2_ros.engine.cuda.kernels.rounding import cast_rne

# The per-MLP table (``MLPStack.meta``, int64 [H, 6]), columns: 0 the token it reads, 1 its
# output width, 2 base_b, 3 base_c, 4 row_stride (its row b goes to
# out + base_b * B + base_c + b * row_stride), 5 sigmoid or not.
_BLOCK_B = 16        # rows per program (tl.dot's smallest M)


@jit
def _mlp3_kernel(x_ptr, x_sb, x_st, x_sc, meta_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, w3_ptr,
                 b3_ptr, out_ptr, B, K: tl.constexpr, HID: tl.constexpr, OUT: tl.constexpr,
                 BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr,
                 PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    h = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    rm = rows < B
    r64 = rows.to(tl.int64)
    dt = w1_ptr.dtype.element_ty
    tok = tl.load(meta_ptr + h * 6 + 0)
    hid = tl.arange(0, HID).to(tl.int64)
    # layer 1: h1 [BLOCK_B, HID] = relu(x W1 + b1), x = token ``tok`` of each row
    acc = tl.zeros([BLOCK_B, HID], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = (k0 + tl.arange(0, BLOCK_K)).to(tl.int64)
        x = tl.load(x_ptr + (r64 * x_sb + tok * x_st)[:, None] + (kk * x_sc)[None, :],
                    mask=rm[:, None], other=0.0).to(tl.float32)
        w = tl.load(w1_ptr + h * K * HID + (kk * HID)[:, None] + hid[None, :])
        x = cast_rne(x, dt)
        if UPCAST:
            x, w = x.to(tl.float32), w.to(tl.float32)
        acc = tl.dot(x, w, acc, input_precision=PRECISION)
    b1 = tl.load(b1_ptr + h * HID + hid).to(tl.float32)
    h1 = cast_rne(tl.maximum(acc + b1[None, :], 0.0), dt)
    if UPCAST:
        h1 = h1.to(tl.float32)
    # layers 2 and 3, BLOCK_N hidden columns at a time: out += relu(h1 W2[:, n] + b2[n]) W3[n]
    oc = tl.arange(0, OUT).to(tl.int64)
    out = tl.zeros([BLOCK_B, OUT], dtype=tl.float32)
    for n0 in range(0, HID, BLOCK_N):
        nn = (n0 + tl.arange(0, BLOCK_N)).to(tl.int64)
        w2 = tl.load(w2_ptr + h * HID * HID + (hid * HID)[:, None] + nn[None, :])
        b2 = tl.load(b2_ptr + h * HID + nn).to(tl.float32)
        w3 = tl.load(w3_ptr + h * HID * OUT + (nn * OUT)[:, None] + oc[None, :])
        if UPCAST:
            w2, w3 = w2.to(tl.float32), w3.to(tl.float32)
        h2 = tl.dot(h1, w2, input_precision=PRECISION)
        h2 = cast_rne(tl.maximum(h2 + b2[None, :], 0.0), dt)
        if UPCAST:
            h2 = h2.to(tl.float32)
        out = tl.dot(h2, w3, out, input_precision=PRECISION)
    b3 = tl.load(b3_ptr + h * OUT + oc).to(tl.float32)
    y = cast_rne(out + b3[None, :], dt).to(tl.float32)      # the last Linear's output
    if tl.load(meta_ptr + h * 6 + 5) != 0:
        y = tl.sigmoid(y)
    width = tl.load(meta_ptr + h * 6 + 1)
    base = tl.load(meta_ptr + h * 6 + 2) * B + tl.load(meta_ptr + h * 6 + 3)
    rs = tl.load(meta_ptr + h * 6 + 4)
    tl.store(out_ptr + base + (r64 * rs)[:, None] + oc[None, :],
             cast_rne(y, out_ptr.dtype.element_ty), mask=rm[:, None] & (oc < width)[None, :])


def stackable(mlp: torch.nn.Module, k: int, hid: int) -> bool:
    """True for a sam2 MLP this kernel computes: 3 Linear layers k -> hid -> hid -> any with
    biases, ReLU between them (sigmoid or not at the end); k a multiple of 16, hid a power of
    two >= 16 (tl.dot's tiles)."""
    from sam2.modeling.sam2_utils import MLP
    if not isinstance(mlp, MLP) or mlp.num_layers != 3 or type(mlp.act) is not torch.nn.ReLU:
        return False
    if k % 16 or hid < 16 or hid != next_pow2(hid):
        return False
    l1, l2, l3 = mlp.layers
    return (l1.in_features, l1.out_features, l2.in_features, l2.out_features,
            l3.in_features) == (k, hid, hid, hid, hid) and all(
                ly.bias is not None for ly in mlp.layers)


class MLPStack(torch.nn.Module):
    """The weights of H stackable sam2 MLPs (same K and HID), copied once into stacked
    buffers, and ``run``, which computes them all in one kernel.

    Output placement: MLP h reads token ``tokens[h]`` of x [B, T, K] and writes its row b at
    ``out[base_b[h] * B + base_c[h] + b * row_stride[h] : ... + width]`` of a flat buffer the
    caller views as its outputs (``run`` returns the buffer)."""

    def __init__(self, mlps: Sequence[torch.nn.Module], tokens: Sequence[int],
                 placement: Sequence[Sequence[int]]):
        super().__init__()
        l1 = mlps[0].layers[0]
        self.k, self.hid = l1.in_features, l1.out_features
        assert all(stackable(m, self.k, self.hid) for m in mlps)
        widths = [m.layers[2].out_features for m in mlps]
        self.out = max(16, next_pow2(max(widths)))
        self.n = len(mlps)
        with torch.inference_mode(False), torch.no_grad():
            lays = [[m.layers[i] for m in mlps] for i in range(3)]
            w3 = torch.zeros(self.n, self.hid, self.out, dtype=l1.weight.dtype,
                             device=l1.weight.device)
            b3 = torch.zeros(self.n, self.out, dtype=l1.weight.dtype, device=l1.weight.device)
            for i, ly in enumerate(lays[2]):
                w3[i, :, :ly.out_features] = ly.weight.t()
                b3[i, :ly.out_features] = ly.bias
            for name, t in (('w1', torch.stack([ly.weight.t() for ly in lays[0]])),  # [H,K,HID]
                            ('b1', torch.stack([ly.bias for ly in lays[0]])),        # [H, HID]
                            ('w2', torch.stack([ly.weight.t() for ly in lays[1]])),
                            ('b2', torch.stack([ly.bias for ly in lays[1]])),
                            ('w3', w3), ('b3', b3)):
                self.register_buffer(name, t.contiguous(), persistent=False)
            meta = [[tok, w, *place, int(m.sigmoid_output)]
                    for tok, w, place, m in zip(tokens, widths, placement, mlps)]
            self.register_buffer('meta', torch.tensor(meta, dtype=torch.int64,
                                                      device=l1.weight.device),
                                 persistent=False)

    def weights(self, dtype: torch.dtype) -> List[torch.Tensor]:
        ws = [self.w1, self.b1, self.w2, self.b2, self.w3, self.b3]
        return [w if w.dtype == dtype else w.to(dtype) for w in ws]

    def run(self, x: torch.Tensor, size: int, out: Optional[torch.Tensor] = None
            ) -> torch.Tensor:
        """x [B, T, K] (any strides) -> the flat output buffer of ``size`` elements, in the
        dtype sam2's Linears would compute in on x (autocast's or x's)."""
        bsz = x.shape[0]
        dtype = linear_input(x, torch.promote_types(x.dtype, self.w1.dtype))
        if out is None:
            out = torch.empty(size, device=x.device, dtype=dtype)
        # [32, HID] weight tiles, two stages: 2 x 16 KB of shared memory per loop in bf16
        block_k = 32 if self.k % 32 == 0 else 16
        block_n = min(32, self.hid)
        # Triton's interpreter (triton 3.6) multiplies bf16 operands of tl.dot as their uint16
        # bit patterns: there the operands go in as float32 (exact: the same products, the
        # same float32 sums); compiled, bf16 runs on the tensor cores
        upcast = x.device.type != 'cuda'
        precision = 'ieee' if dtype == torch.float32 or upcast else 'tf32'   # fp32: no TF32
        _mlp3_kernel[(self.n, triton.cdiv(bsz, _BLOCK_B))](
            x, *x.stride(), self.meta, *self.weights(dtype), out, bsz, K=self.k, HID=self.hid,
            OUT=self.out, BLOCK_B=_BLOCK_B, BLOCK_K=block_k, BLOCK_N=block_n,
            PRECISION=precision, UPCAST=upcast, num_warps=4, num_stages=3)   # launch_probe.py
        return out


class FusedMLP(torch.nn.Module):
    """Replaces one stackable sam2 MLP (the object-pointer projection): x [..., K] ->
    [..., out] in one kernel."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        self.width = inner.layers[2].out_features
        self.stack = MLPStack([inner], [0], [(0, 0, self.width)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        rows = x.reshape(-1, 1, x.shape[-1])                  # [N, 1, K], a view when it can
        y = self.stack.run(rows, rows.shape[0] * self.width)
        return y.view(*lead, self.width)
