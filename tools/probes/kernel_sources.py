"""Probe: which source lines launch the kernels of a steady tracked frame, on the path the CUDA
graphs replay (fused kernels included).

    python -m tools.probes.kernel_sources [--model tiny] [--res 512] [--objects 1]
        [--out $OUT/kernel_sources.json]

Why: a kernel census by kernel name (``kernel_census.py``) says "112 elementwise kernels", not
which line of sam2 or of ours launches them, and graph replays carry no Python stacks. Here
every function captured into a graph is remembered with the autocast and inference-mode state
of its capture; steady frames record which graphs they replay; each replayed graph's function
is then run once eagerly under ``torch.profiler`` and each kernel is
attributed to the innermost function of sam2 or sam2_ros.engine around the op that launched
it (``instrument``: record_function ranges around every such function). The replays' own
kernel count is printed beside the eager re-run's, so a mismatch shows.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import sys
import types
from typing import Dict, List, Optional, Tuple

import torch

from tools.bench.profiling import group_of, kernel_name

def instrument(prefixes=('sam2_ros.engine', 'sam2.')) -> int:
    """Wrap every function and method defined in the modules under ``prefixes`` in a
    ``record_function('src:<module>.<qualname>')`` range (also where another module imported
    it by name), so the profiler's event tree says which of them launched a kernel. Python
    function tracing (``with_stack``) is not used: it did not link ops to their functions on
    the GPU machine's torch. Returns the number of functions wrapped."""
    wrapped: Dict[int, object] = {}

    def wrap(fn, label):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            with torch.profiler.record_function('src:' + label):
                return fn(*args, **kwargs)
        wrapped[id(fn)] = inner
        return inner
    mods = [(n, m) for n, m in list(sys.modules.items())
            if m is not None and n.startswith(prefixes)]
    for name, mod in mods:
        for attr, obj in list(vars(mod).items()):
            if isinstance(obj, types.FunctionType) and obj.__module__ == name:
                setattr(mod, attr, wrap(obj, f'{name}.{attr}'))
            elif isinstance(obj, type) and obj.__module__ == name:
                for m_name, m in list(vars(obj).items()):
                    if isinstance(m, types.FunctionType):
                        setattr(obj, m_name, wrap(m, f'{name}.{obj.__qualname__}.{m_name}'))
    for name, mod in mods:                 # names imported with `from x import f`
        for attr, obj in list(vars(mod).items()):
            if isinstance(obj, types.FunctionType) and id(obj) in wrapped:
                setattr(mod, attr, wrapped[id(obj)])
    return len(wrapped)


def source_of(event) -> Optional[str]:
    """The innermost instrumented function around a profiler event (its ``cpu_parent``
    chain), with the next enclosing one of another module after '<'; None outside them."""
    labels, q = [], event
    while q is not None and len(labels) < 2:
        if q.name.startswith('src:'):
            label = q.name[4:]
            if not labels or label.rsplit('.', 2)[0] != labels[0].rsplit('.', 2)[0]:
                labels.append(label)
        q = q.cpu_parent
    return ' < '.join(labels) if labels else None


class Recorder:
    """Patches Capturer.capture (remember fn, inputs, context per graph) and CUDAGraph.replay
    (count replays while ``recording``)."""

    def __init__(self):
        from sam2_ros.engine.cuda import capture as capture_mod
        self.captured: Dict[int, Tuple[object, object, tuple]] = {}
        self.replays: collections.Counter = collections.Counter()
        self.recording = False
        orig_capture, orig_replay = capture_mod.Capturer.capture, torch.cuda.CUDAGraph.replay
        rec = self

        def capture(self_, fn, inputs):
            cap = orig_capture(self_, fn, inputs)
            ctx = (torch.is_autocast_enabled('cuda'), torch.get_autocast_dtype('cuda'),
                   torch.is_inference_mode_enabled())
            rec.captured[id(cap.graph)] = (fn, inputs, ctx)
            return cap

        def replay(self_):
            if rec.recording:
                rec.replays[id(self_)] += 1
            return orig_replay(self_)
        capture_mod.Capturer.capture = capture
        torch.cuda.CUDAGraph.replay = replay


def rerun(fn, inputs, ctx) -> None:
    autocast_on, dtype, inference = ctx
    with torch.inference_mode(inference), torch.autocast('cuda', dtype=dtype,
                                                          enabled=autocast_on):
        fn(inputs)


def attribute(prof, weight: float, by_source: Dict[str, list], by_name: Dict[str, list]) -> int:
    """Add the profile's kernels (x weight) to the tables; returns the kernel count."""
    n = 0
    attributed = set()
    for e in prof.events():
        kernels = getattr(e, 'kernels', None)
        if e.device_type != torch.autograd.DeviceType.CPU or not kernels:
            continue
        src = source_of(e) or f'(no sam2 frame) {e.name}'
        for k in kernels:
            attributed.add((k.name, getattr(k, 'duration', 0)))
            row = by_source.setdefault(src, [0.0, 0.0, collections.Counter()])
            row[0] += weight
            row[1] += weight * k.duration
            row[2][group_of(k.name)] += weight
            n += 1
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        low = e.name.lower()
        if low.startswith('memcpy') or low.startswith('memset'):
            continue
        row = by_name.setdefault(kernel_name(e.name), [0.0, 0.0])
        row[0] += weight
        row[1] += weight * (e.device_time if hasattr(e, 'device_time') else e.cuda_time)
    return n


def main(argv=None) -> int:
    from torch.profiler import ProfilerActivity, profile

    from tools.probes.kernel_census import make
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--model', default='tiny')
    p.add_argument('--res', type=int, default=512)
    p.add_argument('--objects', type=int, default=1)
    p.add_argument('--frames', type=int, default=4)
    p.add_argument('--top', type=int, default=70)
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'kernel_sources.json'))
    a = p.parse_args(argv)
    rec = Recorder()
    tr, frames, _ = make(a.model, a.res, a.objects, True, 'bf16')
    for f in frames[1:21]:                          # past the 15 frames after a prompt
        tr.track(f)
    torch.cuda.synchronize()
    rec.recording = True
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for f in frames[21:21 + a.frames]:
            tr.track(f)
        torch.cuda.synchronize()
    rec.recording = False
    print('instrumented', instrument(), 'functions', flush=True)
    replay_kernels = sum(1 for e in prof.events()
                         if e.device_type == torch.autograd.DeviceType.CUDA
                         and not e.name.lower().startswith(('memcpy', 'memset'))) / a.frames
    by_source: Dict[str, list] = {}
    by_name: Dict[str, list] = {}
    per_graph = []
    eager_total = 0.0
    for gid, count in rec.replays.items():
        if gid not in rec.captured:
            per_graph.append({'graph': gid, 'replays_per_frame': count / a.frames,
                              'note': 'not captured through Capturer'})
            continue
        fn, inputs, ctx = rec.captured[gid]
        rerun(fn, inputs, ctx)                      # lazy state, as before a capture
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as gp:
            rerun(fn, inputs, ctx)
            torch.cuda.synchronize()
        w = count / a.frames
        n = attribute(gp, w, by_source, by_name)
        eager_total += n * w
        per_graph.append({'graph': gid, 'fn': getattr(fn, '__qualname__', repr(fn)),
                          'replays_per_frame': w, 'kernels_attributed': n})
    top = sorted(by_source.items(), key=lambda kv: -kv[1][0])[:a.top]
    result = {
        'model': a.model, 'res': a.res, 'objects': a.objects, 'gpu': torch.cuda.get_device_name(),
        'torch': torch.__version__, 'replay_kernels_per_frame': replay_kernels,
        'eager_rerun_kernels_attributed_per_frame': eager_total,
        'eager_rerun_kernels_by_name_per_frame': sum(v[0] for v in by_name.values()),
        'graphs': per_graph,
        'sources': [{'source': s, 'kernels': round(v[0], 2), 'us': round(v[1], 1),
                     'groups': dict(v[2])} for s, v in top],
        'names': [{'name': n, 'kernels': round(v[0], 2), 'us': round(v[1], 1)}
                  for n, v in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:a.top]],
    }
    print(f"{a.model}@{a.res} x{a.objects}: replays {replay_kernels:.0f} kernels/frame; eager "
          f"re-run {eager_total:.0f} attributed, "
          f"{result['eager_rerun_kernels_by_name_per_frame']:.0f} by name")
    for r in result['sources'][:45]:
        print(f"{r['kernels']:7.2f} {r['us']:8.1f}us  {r['source'][:110]}  {r['groups']}")
    os.makedirs(os.path.dirname(a.out) or '.', exist_ok=True)
    with open(a.out, 'w') as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
