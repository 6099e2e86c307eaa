"""Where a benchmarked frame's time goes on the GPU: CUDA kernel time under torch.profiler,
the GPU timeline's idle gaps, and a per-stage breakdown of our tracker's frame.

Kept apart from the CLI (``cli.py``) and the result files (``results.py``): these functions
measure, nothing else; each returns None on the CPU, where there is no device timeline.
"""

from __future__ import annotations

import re
import time
from typing import Dict, List, Optional

TOP_KERNELS = 12   # kernels with the most GPU time per frame, kept in the extra JSON
# the census's kernel table: every kernel name (up to this many) with its launches and ms per
# frame, so which chains to fuse next can be read from a run's results without profiling again
KERNEL_TABLE = 120
HOST_GAP_SITES = 8  # gpu_timeline's host_gaps_at: the sites with the most waiting
GROUPS = (   # (group, pattern on the lower-cased kernel name), first match wins
    # our Triton kernels are named after their jit functions, `_<name>_kernel`; nothing of
    # torch, cuBLAS or cuDNN is named so (an earlier list of names left the newer ones 'other')
    ('ours_triton', r'^_[a-z0-9_]+_kernel$'),
    ('layer_norm', r'layer_norm'),
    ('flash', r'flash'),
    ('cudnn_sdpa', r'cudnn|fmha|sdpa|attention'),
    ('gemm', r'gemm|nvjet|cutlass|xmma|cublas|sm90_|splitk'),
    ('conv', r'conv|implicit|winograd|dgrad|wgrad'),
    ('copy', r'copy'),
    ('cast_or_elementwise', r'elementwise|vectorized|unrolled'),
    ('reduce', r'reduce|softmax|norm'),
    ('gather_scatter', r'index|gather|scatter|cat'),
    ('upsample', r'upsample|interp'),
)


def group_of(name: str) -> str:
    low = name.lower()
    return next((g for g, pat in GROUPS if re.search(pat, low)), 'other')


def sync(device: str) -> None:
    """Wait for the device's queued work (CUDA only), so a host clock brackets GPU time."""
    import torch
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize()


def kernel_ms(run, frames: int, device: str) -> Optional[float]:
    """GPU kernel busy time per frame: CUDA kernel durations summed over ``frames`` frames
    under torch.profiler (memcpy/memset excluded); None on the CPU."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    if torch.device(device).type != 'cuda' or frames <= 0:
        return None
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(frames):
            run.step()
        sync(device)
    return tally(prof.events(), frames, run.info, torch.autograd.DeviceType.CUDA)


def tally(events, frames: int, info: Dict[str, object], cuda) -> float:
    """Kernel ms per frame of profiler ``events`` (FunctionEvents; ``cuda``: the device type of
    kernels), memcpy/memset excluded; fills ``info`` with the top kernels by time, the most
    launched ones, every kernel's launches and time (``kernel_table``), the GPU timeline and
    the census groups, all per frame."""
    total_us, count = 0.0, 0
    per_name: Dict[str, float] = {}
    launches: Dict[str, int] = {}
    groups: Dict[str, List[float]] = {}
    intervals = []
    for e in events:
        if e.device_type != cuda:
            continue
        tr = getattr(e, 'time_range', None)
        if tr is not None:
            intervals.append((tr.start, tr.end, e.name[:60]))
        us = kernel_us(e)
        if us is None:
            continue
        total_us += us
        count += 1
        name = kernel_name(e.name)
        per_name[name] = per_name.get(name, 0.0) + us
        launches[name] = launches.get(name, 0) + 1
        g = groups.setdefault(group_of(e.name), [0, 0.0])
        g[0] += 1
        g[1] += us
    by_time = sorted(per_name.items(), key=lambda kv: -kv[1])
    info['top_kernels_ms'] = [[n, round(us / 1e3 / frames, 4)]
                              for n, us in by_time[:TOP_KERNELS]]
    # the most launched kernels: where glue (casts, copies, fills) comes from
    most = sorted(launches.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]
    info['most_launched'] = [[n, round(c / frames, 1)] for n, c in most]
    info['kernel_table'] = [[n, round(launches[n] / frames, 1), round(us / 1e3 / frames, 4)]
                            for n, us in by_time[:KERNEL_TABLE]]
    info['gpu_timeline'] = gpu_timeline(intervals, frames)
    info['kernels_per_frame'] = round(count / frames, 1)
    # the kernel census: per group, kernels and kernel ms per frame, most time first
    by_time = sorted(groups.items(), key=lambda kv: -kv[1][1])
    info['kernel_groups'] = {k: [round(c / frames, 1), round(us / 1e3 / frames, 4)]
                             for k, (c, us) in by_time}
    return total_us / 1e3 / frames


def kernel_name(name: str, width: int = 110) -> str:
    """A kernel's name in the tables, cut to ``width``: without ``void`` and PyTorch's
    namespaces, which pushed what tells two of its elementwise kernels apart (the functor:
    a copy, a cast, an add) past the cut."""
    for noise in ('void ', 'at::native::', '(anonymous namespace)::', 'c10::'):
        name = name.replace(noise, '')
    return name[:width]


def kernel_us(e) -> Optional[float]:
    """A device event's kernel time (us); None for a memcpy or memset, which are no kernels."""
    if e.name.lower().startswith(('memcpy', 'memset')):
        return None
    return e.device_time if hasattr(e, 'device_time') else e.cuda_time


def gpu_timeline(intervals: List[tuple], frames: int, short_us: float = 20.0) -> Dict[str, object]:
    """Where the GPU is idle, per frame, from the device intervals (start, end[, name]) in us
    of all kernels and copies. A gap shorter than ``short_us`` between consecutive device
    operations is launch latency (inside a CUDA graph, or between eagerly queued kernels); a
    longer one is the GPU waiting for the host (Python before the first kernel of a frame,
    after the last, or when the host falls behind). The gap after the last interval is not
    seen. With names, ``host_gaps_at`` says where in the frame the GPU waits: the
    ``HOST_GAP_SITES`` (operation before -> operation after) pairs with the most waiting,
    each [before, after, gaps per frame, ms per frame]."""
    if not intervals or frames <= 0:
        return {}
    ivs = sorted(intervals)
    short = long_ = 0.0
    n_short = n_long = 0
    end, last = ivs[0][1], ivs[0]
    sites: Dict[tuple, List[float]] = {}
    for iv in ivs[1:]:
        s, e = iv[0], iv[1]
        gap = s - end
        if gap > 0:
            if gap < short_us:
                short, n_short = short + gap, n_short + 1
            else:
                long_, n_long = long_ + gap, n_long + 1
                if len(iv) > 2:
                    site = sites.setdefault((last[2], iv[2]), [0, 0.0])
                    site[0] += 1
                    site[1] += gap
        if e >= end:
            end, last = e, iv
    out: Dict[str, object] = {
        'device_ops_per_frame': round(len(ivs) / frames, 1),
        'busy_ms_per_frame': round((end - ivs[0][0] - short - long_) / 1e3 / frames, 4),
        'short_gaps_ms_per_frame': round(short / 1e3 / frames, 4),
        'short_gaps_per_frame': round(n_short / frames, 1),
        'host_gaps_ms_per_frame': round(long_ / 1e3 / frames, 4),
        'host_gaps_per_frame': round(n_long / frames, 1)}
    if sites:
        top = sorted(sites.items(), key=lambda kv: -kv[1][1])[:HOST_GAP_SITES]
        out['host_gaps_at'] = [[before, after, round(n / frames, 2), round(us / 1e3 / frames, 4)]
                               for (before, after), (n, us) in top]
    return out


def breakdown(run, frames: int, device: str) -> Optional[Dict[str, float]]:
    """Where a frame of ours goes (ms per frame, each part bracketed by CUDA syncs, so the
    parts do not overlap), timed at the runner's public calls: preprocessing and image
    encoder (``encode_streams``), object steps (``track``: gather, replay or eager step),
    results (``results``: upsample, masks, stats and label to host). 'other' is the rest of
    track() (prompts, the bank's selection and writes, result objects) plus the caller."""
    import torch
    tr = run.info.get('tracker')
    if tr is None or torch.device(device).type != 'cuda' or frames <= 0:
        return None
    acc: Dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            torch.cuda.synchronize()
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            torch.cuda.synchronize()
            acc[name] = acc.get(name, 0.0) + time.perf_counter() - t
            return out
        return wrapper

    # the step encodes through encode_streams (one camera: encode_frame inside it); the
    # runner's own methods are wrapped on the instance and unwrapped afterwards
    parts = {'encode_streams': 'preprocess+encoder', 'track': 'objects', 'results': 'results'}
    for name, label in parts.items():
        setattr(tr.runner, name, timed(label, getattr(tr.runner, name)))
    try:
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(frames):
            run.step()
        total = time.perf_counter() - t
    finally:
        for name in parts:
            tr.runner.__dict__.pop(name, None)
    out = {k: round(v * 1e3 / frames, 3) for k, v in acc.items()}
    out['total'] = round(total * 1e3 / frames, 3)
    out['other'] = round(out['total'] - sum(v for k, v in out.items() if k != 'total'), 3)
    return out
