"""Masks that hole filling is tested on (CPU: test_holes.py, GPU: test_fidelity_gpu.py):
adversarial cases for the connectivity, area and convergence rules, and logits from them."""

import numpy as np
import torch


def logits_of(bg: np.ndarray, seed: int = 0) -> torch.Tensor:
    """Logits [B, 1, H, W] from background masks [B, H, W]: random values <= 0 on the
    background (0 included), > 0 elsewhere."""
    rng = np.random.default_rng(seed)
    neg = -rng.uniform(0, 4, bg.shape)
    neg[rng.random(bg.shape) < 0.1] = 0.0                 # a logit of exactly 0 is background
    pos = rng.uniform(1e-3, 4, bg.shape)
    return torch.from_numpy(np.where(bg, neg, pos).astype(np.float32))[:, None]


def adversarial() -> np.ndarray:
    """[B, 16, 16] background masks, one case per batch entry."""
    cases = []

    def new():
        cases.append(np.zeros((16, 16), bool))
        return cases[-1]
    m = new()                       # holes touching the border and the corners
    m[0:2, 0:2] = m[0, 5:8] = m[15, 0:2] = m[14, 0] = True      # 4, 3, 3 pixels
    m[5:13, 15] = True              # 8 along the right border
    m[15, 6:15] = True              # 9 along the bottom border
    m = new()                       # diagonal neighbours: 5 + 4 pixels joined only at corners
    m[2, 2:7] = True
    m[3, 7:11] = True               # (2,6)-(3,7) diagonal: one component of 9 under 8-conn.
    m[8, 8] = m[9, 9] = m[10, 10] = m[11, 11] = True     # a diagonal chain of 4
    m = new()                       # areas exactly 8 and 9, compact and as lines
    m[1:3, 1:5] = True              # 8 (2x4)
    m[5:8, 5:8] = True              # 9 (3x3)
    m[10, 0:8] = True               # 8 in a line: diameter 7 = the step count
    m[13, 2:11] = True              # 9 in a line
    m = new()                       # a long thin component, far longer than max_area
    m[4, 1:15] = m[4:12, 14] = m[11, 2:15] = True
    m = new()                       # a spiral: geodesic length >> 8 steps, never converges
    y, x, dy, dx = 0, 0, 0, 1
    seen = np.zeros((16, 16), bool)
    for _ in range(200):
        seen[y, x] = True
        ny, nx = y + 2 * dy, x + 2 * dx
        if not (0 <= ny < 16 and 0 <= nx < 16) or seen[ny, nx]:
            dy, dx = dx, -dy
            ny, nx = y + 2 * dy, x + 2 * dx
            if not (0 <= ny < 16 and 0 <= nx < 16) or seen[ny, nx]:
                break
        seen[y + dy, x + dx] = True
        y, x = ny, nx
    m[:] = seen
    m = new()                       # a comb: many teeth of <= 8 pixels on one long spine
    m[15, :] = True
    for c in range(0, 16, 3):
        m[8:15, c] = True
    m = new()                       # everything background: one component of 256
    m[:] = True
    m = new()                       # checkerboard: all background pixels 8-connected
    m[::2, ::2] = m[1::2, 1::2] = True
    new()                           # no background at all
    return np.stack(cases)
