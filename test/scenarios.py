"""Synthetic streams and prompt schedules shared by the CPU and GPU equivalence tests."""

import numpy as np

from sam2_ros.engine.types import Prompt
from sam2_ros.synthetic import SyntheticCamera


def synthetic_frames(n, h=96, w=128, seed=0):
    """``n`` frames of the synthetic camera (sam2_ros.synthetic): two discs moving over a
    textured background, so features change over time."""
    return SyntheticCamera(w, h, objects=2, seed=seed).frames(n)


def schedule(h, w, add2, add3, fix, remove):
    """Object 1 by a click on frame 0, object 2 by a box at add2, object 3 by a mask at add3,
    a correction (positive + negative click) on object 1 at fix, removal of object 2."""
    p1 = Prompt(1, points=np.array([[w * 0.15, h * 0.4]]), labels=np.array([1]))
    p2 = Prompt(2, box=(w * 0.6, h * 0.15, w * 0.9, h * 0.45))
    mask = np.zeros((h, w), bool)
    mask[int(h * 0.6):int(h * 0.85), int(w * 0.3):int(w * 0.55)] = True
    p3 = Prompt(3, mask=mask)
    corr = Prompt(1, points=np.array([[w * 0.3, h * 0.4], [w * 0.5, h * 0.8]]),
                  labels=np.array([1, 0]))
    return {0: [('add', p1)], add2: [('add', p2)], add3: [('add', p3)], fix: [('add', corr)],
            remove: [('remove', 2)]}


def padded_buffers(bank, n_s, n_p, batch=1):
    """Static memory buffers of a padded bucket (n_s spatial memories, n_p pointers) for
    ``batch`` objects, with validity flags, as a padded graph holds them."""
    import torch                        # lazily: the ROS tests that import this need no torch
    from sam2_ros.engine import step
    return step.Memory(bank.feats.new_zeros(n_s, batch, *bank.feats.shape[2:]),
                       torch.zeros(n_s, batch, dtype=torch.long),
                       bank.ptrs.new_zeros(n_p, batch, bank.ptrs.shape[-1]),
                       torch.ones(n_p, batch), torch.ones(n_s, batch, dtype=torch.bool),
                       torch.ones(n_p, batch, dtype=torch.bool))
