"""sam2's Hiera trunk with each block's norms fused with their neighbours (``layernorm.py``).

A ``MultiScaleBlock`` computes (sam2/modeling/backbones/hieradet.py, drop_path off in eval):

    y = norm1(x); [shortcut = pool(proj(y)) at a stage change, else x]; window partition of y
    (a pad and a permuted copy); attention; unpartition (a copy, a slice); x = shortcut + attn
    x = x + mlp(norm2(x))

and autocast casts each norm's float32 output to bf16 before the next Linear. Here
* the first norm also does the previous block's residual add (``x + mlp`` is never written
  alone, except as a stage output) and writes its bf16 output straight into the window
  layout (padding rows zero, as F.pad's); at a stage change also in the grid layout, which
  the pooled projection of the shortcut reads;
* the second norm reads the attention output through the unpartition index map, adds the
  shortcut and writes the new residual and its bf16 output.
The first block's input add (patch embedding + positional embedding) is fused the same way;
the positional embedding (an interpolation of parameters) is computed once per size.
A stage change's attention pools its queries in one kernel, and its shortcut's pooling runs
the same kernel (``q_pool.py``). Attention, projections and the MLP are sam2's modules,
sharing its weights; with the opt-in group 'gelu_epilogue' the MLP's GELU runs in its first
GEMM (``dtypes.gelu_mlp``), with 'window_attention' the attention of windows of up to 64
tokens (their queries pooled too, at a stage change) in one program per window and head
(``window_attention.py``).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

import torch

from sam2_ros.engine.cuda.kernels.dtypes import gelu_mlp, is_gelu_mlp, linear_input
from sam2_ros.engine.cuda.kernels.layernorm import add_layernorm
from sam2_ros.engine.cuda.kernels.q_pool import PooledQueryAttention, pool_grid, pool_stride
from sam2_ros.engine.cuda.kernels.patch_embed import FusedPatchEmbed
from sam2_ros.engine.cuda.kernels.window_attention import WindowAttention, takes


def partition_rows(h: int, w: int, ws: int, device: Union[str, torch.device]) -> torch.Tensor:
    """[nWh*nWw*ws*ws] int32: the source row (h*W + w) of each row of sam2's window partition
    of an [H, W] grid, -1 for padding."""
    hp, wp = -(-h // ws) * ws, -(-w // ws) * ws
    hh = torch.arange(hp, device=device).view(hp // ws, 1, ws, 1)
    ww = torch.arange(wp, device=device).view(1, wp // ws, 1, ws)
    src = hh * w + ww
    src = torch.where((hh < h) & (ww < w), src, torch.full_like(src, -1))
    return src.reshape(-1).to(torch.int32)


def unpartition_rows(h: int, w: int, ws: int,
                     device: Union[str, torch.device]) -> torch.Tensor:
    """[H*W] int32: the row of sam2's window partition that holds grid row (h, w)."""
    nww = -(-w // ws)
    hh = torch.arange(h, device=device).view(h, 1)
    ww = torch.arange(w, device=device).view(1, w)
    row = ((hh // ws) * nww + ww // ws) * ws * ws + (hh % ws) * ws + ww % ws
    return row.reshape(-1).to(torch.int32)


class FusedHiera(torch.nn.Module):
    """Replaces ``image_encoder.trunk`` (a sam2 ``Hiera``) in the fused model copy: the same
    outputs (a list of [B, C, H, W] feature maps, the last stage first as sam2 returns them)
    from the same weights."""

    def __init__(self, trunk: torch.nn.Module, gelu_epilogue: bool = False,
                 window_attention: bool = False, patch_embed: bool = False):
        super().__init__()
        self.trunk = trunk
        # the patch embedding: one implicit-GEMM kernel writing the tokens (the opt-in
        # 'patch_embed', patch_embed.py) where the convolution is a plain one
        self.patch_embed = FusedPatchEmbed(trunk.patch_embed) \
            if patch_embed and FusedPatchEmbed.applicable(trunk.patch_embed) \
            else trunk.patch_embed
        # per block: its MLP's GELU in the first GEMM (dtypes.gelu_mlp; the opt-in
        # 'gelu_epilogue'), where the MLP is one gelu_mlp computes
        self.gelu_epilogue = gelu_epilogue
        self.gelu_mlps = [gelu_epilogue and is_gelu_mlp(blk.mlp) for blk in trunk.blocks]
        self.pos: Dict[tuple, torch.Tensor] = {}          # (H, W, device) -> [1, HW, C]
        self.rows: Dict[tuple, torch.Tensor] = {}         # index maps per shape
        outs = set(trunk.stage_ends if trunk.return_interm_layers else trunk.stage_ends[-1:])
        self.outputs = outs
        # each block's attention: a stage change's pools its queries in one kernel (q_pool.py);
        # with the opt-in 'window_attention', small windows (pooled or not) attend in one
        # program each
        strides = [pool_stride(blk.attn) for blk in trunk.blocks]
        self.attns = torch.nn.ModuleList(
            PooledQueryAttention(blk.attn, s, window_attention) if s is not None else
            WindowAttention(blk.attn) if window_attention and takes(blk.attn, blk.window_size)
            else blk.attn for blk, s in zip(trunk.blocks, strides))

    def _pos_embed(self, h: int, w: int, device) -> torch.Tensor:
        key = (h, w, device)
        if key not in self.pos:       # depends on parameters only: once per size
            self.pos[key] = self.trunk._get_pos_embed((h, w)).reshape(1, h * w, -1).contiguous()
        return self.pos[key]

    def _rows(self, kind: str, h: int, w: int, ws: int, device) -> torch.Tensor:
        key = (kind, h, w, ws, device)
        if key not in self.rows:
            fn = partition_rows if kind == 'partition' else unpartition_rows
            self.rows[key] = fn(h, w, ws, device)
        return self.rows[key]

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        t = self.trunk
        x = self.patch_embed(x)                            # [B, H, W, C]
        bsz, h, w, _ = x.shape
        # block input = a + b
        a, b = x.flatten(1, 2), self._pos_embed(h, w, x.device).expand(bsz, -1, -1)
        outputs = []
        for i, blk in enumerate(t.blocks):
            store_in = i - 1 in self.outputs        # the previous block ended a stage
            hw_in = (h, w)
            x_in, a, b, (h, w) = self._block(blk, self.attns[i], a, b, h, w, store_in,
                                             self.gelu_mlps[i])
            if store_in:
                outputs.append(x_in.view(bsz, *hw_in, -1).permute(0, 3, 1, 2))
        if len(t.blocks) - 1 in self.outputs:
            outputs.append((a + b).view(bsz, h, w, -1).permute(0, 3, 1, 2))
        return outputs

    def _block(self, blk, attn_mod: torch.nn.Module, a: torch.Tensor, b: torch.Tensor, h: int,
               w: int, store_in: bool, epilogue: bool = False
               ) -> Tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor, Tuple[int, int]]:
        """One MultiScaleBlock on input a + b ([B, H*W, C] each); ``epilogue``: its MLP's GELU
        in the first GEMM (``gelu_mlps``). Returns (a + b if it was
        stored, the residual before the MLP, the MLP output, the output grid size)."""
        bsz, c = a.shape[0], blk.dim
        ws = blk.window_size
        dt = linear_input(a, torch.promote_types(a.dtype, b.dtype))
        rows = self._rows('partition', h, w, ws, a.device) if ws > 0 else None
        if blk.dim != blk.dim_out:        # stage change: pooled projection as the shortcut
            # the norm writes y twice, in the grid (the projection's input) and in windows
            n1 = add_layernorm(blk.norm1, a, b, a_rows=rows, store_sum=store_in, y_dtype=dt,
                               y_at_a_rows=ws > 0)
            y = (n1.yg if ws > 0 else n1.y).view(bsz, h, w, c)
            shortcut = pool_grid(blk.proj(y), blk.pool)
            xw = n1.y.view(-1, ws, ws, c) if ws > 0 else y
            x_in = n1.s
        else:
            n1 = add_layernorm(blk.norm1, a, b, a_rows=rows, store_sum=True, y_dtype=dt)
            shortcut = n1.s.view(bsz, h, w, c)
            xw = n1.y.view(-1, ws, ws, c) if ws > 0 else n1.y.view(bsz, h, w, c)
            x_in = n1.s
        attn = attn_mod(xw)
        h2, w2, c2 = shortcut.shape[1:]
        rows = None
        if ws > 0:
            ws2 = ws // blk.q_stride[0] if blk.q_stride else ws
            rows = self._rows('unpartition', h2, w2, ws2, a.device)
        attn = attn.reshape(bsz, -1, c2)
        sc = shortcut.flatten(1, 2)
        dt2 = linear_input(a, torch.promote_types(sc.dtype, attn.dtype))
        n2 = add_layernorm(blk.norm2, sc, attn, b_rows=rows, store_sum=True, y_dtype=dt2)
        # float32 keeps sam2's exact GELU: the approximation is only for 16-bit compute
        mlp = gelu_mlp(blk.mlp, n2.y) if epilogue and n2.y.dtype != torch.float32 and \
            n2.y.is_contiguous() else blk.mlp(n2.y)
        return x_in, n2.s, mlp, (h2, w2)
