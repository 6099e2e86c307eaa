"""The fused model copy the CUDA-graph runner captures (``TrackerConfig.fused_kernels``).

Like ``model.compiled_copy``: a shallow copy of the SAM 2 model whose submodules of the
enabled groups are replaced by fused versions wrapping sam2's own modules (the same weights,
no copy of them). The original model, which the eager runner (the reference path) and every
fallback run, is left unchanged.

Groups:
  'hiera'             image encoder trunk: add + LayerNorm + bf16 + window (un)partition
                      (``hiera.py``)
  'memory_attention'  memory attention layers: fused norms, key/value inputs cast once, one
                      q/k/v GEMM, ReLU in the MLP GEMM (``memory_attention.py``)
  'rope'              the memory attention's rotary encoding in one kernel per attention
                      (``rope_attention.py``)
  'decoder'           the mask decoder's two-way transformer: fused norms and attention inputs
                      (``two_way.py``)
  'decoder_heads'     the mask decoder's output heads (4 hypernetworks, IoU, object score) and
                      the object-pointer MLP, one kernel each; its constant tokens concatenated
                      once, no per-prompt repeat of the positional encoding (``mask_decoder.py``,
                      ``mlp_heads.py``)
  'layernorm2d'       every LayerNorm2d (memory encoder, mask decoder upscaling), with the GELU
                      after it (``layernorm2d.py``)
"""

from __future__ import annotations

import logging
from typing import Tuple

import torch

from sam2_ros.engine.config import FUSED_GROUPS, TrackerConfig
from sam2_ros.engine.cuda.kernels.launch import triton_importable
from sam2_ros.engine.cuda.kernels.swap import with_children

log = logging.getLogger(__name__)
_SAID = set()          # reasons already logged (once per process)


def enabled_groups(cfg: TrackerConfig, device=None) -> Tuple[str, ...]:
    """The groups ``cfg.fused_kernels`` turns on that can run on ``device`` (default
    cfg.device): none on the CPU, without triton or with compile_mode (inductor fuses those
    modules itself)."""
    groups = FUSED_GROUPS if cfg.fused_kernels is True else tuple(cfg.fused_kernels or ())
    if not groups:
        return ()
    device = torch.device(device if device is not None else cfg.device)
    reason = None
    if device.type != 'cuda':
        reason = f'device {device.type}'
    elif not triton_importable():
        reason = 'triton is not importable'
    elif cfg.compile_mode is not None:
        reason = f'compile_mode={cfg.compile_mode}'
    if reason is not None:
        if reason not in _SAID:
            _SAID.add(reason)
            log.info('fused_kernels: %s, running sam2\'s modules', reason)
        return ()
    return groups


def fused_model(model: torch.nn.Module, groups: Tuple[str, ...]) -> torch.nn.Module:
    """``model`` with the fused modules of ``groups`` swapped in (a shallow copy), or
    ``model`` itself when groups is empty. Builds no kernels: they compile on first use."""
    if not groups:
        return model
    from sam2_ros.engine.cuda.kernels.hiera import FusedHiera
    from sam2_ros.engine.cuda.kernels.memory_attention import FusedMemoryAttention
    from sam2_ros.engine.cuda.kernels.two_way import FusedTwoWayTransformer
    parts = {}
    if 'hiera' in groups:
        enc = model.image_encoder
        parts['image_encoder'] = with_children(enc, trunk=FusedHiera(enc.trunk))
    rope = 'rope' in groups
    if 'memory_attention' in groups:
        parts['memory_attention'] = FusedMemoryAttention(model.memory_attention, rope=rope)
    elif rope:
        parts['memory_attention'] = _rope_only(model.memory_attention)
    dec = model.sam_mask_decoder
    transformer = FusedTwoWayTransformer(dec.transformer) if 'decoder' in groups else None
    if 'decoder_heads' in groups:
        from sam2_ros.engine.cuda.kernels.mask_decoder import FusedMaskDecoder
        parts['sam_mask_decoder'] = FusedMaskDecoder(dec, transformer)
        parts.update(_obj_ptr_proj(model))
    elif transformer is not None:
        parts['sam_mask_decoder'] = with_children(dec, transformer=transformer)
    twin = with_children(model, **parts)
    if 'layernorm2d' in groups:
        from sam2_ros.engine.cuda.kernels.layernorm2d import swap_layernorm2d
        twin = swap_layernorm2d(twin)
    return twin


def _obj_ptr_proj(model: torch.nn.Module) -> dict:
    """{'obj_ptr_proj': its one-kernel version} where it is a 3-layer ReLU MLP, else {}."""
    from sam2.modeling.sam2_utils import MLP

    from sam2_ros.engine.cuda.kernels.mlp_heads import FusedMLP, stackable
    proj = getattr(model, 'obj_ptr_proj', None)
    if not isinstance(proj, MLP):
        return {}
    first = proj.layers[0]
    return {'obj_ptr_proj': FusedMLP(proj)} if stackable(
        proj, first.in_features, first.out_features) else {}


def _rope_only(memory_attention: torch.nn.Module) -> torch.nn.Module:
    """sam2's memory attention whose layers' RoPE attentions rotate with one kernel."""
    from sam2.modeling.sam.transformer import RoPEAttention

    from sam2_ros.engine.cuda.kernels.rope_attention import FusedRoPEAttention
    layers = []
    for layer in memory_attention.layers:
        swap = {name: FusedRoPEAttention(getattr(layer, name))
                for name in ('self_attn', 'cross_attn_image')
                if isinstance(getattr(layer, name), RoPEAttention)}
        layers.append(with_children(layer, **swap))
    return with_children(memory_attention, layers=torch.nn.ModuleList(layers))


def fused_copy(model: torch.nn.Module, cfg: TrackerConfig) -> torch.nn.Module:
    """The model the graph runner captures: ``fused_model`` of the groups enabled for cfg."""
    groups = enabled_groups(cfg)
    if groups:
        import os
        cache = os.environ.get('TRITON_CACHE_DIR') or os.path.expanduser('~/.triton/cache')
        log.info('fused_kernels: captured graphs run fused kernels of %s (Triton compiles them '
                 'on the first start and caches them in %s)', ', '.join(groups), cache)
    return fused_model(model, groups)
