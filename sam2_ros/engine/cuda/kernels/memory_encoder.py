"""sam2's ``MemoryEncoder`` in eleven kernels: the fused model copy's 'memory_encoder' group.

sam2's memory encoder (sam2/modeling/memory_encoder.py) runs about 48 small kernels a memory
(tiny@512, bf16: the mask downsampler's four strided convolutions with their LayerNorm2d and
GELU, its final 1x1 convolution, ``pix_feat_proj``, the add, two CXBlocks, ``out_proj``, the
casts autocast adds). Here, on channels-last activations throughout:

* one kernel per downsampler stage (``mask_downsampler.py``), the last one also computing the
  final 1x1 convolution, ``pix_feat_proj`` and their sum: 4 kernels;
* three per CXBlock (``cx_block.py``): 6;
* ``out_proj`` (``row_gemm.py``), written as the [B, C_out, h, w] NCHW tensor sam2 returns: 1.

The position encoding is the module's own (``position_encoding``, a child of this module, so
the 'constants' group can replace it before or after this group: then no kernel). The weights
are read from sam2's modules on every call (no copies: a precast or reloaded weight is used as
it is). Outputs as sam2's: {'vision_features': [B, C_out, h, w] in the compute dtype (bf16
under autocast), 'vision_pos_enc': [pos]}.

``fused_memory_encoder`` decides at construction: a memory encoder of another structure than
sam2's SAM 2 / 2.1 one stays sam2's module. At call time a compute dtype other than float32 or
bf16 (float16 autocast) and inputs sam2 would reject run sam2's module as it is.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Optional, Tuple

import torch

from sam2_ros.engine.cuda.kernels.cx_block import cx_block, supported as block_supported
from sam2_ros.engine.cuda.kernels.dtypes import autocast_dtype
from sam2_ros.engine.cuda.kernels.mask_downsampler import conv_stage, out_size
from sam2_ros.engine.cuda.kernels.mask_prologue import SIGMOID, MaskPrologue
from sam2_ros.engine.cuda.kernels.row_gemm import CONV, row_gemm

log = logging.getLogger(__name__)


def _is_conv(m: torch.nn.Module, k: int, cin: int = None) -> bool:
    return (type(m) is torch.nn.Conv2d and m.kernel_size == (k, k) and m.groups == 1
            and m.dilation == (1, 1) and m.bias is not None and m.padding_mode == 'zeros'
            and m.stride[0] == m.stride[1] and m.padding[0] == m.padding[1]
            and (cin is None or m.in_channels == cin))


def _pow2_in(n: int, lo: int, hi: int) -> bool:
    return lo <= n <= hi and n & (n - 1) == 0


def unsupported(mem: torch.nn.Module) -> str:
    """Why these kernels cannot compute ``mem`` ('' when they can)."""
    from sam2.modeling.memory_encoder import MemoryEncoder
    from sam2.modeling.sam2_utils import LayerNorm2d
    if type(mem) is not MemoryEncoder:
        return f'{type(mem).__name__} is not sam2\'s MemoryEncoder'
    enc = getattr(mem.mask_downsampler, 'encoder', None)
    if not isinstance(enc, torch.nn.Sequential) or len(enc) < 4 or len(enc) % 3 != 1:
        return 'mask downsampler: not [conv, LayerNorm2d, GELU] x n + conv'
    cin = 1
    for i in range(0, len(enc) - 1, 3):
        conv, norm, act = enc[i], enc[i + 1], enc[i + 2]
        cout = conv.out_channels if isinstance(conv, torch.nn.Conv2d) else 0
        if not (_is_conv(conv, conv.kernel_size[0], cin) and type(norm) is LayerNorm2d
                and type(act) is torch.nn.GELU and act.approximate == 'none'):
            return f'mask downsampler stage {i // 3}: not conv + LayerNorm2d + exact GELU'
        if not _pow2_in(cout, 16 if i == len(enc) - 4 else 1, 256):
            return f'mask downsampler stage {i // 3}: {cout} channels'
        cin = cout
    final, proj = enc[-1], mem.pix_feat_proj
    dim = final.out_channels if isinstance(final, torch.nn.Conv2d) else 0
    if not (_is_conv(final, 1, cin) and _is_conv(proj, 1) and proj.stride == (1, 1)
            and final.stride == (1, 1) and proj.out_channels == dim
            and _pow2_in(proj.in_channels, 16, 256) and _pow2_in(dim, 16, 256)):
        return 'final 1x1 convolution / pix_feat_proj'
    if type(mem.fuser.proj) is not torch.nn.Identity or not all(
            block_supported(b, dim) for b in mem.fuser.layers):
        return 'fuser: an input projection or a block other than a depthwise CXBlock'
    if not (_is_conv(mem.out_proj, 1, dim) and mem.out_proj.stride == (1, 1)):
        return 'out_proj: not a 1x1 convolution'
    return ''


def fused_memory_encoder(mem: torch.nn.Module) -> torch.nn.Module:
    """``FusedMemoryEncoder(mem)``, or ``mem`` itself where the kernels do not fit it."""
    why = unsupported(mem)
    if why:
        log.info('fused_kernels: memory_encoder runs sam2\'s module (%s)', why)
        return mem
    return FusedMemoryEncoder(mem)


class FusedMemoryEncoder(torch.nn.Module):
    """Replaces a sam2 ``MemoryEncoder`` that ``unsupported`` accepts (its weights)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        self.position_encoding = inner.position_encoding
        enc = inner.mask_downsampler.encoder
        self.stages = [(enc[i], enc[i + 1]) for i in range(0, len(enc) - 1, 3)]

    def compute_dtype(self, masks: torch.Tensor) -> Optional[torch.dtype]:
        """The dtype sam2's convolutions compute in for this call, or None (sam2's module)."""
        first = self.stages[0][0].weight
        dtype = autocast_dtype(masks.device) or torch.promote_types(masks.dtype, first.dtype)
        return dtype if dtype in (torch.float32, torch.bfloat16) else None

    def fits(self, pix_feat: torch.Tensor, masks: torch.Tensor) -> bool:
        """Inputs the kernels take: the shapes sam2 would accept, weights as stored by torch."""
        if masks.dim() != 4 or pix_feat.dim() != 4 or masks.shape[1] != 1 \
                or pix_feat.device != masks.device:
            return False
        h, w = masks.shape[2:]
        for conv, _ in self.stages:
            h, w = out_size(h, conv), out_size(w, conv)
        proj = self.inner.pix_feat_proj
        weights = [p for p in self.inner.parameters()]
        return (tuple(pix_feat.shape) == (masks.shape[0], proj.in_channels, h, w) and h > 0
                and w > 0 and all(p.is_contiguous() for p in weights))

    def takes(self, pix_feat: torch.Tensor, masks: torch.Tensor) -> bool:
        """True when ``encode`` computes this call (else sam2's module must)."""
        return self.compute_dtype(masks) is not None and self.fits(pix_feat, masks)

    def forward(self, pix_feat: torch.Tensor, masks: torch.Tensor,
                skip_mask_sigmoid: bool = False) -> Dict[str, List[torch.Tensor]]:
        """pix_feat [B, Cp, h, w], masks [B, 1, H, W] (any strides) -> sam2's outputs."""
        if not self.takes(pix_feat, masks):
            return self.inner(pix_feat, masks, skip_mask_sigmoid)
        return self.encode(pix_feat, masks, None if skip_mask_sigmoid else MaskPrologue(SIGMOID))

    def encode(self, pix_feat: torch.Tensor, masks: torch.Tensor,
               prologue: Optional[MaskPrologue] = None,
               no_object: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
               ) -> Dict[str, List[torch.Tensor]]:
        """``forward`` for inputs ``takes`` accepts, the first stage reading ``masks`` through
        ``prologue`` (None: as they are); ``no_object`` = (object score logits [B, 1],
        embedding [C_out]): the features plus sam2's no-object embedding where a score is
        <= 0, in out_proj's kernel (``row_gemm.py``)."""
        compute = self.compute_dtype(masks)
        inner = self.inner
        bsz, _, h, w = masks.shape
        x, strides = masks, masks.stride()
        last = len(self.stages) - 1
        for i, (conv, norm) in enumerate(self.stages):
            fuse = (inner.mask_downsampler.encoder[-1], inner.pix_feat_proj, pix_feat) \
                if i == last else None
            x = conv_stage(x, (bsz, h, w), strides, conv, norm, compute,
                           prologue=prologue if i == 0 else None, fuse=fuse)
            h, w = out_size(h, conv), out_size(w, conv)
            if i < last:                  # [B, h, w, C] channels-last: its (b, c, h, w) strides
                strides = (x.stride(0), x.stride(3), x.stride(1), x.stride(2))
        for block in inner.fuser.layers:  # x: [B * h * w, C] rows
            x = cx_block(x, (bsz, h, w), block, compute)
        proj = inner.out_proj
        out = torch.empty(bsz, proj.out_channels, h, w, device=x.device, dtype=compute)
        row_gemm(x, proj.weight, proj.bias, CONV, compute, out, hw=h * w,
                 out_strides=(out.stride(0), 1, out.stride(1)), no_object=no_object)
        pos = self.position_encoding(out).to(out.dtype)
        return {'vision_features': out, 'vision_pos_enc': [pos]}
