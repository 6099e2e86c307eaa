"""sam2's memory attention with fused norms, rotary encoding and key/value inputs.

A ``MemoryAttentionLayer`` (sam2/modeling/memory_attention.py) runs three pre-norm sublayers
(self-attention, cross-attention to the memory, MLP), each ``tgt = tgt + f(norm(tgt))``, and
autocast casts every norm output, ``memory + pos`` and ``memory`` to bf16 in every layer.
Here
* each norm also does the residual add before it (the layer's input ``curr + 0.1 * pos`` in
  the first), writing the residual in float32 and its output in the Linears' dtype;
* ``memory + pos`` and ``memory`` are cast once for all layers (``elementwise.py``);
* RoPE runs in one kernel per attention, self-attention projects q, k, v with one GEMM,
  the MLP's first Linear applies its ReLU in the GEMM's epilogue;
* the cross-attentions of all layers read the same memory, so their key projections run as
  one GEMM over the layers' concatenated weights, and their value projections as another
  (``projections.SharedKeyValues``);
* the final norm writes [B, C, L] storage, so that the step's reshape to [B, C, h, w] is a
  view;
* split-KV attention (``attention.split_kv``) merges its chunks in one kernel
  (``split_merge.py``);
* with ``fold_values`` (the opt-in 'memory_values') the cross-attentions attend over the raw
  memory as values and project them inside the output projection (``value_attention.py``):
  no value projection at all;
* with ``self_flash`` (the opt-in 'self_flash') one object's self-attention runs
  FlashAttention (``rope_attention.flash_alone``).
The module keeps ``layers`` with ``self_attn`` / ``cross_attn_image`` attributes, so the
graph runner's attention swaps (``attention.py``) apply to it as to sam2's.
"""

from __future__ import annotations

from typing import List, Optional, Tuple, Union

import torch
from sam2.modeling.sam.transformer import RoPEAttention

from sam2_ros.engine.cuda.kernels.dtypes import linear_input, norm_output, relu_linear
from sam2_ros.engine.cuda.kernels.elementwise import key_value_inputs
from sam2_ros.engine.cuda.kernels.layernorm import add_layernorm
from sam2_ros.engine.cuda.kernels.projections import SharedKeyValues
from sam2_ros.engine.cuda.kernels import value_attention
from sam2_ros.engine.cuda.kernels.rope_attention import (FoldedValues, FusedRoPEAttention,
                                                         flash_alone)
from sam2_ros.engine.cuda.kernels.split_merge import merge_splits, merge_varlen


class FusedMemoryAttentionLayer(torch.nn.Module):
    """One layer; forward takes and returns the residual as a pending sum (a, b)."""

    def __init__(self, layer: torch.nn.Module, rope: bool, fold_values: bool = False,
                 self_flash: bool = False):
        super().__init__()
        self.inner = layer
        wrap = (lambda m, fuse, attend=None: FusedRoPEAttention(m, attend, fuse_qkv=fuse)
                if rope and isinstance(m, RoPEAttention) else m)
        # self_flash (the opt-in 'self_flash'): one object's self-attention by FlashAttention
        self.self_attn = wrap(layer.self_attn, True, flash_alone if self_flash else None)
        cross = layer.cross_attn_image
        self.cross_attn_image = FusedRoPEAttention(
            cross, folded=FoldedValues(cross), narrow=value_attention.attend) \
            if fold_values and rope and isinstance(cross, RoPEAttention) else wrap(cross, False)

    def forward(self, a: torch.Tensor, b: Optional[torch.Tensor], b_scale: Optional[float],
                kin: torch.Tensor, vin: torch.Tensor, query_pos: torch.Tensor,
                num_k_exclude_rope: int,
                kv: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Input residual a + b_scale * b ([B, L, C]); returns (residual, MLP output).
        kv: this layer's cross-attention keys and values, already projected."""
        ly = self.inner
        sum_dtype = a.dtype if b is None else torch.promote_types(a.dtype, b.dtype)
        dt = linear_input(a, norm_output(a, sum_dtype))
        pe = query_pos if ly.pos_enc_at_attn else None
        n1 = add_layernorm(ly.norm1, a, b, b_scale=b_scale, store_sum=True, y_dtype=dt,
                           pe=pe, pe_dtype=dt)
        q = n1.yp if pe is not None else n1.y
        sa = self.self_attn(q, q, v=n1.y)
        pe = query_pos if ly.pos_enc_at_cross_attn_queries else None
        n2 = add_layernorm(ly.norm2, n1.s, sa, store_sum=True, y_dtype=dt, pe=pe, pe_dtype=dt)
        kw = {'num_k_exclude_rope': num_k_exclude_rope} if num_k_exclude_rope > 0 else {}
        if kv is not None:
            kw['projected'] = kv
        ca = self.cross_attn_image(q=n2.yp if pe is not None else n2.y, k=kin, v=vin, **kw)
        n3 = add_layernorm(ly.norm3, n2.s, ca, store_sum=True, y_dtype=dt)
        if ly.activation_str == 'relu':
            hidden = relu_linear(ly.linear1, n3.y)
        else:
            hidden = ly.activation(ly.linear1(n3.y))
        return n3.s, ly.linear2(hidden)


class FusedMemoryAttention(torch.nn.Module):
    """Replaces ``model.memory_attention`` (a sam2 ``MemoryAttention``) in the fused model
    copy; the same call signature and output ([L, B, C])."""

    def __init__(self, inner: torch.nn.Module, rope: bool = True, fold_values: bool = False,
                 self_flash: bool = False):
        super().__init__()
        self.inner = inner
        # fold_values (the opt-in 'memory_values'): every one-head cross-attention attends
        # with the raw memory as values (value_attention.py)
        fold = fold_values and rope and all(FoldedValues.applicable(ly.cross_attn_image)
                                            for ly in inner.layers)
        self.layers = torch.nn.ModuleList(FusedMemoryAttentionLayer(ly, rope, fold, self_flash)
                                          for ly in inner.layers)
        cross = [ly.cross_attn_image for ly in self.layers]
        inner_cross = [m.inner for m in cross if isinstance(m, FusedRoPEAttention)]
        self.shared_kv = SharedKeyValues(inner_cross, values=not fold) \
            if len(inner_cross) == len(cross) and SharedKeyValues.applicable(inner_cross) \
            else None
        # the runner's attention swaps (attention.py) attend with it where values are narrower
        # than the keys
        self.narrow_values = value_attention.attend if fold else None
        self.split_merge = merge_splits     # attention.split_kv merges with this kernel
        self.split_merge_varlen = merge_varlen      # and attention.masked_memory with this
        # its kernels read the current frame, its positions and the memory at any strides
        # (add_layernorm, key_value_inputs), so step.condition_on_memory copies none of them
        # into batch-major storage for it
        self.strided_inputs = True

    def forward(self, curr: Union[torch.Tensor, List[torch.Tensor]],
                memory: torch.Tensor, curr_pos: Union[None, torch.Tensor, List] = None,
                memory_pos: Optional[torch.Tensor] = None,
                num_obj_ptr_tokens: int = 0) -> torch.Tensor:
        m = self.inner
        if isinstance(curr, list):
            assert isinstance(curr_pos, list) and len(curr) == len(curr_pos) == 1
            curr, curr_pos = curr[0], curr_pos[0]
        assert curr.shape[1] == memory.shape[1], 'Batch size must be the same'
        assert m.batch_first
        a = curr.transpose(0, 1)                           # [B, L, C]
        qpos = curr_pos.transpose(0, 1)
        b, scale = (qpos, 0.1) if m.pos_enc_at_input and curr_pos is not None else (None, None)
        mem, mpos = memory.transpose(0, 1), memory_pos.transpose(0, 1)
        kv_dtype = linear_input(mem, torch.promote_types(mem.dtype, mpos.dtype))
        keys_pos = any(ly.pos_enc_at_cross_attn_keys for ly in m.layers)
        assert keys_pos == all(ly.pos_enc_at_cross_attn_keys for ly in m.layers)
        kin, vin = key_value_inputs(mem, mpos if keys_pos else None, kv_dtype)
        kvs = self.shared_kv(kin, vin) if self.shared_kv is not None else \
            [None] * len(self.layers)
        for layer, kv in zip(self.layers, kvs):
            n_ex = num_obj_ptr_tokens if isinstance(layer.cross_attn_image, RoPEAttention) else 0
            a, b = layer(a, b, scale, kin, vin, qpos, n_ex, kv)
            scale = None
        bsz, length, c = a.shape
        sum_dtype = a.dtype if b is None else torch.promote_types(a.dtype, b.dtype)
        out = torch.empty(bsz, c, length, device=a.device, dtype=norm_output(a, sum_dtype))
        add_layernorm(m.norm, a, b, y=out.transpose(1, 2))
        return out.permute(2, 0, 1)                       # [L, B, C] view of [B, C, L]
