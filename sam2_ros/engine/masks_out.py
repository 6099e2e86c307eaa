"""Low-resolution mask logits to per-object results at source resolution.

Masks are upsampled exactly as the official predictor's ``_get_orig_video_res_output``
(bilinear, align_corners=False, threshold > 0). Boxes, areas and centroids are reduced on the
device so the host receives one bool mask stack and one small stats tensor per frame; the label
mask (one uint8 image of all objects, what the node publishes and the overlay draws) is built
there too, since on the host it costs one full-image pass per object.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F


def host_results(logits: torch.Tensor, h: int, w: int, scores: torch.Tensor,
                 ids: List[int]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """logits [B, 1, s, s], scores [B], object ids [B] -> masks [B, H, W] bool, stats [B, 8]
    float64 (area, x0, y0, x1, y1, cx, cy, score) and label [H, W] uint8, all on
    the host. The eager reference of the CUDA-graph runner's results."""
    if logits.shape[0] == 0:
        return np.zeros((0, h, w), bool), np.zeros((0, 8)), np.zeros((h, w), np.uint8)
    m, stats = on_device(logits, h, w, scores)
    label = label_on_device(m, torch.tensor(ids, dtype=torch.uint8, device=m.device))
    return m.cpu().numpy(), stats.cpu().numpy(), label.cpu().numpy()


def label_on_device(masks: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """masks [B, H, W] bool, ids [B] uint8 (0 for padding rows) -> [H, W] uint8: 0 where no
    mask is set, else the highest id whose mask is (as ``FrameResult.label_mask``)."""
    return (masks.to(torch.uint8) * ids[:, None, None]).amax(0)


def on_device(logits: torch.Tensor, h: int, w: int,
              extra: torch.Tensor = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """The device part of ``host_results`` (no host sync, so it can be captured):
    masks [B, H, W] bool and stats [B, 7 or 8] float64, both on the logits' device."""
    up = F.interpolate(logits.float(), size=(h, w), mode='bilinear', align_corners=False)
    m = up[:, 0] > 0                                                 # [B, H, W]
    return m, stats_of(up.gt_(0)[:, 0], extra)


def stats_of(m: torch.Tensor, extra: torch.Tensor = None) -> torch.Tensor:
    """masks [B, H, W] (bool, or 0./1. floats) -> stats [B, 7 or 8] float64 (``on_device``'s,
    on the masks' device): area, x0, y0, x1, y1, cx, cy (-1 where empty), ``extra`` [B]
    appended.

    The counts are float sums of 0/1 values: reductions of a bool mask would cast it to int64
    first, [B, H, W] int64 temporaries (three of them, 192 MiB at 1024 px and 8 objects: image
    mode's peak). Float sums of 0/1 are exact up to 2^24 per row or column, so every statistic
    equals the integer one; ``on_device`` passes its upsampled tensor turned 0/1 in place."""
    h, w = m.shape[-2:]
    ones = m if m.is_floating_point() else m.float()
    per_row, per_col = ones.sum(dim=2).double(), ones.sum(dim=1).double()   # [B, H], [B, W]
    area = per_row.sum(1)
    ys = torch.arange(h, device=m.device, dtype=torch.float64)
    xs = torch.arange(w, device=m.device, dtype=torch.float64)
    rows, cols = per_row > 0, per_col > 0
    big = 1e9
    y0 = torch.where(rows, ys, big).amin(1)
    y1 = torch.where(rows, ys, -big).amax(1)
    x0 = torch.where(cols, xs, big).amin(1)
    x1 = torch.where(cols, xs, -big).amax(1)
    safe = area.clamp(min=1)
    cy = (per_row * ys).sum(1) / safe
    cx = (per_col * xs).sum(1) / safe
    stats = torch.stack([area, x0, y0, x1, y1, cx, cy], dim=1)
    stats = torch.where((area == 0)[:, None] & (torch.arange(7, device=m.device) > 0),
                        -1.0, stats)
    if extra is not None:
        stats = torch.cat([stats, extra.double()[:, None]], dim=1)
    return stats


def unpack(stats_row: np.ndarray) -> Tuple[int, Optional[Tuple[int, int, int, int]],
                                           Optional[Tuple[float, float]]]:
    """(area, box or None, centroid or None) from one stats row."""
    area = int(stats_row[0])
    if area == 0:
        return 0, None, None
    box = tuple(int(v) for v in stats_row[1:5])
    return area, box, (float(stats_row[5]), float(stats_row[6]))
