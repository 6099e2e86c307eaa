"""The fused model copy's 'sam_glue' group: sam2's elementwise glue around the SAM heads and the
memory encoder in our kernels, sam2's modules called as sam2 calls them.

``SAM2Base._forward_sam_heads`` runs the prompt encoder, the mask decoder and the object-pointer
projection, and some fifteen small kernels between and after them (``heads_glue.py`` lists
them); here those are one kernel (``heads_glue.heads_outputs``). The projection runs on the
tokens of every mask (on a view of the decoder's tokens: no gather), the kernel reads the best
one's: the rows are independent, so the pointer is the one of the best token alone.

``SAM2Base._encode_new_memory`` turns the mask logits into the memory encoder's input (sigmoid
or binarization, scale, bias) and adds the no-object embedding afterwards: eight kernels. With
the 'memory_encoder' group's module those are no kernel at all: the first downsampler stage
makes its input from the logits as it loads them (``mask_prologue.py``) and out_proj's kernel
adds the embedding (``row_gemm.py``).

How the copy carries them: by composition, as ``engine.glue.GLUE``, a ``Glue`` of the two
functions below (``FUSED_GLUE``); they take the model as an explicit argument, so a later
shallow copy (such as the one the 'holes' group makes) runs them on itself. The steps call
them through ``glue.sam_heads`` / ``glue.new_memory`` (and sam2's ``_use_mask_as_output``
through ``glue.mask_as_output``); the copy keeps sam2's class, the model its methods.

What runs sam2's method as it is, decided per call from Python-level flags, types and dtypes
(never from a tensor's values): a training model; ``soft_no_obj_ptr`` (no SAM 2.1 config sets
it); an object-pointer projection that is not one of sam2's row-wise modules; an autocast
other than bf16; ``non_overlap_masks_for_mem_enc``; a memory encoder other than the
'memory_encoder' group's (that group off) or inputs it does not take; logits of another dtype
than float32 / bf16 (float32 only when binarized).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

from sam2_ros.engine.cuda.kernels.dtypes import autocast_dtype
from sam2_ros.engine.cuda.kernels.heads_glue import heads_outputs
from sam2_ros.engine.cuda.kernels.mask_prologue import BINARIZE, SIGMOID, MaskPrologue
from sam2_ros.engine.cuda.kernels.swap import with_children
from sam2_ros.engine.glue import GLUE, Glue

_FLOATS = (torch.float32, torch.bfloat16)


def rowwise_projection(proj: torch.nn.Module) -> bool:
    """True for the object-pointer projections sam2 builds (an MLP, a Linear, an Identity) and
    the 'decoder_heads' group's one-kernel MLP: each output row depends on its input row
    only."""
    from sam2.modeling.sam2_utils import MLP

    from sam2_ros.engine.cuda.kernels.mlp_heads import FusedMLP
    return type(proj) in (MLP, FusedMLP, torch.nn.Linear, torch.nn.Identity)


def heads_fit(model: torch.nn.Module, backbone_features: torch.Tensor) -> bool:
    """Whether the fused ``_forward_sam_heads`` computes this call."""
    pred = model.pred_obj_scores
    return (not model.training and not (pred and model.soft_no_obj_ptr)
            and not (pred and getattr(model, 'no_obj_ptr', None) is None)
            and rowwise_projection(model.obj_ptr_proj)
            and autocast_dtype(backbone_features.device) in (None, torch.bfloat16)
            and backbone_features.dtype in _FLOATS)


def token_rows(tokens: torch.Tensor) -> Tuple[torch.Tensor, int]:
    """tokens [B, T, C] (the decoder's, a view of its [B, T_all, C] output) -> (rows [R, C]
    holding token (b, t) at row b * rs + t, rs): a view of every token from the first to the
    last where the layout allows (a copy otherwise)."""
    bsz, n_tok, c = tokens.shape
    sb, st, sc = tokens.stride()
    if n_tok == 1:
        return tokens[:, 0], 1
    if sc == 1 and st == c and sb % c == 0:
        rs = sb // c
        return tokens.as_strided(((bsz - 1) * rs + n_tok, c), (c, 1)), rs
    return tokens.reshape(bsz * n_tok, c), n_tok


def fused_sam_heads(model: torch.nn.Module, backbone_features: torch.Tensor,
                    point_inputs: Optional[dict] = None,
                    mask_inputs: Optional[torch.Tensor] = None,
                    high_res_features: Optional[List[torch.Tensor]] = None,
                    multimask_output: bool = False) -> tuple:
    """sam2's ``model._forward_sam_heads`` with its glue in one kernel, or that method where
    ``heads_fit`` says no: (low-res multimasks, high-res multimasks, IoUs, low-res mask,
    high-res mask, object pointer, object score logits)."""
    if not heads_fit(model, backbone_features):
        return model._forward_sam_heads(backbone_features, point_inputs, mask_inputs,
                                       high_res_features, multimask_output)
    bsz, dev = backbone_features.size(0), backbone_features.device
    assert backbone_features.shape[1:] == (model.sam_prompt_embed_dim,
                                           model.sam_image_embedding_size,
                                           model.sam_image_embedding_size)
    if point_inputs is None:       # sam2's padding point (label -1)
        coords = torch.zeros(bsz, 1, 2, device=dev)
        labels = -torch.ones(bsz, 1, dtype=torch.int32, device=dev)
    else:
        coords, labels = point_inputs['point_coords'], point_inputs['point_labels']
        assert coords.size(0) == bsz and labels.size(0) == bsz
    dense_mask = None
    if mask_inputs is not None:    # a mask prompt at the prompt encoder's size
        assert mask_inputs.dim() == 4 and mask_inputs.shape[:2] == (bsz, 1)
        size = model.sam_prompt_encoder.mask_input_size
        dense_mask = mask_inputs if mask_inputs.shape[-2:] == size else F.interpolate(
            mask_inputs.float(), size=size, align_corners=False, mode='bilinear',
            antialias=True)
    sparse, dense = model.sam_prompt_encoder(points=(coords, labels), boxes=None,
                                            masks=dense_mask)
    masks, ious, tokens, score = model.sam_mask_decoder(
        image_embeddings=backbone_features, image_pe=model.sam_prompt_encoder.get_dense_pe(),
        sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
        multimask_output=multimask_output, repeat_image=False,
        high_res_features=high_res_features)
    token_select = bool(multimask_output) and tokens.size(1) > 1
    rows, rs = token_rows(tokens if token_select else tokens[:, :1])
    projected = model.obj_ptr_proj(rows)                                  # [R, C]
    c = projected.shape[-1]
    strides = (rs * projected.stride(0), projected.stride(0))      # of row (b, t)
    pred = model.pred_obj_scores
    ptr_dtype = projected.dtype if not pred else torch.promote_types(
        torch.promote_types(torch.float32, projected.dtype), model.no_obj_ptr.dtype)
    assert projected.stride(-1) == 1 and (not pred or model.no_obj_ptr.numel() == c)
    out = heads_outputs(masks, ious, score, projected, strides, token_select,
                        model.no_obj_ptr if pred else None, model.image_size,
                        bool(multimask_output), bool(model.fixed_no_obj_ptr), ptr_dtype)
    return (out.low_res_multimasks, out.high_res_multimasks, ious, out.low_res_masks,
            out.high_res_masks, out.obj_ptr, score)


def fused_new_memory(model: torch.nn.Module, current_vision_feats: List[torch.Tensor],
                     feat_sizes: List[Tuple[int, int]], pred_masks_high_res: torch.Tensor,
                     object_score_logits: torch.Tensor, is_mask_from_pts: bool) -> tuple:
    """sam2's ``model._encode_new_memory`` with its glue folded into the 'memory_encoder'
    group's kernels, or that method where they do not take the call: (memory features
    [B, Cm, h, w], [position encoding])."""
    from sam2_ros.engine.cuda.kernels.memory_encoder import FusedMemoryEncoder
    mem, logits = model.memory_encoder, pred_masks_high_res
    binarize = bool(model.binarize_mask_from_pts_for_mem_enc and is_mask_from_pts)
    bsz = current_vision_feats[-1].size(1)
    emb = model.no_obj_embed_spatial
    fits = (not model.training and not model.non_overlap_masks_for_mem_enc
            and isinstance(mem, FusedMemoryEncoder) and logits.dtype in _FLOATS
            and not (binarize and logits.dtype != torch.float32)
            and tuple(object_score_logits.shape) == (bsz, 1)
            and (emb is None or emb.numel() == mem.inner.out_proj.out_channels))
    h, w = feat_sizes[-1]
    pix_feat = current_vision_feats[-1].permute(1, 2, 0).view(bsz, model.hidden_dim, h, w)
    if not (fits and mem.takes(pix_feat, logits)):
        return model._encode_new_memory(current_vision_feats, feat_sizes, pred_masks_high_res,
                                       object_score_logits, is_mask_from_pts)
    prologue = MaskPrologue(BINARIZE if binarize else SIGMOID,
                            float(model.sigmoid_scale_for_mem_enc),
                            float(model.sigmoid_bias_for_mem_enc))
    no_object = None if emb is None else (object_score_logits, emb.reshape(-1))
    out = mem.encode(pix_feat, logits, prologue, no_object)
    return out['vision_features'], out['vision_pos_enc']


# what the fused copy carries as its ``glue.GLUE``
FUSED_GLUE = Glue(sam_heads=fused_sam_heads, new_memory=fused_new_memory)


def with_sam_glue(model: torch.nn.Module) -> torch.nn.Module:
    """A shallow copy of ``model`` (every module and weight shared, sam2's class) carrying
    ``FUSED_GLUE``; ``model`` is unchanged."""
    twin = with_children(model)
    setattr(twin, GLUE, FUSED_GLUE)
    return twin
