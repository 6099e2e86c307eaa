"""The SAM mask decoder's two-way transformer with fused norms and attention inputs.

Every sublayer of sam2's ``TwoWayAttentionBlock`` (sam2/modeling/sam/transformer.py) ends in
``norm(x + attn_or_mlp)`` and the next one starts by adding a positional encoding and
letting autocast cast q, k and v to bf16 (the image side's ``keys + key_pe`` is recomputed
twice per block). Here each norm does the residual add and writes, besides its float32
output (the residual stream), the bf16 inputs the following projections read: the output
plus its positional encoding and the output itself. The first block's image-side inputs
come from one kernel (``elementwise.py``). A self-attention projects the one tensor it
reads as several of q, k, v with one GEMM (``Projections``). SDPA and MLPs are sam2's
modules.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F

from sam2_ros.engine.cuda.kernels.dtypes import linear_input, norm_output, relu_linear
from sam2_ros.engine.cuda.kernels.elementwise import key_value_inputs, sum_key_value_inputs
from sam2_ros.engine.cuda.kernels.layernorm import NormOut, add_layernorm
from sam2_ros.engine.cuda.kernels.projections import Projections


def attend(attn: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           proj: Optional[Projections] = None) -> torch.Tensor:
    """sam2's ``Attention.forward`` on inputs already in the projections' dtype; ``proj``:
    its projections fused where inputs are shared."""
    qp, kp, vp = proj(q, k, v) if proj is not None else (
        attn.q_proj(q), attn.k_proj(k), attn.v_proj(v))
    h = attn.num_heads
    out = F.scaled_dot_product_attention(attn._separate_heads(qp, h),
                                         attn._separate_heads(kp, h),
                                         attn._separate_heads(vp, h))
    return attn.out_proj(attn._recombine_heads(out))


class _Side:
    """One token stream between sublayers: x (float32 residual), x + pe and x in the
    projections' dtype."""

    def __init__(self, x: torch.Tensor, with_pe: torch.Tensor, plain: torch.Tensor):
        self.x, self.with_pe, self.plain = x, with_pe, plain


def _norm(norm, a, b, pe) -> _Side:
    sum_dtype = a.dtype if b is None else torch.promote_types(a.dtype, b.dtype)
    y_dtype = norm_output(a, sum_dtype)
    lin = linear_input(a, y_dtype)
    n: NormOut = add_layernorm(norm, a, b, y_dtype=y_dtype, pe=pe, pe_dtype=lin,
                               yc_dtype=lin)
    return _Side(n.y, n.yp, n.yc)


class FusedTwoWayTransformer(torch.nn.Module):
    """Replaces ``sam_mask_decoder.transformer`` (a sam2 ``TwoWayTransformer``) in the fused
    model copy: the same signature and outputs (queries, keys)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        # each block's self-attention reads one tensor as q and k (and v in the first block)
        self.self_proj = [Projections(layer.self_attn) for layer in inner.layers]

    def forward(self, image_embedding: torch.Tensor, image_pe: torch.Tensor,
                point_embedding: torch.Tensor, dense: Optional[torch.Tensor] = None
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """dense: [B, C, h, w] added to image_embedding (broadcast) in the kernel that
        prepares the keys (the mask decoder's ``image_embeddings + dense``), not before."""
        t = self.inner
        keys_x = image_embedding.flatten(2).permute(0, 2, 1)        # [B, HW, C]
        add = None
        if dense is not None:
            add = dense.flatten(2).permute(0, 2, 1)
            shape = torch.broadcast_shapes(keys_x.shape, add.shape)
            keys_x, add = keys_x.expand(shape), add.expand(shape)
        key_pe = image_pe.flatten(2).permute(0, 2, 1)
        key_pe = key_pe.expand(keys_x.shape[0], -1, -1)
        query_pe = point_embedding
        sum_dtype = keys_x.dtype if add is None else torch.promote_types(keys_x.dtype, add.dtype)
        lin = linear_input(keys_x, torch.promote_types(sum_dtype, key_pe.dtype))
        if add is None:
            k_pe, k_plain = key_value_inputs(keys_x, key_pe, lin)
        else:
            keys_x, k_pe, k_plain = sum_key_value_inputs(keys_x, add, key_pe, lin)
        keys = _Side(keys_x, k_pe, k_plain)
        queries: Optional[_Side] = None
        for layer, proj in zip(t.layers, self.self_proj):
            queries, keys = self._block(layer, proj, point_embedding, queries, keys, query_pe,
                                        key_pe)
        attn_out = attend(t.final_attn_token_to_image, queries.with_pe, keys.with_pe,
                          keys.plain)
        out = add_layernorm(t.norm_final_attn, queries.x, attn_out,
                            y_dtype=norm_output(attn_out, torch.promote_types(
                                queries.x.dtype, attn_out.dtype))).y
        return out, keys.x

    @staticmethod
    def _block(blk, proj: Projections, point_embedding: torch.Tensor,
               queries: Optional[_Side], keys: _Side, query_pe: torch.Tensor,
               key_pe: torch.Tensor) -> Tuple[_Side, _Side]:
        if blk.skip_first_layer_pe:     # no residual: queries = self_attn(queries, ...)
            x = point_embedding if queries is None else queries.x
            x = x.to(linear_input(x, x.dtype))       # autocast's cast, once for q, k and v
            sa = attend(blk.self_attn, x, x, x, proj)
            q = _norm(blk.norm1, sa, None, query_pe)
        else:
            if queries is None:
                queries = _Side(point_embedding, *(t.to(linear_input(
                    point_embedding, point_embedding.dtype)) for t in (
                        point_embedding + query_pe, point_embedding)))
            sa = attend(blk.self_attn, queries.with_pe, queries.with_pe, queries.plain, proj)
            q = _norm(blk.norm1, queries.x, sa, query_pe)
        ca = attend(blk.cross_attn_token_to_image, q.with_pe, keys.with_pe, keys.plain)
        q = _norm(blk.norm2, q.x, ca, query_pe)
        if isinstance(blk.mlp.act, torch.nn.ReLU) and blk.mlp.num_layers == 2 \
                and not blk.mlp.sigmoid_output:
            mlp = blk.mlp.layers[1](relu_linear(blk.mlp.layers[0], q.plain))
        else:
            mlp = blk.mlp(q.x)
        q = _norm(blk.norm3, q.x, mlp, query_pe)
        ia = attend(blk.cross_attn_image_to_token, keys.with_pe, q.with_pe, q.plain)
        keys = _norm(blk.norm4, keys.x, ia, key_pe)
        return q, keys
