"""Prompts of the lean image path (``image.py``) in model space, batched by shape.

A decoder call takes prompts of one shape: N prompts of P points each (a box is its two
corners, labels 2 and 3, before any clicks, as ``SAM2ImagePredictor._predict`` concatenates
them), with or without a mask input. Padding a prompt with not-a-point tokens would change
what the decoder attends to, so prompts of different shapes run in separate calls, each as
sam2's predictor would run that batch; the usual call (all boxes, or all single clicks) is one.

Coordinates are scaled as the predictor's ``transform_coords`` does (x / W, y / H, times the
model side, float32), computed on the host, so they do not depend on the device's division.
Every prompt is validated (``prompts.py``) before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import ArrayLike

from sam2_ros.engine.errors import PromptError
from sam2_ros.engine.prompts import prompt_mask, prompt_points
from sam2_ros.engine.types import Prompt

# sam2's mapping of a binary mask to mask logits (SAM2Base._use_mask_as_output).
MASK_SCALE, MASK_BIAS = 20.0, -10.0
# Prompts of one image: each is a mask at source resolution on the host, so more would be
# memory, not segmentation (sam2's predictor sets no bound; an unbounded request is a DoS).
MAX_PROMPTS = 256
# A prompt argument of ``from_arrays``: a tensor (any device) or anything ``np.asarray`` takes
PromptArray = Union[torch.Tensor, ArrayLike]


@dataclass
class PromptBatch:
    """N prompts of one shape, on the model's device (the inputs of one decoder call)."""

    coords: Optional[torch.Tensor]       # [N, P, 2] float32 model pixels, box corners first
    labels: Optional[torch.Tensor]       # [N, P] int32: 2, 3 box corners; 1 / 0 clicks
    mask_input: Optional[torch.Tensor]   # [N, 1, S/4, S/4] float32 mask logits

    @property
    def n(self) -> int:
        return (self.coords if self.coords is not None else self.mask_input).shape[0]

    @property
    def points(self) -> int:
        """P, the points per prompt (0: a mask input alone)."""
        return 0 if self.coords is None else self.coords.shape[1]

    def rows(self, start: int, stop: int) -> 'PromptBatch':
        return PromptBatch(*(None if t is None else t[start:stop]
                             for t in (self.coords, self.labels, self.mask_input)))

    def padded(self, n: int) -> 'PromptBatch':
        """The batch grown to n rows by repeating its last prompt (decoder rows are
        independent: the extra rows' outputs are ignored)."""
        def pad(t):
            if t is None or t.shape[0] == n:
                return t
            return torch.cat([t, t[-1:].expand(n - t.shape[0], *t.shape[1:])])
        return PromptBatch(pad(self.coords), pad(self.labels), pad(self.mask_input))


def mask_logits(mask: torch.Tensor) -> torch.Tensor:
    """A binary mask [N, 1, S, S] {0, 1} -> mask-input logits [N, 1, S/4, S/4], as sam2 turns a
    mask prompt into low-resolution logits (scaled to +-10, then antialiased bilinear)."""
    s = mask.shape[-1] // 4
    return F.interpolate(mask.float() * MASK_SCALE + MASK_BIAS, size=(s, s), mode='bilinear',
                         align_corners=False, antialias=True)


def group(prompts: Sequence[Prompt], h: int, w: int, size: int,
          device: torch.device) -> List[Tuple[List[int], PromptBatch]]:
    """Validated prompts grouped by shape, in order of first appearance: (their indices in
    ``prompts``, their batch). A ``Prompt.mask`` (source resolution) becomes a mask input
    (``mask_logits``) without points. Raises PromptError naming the first bad prompt, or for
    more than ``MAX_PROMPTS``."""
    if len(prompts) > MAX_PROMPTS:
        raise PromptError(f'at most {MAX_PROMPTS} prompts per image, got {len(prompts)}')
    rows: List[Tuple[int, Optional[dict], Optional[Prompt]]] = []
    for i, p in enumerate(prompts):
        try:
            if p.mask is not None:
                prompt_mask(p, h, w, size, torch.device('meta'))    # checks only, no resize
                rows.append((0, None, p))
            else:
                pts = prompt_points(p, h, w, size, torch.device('cpu'))
                rows.append((pts['point_coords'].shape[1], pts, None))
        except PromptError as exc:
            raise PromptError(f'prompt {i} (object {p.obj_id}): {exc}') from None
    # a shape: the point count and whether a box leads them (2 clicks and a box are not
    # one shape: sam2's predictor runs each prompt alone, and a batch of one shape equals it)
    groups: dict = {}
    for i, (n_pts, _, _) in enumerate(rows):
        groups.setdefault((n_pts, prompts[i].box is not None), []).append(i)
    out = []
    for (n_pts, _), idx in groups.items():
        if n_pts == 0:
            masks = torch.cat([prompt_mask(rows[i][2], h, w, size, device) for i in idx])
            out.append((idx, PromptBatch(None, None, mask_logits(masks))))
            continue
        coords = torch.cat([rows[i][1]['point_coords'] for i in idx]).to(device)
        labels = torch.cat([rows[i][1]['point_labels'] for i in idx]).to(device)
        out.append((idx, PromptBatch(coords, labels, None)))
    return out


def from_arrays(point_coords: Optional[PromptArray], point_labels: Optional[PromptArray],
                box: Optional[PromptArray], mask_input: Optional[PromptArray], h: int, w: int,
                size: int, device: torch.device) -> PromptBatch:
    """``SAM2ImagePredictor.predict``'s arguments (source pixels) -> one batch.

    point_coords [N, P, 2] or [P, 2], point_labels [N, P] or [P], box [N, 4], [4] or
    [N, 2, 2], mask_input [N, 1, S/4, S/4] or [1, S/4, S/4] logits; any may be None, not all;
    at most ``MAX_PROMPTS`` prompts."""
    pts = None if point_coords is None else _array(point_coords, 'point_coords', 3, 2)
    lab = None if point_labels is None else _array(point_labels, 'point_labels', 2, None)
    # [N, 2, 2] corner pairs too, as the predictor reshapes boxes to (-1, 2, 2)
    bx = None if box is None else _array(_boxes(box), 'box', 2, 4)
    if (pts is None) != (lab is None):
        raise PromptError('point_coords and point_labels go together')
    m = None
    if mask_input is not None:
        m = torch.as_tensor(np.asarray(mask_input, np.float32) if not torch.is_tensor(
            mask_input) else mask_input, dtype=torch.float32)
        m = m[None] if m.ndim == 3 else m
        if m.ndim != 4 or tuple(m.shape[1:]) != (1, size // 4, size // 4):
            raise PromptError(f'mask_input must be [N, 1, {size // 4}, {size // 4}] logits, '
                              f'got {tuple(m.shape)}')
        if not torch.isfinite(m).all():
            raise PromptError('mask_input contains NaN or inf')
    sizes = {t.shape[0] for t in (pts, lab, bx, m) if t is not None}
    if not sizes:
        raise PromptError('no points, box or mask input given')
    if len(sizes) > 1:
        raise PromptError(f'prompt counts differ between the arguments: {sorted(sizes)}')
    n = sizes.pop()
    if n > MAX_PROMPTS:
        raise PromptError(f'at most {MAX_PROMPTS} prompts per image, got {n}')
    if pts is None and bx is None:
        return PromptBatch(None, None, m.to(device))
    coords, labels = [], []
    for i in range(n):
        p = Prompt(1, points=None if pts is None else pts[i],
                   labels=None if lab is None else lab[i], box=None if bx is None else bx[i])
        try:
            t = prompt_points(p, h, w, size, torch.device('cpu'))
        except PromptError as exc:
            raise PromptError(f'prompt {i}: {exc}') from None
        coords.append(t['point_coords'])
        labels.append(t['point_labels'])
    return PromptBatch(torch.cat(coords).to(device), torch.cat(labels).to(device),
                       None if m is None else m.to(device))


def _boxes(box):
    """Boxes given as [N, 2, 2] corner pairs -> [N, 4]; anything else as it is."""
    shape = tuple(box.shape) if hasattr(box, 'shape') else np.shape(box)
    if len(shape) != 3 or shape[1:] != (2, 2):
        return box
    # nested lists have no reshape; a tensor stays one (on its device)
    return box.reshape(-1, 4) if hasattr(box, 'reshape') else np.reshape(box, (-1, 4))


def _array(a, name: str, ndim: int, last: Optional[int]) -> np.ndarray:
    """``a`` as float64 with a leading prompt axis: [N, ...] of ``ndim`` dimensions, the
    last of size ``last`` (None: any)."""
    try:
        x = np.asarray(a.cpu() if torch.is_tensor(a) else a, np.float64)
    except (TypeError, ValueError) as exc:
        raise PromptError(f'{name} must be numbers: {exc}') from None
    if x.ndim == ndim - 1:
        x = x[None]
    if x.ndim != ndim or (last is not None and x.shape[-1] != last):
        raise PromptError(f'{name} has shape {x.shape}')
    return x
