"""Which runner executes the per-frame steps: the CUDA-graph runner (``cuda/runner.py``) when
enabled and on CUDA, else the eager reference runner (``eager.py``).

A module of its own so that the trackers and the graph layer need not import each other: the
trackers ask this for a runner, and the graph layer (imported only when it is picked) knows
nothing of the trackers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, List, Union

import torch

from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.eager import EagerRunner

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

    from sam2_ros.engine.cuda.runner import GraphRunner

# What ``make_runner`` returns (the graph runner named as a string: imported only when picked)
Runner = Union[EagerRunner, 'GraphRunner']


def make_runner(model: SAM2Base, cfg: TrackerConfig, on_fallback: Callable[[str], None],
                cameras: int = 1) -> Runner:
    """The graph runner (for ``cameras`` streams) when enabled and on CUDA, else the eager
    runner (the graph module is imported only then, so a CPU tracker never loads it)."""
    if cfg.use_cuda_graphs and torch.device(cfg.device).type == 'cuda':
        from sam2_ros.engine.cuda.runner import GraphRunner
        return GraphRunner(model, cfg, on_fallback, cameras)
    return EagerRunner(model, cfg)


def frame_mode(modes: List[str]) -> str:
    """A frame's mode from its objects' step modes ('eager' with no tracked object)."""
    if modes and all(m == 'graph' for m in modes):
        return 'graph'
    return 'eager' if all(m == 'eager' for m in modes) else 'mixed'
