"""Constants of a frame computed once: the fused model copy's 'constants' group (``fused.py``).

Why: a steady frame's graphs replay kernels whose results depend only on the weights and the
shapes, never on the frame or a prompt, every frame (``tools/probes/kernel_sources.py``):

* the mask decoder's dense positional encoding (``PromptEncoder.get_dense_pe``: a grid of
  ones, two cumsums, a matmul, sin, cos, cat);
* a tracking frame's "no prompt": sam2's ``_forward_sam_heads`` builds one padding point per
  object (coords 0, label -1) and the prompt encoder embeds it (pad, shift, normalise, the
  random-Fourier encoding, five label masks) into the same sparse embedding every frame;
* the FPN neck's and the memory encoder's sine encodings: sam2 caches the grid, then repeats
  it over the batch and casts it to the features' dtype on every call;
* Hiera's positional embedding (a bicubic interpolation of parameters; ``FusedHiera`` of the
  'hiera' group caches it too);
* in ``step.py``: the spatial memories' encoding (the memory encoder's grid plus the temporal
  embedding of each memory: one of ``num_maskmem`` rows), the frequencies of the object
  pointers' temporal sine encoding, and ``holes.py``'s label grid.

Each is computed by sam2's own module (or the function ``step.py`` runs without the group) on
its first call, with the arguments, device, autocast and inference-mode state of that call,
and stored per such key; the warm-up run before each capture (``capture.py``) fills the store,
so the captured graphs read the stored tensors. Same inputs, same ops: the values are bitwise
the per-call ones (``test/engine/test_constants_cpu.py``). Nothing is stored while a CUDA
graph is being captured (a missed key is computed into the graph then, as without the group).
The shared tensors are read-only: nothing sam2 or the engine runs writes into them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, Optional, Tuple, TypeVar

import torch

from sam2_ros.engine import holes
from sam2_ros.engine.cuda.kernels.swap import with_children

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

T = TypeVar('T')


def call_state(device: torch.device) -> tuple:
    """What a constant's value or dtype may depend on besides its arguments: the device, the
    autocast state of its type and inference mode."""
    kind = torch.device(device).type
    return (torch.device(device), torch.is_autocast_enabled(kind),
            torch.get_autocast_dtype(kind), torch.is_inference_mode_enabled())


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


class Store:
    """Values computed once per key (``make()`` under no_grad: no autograd graph is kept)."""

    def __init__(self):
        self.values: Dict[tuple, object] = {}

    def get(self, key: tuple, make: Callable[[], T]) -> T:
        if key in self.values:
            return self.values[key]
        with torch.no_grad():
            value = make()
        if not _capturing():
            self.values[key] = value
        return value


class ConstantSinePE(torch.nn.Module):
    """Replaces a sam2 ``PositionEmbeddingSine`` whose caller casts its output to the input's
    dtype (``FpnNeck``, ``MemoryEncoder``: ``position_encoding(x).to(x.dtype)``): that
    [B, C, H, W] output, stored per (B, H, W, dtype); the caller's cast is then a no-op."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        self.store = Store()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        key = (x.shape[0], *x.shape[-2:], x.dtype, call_state(x.device))
        return self.store.get(key, lambda: self.inner(x).to(x.dtype))


class ConstantPromptEncoder(torch.nn.Module):
    """Replaces ``sam_prompt_encoder`` (a sam2 ``PromptEncoder``): the dense positional
    encoding once, and a tracking frame's "no prompt" once per batch size. ``no_points`` hands
    out sam2's padding-point input ([B, 1, 2] zeros, [B, 1] int32 -1) as the same two tensors
    every call; ``forward`` recognises them (by identity, never by value: a real prompt is
    always embedded) and returns their embedding as stored. Anything else is sam2's module."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        # what sam2's SAM2Base reads of its prompt encoder besides forward and get_dense_pe
        self.embed_dim = inner.embed_dim
        self.input_image_size = inner.input_image_size
        self.image_embedding_size = inner.image_embedding_size
        self.mask_input_size = inner.mask_input_size
        self.store = Store()

    def get_dense_pe(self) -> torch.Tensor:
        """[1, C, h, w], as sam2's."""
        dev = self.inner.pe_layer.positional_encoding_gaussian_matrix.device
        return self.store.get(('dense_pe', call_state(dev)), self.inner.get_dense_pe)

    def no_points(self, batch: int, device: torch.device) -> Dict[str, torch.Tensor]:
        """sam2's point input of a frame without prompts (what ``_forward_sam_heads`` builds
        for point_inputs=None): {'point_coords': [B, 1, 2] zeros, 'point_labels': [B, 1] -1}."""
        device = torch.device(device)
        return self.store.get(('no_points', batch, device), lambda: {
            'point_coords': torch.zeros(batch, 1, 2, device=device),
            'point_labels': -torch.ones(batch, 1, dtype=torch.int32, device=device)})

    def _is_no_points(self, points) -> bool:
        coords, labels = points
        held = self.store.values.get(('no_points', coords.shape[0], coords.device))
        return held is not None and coords is held['point_coords'] \
            and labels is held['point_labels']

    def forward(self, points: Optional[Tuple[torch.Tensor, torch.Tensor]],
                boxes: Optional[torch.Tensor],
                masks: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        """(sparse [B, N, C], dense [B, C, h, w]) as sam2's ``forward``."""
        if points is None or boxes is not None or not self._is_no_points(points):
            return self.inner(points, boxes, masks)
        coords = points[0]
        # sparse depends on the points alone, the no-mask dense on the batch size alone
        sparse, dense = self.store.get(('no_prompt', coords.shape[0], call_state(coords.device)),
                                       lambda: self.inner(points, None, None))
        if masks is not None:
            dense = self.inner(None, None, masks)[1]
        return sparse, dense


def cached_pos_embed(trunk: torch.nn.Module) -> torch.nn.Module:
    """A shallow copy of a sam2 ``Hiera`` whose ``_get_pos_embed`` (sam2's, called by its
    ``forward``) is computed once per feature size."""
    twin = with_children(trunk)
    store = Store()
    sam2_pos_embed = trunk._get_pos_embed

    def pos_embed(hw) -> torch.Tensor:                         # [1, H, W, C]
        return store.get((tuple(hw), call_state(trunk.pos_embed.device)),
                         lambda: sam2_pos_embed(hw))
    twin._get_pos_embed = pos_embed          # an instance attribute shadows the method
    return twin


def sine_frequencies(dim: int, temperature: float, device: torch.device) -> torch.Tensor:
    """The divisors [dim // 2] float32 of sam2's ``get_1d_sine_pe(pos, dim, temperature)``,
    by the same ops (``pointer_pos.py`` reads them too)."""
    dim_t = torch.arange(dim // 2, dtype=torch.float32, device=device)
    return temperature ** (2 * (dim_t // 2) / (dim // 2))


class StepConstants(torch.nn.Module):
    """The constants ``step.py`` reads from a model that has them (``model.constants``, set
    by ``with_constants``); without it ``step.py`` computes the same values per call."""

    def __init__(self):
        super().__init__()
        self.store = Store()
        # id(maskmem_pos) -> (maskmem_pos, [num_maskmem, HW, Cm] table)
        self.spatial: Dict[int, Tuple[torch.Tensor, torch.Tensor]] = {}

    def no_points(self, model: SAM2Base, batch: int, device: torch.device) -> Optional[dict]:
        """The point input of a frame without prompts that the model's prompt encoder embeds
        from its store; None (sam2 builds it) when that is sam2's prompt encoder."""
        fn = getattr(model.sam_prompt_encoder, 'no_points', None)
        return None if fn is None else fn(batch, device)

    def spatial_table(self, model: SAM2Base, maskmem_pos: torch.Tensor) -> torch.Tensor:
        """[num_maskmem, HW, Cm]: maskmem_pos [1, Cm, h, w] + each row of maskmem_tpos_enc."""
        held = self.spatial.get(id(maskmem_pos))
        if held is None or held[0] is not maskmem_pos:
            with torch.no_grad():     # the add step.memory_tokens does, for every table row
                table = maskmem_pos.flatten(2).permute(0, 2, 1) \
                    + model.maskmem_tpos_enc.flatten(1).unsqueeze(1)      # [K, HW, Cm]
            if _capturing():
                return table
            held = self.spatial[id(maskmem_pos)] = (maskmem_pos, table)
        return held[1]

    def spatial_pos(self, model: SAM2Base, maskmem_pos: torch.Tensor,
                    tpos_idx: torch.Tensor) -> torch.Tensor:
        """maskmem_pos [1, Cm, h, w] (+) maskmem_tpos_enc[tpos_idx] -> [n_s, HW, B, Cm] (a
        view): one gather from the table of the num_maskmem sums, not a gather and an add."""
        return self.spatial_table(model, maskmem_pos)[tpos_idx].permute(0, 2, 1, 3)

    @staticmethod
    def gather_spatial(table: torch.Tensor, tpos_idx: torch.Tensor, out: torch.Tensor) -> None:
        """out [n_s, HW, B, Cm] (any strides: memory_pos's rows) = table[tpos_idx], permuted
        as ``spatial_pos`` returns it. Of the table's dtype, the gather writes out itself (one
        kernel, not a gather and a copy); of another, it is cast in the copy."""
        if out.dtype == table.dtype:
            torch.ops.aten.index.Tensor_out(table, [tpos_idx], out=out.permute(0, 2, 1, 3))
        else:
            out.copy_(table[tpos_idx].permute(0, 2, 1, 3))

    def sine_pe(self, pos: torch.Tensor, dim: int, temperature: int = 10000) -> torch.Tensor:
        """sam2's ``get_1d_sine_pe(pos, dim)`` ([..., dim]) with its frequencies computed once:
        the same ops on the same values (``test_sine_pe_equals_sam2``)."""
        dim_t = self.store.get(('dim_t', dim, temperature, call_state(pos.device)),
                               lambda: sine_frequencies(dim, temperature, pos.device))
        pe = pos.unsqueeze(-1) / dim_t
        return torch.cat([pe.sin(), pe.cos()], dim=-1)

    def hole_tables(self, batch: int, h: int, w: int,
                    device: torch.device) -> Tuple[torch.Tensor, ...]:
        """``holes.hole_tables``, once per shape."""
        return self.store.get(('holes', batch, h, w, torch.device(device)),
                              lambda: holes.hole_tables(batch, h, w, device))


def with_constants(model: torch.nn.Module) -> torch.nn.Module:
    """A shallow copy of a sam2 model (sharing every weight) whose frame-independent parts
    are computed once (module docstring); ``model`` is unchanged."""
    enc, mem = model.image_encoder, model.memory_encoder
    neck = with_children(enc.neck, position_encoding=ConstantSinePE(enc.neck.position_encoding))
    return with_children(
        model,
        image_encoder=with_children(enc, trunk=cached_pos_embed(enc.trunk), neck=neck),
        memory_encoder=with_children(
            mem, position_encoding=ConstantSinePE(mem.position_encoding)),
        sam_prompt_encoder=ConstantPromptEncoder(model.sam_prompt_encoder),
        constants=StepConstants())
