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

from typing import Callable, Optional, Tuple, Union

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


def hole_tables(batch: int, h: int, w: int,
                device: Union[str, torch.device]) -> Tuple[torch.Tensor, ...]:
    """The constants of ``fill_holes`` for [B, 1, H, W] logits: (negated flat pixel indices
    [1, 1, H, W] float32,) (``batch``: the key the graphs' constants store them under)."""
    return (torch.arange(0, -h * w, -1, device=device, dtype=torch.float32).view(1, 1, h, w),)


def fill_holes(logits: torch.Tensor, max_area: int,
               tables: Optional[Tuple[torch.Tensor, ...]] = None) -> torch.Tensor:
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
    # -index of every pixel (0, -1, -2, ...): negated labels, so that the 3x3 minimum of
    # labels is one max-pool of them
    start, = tables if tables is not None else hole_tables(batch, h, w, logits.device)
    neg = torch.where(bg, start, -big)                                 # [B, 1, H, W] float32
    for _ in range(max_area - 1):
        neg = torch.where(bg, _max3x3(neg), -big)
    # open: a background neighbour with a smaller label (foreground: -big never is) or a
    # larger one
    smaller = _max3x3(neg) > neg
    # labels, and for a foreground pixel its own index: a slot no background label uses
    # (labels are background pixels' indices) and no other pixel shares, so the scatter
    # below has no address that every foreground pixel adds to
    lab = torch.where(bg, neg, start).neg_()
    larger = _max3x3(torch.where(bg, lab, -1.0)) > lab
    # each pixel adds 1 to its label, an open one max_area + 1: a label's sum is at most
    # max_area exactly when it is closed and carried by at most max_area pixels (float sums
    # of non-negative integers are exact up to 2^24 and never drop below a partial sum)
    weight = torch.where(smaller | larger, float(max_area + 1), 1.0)
    flat = lab.long().flatten(1)                                       # [B, HW]
    sums = torch.zeros(batch, n, device=logits.device, dtype=torch.float32)
    sums.scatter_add_(1, flat, weight.flatten(1))
    is_hole = bg & (sums.gather(1, flat) <= max_area).view(batch, 1, h, w)
    return torch.where(is_hole, FILL_VALUE, logits)


def _max3x3(x: torch.Tensor) -> torch.Tensor:
    """Maximum over each pixel's 3x3 neighbourhood [B, 1, H, W] (outside the image ignored)."""
    return F.max_pool2d(x, 3, stride=1, padding=1)
