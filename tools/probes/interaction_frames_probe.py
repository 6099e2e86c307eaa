"""Probe: every frame of the interaction benchmark's stream, with the kernels of a window.

    python -m tools.probes.interaction_frames_probe [--objects 1] [--corrections deferred]
        [--window 176-192] [--out $OUT/interaction_frames.json]

Why: with deferred corrections, tiny@512, the frames 3-10 after the correction at frame 180
took 9.1 ms at 1 object (13 at 8) against a p50 of 4.1 (7.5), with no prompt on them and
every step a graph replay; immediate corrections do not show it. The benchmark keeps only the
5 slowest frames. Here the same stream (``tools.bench.interaction.run_row``, the same
arguments) runs twice: once for the wall ms of every timed frame, once with the frames of
``--window`` each under torch.profiler, for their kernels per frame, kernel ms and census
groups. A frame whose kernels grow says which kernels; one whose kernels do not is host time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from types import SimpleNamespace
from typing import Callable, Dict, List, Optional, Tuple

import torch

from tools.bench import gc_watch
from tools.bench.interaction import run_row
from tools.probes import frame_trace, replay_watch
from tools.bench.profiling import kernel_ms, sync
from tools.bench.results import save_probe


def stream_args(a: argparse.Namespace) -> argparse.Namespace:
    """The interaction benchmark's arguments for this probe's stream (its defaults)."""
    return argparse.Namespace(model='tiny', res=a.res, checkpoint=None, random_weights=True,
                              seed=0, device=a.device, precision=a.precision, frames=a.frames,
                              w=1280, h=720, correct_every=60, new_at=150, precompile='',
                              tune_malloc=a.tune_malloc, gc_freeze=a.gc_freeze,
                              steady_frames=0)


def walls(a: argparse.Namespace
          ) -> Tuple[List[float], List[Optional[float]], List[float], List[Dict[str, float]]]:
    """Wall ms of every timed frame, as the benchmark times them, the engine_ms its result
    reports (``track`` to the masks' read-back on the host, before the per-object results are
    built) and its ms in Python's garbage collections: a slow frame whose engine_ms is slow
    too lost its time before the read-back completed, one whose engine_ms is not lost it after
    (building the host results); its gc ms says how much of that a collection took; its
    replay counters (``replay_watch``: first replays, pinned blocks created) say whether it
    paid a first-use cost."""
    ms: List[float] = []
    replays: List[Dict[str, float]] = []
    engine: List[Optional[float]] = []
    gc_ms: List[float] = []

    counts = replay_watch.ReplayWatch()

    def around(t: int, work: Callable[[], object]) -> object:
        if t == 1:
            counts.frame()      # the set-up frame's captures and first replays are not frame 1's
        with gc_watch.GcWatch() as watch:
            sync(a.device)
            t0 = time.perf_counter()
            out = work()
            sync(a.device)
            ms.append(round((time.perf_counter() - t0) * 1e3, 3))
        gc_ms.append(gc_watch.frame_ms(watch.take()))
        replays.append(counts.frame())
        e = getattr(out, 'engine_ms', None)
        engine.append(None if e is None else round(float(e), 3))
        return out
    with counts:
        run_row(stream_args(a), a.objects, 'batched', a.corrections, around=around)
    return ms, engine, gc_ms, replays


def kernels(a: argparse.Namespace, lo: int, hi: int) -> Dict[int, Dict[str, object]]:
    """Per frame of [lo, hi]: kernels, kernel ms and census groups of its work."""
    out: Dict[int, Dict[str, object]] = {}

    def around(t: int, work: Callable[[], object]) -> object:
        if not lo <= t <= hi:
            return work()
        box: List[object] = []
        run = SimpleNamespace(step=lambda: box.append(work()), info={})
        ms = kernel_ms(run, 1, a.device)      # None, without running it, on the CPU
        if not box:
            run.step()
        out[t] = {'kernels': run.info.get('kernels_per_frame'),
                  'kernel_ms': None if ms is None else round(ms, 3),
                  'groups': run.info.get('kernel_groups'),
                  'most_launched': run.info.get('most_launched'),
                  'host_gaps_ms': (run.info.get('gpu_timeline') or {}).get(
                      'host_gaps_ms_per_frame'),
                  'host_gaps_at': (run.info.get('gpu_timeline') or {}).get('host_gaps_at')}
        return box[0]
    run_row(stream_args(a), a.objects, 'batched', a.corrections, around=around)
    return out


def traced(a: argparse.Namespace) -> Dict[int, Dict[str, object]]:
    """The same stream once more, every timed frame under one profiler session
    (``frame_trace``): per frame its wall there, kernel ms and longest host calls."""
    trace = frame_trace.FrameTrace(cuda=torch.device(a.device).type == 'cuda')
    try:
        run_row(stream_args(a), a.objects, 'batched', a.corrections, around=trace.around)
    finally:
        trace.stop()
    return trace.frames()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--objects', type=int, default=1)
    p.add_argument('--corrections', default='deferred', choices=('deferred', 'immediate'))
    p.add_argument('--frames', type=int, default=200)
    p.add_argument('--window', default='176-192', help='frames profiled, lo-hi')
    p.add_argument('--res', type=int, default=512)
    p.add_argument('--device', default='cuda')
    p.add_argument('--precision', default='bf16', choices=('bf16', 'fp32'))
    p.add_argument('--tune-malloc', action='store_true',
                   help="raise glibc's mmap and trim thresholds first, as the node does "
                        "(its tune_malloc parameter): host buffers reused, no page faults")
    p.add_argument('--gc-freeze', action='store_true',
                   help='gc.freeze() after the set-up frame, as the node does after configure')
    p.add_argument('--trace', action='store_true',
                   help='a third pass with every frame under one profiler session: the '
                        'slowest frames with their kernel ms and longest host calls')
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'interaction_frames.json'))
    a = p.parse_args(argv)
    lo, hi = (int(x) for x in a.window.split('-'))
    if a.tune_malloc:
        from sam2_ros.ros.malloc import keep_large_buffers
        print(f'# tune_malloc: {keep_large_buffers()}', flush=True)
    with torch.inference_mode():
        ms, engine, gc_ms, replays = walls(a)
        prof = kernels(a, lo, hi)
        trace = traced(a) if a.trace else {}
    for t in range(lo, hi + 1):
        k = prof.get(t, {})
        print(f"frame {t}: {ms[t - 1]:7.3f} ms wall, engine_ms {engine[t - 1]}, "
              f"gc {gc_ms[t - 1]} ms, "
              f"{k.get('kernels')} kernels, "
              f"{k.get('kernel_ms')} ms kernels, host gaps {k.get('host_gaps_ms')} ms, "
              f"{k.get('groups')}", flush=True)
    for i in sorted(range(len(ms)), key=lambda i: -ms[i])[:5]:
        print(f'slow frame {i + 1}: {ms[i]:7.3f} ms wall, engine_ms {engine[i]}, '
              f'gc {gc_ms[i]} ms, {replays[i]}', flush=True)
    firsts = [i + 1 for i, r in enumerate(replays)
              if r['first_replays'] or r['host_allocs'] or r['captures']]
    print(f'frames with a first replay, a capture or a new pinned block: {firsts}', flush=True)
    for t, f in frame_trace.slowest(trace):
        print(f"traced slow frame {t}: {f['wall_ms']:7.3f} ms wall, {f['host_ops_ms']} ms in "
              f"host ops, {f['kernel_ms']} ms kernels, longest host calls {f['top_calls']}",
              flush=True)
    save_probe(a.out, [{'objects': a.objects, 'corrections': a.corrections,
                        'tune_malloc': a.tune_malloc, 'gc_freeze': a.gc_freeze,
                        'frame_ms': ms, 'engine_ms': engine, 'gc_ms': gc_ms,
                        'replays': replays,
                        'window': {str(t): v for t, v in prof.items()},
                        'trace': {str(t): v for t, v in trace.items()}}])
    return 0


if __name__ == '__main__':
    sys.exit(main())
