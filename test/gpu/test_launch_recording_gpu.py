"""``launch.recording`` on the GPU: a recorded compiled launch, launched again from its record
(as tools/probes/launch_probe.py does, here under another warp count), writes the same bytes."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')]


def test_a_recorded_launch_launched_again_writes_the_same_output_gpu():
    from sam2_ros.engine.cuda.kernels import launch
    from sam2_ros.engine.cuda.kernels.holes import fill_holes_fused
    logits = torch.randn(2, 1, 64, 64, device='cuda')
    with launch.recording() as rec:
        out = fill_holes_fused(logits, 8)
    torch.cuda.synchronize()
    assert len(rec) == 1 and rec[0].kernel.__name__.endswith('fill_holes_kernel')
    first = out.clone()
    out.zero_()
    again = rec[0]
    again.kernel[again.grid](*again.args, **{**again.kwargs, 'num_warps': 4})
    torch.cuda.synchronize()
    assert torch.equal(out, first)
