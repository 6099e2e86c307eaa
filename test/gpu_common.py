"""Shared by the GPU equivalence tests: the tracker configuration they compare and the JSON
their measured differences go to ($OUT/gpu_equivalence.json, for docs/design.md's table)."""

import json
import os

from sam2_ros.engine.config import TrackerConfig

OUT = os.environ.get('OUT', 'out')


def tiny_cuda_cfg(**kw) -> TrackerConfig:
    """tiny@512 on CUDA with random weights, 4 objects, no hole filling (sam2 without its
    extension, as the official predictor runs here), overridden by ``kw``."""
    base = dict(model_size='tiny', image_size=512, device='cuda', random_weights=True,
                max_objects=4, fill_hole_area=0)
    base.update(kw)
    return TrackerConfig(**base)


def record_equivalence(name: str, value) -> None:
    """Add ``value`` under ``name`` to $OUT/gpu_equivalence.json."""
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, 'gpu_equivalence.json')
    data = json.load(open(path)) if os.path.exists(path) else {}
    data[name] = value
    json.dump(data, open(path, 'w'), indent=1)
