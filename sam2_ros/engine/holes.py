"""Hole filling of mask logits exactly as sam2's video predictor does it, with fixed shapes.

Why: ``build_sam2_video_predictor`` sets ``fill_hole_area=8``, and where sam2's CUDA extension
(``sam2._C``) is built, ``SAM2VideoPredictor`` fills every background component of at most that
many low-resolution pixels before it stores a mask (``sam2.utils.misc.fill_holes_in_mask_scores``):
the stored logits are the output masks, the previous-mask input of a correction and the source
of the memory encoded for prompted frames. sam2 labels components with a union-find kernel
(``sam2/csrc/connected_components.cu``) whose work depends on the data; here the same decision
is made by a fixed sequence of tensor ops, so it runs inside our CUDA graphs (no host sync, no
data-dependent shape) and on the CPU alike.

sam2's rule, read from that kernel and ``fill_holes_in_mask_scores``:

* background is ``logit <= 0`` (NaN is not background);
* components are 8-connected (the kernel merges 2x2 blocks with their diagonal neighbours);
* a background component is a hole when its area is ``<= max_area`` pixels, components touching
  the image border included (nothing excludes them);
* a hole's logits become 0.1 (``torch.where(is_hole, 0.1, mask)``), every other logit is kept.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import torch
import torch.nn.functional as F

FILL_VALUE = 0.1    # sam2's score for a filled hole: just foreground
# The attribute of a model copy that fills holes another way: the fused copy the graphs capture
# (cuda/kernels/fused.py, group 'holes') carries the one-kernel fill there; the model itself,
# which the eager runner (the reference) runs, never has it.
FILLER = 'sam2_ros_hole_filler'


def filler(model: torch.nn.Module) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """The hole filling the steps run with ``model``: its ``FILLER``, else ``fill_holes``."""
    return getattr(model, FILLER, fill_holes)


def hole_tables(batch: int, h: int, w: int, device) -> Tuple[torch.Tensor, torch.Tensor]:
    """The constants of ``fill_holes`` for [B, 1, H, W] logits: (negated flat pixel indices
    [1, 1, H, W] float32, ones [B, H*W] float32 to count areas with)."""
    idx = torch.arange(h * w, device=device, dtype=torch.float32).view(1, 1, h, w)
    return -idx, torch.ones(batch, h * w, device=device, dtype=torch.float32)


def fill_holes(logits: torch.Tensor, max_area: int,
               tables: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
    """logits [B, 1, H, W] -> the same logits with every background (<= 0) 8-connected
    component of area <= ``max_area`` set to 0.1, as sam2 does; ``max_area`` <= 0: unchanged.
    ``tables``: ``hole_tables`` of this shape computed once (the graphs' constants), else
    computed here.

    Labels: every background pixel starts with its own flat index, foreground with BIG; each
    of ``max_area - 1`` steps replaces a background pixel's label by the minimum over its 3x3
    neighbourhood (foreground stays BIG). After k steps a pixel holds the smallest index of
    its component within 8-path distance k. A pixel is *open* when a background 8-neighbour
    has another label; a label is *closed* when none of its pixels is open. Filled: background
    pixels whose label is closed and carried by at most ``max_area`` pixels.

    Proof that this is sam2's rule. Labels are indices of pixels of the pixel's own component,
    so components never share a label. (1) A component C with |C| <= max_area has 8-path
    diameter <= |C| - 1 <= max_area - 1 = the step count, so all of C carries min(C); no other
    pixel does, so its area is |C| <= max_area; every background neighbour of a pixel of C is
    in C and carries the same label, so it is closed: C is filled. (2) A component C with
    |C| > max_area: take any label L in C and S, the pixels carrying it. If L is closed, no
    pixel of S has a background neighbour outside S; C is connected, so S = C and L's area is
    |C| > max_area. Either way no pixel of C is filled. Foreground is never touched.
    """
    if max_area <= 0:
        return logits
    batch, _, h, w = logits.shape
    n = h * w
    if n >= 2 ** 24:
        raise ValueError(f'fill_holes: {h}x{w} logits exceed exact float32 labels')
    bg = logits <= 0                                                   # [B, 1, H, W]
    big = float(n)                                     # foreground label, one past any index
    neg_idx, ones = tables if tables is not None else hole_tables(batch, h, w, logits.device)
    # negated labels: the 3x3 minimum of labels is one max-pool of them
    neg = torch.where(bg, neg_idx, -big)                               # [B, 1, H, W] float32
    for _ in range(max_area - 1):
        neg = torch.where(bg, _max3x3(neg), -big)
    # open: a background neighbour with a smaller label (foreground: BIG) or a larger one
    # (foreground counts as -1 then, never larger)
    smaller = _max3x3(neg) > neg
    larger = -_max3x3(-torch.where(bg, neg, 1.0)) < neg
    open_px = bg & (smaller | larger)
    flat = (-neg).long().flatten(1)                                    # [B, HW]; fg -> n
    area = torch.zeros(batch, n + 1, device=logits.device, dtype=torch.float32)
    area.scatter_add_(1, flat, ones)
    n_open = torch.zeros_like(area).scatter_add_(1, flat, open_px.flatten(1).float())
    small = (area.gather(1, flat) <= max_area) & (n_open.gather(1, flat) == 0)
    is_hole = bg & small.view(batch, 1, h, w)
    return torch.where(is_hole, FILL_VALUE, logits)


def _max3x3(x: torch.Tensor) -> torch.Tensor:
    """Maximum over each pixel's 3x3 neighbourhood [B, 1, H, W] (outside the image ignored)."""
    return F.max_pool2d(x, 3, stride=1, padding=1)
