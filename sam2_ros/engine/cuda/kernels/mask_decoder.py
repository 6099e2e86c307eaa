"""sam2's ``MaskDecoder`` whose ``predict_masks`` runs its output heads in one kernel.

sam2's ``predict_masks`` (sam2/modeling/sam/mask_decoder.py) concatenates its constant output
tokens on every call, repeats the image positional encoding per prompt, then runs the four
hypernetwork MLPs, the IoU head and the object-score head one after another on strided token
slices and stacks the hypernetworks' outputs. Here the constant tokens are concatenated once
(at build), the positional encoding goes to the two-way transformer unrepeated (both sam2's
and ours broadcast it: the same sums), the fused transformer adds the dense prompt embedding
to the image embedding in the kernel that prepares its keys (``two_way.py``), and every head
that is a 3-layer ReLU MLP runs in one kernel (``mlp_heads.py``) writing hyper_in [B, 4, C/8],
the IoU [B, 4] and the object score [B, 1] directly. The upscaling is sam2's code, except
where the 'layernorm2d' group has fused its LayerNorm2d and GELU: then the residual add before
the norm runs inside the norm's kernel and the last add with its GELU in one kernel
(``layernorm2d.py``), two kernels fewer. The hypernetwork product is sam2's code. ``forward``
(multimask selection, dynamic multimask via stability, the object-pointer tokens) is sam2's
own, inherited.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from sam2.modeling.sam.mask_decoder import MaskDecoder
from sam2.modeling.sam.transformer import TwoWayTransformer

from sam2_ros.engine.cuda.kernels.layernorm2d import add_gelu, fuses_upscaling
from sam2_ros.engine.cuda.kernels.mlp_heads import MLPStack, stackable
from sam2_ros.engine.cuda.kernels.two_way import FusedTwoWayTransformer


class FusedMaskDecoder(MaskDecoder):
    """Replaces ``sam_mask_decoder`` in the fused model copy: a shallow copy of ``inner`` (a
    sam2 ``MaskDecoder``; every parameter shared) with ``transformer`` swapped in when given
    and the heads' weights stacked into buffers of its own. A decoder whose hypernetworks or
    IoU head are not stackable MLPs runs sam2's ``predict_masks``."""

    def __init__(self, inner: MaskDecoder, transformer: Optional[torch.nn.Module] = None):
        torch.nn.Module.__init__(self)      # not MaskDecoder's: it would build new weights
        vars(self).update(vars(inner))      # as copy.copy, then dicts of its own
        self._modules = dict(inner._modules)
        self._parameters = dict(inner._parameters)
        self._buffers = dict(inner._buffers)
        if transformer is not None:
            self._modules['transformer'] = transformer
        s = 1 if self.pred_obj_scores else 0
        c = self.transformer_dim
        hyper = list(self.output_hypernetworks_mlps)
        self.n_hyper = len(hyper)
        self.hyper_width = hyper[0].layers[-1].out_features if hyper else 0     # C / 8
        obj = getattr(self, 'pred_obj_score_head', None) if self.pred_obj_scores else None
        self.obj_in_stack = obj is not None and stackable(obj, c, c)
        self.heads: Optional[MLPStack] = None
        if hyper and all(stackable(m, c, c) for m in hyper + [self.iou_prediction_head]) and \
                all(m.layers[-1].out_features == self.hyper_width for m in hyper):
            hw = self.n_hyper * self.hyper_width
            mlps = hyper + [self.iou_prediction_head] + ([obj] if self.obj_in_stack else [])
            tokens = [s + 1 + i for i in range(self.n_hyper)] + [s] + [0] * self.obj_in_stack
            # flat output: hyper_in [B, NH, C/8], then iou [B, NM], then the score [B, 1]
            place = [(0, i * self.hyper_width, hw) for i in range(self.n_hyper)]
            place += [(hw, 0, self.num_mask_tokens)] + \
                [(hw + self.num_mask_tokens, 0, 1)] * self.obj_in_stack
            self.heads = MLPStack(mlps, tokens, place)
        self.flat_width = self.n_hyper * self.hyper_width + self.num_mask_tokens + \
            int(self.obj_in_stack)
        weights = ([self.obj_score_token.weight] if s else []) + [
            self.iou_token.weight, self.mask_tokens.weight]
        with torch.inference_mode(False), torch.no_grad():
            self.register_buffer('output_tokens', torch.cat(weights, dim=0),
                                 persistent=False)                              # [T0, C]

    def predict_masks(self, image_embeddings: torch.Tensor, image_pe: torch.Tensor,
                      sparse_prompt_embeddings: torch.Tensor,
                      dense_prompt_embeddings: torch.Tensor, repeat_image: bool,
                      high_res_features: Optional[List[torch.Tensor]] = None
                      ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """sam2's ``predict_masks``: (masks [B, NM, 4h, 4w], iou [B, NM], mask tokens
        [B, NM, C] (a view of the transformer's output), object score logits [B, 1])."""
        if self.heads is None:
            return super().predict_masks(
                image_embeddings, image_pe, sparse_prompt_embeddings, dense_prompt_embeddings,
                repeat_image, high_res_features)
        s = 1 if self.pred_obj_scores else 0
        bsz = sparse_prompt_embeddings.size(0)
        dense = dense_prompt_embeddings
        tokens = torch.cat((self.output_tokens.unsqueeze(0).expand(bsz, -1, -1),
                            sparse_prompt_embeddings), dim=1)              # [B, T, C]
        assert repeat_image or image_embeddings.shape[0] == bsz
        # one image for every prompt broadcasts: repeat_interleave's sums
        broadcast = not repeat_image or (image_embeddings.size(0) == 1 and dense.size(0) == bsz)
        # fold: the fused transformer adds dense in the kernel that prepares its keys
        fold = broadcast and isinstance(self.transformer, FusedTwoWayTransformer)
        if fold:
            src = image_embeddings
        elif broadcast:
            src = image_embeddings + dense
        else:
            src = torch.repeat_interleave(image_embeddings, bsz, dim=0) + dense
        assert image_pe.size(0) == 1, \
            'image_pe should have size 1 in batch dim (from `get_dense_pe()`)'
        pos_src = image_pe
        if not isinstance(self.transformer, (TwoWayTransformer, FusedTwoWayTransformer)):
            pos_src = torch.repeat_interleave(image_pe, bsz, dim=0)   # may not broadcast
        b, c, h, w = torch.broadcast_shapes(src.shape, dense.shape) if fold else src.shape
        hs, src = self.transformer(src, pos_src, tokens, dense=dense) if fold else \
            self.transformer(src, pos_src, tokens)          # [B, T, C], [B, hw, C]
        mask_tokens_out = hs[:, s + 1:(s + 1 + self.num_mask_tokens), :]
        src = src.transpose(1, 2).view(b, c, h, w)
        if not self.use_high_res_features:
            upscaled_embedding = self.output_upscaling(src)
        else:
            dc1, ln1, act1, dc2, act2 = self.output_upscaling
            feat_s0, feat_s1 = high_res_features
            if fuses_upscaling(ln1, act1, act2):
                # 'layernorm2d' fused the norm and its GELU: each add joins the kernel after
                # it, rounded as torch's add (the same values as the lines below)
                up = ln1(dc1(src), residual=feat_s1)                     # [B, C/4, 2h, 2w]
                upscaled_embedding = add_gelu(dc2(up), feat_s0)          # [B, C/8, 4h, 4w]
            else:
                upscaled_embedding = act1(ln1(dc1(src) + feat_s1))
                upscaled_embedding = act2(dc2(upscaled_embedding) + feat_s0)
        flat = self.heads.run(hs, bsz * self.flat_width)
        hw_ = self.n_hyper * self.hyper_width
        hyper_in = flat[:bsz * hw_].view(bsz, self.n_hyper, self.hyper_width)
        nm = self.num_mask_tokens
        iou_pred = flat[bsz * hw_:bsz * (hw_ + nm)].view(bsz, nm)
        b, c, h, w = upscaled_embedding.shape
        masks = (hyper_in @ upscaled_embedding.view(b, c, h * w)).view(b, -1, h, w)
        if not self.pred_obj_scores:
            # as sam2: 10.0, i.e. assuming the object is present (sigmoid(10) = 1)
            object_score_logits = 10.0 * iou_pred.new_ones(iou_pred.shape[0], 1)
        elif self.obj_in_stack:
            object_score_logits = flat[bsz * (hw_ + nm):].view(bsz, 1)
        else:
            object_score_logits = self.pred_obj_score_head(hs[:, 0, :])
        return masks, iou_pred, mask_tokens_out, object_score_logits
