"""The tensors of the image path: an image's encoder features and the decoder's predictions.

Shared by the eager image path (``image.py``) and its CUDA graphs (``cuda/image_graphs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import torch


@dataclass
class ImageFeatures:
    """One image's encoder output as ``set_image`` keeps it (its ``_features``)."""

    image_embed: torch.Tensor        # [1, C, S/16, S/16], no_mem_embed added
    high_res: List[torch.Tensor]     # [1, C0, S/4, S/4], [1, C1, S/8, S/8]


@dataclass
class Prediction:
    """The decoder's outputs for N prompts (M = 3 masks each with multimask_output, else 1)."""

    low_res_logits: torch.Tensor     # [N, M, S/4, S/4] mask logits, not clamped
    iou: torch.Tensor                # [N, M] predicted IoU
    object_score: torch.Tensor       # [N, 1] object score logits (> 0: an object is there)

    def best(self) -> 'Prediction':
        """Each prompt's mask of highest predicted IoU: [N, 1, ...] (itself when M = 1)."""
        if self.iou.shape[1] == 1:
            return self
        rows = torch.arange(self.iou.shape[0], device=self.iou.device)
        k = self.iou.argmax(1)
        return Prediction(self.low_res_logits[rows, k].unsqueeze(1),
                          self.iou[rows, k].unsqueeze(1), self.object_score)


def cat_predictions(parts: Sequence[Prediction]) -> Prediction:
    if len(parts) == 1:
        return parts[0]
    return Prediction(*(torch.cat(t) for t in zip(
        *((p.low_res_logits, p.iou, p.object_score) for p in parts))))
