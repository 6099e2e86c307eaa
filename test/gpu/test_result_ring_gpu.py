"""The masks-out read-back sets on real CUDA graphs (marked gpu; the CPU stand-in is
``test/engine/test_io_graphs_cpu.py``): the sets are pinned, every frame's results are copied
asynchronously into a set no held result uses, so results a caller keeps (as the node's
publisher and overlay threads do) stay exactly as they were read while later frames reuse
the other sets; two cameras of one step read into two sets; no frame allocates while fewer
results than sets are held."""

import numpy as np
import pytest
import torch

from gpu_common import tiny_cuda_cfg
from scenarios import synthetic_frames
from sam2_ros.engine.cuda.buckets import MasksOutKey
from sam2_ros.engine.multistream import MultiStreamTracker
from sam2_ros.engine.types import Prompt

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]
H, W = 360, 640


def test_held_results_are_never_overwritten_by_later_frames():
    tr = MultiStreamTracker(tiny_cuda_cfg(precision='bf16'), cameras=2)
    frames = synthetic_frames(40, h=H, w=W)
    tr.track([frames[0], frames[0][::-1].copy()])
    for c in (0, 1):
        tr.stream(c).add_prompt(Prompt(1, box=(100, 80, 300, 250)))
        tr.stream(c).add_prompt(Prompt(2, box=(350, 100, 600, 300)))
    io = tr.runner.graphs.io
    held, copies = [], []
    for t in range(1, 40):
        out = tr.track([frames[t], frames[t][::-1].copy()])
        assert not any(out.errors), out.errors
        if t % 10 == 0:           # a few results kept, as a slow consumer would
            for r in out.results:
                held.append(r)
                copies.append(([o.mask.copy() for o in r.objects], r.label_mask().copy()))
    rings = [r for k, r in io.rings.items() if isinstance(k, MasksOutKey) and k.hw == (H, W)]
    assert rings and all(t.is_pinned() for r in rings for s in r.sets for t in s)
    assert sum(r.misses for r in rings) == 0
    for r, (masks, label) in zip(held, copies):
        assert all(np.array_equal(o.mask, m) for o, m in zip(r.objects, masks))
        assert np.array_equal(r.label_mask(), label)
    a, b = held[-2:]              # one step's two cameras: two sets
    assert a.objects[0].mask.__array_interface__['data'][0] != \
        b.objects[0].mask.__array_interface__['data'][0]
