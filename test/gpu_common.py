"""Shared by the GPU equivalence tests: the tracker configuration they compare and the JSON
their measured differences go to ($OUT/gpu_equivalence.json, for docs/design.md's table; the
fused kernels' to $OUT/gpu_fused_kernels.json), a profiler count of kernels, and the model and
inputs the fused modules' tests compare on."""

import json
import os
from typing import Tuple

from sam2_ros.engine.config import TrackerConfig

OUT = os.environ.get('OUT', 'out')


def tiny_cuda_cfg(**kw) -> TrackerConfig:
    """tiny@512 on CUDA with random weights, 4 objects, no hole filling (sam2 without its
    extension, as the official predictor runs here), overridden by ``kw``."""
    base = dict(model_size='tiny', image_size=512, device='cuda', random_weights=True,
                max_objects=4, fill_hole_area=0)
    base.update(kw)
    return TrackerConfig(**base)


def record(name: str, value, file: str = 'gpu_equivalence.json') -> None:
    """Add ``value`` under ``name`` to $OUT/``file``."""
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, file)
    data = json.load(open(path)) if os.path.exists(path) else {}
    data[name] = value
    json.dump(data, open(path, 'w'), indent=1)


def record_equivalence(name: str, value) -> None:
    """Add ``value`` under ``name`` to $OUT/gpu_equivalence.json."""
    record(name, value)


def record_fused(name: str, value) -> None:
    """Add ``value`` under ``name`` to $OUT/gpu_fused_kernels.json (the fused kernels' tests)."""
    record(name, value, 'gpu_fused_kernels.json')


def cuda_events(fn, warm_up: bool = True) -> list:
    """The CUDA events (kernels, copies, sets) of one call of ``fn`` by torch.profiler;
    ``warm_up``: one call first, so Triton compiles outside them."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    if warm_up:
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def cuda_kernels(fn, warm_up: bool = True) -> Tuple[int, float]:
    """(CUDA kernels one call of ``fn`` launches, their GPU microseconds) by torch.profiler,
    memcpy/memset aside; ``warm_up`` as ``cuda_events``."""
    ev = [e for e in cuda_events(fn, warm_up)
          if not e.name.lower().startswith(('memcpy', 'memset'))]
    return len(ev), sum(getattr(e, 'device_time', 0.0) for e in ev)


def fused_test_model():
    """tiny@512 in float32 with TF32 off (matmuls and cuDNN: sam2's fp32 convolutions in fp32
    too) and random LayerNorm affines (sam2's init, 1 and 0, would hide errors): the model the
    fused modules' GPU tests compare on."""
    import torch

    from conftest import perturb_norms
    from sam2_ros.engine.model import build_model
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    m = build_model(tiny_cuda_cfg(precision='fp32'))
    perturb_norms(m, torch.Generator(device='cuda').manual_seed(0))
    return m


def tracker_stream(cfg: TrackerConfig, frames, events):
    """(per frame {obj_id: low-res logits} of a StreamingTracker of ``cfg`` over ``frames``
    with ``events`` applied after each frame's track, its stats, the tracker)."""
    from scenarios import stream_logits
    from sam2_ros.engine.tracker import StreamingTracker
    tr = StreamingTracker(cfg)
    out = stream_logits(tr, frames, events, after_prompts=False)
    return out, dict(tr.stats), tr


def worst_logits(a, b) -> float:
    """The largest absolute difference of two ``tracker_stream`` outputs' logits."""
    return max(float((x[k] - y[k]).abs().max()) for x, y in zip(a, b) for k in x)


def cuda_rand(*shape, seed: int = 0):
    """Standard normal float32 on the GPU from its own generator."""
    import torch
    return torch.randn(*shape, device='cuda', generator=torch.Generator(
        device='cuda').manual_seed(seed))
