"""Every frame of a stream under one torch.profiler session: per frame its wall time there, its
GPU kernel time and the host calls inside it with the most time of their own (CUDA runtime
calls and aten ops; an op's children are not counted in it). Without Python stacks:
torch.profiler's ``with_stack`` names came back empty for the GPU's ops and, on the CPU,
its event names were sometimes undecodable bytes (a UnicodeDecodeError in ``events()``).

Why: in the 8-object interaction stream the slow frames are slow inside ``track`` (before the
masks reach the host) while the kernels of the frames profiled one by one stay the same; which
frames are slow is random, so a window misses them. Profiling the whole stream once shows, for
each slow frame, whether its time went to a host call (a graph launch, a pinned allocation, a
wait in ``cudaStreamSynchronize`` for slower GPU work) and to which.
"""

from __future__ import annotations

import bisect
from typing import Callable, Dict, List

from tools.bench.profiling import kernel_us

MARK = 'probe_frame_'     # record_function name of a frame: MARK + its index
TOP_CALLS = 6             # host calls kept per frame, longest first


class FrameTrace:
    """Profiles frames given to ``around`` (the benchmark's hook); ``frames()`` after ``stop``."""

    def __init__(self, cuda: bool) -> None:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        self.prof = profile(activities=acts)
        self.started = False

    def around(self, t: int, work: Callable[[], object]) -> object:
        import torch
        if not self.started:
            self.prof.__enter__()
            self.started = True
        with torch.profiler.record_function(f'{MARK}{t}'):
            return work()

    def stop(self) -> None:
        if self.started:
            self.prof.__exit__(None, None, None)
            self.started = False

    def frames(self) -> Dict[int, Dict[str, object]]:
        """Per frame index: wall_ms (its marker), kernel_ms and its longest host calls."""
        return per_frame(self.prof.events())


def per_frame(events) -> Dict[int, Dict[str, object]]:
    """``events`` (torch.profiler FunctionEvents) -> per frame marker: wall_ms, host_ops_ms (the
    own time of every host op in it; the rest of the wall ran outside any op), kernel_ms (CUDA
    kernels launched inside it, memcpy/memset excluded; 0 on the CPU) and top_calls
    [[name, ms], ...] (host events inside it by their own time, longest first, the marker
    left out)."""
    import torch
    cuda = torch.autograd.DeviceType.CUDA
    marks = sorted((e.time_range.start, e.time_range.end, int(e.name[len(MARK):]))
                   for e in events if e.name.startswith(MARK) and e.device_type != cuda)
    out: Dict[int, Dict[str, object]] = {
        t: {'wall_ms': round((end - start) / 1e3, 3), 'kernel_ms': 0.0, 'calls': []}
        for start, end, t in marks}

    starts = [start for start, _, _ in marks]

    def frame_of(us: float):
        i = bisect.bisect_right(starts, us) - 1       # the last frame starting at or before
        return marks[i][2] if i >= 0 and us <= marks[i][1] else None
    for e in events:
        if e.name.startswith(MARK):
            continue
        if e.device_type == cuda:
            # a frame ends after its masks' read-back, so its kernels ran inside its marker
            t = frame_of(e.time_range.start)
            us = kernel_us(e)
            if t is not None and us is not None:
                out[t]['kernel_ms'] += us / 1e3
            continue
        t = frame_of(e.time_range.start)
        if t is not None:        # self time: an enclosing op does not repeat its children's
            out[t]['calls'].append((self_us(e), e.name[:60]))
    for f in out.values():
        f['kernel_ms'] = round(f['kernel_ms'], 3)
        # the rest of the wall is outside every profiled op: Python, or the thread not running
        f['host_ops_ms'] = round(sum(c[0] for c in f['calls']) / 1e3, 3)
        f['top_calls'] = [[n, round(us / 1e3, 3)]
                          for us, n in sorted(f.pop('calls'), reverse=True)[:TOP_CALLS]]
    return out


def self_us(e) -> float:
    """An event's own host time, its children's left out (its whole span where the profiler
    gives no self time)."""
    own = getattr(e, 'self_cpu_time_total', None)
    return float(own) if own is not None else e.time_range.end - e.time_range.start


def slowest(frames: Dict[int, Dict[str, object]], n: int = 5) -> List[tuple]:
    """The n frames with the longest wall under the profiler: (index, its entry)."""
    return sorted(frames.items(), key=lambda kv: -kv[1]['wall_ms'])[:n]
