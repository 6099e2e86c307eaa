"""The GPU clock keeper (sam2_ros/engine/clock_keeper.py) on the GPU machine: its spin is
queued behind the frame's work on a stream of its own, leaves a graph replay on the tracker's
stream correct, and is not followed by another while it runs. Whether it pays is measured by
benchmarks (``tools.bench.cli --pace-hz 0,60 --clock-keeper-us 0,12000``), not here."""

import pytest
import torch

from sam2_ros.engine import clock_keeper

pytestmark = pytest.mark.gpu


def test_a_spin_follows_the_frame_and_leaves_graph_replays_correct():
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
    keeper = clock_keeper.keep('cuda', 20000)       # 20 ms: still running below
    try:
        for _ in range(20):
            graph.replay()
        clock_keeper.frame_done('cuda')
        clock_keeper.frame_done('cuda')              # the first still spins: skipped
        graph.replay()
        torch.cuda.current_stream().synchronize()    # the frame's stream, not the spin's
        torch.testing.assert_close(out, x @ x)
        assert (keeper.spins, keeper.skipped, keeper.error) == (1, 1, None)
        torch.cuda.synchronize()                     # the spin ends by itself
        assert clock_keeper.frame_done('cuda') is None and keeper.spins == 2
    finally:
        clock_keeper.release('cuda')
    torch.cuda.synchronize()
