"""The GPU clock keeper (sam2_ros/engine/clock_keeper.py) on the GPU machine: its spins run
on a stream of their own and leave a graph replay on the tracker's stream correct. Whether it
pays is measured by benchmarks (``tools.bench.cli --pace-hz 0,60 --clock-keeper-us 0,500``),
not here."""

import time

import pytest
import torch

from sam2_ros.engine.clock_keeper import ClockKeeper

pytestmark = pytest.mark.gpu


def test_keeper_spins_beside_a_graph_replay():
    x = torch.randn(1024, 1024, device='cuda')
    static = x.clone()
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):          # warm-up before capture, as torch's docs do
        static @ static
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        out = static @ static
    keeper = ClockKeeper('cuda', 500)
    keeper.start()
    try:
        deadline = time.monotonic() + 30
        while keeper.spins < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(20):
            graph.replay()
        torch.cuda.synchronize()
    finally:
        keeper.stop()
    assert keeper.error is None and keeper.spins >= 5
    torch.testing.assert_close(out, x @ x)
