"""The per-frame SAM 2 computation as functions of tensors, with no ids, dicts or clocks.

Everything here is a pure function of its tensor arguments plus the model's weights, so the
same code runs eagerly and inside a captured CUDA graph (``cuda/runner.py``). Object ids, frame
indices, eviction and which memories to read live in ``memory.py`` / ``tracker.py``; the
image features come from ``encoder.py``.

The functions reuse sam2's own modules (``memory_attention``, ``_forward_sam_heads``,
``_encode_new_memory``, ``_use_mask_as_output``: through ``glue.py``, which hands the fused
copy's own versions where it carries them); only the memory assembly that sam2 does
from a dict of past frames (``SAM2Base._prepare_memory_conditioned_features``) is redone
here from fixed-shape tensors, with the same order and the same encodings, so results are
equal to the official predictor.

Shapes: B objects, HW = (S/16)^2 tokens of the coarsest feature map (S = image size),
C = 256 hidden dim, Cm = 64 memory dim, h = w = S/16.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol, Tuple

import torch
from sam2.modeling.sam2_utils import get_1d_sine_pe

from sam2_ros.engine import attention, glue, streams
from sam2_ros.engine.encoder import Features, high_res_features
from sam2_ros.engine.holes import fill_holes, filler

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

    from sam2_ros.engine.cuda.kernels.constants import StepConstants


@dataclass
class Memory:
    """Memories one step attends to; fixed shapes within a graph bucket.

    feats:      [n_s, B, Cm, h, w] spatial memories (bf16, as sam2 stores them)
    tpos_idx:   [n_s, B] long, index into ``model.maskmem_tpos_enc`` of each spatial memory
    ptrs:       [n_p, B, C] object pointers
    ptr_dist:   [n_p, B] float (or int64) signed temporal distance (current frame -
                pointer's frame)
    feat_valid: [n_s, B] bool (or int64, 1: valid), ptr_valid: [n_p, B]: which slots hold a
                memory, for a graph bucket padded beyond an object's memories
                (``attention.py``); None when every slot is a memory (sam2's own attention
                call is used then)
    stream_of:  [B] long, the frame of the step's features object b reads (its camera's),
                when the features hold the frames of several cameras ([HW_l, N, C_l],
                ``streams.py``); None: one frame shared by all B objects
    slot_of:    [B] long, each object's bank slot (a graph's static buffers: where the step
                keeps its conditioned features, ``MemoryBank.keep_conditioned``)
    index:      a graph's static buffers only: [3 n_s B + 3 n_p B + 2 B] int64, of which
                tpos_idx, ptr_dist, the flags (1: valid), stream_of and slot_of are views (then
                int64) and which also holds the bank rows of feats and ptrs, in the order
                ``MemoryBank.gather`` stages them: the gather writes it with one host copy
    """

    feats: torch.Tensor
    tpos_idx: torch.Tensor
    ptrs: torch.Tensor
    ptr_dist: torch.Tensor
    feat_valid: Optional[torch.Tensor] = None
    ptr_valid: Optional[torch.Tensor] = None
    stream_of: Optional[torch.Tensor] = None
    slot_of: Optional[torch.Tensor] = None
    index: Optional[torch.Tensor] = None


@dataclass
class StepOut:
    """Outputs of one track step for B objects."""

    low_res_logits: torch.Tensor   # [B, 1, S/4, S/4] fp32
    obj_ptr: torch.Tensor          # [B, C]
    score: torch.Tensor            # [B, 1] object score logits
    mem_feats: torch.Tensor        # [B, Cm, h, w] bf16 (new memory of this frame)
    # [B, C, h, w] memory attention's output on a tracking step (``track_step``), for a
    # correction of the same frame (``prompted_heads``); None on prompted steps
    pix_feat: Optional[torch.Tensor] = None


def constants_of(model: SAM2Base) -> Optional[StepConstants]:
    """The frame-independent values ``model`` holds precomputed (``StepConstants`` of the
    graphs' model copy with the fused 'constants' group, ``cuda/kernels/constants.py``), or
    None: computed here on every call, as sam2 does."""
    return getattr(model, 'constants', None)


# The attribute of a model copy that encodes the object pointers' temporal positions in one
# kernel: the fused copy the graphs capture (group 'pointer_pos',
# ``cuda/kernels/pointer_pos.py``) carries it; the model itself, which the eager runner (the
# reference) runs, never has it.
POINTER_POS = 'sam2_ros_pointer_pos'


class PointerPosEncoder(Protocol):
    """What a model copy carries as ``POINTER_POS`` (``cuda/kernels/pointer_pos.PointerPos``,
    which imports this module, so it is described here rather than imported)."""

    def dtype(self, model: SAM2Base, dist: torch.Tensor) -> Optional[torch.dtype]:
        ...

    def __call__(self, model: SAM2Base, dist: torch.Tensor, t_diff_max: float,
                 out: torch.Tensor, dtype: torch.dtype) -> None:
        ...


def pointer_pos_of(model: SAM2Base) -> Optional[PointerPosEncoder]:
    """``model``'s ``POINTER_POS``, or None: sam2's ops (sine encoding, projection, copy)."""
    return getattr(model, POINTER_POS, None)


def memory_tokens(model: SAM2Base, mem: Memory, maskmem_pos: torch.Tensor,
                  batch_major: bool = False) -> Tuple[torch.Tensor, torch.Tensor, int]:
    """Assemble the memory sequence the memory attention reads, in sam2's order.

    maskmem_pos: [1, Cm, h, w] spatial positional encoding of memories (a constant).
    Returns memory, memory_pos: [n_s*HW + (C/Cm)*n_p, B, Cm] and the pointer token count.
    batch_major: the two are views of [B, N, Cm] storage (see ``condition_on_memory``);
    the same values either way.

    sam2 concatenates the pieces (``torch.cat``, which promotes them to the widest dtype,
    under autocast too: a cast kernel per bf16 memory, then the cat); here each group of
    pieces is written into its slice of one buffer of that dtype by one copy (all spatial
    memories at once, all pointer tokens at once): the same values, fewer kernels.
    """
    n_s, batch = mem.feats.shape[:2]
    hw = mem.feats.shape[3] * mem.feats.shape[4]
    consts = constants_of(model)
    if consts is None:
        tpos = model.maskmem_tpos_enc.flatten(1)[mem.tpos_idx]           # [n_s, B, Cm]
        # [1, HW, 1, Cm] + [n_s, 1, B, Cm] -> [n_s, HW, B, Cm], added into memory_pos below
        terms = maskmem_pos.flatten(2).permute(2, 0, 1).unsqueeze(0), tpos.unsqueeze(1)
        spatial_dtype = torch.result_type(*terms)
    else:       # the same sums, gathered from a table of the num_maskmem possible ones
        spatial_table = consts.spatial_table(model, maskmem_pos)           # [K, HW, Cm]
        spatial_dtype = spatial_table.dtype
    mem_dim = model.mem_dim
    hidden = model.hidden_dim
    # Pointer temporal encoding, as sam2: sine(dist / (max_ptrs - 1)), projected; where the
    # model carries the one-kernel encoding (None: it does not compute this call) it writes
    # it into memory_pos below instead
    t_diff_max = model.max_obj_ptrs_in_encoder - 1
    tpos_dim = hidden if model.proj_tpos_enc_in_obj_ptrs else mem_dim
    encode = pointer_pos_of(model)
    ptr_dtype = None if encode is None else encode.dtype(model, mem.ptr_dist)
    ptr_pos = None
    if ptr_dtype is None:
        sine = get_1d_sine_pe if consts is None else consts.sine_pe
        ptr_pos = model.obj_ptr_tpos_proj(sine(mem.ptr_dist / t_diff_max, dim=tpos_dim))
        ptr_dtype = ptr_pos.dtype
    n_p = mem.ptrs.shape[0]
    split = hidden // mem_dim
    n_sp, n_ptr = n_s * hw, n_p * split
    memory, memory_pos = (mem.feats.new_empty(batch, n_sp + n_ptr, mem_dim, dtype=dt)
                          .transpose(0, 1) if batch_major else
                          mem.feats.new_empty(n_sp + n_ptr, batch, mem_dim, dtype=dt)
                          for dt in (torch.promote_types(mem.feats.dtype, mem.ptrs.dtype),
                                     torch.promote_types(spatial_dtype, ptr_dtype)))
    # spatial memories: [n_s, B, Cm, h, w] -> tokens [n_s, HW, B, Cm] (bf16 until this copy)
    memory[:n_sp].view(n_s, hw, batch, mem_dim).copy_(mem.feats.flatten(3).permute(0, 3, 1, 2))
    spatial_out = memory_pos[:n_sp].view(n_s, hw, batch, mem_dim)
    if consts is None:              # computed in the sum's dtype, as sam2's add
        torch.add(*terms, out=spatial_out)
    else:
        consts.gather_spatial(spatial_table, mem.tpos_idx, spatial_out)
    # each pointer [C] is `split` tokens of Cm: [n_p, B, C] -> [n_p, split, B, Cm]; each
    # token of a pointer has the pointer's position (sam2's repeat_interleave)
    memory[n_sp:].view(n_p, split, batch, mem_dim).copy_(
        mem.ptrs.reshape(n_p, batch, split, mem_dim).transpose(1, 2))
    ptr_out = memory_pos[n_sp:].view(n_p, split, batch, mem_dim)
    if ptr_pos is None:
        encode(model, mem.ptr_dist, t_diff_max, ptr_out, ptr_dtype)
    else:
        ptr_out.copy_(ptr_pos.unsqueeze(1).expand(n_p, split, batch, mem_dim))
    return memory, memory_pos, n_ptr


def condition_on_memory(model: SAM2Base, features: Features, mem: Optional[Memory],
                        maskmem_pos: Optional[torch.Tensor],
                        batch_major: bool = False, split_padded: bool = False) -> torch.Tensor:
    """Fuse the current frame with memory; mem=None marks an initial conditioning frame.
    Returns pix_feat [B, C, h, w].

    batch_major: sam2's memory attention takes [L, B, C] inputs and transposes them to
    [B, L, C]; with B > 1 (batched graphs) every elementwise op of its layers then runs on
    strided tensors and every linear and norm first copies its input (a copy kernel per layer
    and frame, growing with B). Handing it views of [B, L, C] storage makes the
    transposed tensors contiguous. The values are the same, so is every GEMM's input after
    its copy; with B = 1 nothing changes."""
    curr, curr_pos = features.vision_feats[-1], features.vision_pos[-1]
    batch, hidden = curr.shape[1], model.hidden_dim
    # a memory attention whose kernels read strided inputs (the fused one) needs no copies
    batch_major = batch_major and batch > 1 and \
        not getattr(model.memory_attention, 'strided_inputs', False)
    if batch_major:
        curr, curr_pos = (x.transpose(0, 1).contiguous().transpose(0, 1)
                          for x in (curr, curr_pos))
    h, w = features.feat_sizes[-1]
    if mem is None:
        # SAM 2.1 configs set directly_add_no_mem_embed: no attention on a first prompt.
        assert model.directly_add_no_mem_embed
        fused = curr + model.no_mem_embed
    else:
        memory, memory_pos, n_ptr_tokens = memory_tokens(model, mem, maskmem_pos, batch_major)
        padded = contextlib.nullcontext() if mem.feat_valid is None else \
            attention.masked_memory(model, attention.token_mask(
                mem.feat_valid, mem.ptr_valid, h * w, model.hidden_dim // model.mem_dim),
                split=split_padded)
        with padded:
            fused = model.memory_attention(curr=[curr], curr_pos=[curr_pos],
                                           memory=memory, memory_pos=memory_pos,
                                           num_obj_ptr_tokens=n_ptr_tokens)
    return fused.permute(1, 2, 0).reshape(batch, hidden, h, w)


def track_step(model: SAM2Base, features: Features, mem: Optional[Memory],
               maskmem_pos: Optional[torch.Tensor],
               points: Optional[dict] = None,
               prev_logits: Optional[torch.Tensor] = None,
               fill_hole_area: int = 0,
               heads: Optional[Callable[[torch.Tensor, Features], StepOut]] = None,
               batch_major: bool = False, split_padded: bool = False) -> StepOut:
    """One frame for B objects: memory attention, SAM heads, memory encoder.

    points: sam2 point_inputs ({'point_coords': [B, P, 2] in model pixels,
    'point_labels': [B, P] int32}) on prompted frames, else None (plain tracking).
    prev_logits: [B, 1, S/4, S/4] previous logits fed with a correction click.
    fill_hole_area: background components of at most this many low-res pixels become 0.1
    (``holes.py``, by the model's ``holes.filler``: the fused copy's one kernel in the graphs),
    where sam2 fills them: in the returned logits (what is stored, shown and fed to a later
    correction) and, on prompted frames, before their memory is encoded from
    them; a tracking frame's memory comes from the decoder's unfilled high-res mask, as sam2
    encodes it inside ``track_step``, before its fill.
    heads: replaces ``tracking_heads`` on a tracking frame (the precompiled one,
    ``cuda/precompiled.py``); None: sam2's modules.
    batch_major: the memory attention's inputs laid out batch-major (``condition_on_memory``).
    split_padded: padded memories are attended in key chunks where the call is too small for
    the GPU (``attention.masked_memory``).
    features: one frame's [HW_l, 1 or B, C_l] (shared by the B objects), or with
    ``mem.stream_of`` the frames of several cameras [HW_l, N, C_l], object b reading frame
    ``mem.stream_of[b]``.
    """
    if mem is not None and mem.stream_of is not None:
        features = streams.select(features, mem.stream_of)
    pix_feat = condition_on_memory(model, features, mem, maskmem_pos, batch_major, split_padded)
    if points is None and prev_logits is None and mem is not None:
        out = heads(pix_feat, features) if heads is not None else \
            tracking_heads(model, pix_feat, features, fill_hole_area)
        out.pix_feat = pix_feat
        return out
    return prompted_heads(model, features, pix_feat, points, prev_logits, fill_hole_area,
                          init=mem is None)


def prompted_heads(model: SAM2Base, features: Features, pix_feat: torch.Tensor,
                   points: Optional[dict], prev_logits: Optional[torch.Tensor],
                   fill_hole_area: int = 0, init: bool = False) -> StepOut:
    """A prompted step after memory attention: SAM heads on pix_feat [B, C, h, w] with the
    points and the previous logits (the mask input), hole filling, memory encoder from the
    filled logits. init: an initial conditioning frame (sam2's is_init_cond_frame). Split out
    of ``track_step`` so that a correction on a tracked frame can start from that frame's
    ``StepOut.pix_feat``: memory attention reads the same memories as then."""
    hires = high_res_features(features)
    multimask = model._use_multimask(init, points)
    mask_in = None if prev_logits is None else prev_logits.clamp(-32.0, 32.0)
    _, _, _, low_res, high_res, obj_ptr, score = glue.sam_heads(model)(
        backbone_features=pix_feat, point_inputs=points, mask_inputs=mask_in,
        high_res_features=hires, multimask_output=multimask)
    low_res = filler(model)(low_res, fill_hole_area)
    mem_feats = encode_memory(model, features, low_res if points is not None else None,
                              high_res, score, from_points=points is not None)
    return StepOut(low_res, obj_ptr, score, mem_feats)


def tracking_heads(model: SAM2Base, pix_feat: torch.Tensor, features: Features,
                   fill_hole_area: int = 0) -> StepOut:
    """A tracking frame after memory attention: SAM heads on pix_feat [B, C, h, w] (no
    prompt), hole filling, memory encoder (from the decoder's unfilled high-res mask, as
    sam2's ``track_step``). The same operations as ``track_step``'s prompted path with no
    points, split out so that it can be precompiled: its shapes depend on the batch only."""
    consts = constants_of(model)
    # no prompt: sam2 builds and embeds a padding point (its prompt encoder's, when stored)
    points = None if consts is None else \
        consts.no_points(model, pix_feat.shape[0], pix_feat.device)
    _, _, _, low_res, high_res, obj_ptr, score = glue.sam_heads(model)(
        backbone_features=pix_feat, point_inputs=points, mask_inputs=None,
        high_res_features=high_res_features(features),
        multimask_output=model._use_multimask(False, None))
    fill = filler(model)
    if fill is fill_holes and consts is not None and fill_hole_area > 0:   # tables stored once
        b, _, h, w = low_res.shape
        low_res = fill_holes(low_res, fill_hole_area,
                             consts.hole_tables(b, h, w, low_res.device))
    else:
        low_res = fill(low_res, fill_hole_area)
    mem_feats = encode_memory(model, features, None, high_res, score, from_points=False)
    return StepOut(low_res, obj_ptr, score, mem_feats)


def mask_step(model: SAM2Base, features: Features, mask: torch.Tensor,
              fill_hole_area: int = 0) -> StepOut:
    """A mask prompt [B, 1, S, S] in {0, 1}: sam2 uses it as the output directly
    (use_mask_input_as_output_without_sam) and derives the object pointer from it; holes of
    the resulting logits are filled before the memory is encoded, as in ``track_step``."""
    pix_feat = features.vision_feats[-1]
    h, w = features.feat_sizes[-1]
    pix_feat = pix_feat.permute(1, 2, 0).reshape(-1, model.hidden_dim, h, w)
    _, _, _, low_res, high_res, obj_ptr, score = glue.mask_as_output(model)(
        pix_feat, high_res_features(features), mask)
    low_res = filler(model)(low_res, fill_hole_area)
    mem_feats = encode_memory(model, features, low_res, high_res, score, from_points=True)
    return StepOut(low_res, obj_ptr, score, mem_feats)


def encode_memory(model: SAM2Base, features: Features, low_res: Optional[torch.Tensor],
                  high_res: torch.Tensor, score: torch.Tensor,
                  from_points: bool) -> torch.Tensor:
    """New spatial memory [B, Cm, h, w] bf16.

    On prompted frames the official predictor encodes memory later, in
    ``propagate_in_video_preflight``, from the low-res logits upsampled again (not from the
    decoder's high-res mask) and with binarization; pass ``low_res`` to do the same.
    """
    if low_res is not None:
        high_res = torch.nn.functional.interpolate(
            low_res, size=(model.image_size, model.image_size), mode='bilinear',
            align_corners=False)
    feats, _ = glue.new_memory(model)(
        current_vision_feats=features.vision_feats, feat_sizes=features.feat_sizes,
        pred_masks_high_res=high_res, object_score_logits=score,
        is_mask_from_pts=from_points)
    return feats.to(torch.bfloat16)


def maskmem_pos_enc(model: SAM2Base, features: Features) -> torch.Tensor:
    """The spatial positional encoding of memories [1, Cm, h, w]: constant per resolution,
    computed once by running the memory encoder's position encoding."""
    h, w = features.feat_sizes[-1]
    dummy = features.vision_feats[-1].new_zeros(1, model.mem_dim, h, w)
    return model.memory_encoder.position_encoding(dummy).to(dummy.dtype)
