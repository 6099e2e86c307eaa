"""Which SAM-heads and memory-encoding functions the steps run with a model.

sam2's ``SAM2Base._forward_sam_heads`` and ``_encode_new_memory`` do elementwise glue around
the prompt encoder, the mask decoder and the memory encoder. The fused copy the graphs capture
(``cuda/kernels/fused.py``, group 'sam_glue') does that glue in its own kernels: it carries a
``Glue`` of two functions as its attribute ``GLUE``, as it carries the hole filling
(``holes.FILLER``). The copy keeps sam2's class; the model itself, which the eager runner (the
reference) runs, never has the attribute, so the accessors return sam2's bound methods for it.

The carried functions take the model as an explicit first argument, so a later shallow copy of
the fused copy (one with other modules swapped in) runs them on itself, never on the copy they
were first set on. They decide per call whether they compute it (``cuda/kernels/sam_glue.py``)
and run sam2's method on that model otherwise.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Optional

import torch

# The attribute of a model copy holding its ``Glue``; absent: sam2's methods.
GLUE = 'sam2_ros_sam_glue'


@dataclass(frozen=True)
class Glue:
    """sam_heads(model, backbone_features, point_inputs=None, mask_inputs=None,
    high_res_features=None, multimask_output=False): sam2's ``_forward_sam_heads``' 7 outputs.
    new_memory(model, current_vision_feats, feat_sizes, pred_masks_high_res,
    object_score_logits, is_mask_from_pts): sam2's ``_encode_new_memory``' (features, [pos])."""

    sam_heads: Callable[..., tuple]
    new_memory: Callable[..., tuple]


def glue_of(model: torch.nn.Module) -> Optional[Glue]:
    """The ``Glue`` ``model`` carries, or None (sam2's methods)."""
    return getattr(model, GLUE, None)


def sam_heads(model: torch.nn.Module) -> Callable[..., tuple]:
    """What the steps call as ``model._forward_sam_heads`` (with sam2's keyword arguments)."""
    glue = glue_of(model)
    return model._forward_sam_heads if glue is None else functools.partial(glue.sam_heads, model)


def new_memory(model: torch.nn.Module) -> Callable[..., tuple]:
    """What the steps call as ``model._encode_new_memory`` (with sam2's keyword arguments)."""
    glue = glue_of(model)
    return model._encode_new_memory if glue is None else \
        functools.partial(glue.new_memory, model)


def mask_as_output(model: torch.nn.Module) -> Callable[..., tuple]:
    """What the steps call as ``model._use_mask_as_output``: sam2's method, whose object
    pointer comes from ``self._forward_sam_heads``; with a ``Glue`` that ``self`` is a
    ``HeadsView`` of the model, so the pointer comes from the glue's heads."""
    if glue_of(model) is None:
        return model._use_mask_as_output
    return functools.partial(type(model)._use_mask_as_output, HeadsView(model, sam_heads(model)))


class HeadsView:
    """``model``'s attributes, but ``_forward_sam_heads`` is ``heads``: the ``self`` of one
    call of a sam2 method that calls ``self._forward_sam_heads`` (reads only)."""

    def __init__(self, model: torch.nn.Module, heads: Callable[..., tuple]):
        self.model = model
        self._forward_sam_heads = heads

    def __getattr__(self, name: str):
        return getattr(self.model, name)
