"""The fused model copy the CUDA-graph runner captures (``TrackerConfig.fused_kernels``).

Like ``model.compiled_copy``: a shallow copy of the SAM 2 model whose submodules of the
enabled groups are replaced by fused versions wrapping sam2's own modules (the same weights,
no copy of them). The original model, which the eager runner (the reference path) and every
fallback run, is left unchanged.

Groups:
  'hiera'             image encoder trunk: add + LayerNorm + bf16 + window (un)partition
                      (``hiera.py``), a stage change's query pooling and its shortcut's
                      pooling in one kernel each (``q_pool.py``)
  'memory_attention'  memory attention layers: fused norms, key/value inputs cast once, one
                      q/k/v GEMM, the cross-attentions' keys and values of all layers in two
                      GEMMs, ReLU in the MLP GEMM (``memory_attention.py``)
  'rope'              the memory attention's rotary encoding in one kernel per attention
                      (``rope_attention.py``)
  'decoder'           the mask decoder's two-way transformer: fused norms and attention inputs
                      (``two_way.py``)
  'decoder_heads'     the mask decoder's output heads (4 hypernetworks, IoU, object score) and
                      the object-pointer MLP, one kernel each; its constant tokens concatenated
                      once, no per-prompt repeat of the positional encoding (``mask_decoder.py``,
                      ``mlp_heads.py``)
  'memory_encoder'    the memory encoder (mask downsampler, pix_feat_proj, fuser CXBlocks,
                      out_proj) in eleven kernels, channels-last throughout
                      (``memory_encoder.py``, ``mask_downsampler.py``, ``cx_block.py``,
                      ``row_gemm.py``); a memory encoder of another structure stays sam2's
  'layernorm2d'       every LayerNorm2d (mask decoder upscaling; the memory encoder's where the
                      'memory_encoder' group is off), with the GELU after it; in the mask
                      decoder's upscaling (with 'decoder_heads') also the residual add before
                      the norm, and the last add with its GELU in one kernel (``layernorm2d.py``)
  'io'                not a module: the frame-in graph's resize + normalization and the
                      masks-out graph's masks, stats and label, two kernels each
                      (``io_frame.py``, ``io_masks.py``; ``cuda/io_graphs.py`` captures them)
  'constants'         no kernel: what depends on the weights and shapes alone (positional
                      encodings, a tracking frame's no-prompt embedding) computed once, bitwise
                      as sam2 computes it per call (``constants.py``); needs no Triton
  'holes'             the steps' hole filling in one kernel, bitwise sam2's (``holes.py``): the
                      copy carries it as ``engine.holes.FILLER``, which ``holes.filler`` reads
  'sam_glue'          not a module: sam2's glue in ``_forward_sam_heads`` (the no-object
                      masks, their cast and upsampling, the best-mask selection, the pointer
                      gating) in one kernel, and in ``_encode_new_memory`` (sigmoid or
                      binarization, scale, bias, the no-object embedding) folded into the
                      'memory_encoder' group's kernels; the copy carries the two functions as
                      ``engine.glue.GLUE``, which ``glue.sam_heads`` / ``glue.new_memory``
                      read, and keeps sam2's class (``sam_glue.py``, ``heads_glue.py``,
                      ``mask_prologue.py``)
  'fpn'               the image encoder's FPN neck: its top-down step (cast, nearest
                      upsampling, add) in one kernel, bitwise sam2's (``fpn.py``)
  'pointer_pos'       not a module: the object pointers' temporal position encoding in
                      ``step.memory_tokens`` (division, sine encoding, cast, projection, the
                      repeat over each pointer's tokens) in one kernel writing memory_pos
                      (``pointer_pos.py``); the copy carries it as ``engine.step.POINTER_POS``,
                      which ``step.pointer_pos_of`` reads; a projection other than sam2's Linear
                      (an Identity) keeps sam2's ops
Opt-in (``config.FUSED_OPT_IN``, each with its switch in ``fused_opt_in``; those of
``config.DEFAULT_OPT_IN`` on by default): rounding elsewhere than sam2's ops:
  'gelu_epilogue'     with 'hiera': each block's MLP GELU in its first GEMM's epilogue
                      (cuBLASLt's tanh GELU, ``dtypes.gelu_mlp``)
  'window_attention'  with 'hiera': the attention of windows of up to 64 tokens (no query
                      pooling) in one program per window and head (``window_attention.py``)
  'memory_values'     with 'memory_attention' and 'rope': each one-head cross-attention
                      attends over the raw memory as values, its value projection folded
                      into the output projection (``value_attention.py``)
  'patch_embed'       with 'hiera': the patch embedding (convolution, bias add, channels last)
                      in one implicit-GEMM kernel (``patch_embed.py``); sam2's values up to
                      the summation order
  'self_flash'        with 'memory_attention' and 'rope': one object's memory self-attention
                      (one head, up to 2,048 keys) by FlashAttention instead of SDPA's
                      choice, cuDNN (``rope_attention.flash_alone``); another summation
                      order, 16-bit only
"""

from __future__ import annotations

import logging
from typing import Optional, Tuple, Union

import torch

from sam2_ros.engine import holes
from sam2_ros.engine.config import FUSED_GROUPS, TRITON_FREE_GROUPS, TrackerConfig
from sam2_ros.engine.cuda.kernels.launch import triton_importable
from sam2_ros.engine.cuda.kernels.swap import with_children

log = logging.getLogger(__name__)
_SAID = set()          # reasons already logged (once per process)
# the groups whose modules each opt-in group changes: without them it changes nothing
OPT_IN_NEEDS = {'gelu_epilogue': ('hiera',), 'window_attention': ('hiera',),
                'memory_values': ('memory_attention', 'rope'), 'patch_embed': ('hiera',),
                'self_flash': ('memory_attention', 'rope')}


def enabled_groups(cfg: TrackerConfig,
                   device: Optional[Union[str, torch.device]] = None) -> Tuple[str, ...]:
    """The groups ``cfg.fused_kernels`` turns on (and ``cfg.fused_opt_in``'s whose
    ``OPT_IN_NEEDS`` it turns on) that can run on ``device`` (default cfg.device): none on
    the CPU (no graphs there) or with compile_mode (inductor fuses those modules and folds
    their constants itself); without triton only TRITON_FREE_GROUPS."""
    groups = FUSED_GROUPS if cfg.fused_kernels is True else tuple(cfg.fused_kernels or ())
    if not groups:
        return ()
    groups += tuple(g for g in cfg.fused_opt_in
                    if g not in groups and set(OPT_IN_NEEDS[g]) <= set(groups))
    device = torch.device(device if device is not None else cfg.device)
    if device.type != 'cuda':
        return _off(groups, (), f'device {device.type}')
    if cfg.compile_mode is not None:
        return _off(groups, (), f'compile_mode={cfg.compile_mode}')
    if not triton_importable():
        return _off(groups, TRITON_FREE_GROUPS, 'triton is not importable')
    return groups


def _off(groups: Tuple[str, ...], kept: Tuple[str, ...], reason: str) -> Tuple[str, ...]:
    """The groups of ``groups`` in ``kept``; why the others are off is logged once."""
    on = tuple(g for g in groups if g in kept)
    off = ', '.join(g for g in groups if g not in on)
    said = f'{reason}, running sam2\'s modules' + (f' for {off}' if on else '')
    if off and said not in _SAID:
        _SAID.add(said)
        log.info('fused_kernels: %s', said)
    return on


def fused_model(model: torch.nn.Module, groups: Tuple[str, ...]) -> torch.nn.Module:
    """``model`` with the fused modules of ``groups`` swapped in (a shallow copy), or
    ``model`` itself when no module group is in groups ('io' is not one). Builds no kernels:
    they compile on first use."""
    groups = tuple(g for g in groups if g != 'io')
    if not groups:
        return model
    if 'constants' in groups:        # first: the other groups wrap its modules
        from sam2_ros.engine.cuda.kernels.constants import with_constants
        model = with_constants(model)
        if set(groups) <= set(TRITON_FREE_GROUPS):
            return model
    from sam2_ros.engine.cuda.kernels.hiera import FusedHiera
    from sam2_ros.engine.cuda.kernels.memory_attention import FusedMemoryAttention
    from sam2_ros.engine.cuda.kernels.two_way import FusedTwoWayTransformer
    parts = {}
    if 'hiera' in groups:
        enc = model.image_encoder
        parts['image_encoder'] = with_children(enc, trunk=FusedHiera(
            enc.trunk, gelu_epilogue='gelu_epilogue' in groups,
            window_attention='window_attention' in groups,
            patch_embed='patch_embed' in groups))
    rope = 'rope' in groups
    if 'memory_attention' in groups:
        parts['memory_attention'] = FusedMemoryAttention(
            model.memory_attention, rope=rope, fold_values='memory_values' in groups,
            self_flash='self_flash' in groups)
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
    if 'fpn' in groups:        # after 'hiera': the image encoder is the copy's
        from sam2_ros.engine.cuda.kernels.fpn import fused_fpn_neck
        enc = twin.image_encoder
        twin = with_children(twin, image_encoder=with_children(enc, neck=fused_fpn_neck(enc.neck)))
    if 'layernorm2d' in groups:
        from sam2_ros.engine.cuda.kernels.layernorm2d import swap_layernorm2d
        twin = swap_layernorm2d(twin)
    if 'memory_encoder' in groups:   # after 'layernorm2d': its kernels replace those norms too
        from sam2_ros.engine.cuda.kernels.memory_encoder import fused_memory_encoder
        mem = fused_memory_encoder(model.memory_encoder)    # model: 'constants' applied
        if mem is not model.memory_encoder:
            twin = with_children(twin, memory_encoder=mem)
    if 'holes' in groups:      # a function, not a module: an attribute of a copy of its own
        from sam2_ros.engine.cuda.kernels.holes import fill_holes_fused
        twin = with_children(twin)
        setattr(twin, holes.FILLER, fill_holes_fused)
    if 'sam_glue' in groups:   # functions, not modules: an attribute, as 'holes'
        from sam2_ros.engine.cuda.kernels.sam_glue import with_sam_glue
        twin = with_sam_glue(twin)
    if 'pointer_pos' in groups:    # a function, not a module: an attribute, as 'holes'
        from sam2_ros.engine.cuda.kernels.pointer_pos import with_pointer_pos
        twin = with_pointer_pos(twin)
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
    if set(groups) - set(TRITON_FREE_GROUPS):
        import os
        cache = os.environ.get('TRITON_CACHE_DIR') or os.path.expanduser('~/.triton/cache')
        log.info('fused_kernels: captured graphs run fused kernels of %s (Triton compiles them '
                 'on the first start and caches them in %s)', ', '.join(groups), cache)
    return fused_model(model, groups)
