"""Drive the official SAM2VideoPredictor over the same frames and prompts as our tracker.

The predictor wants the whole video up front: frames are written to a JPEG folder only to
satisfy ``init_state``; its image tensor is then replaced by our preprocessed frames so both
sides see identical model inputs (preprocessing is compared in its own test).
"""

from __future__ import annotations

import os
import tempfile
from typing import Dict, List, Tuple

import numpy as np
import torch
from PIL import Image

from sam2_ros import preprocess


def init_reference(predictor, frames: List[np.ndarray]):
    """An inference_state over ``frames`` ([H, W, 3] uint8) with our preprocessing."""
    size = predictor.image_size
    with tempfile.TemporaryDirectory() as d:
        for i, fr in enumerate(frames):
            Image.fromarray(fr).save(os.path.join(d, f'{i:05d}.jpg'))
        state = predictor.init_state(d)
    dev = predictor.device
    state['images'] = torch.cat([preprocess.to_model_input(f, size, dev) for f in frames])
    state['cached_features'] = {}
    return state


def outputs(state, obj_idx: int, frame: int) -> Dict[str, torch.Tensor]:
    """The stored output of one object on one frame (conditioning or not)."""
    d = state['output_dict_per_obj'][obj_idx]
    out = d['cond_frame_outputs'].get(frame)
    if out is None:
        out = d['non_cond_frame_outputs'][frame]
    return out


def propagate(predictor, state, start: int, stop: int) -> List[int]:
    """Track frames start..stop inclusive."""
    done = []
    for f, _, _ in predictor.propagate_in_video(state, start_frame_idx=start,
                                                max_frame_num_to_track=stop - start):
        done.append(f)
    return done


def compare(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float().cpu() - b.float().cpu()).abs().max())


def ours(tracker, obj_id: int, frame: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """(obj_ptr [C], maskmem_features [Cm, h, w]) our bank holds for ``frame``."""
    bank = tracker.bank
    slot = tracker._objects[obj_id].slot
    k = bank.max_cond
    for row in range(k):
        if bank.cond_frame[slot, row] == frame:
            return bank.ptrs[slot, row], bank.feats[slot, row]
    ring, pring = bank.ring_frame.shape[1], bank.ptr_frame.shape[1]
    assert bank.ring_frame[slot, frame % ring] == frame
    assert bank.ptr_frame[slot, frame % pring] == frame
    return bank.ptrs[slot, k + frame % pring], bank.feats[slot, k + frame % ring]
