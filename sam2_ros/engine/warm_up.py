"""The tracker's start-up run: one frame through every code path before the first real one.

Why: the memory bank's shapes and dtypes come from the model (not from the config), and sam2
builds some tables lazily (RoPE at non-default sizes); both must exist before any graph is
captured over the bank. Imports no ROS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Tuple

import torch

from sam2_ros.engine import encoder, pil_resize, step
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.memory import MemoryBank
from sam2_ros.engine.model import autocast

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

    from sam2_ros.engine.runners import Runner


def warm_up(model: SAM2Base, cfg: TrackerConfig, runner: Runner,
            slots: int) -> Tuple[torch.Tensor, MemoryBank]:
    """Run one frame and a prompt through the model, allocate the bank of ``slots`` object
    slots, let the runner prepare (capture) over it. Returns the memories' positional encoding
    [1, Cm, h, w] and the bank."""
    size, device = model.image_size, torch.device(cfg.device)
    # the first frame of a size asks which pass order Pillow uses; answered (and PIL and
    # numpy.random imported) now, not on a stream's first frame
    pil_resize.pillow_reorders()
    with torch.inference_mode(), autocast(cfg):
        img = torch.zeros(1, 3, size, size, device=device)
        feats = encoder.encode_image(model, img)
        points = {'point_coords': torch.tensor([[[size / 2, size / 2]]], device=device),
                  'point_labels': torch.ones(1, 1, dtype=torch.int32, device=device)}
        first = step.track_step(model, feats, None, None, points=points)
        pos_dtype = torch.bfloat16 if cfg.precision == 'bf16' else torch.float32
        maskmem_pos = step.maskmem_pos_enc(model, feats).to(pos_dtype)
        bank = MemoryBank.allocate(
            slots, cfg.max_cond_frames, model.num_maskmem, model.max_obj_ptrs_in_encoder,
            first.mem_feats[0], first.obj_ptr[0], first.low_res_logits[0])
        runner.prepare(bank, maskmem_pos, feats)
    return maskmem_pos, bank
