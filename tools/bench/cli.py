"""Benchmark CLI: official SAM 2 predictor variants and ours, side by side in one process.

    python -m tools.bench.cli --models tiny --res 512 --objects 1,3,10 \
        --variants official_eager,ours_eager,ours_graph,ours_graph_batched \
        --frames 60 --warmup 16 --out benchmarks/results/h200.json --table out/table.md

Per row (model, res, objects, variant): wall ms per frame p50/p99 over the measured frames
(the frame's masks of every object delivered to the host at source resolution), fps (from
p50), gpu_kernel_ms (sum of CUDA kernel durations per frame under torch.profiler, a few
steady frames after the measured ones), peak_mib (torch.cuda.max_memory_allocated since
the variant started, model included), compile_s (torch.compile time of compiled variants:
the extra wall time of the prompt and warm-up frames over steady ones; for ours_graph* the
CUDA graph capture seconds; null otherwise). The first ``--warmup`` frames after the
prompts are not measured (memory fills up over the first 16 frames).

Every row also carries ``run`` (one id per invocation: speed ratios are only meaningful
between rows of one run, same process, GPU and build) and, where missing, ``date``,
``commit`` ($SAM2_ROS_COMMIT when set, else ``git rev-parse --short HEAD``, '+dirty' when
sam2_ros/ has uncommitted changes), ``gpu`` and ``command``.

This file is the command line and the measurement loop; ``profiling.py`` measures where a
frame's GPU time goes, ``results.py`` writes the rows, tables and provenance.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import sys
import time
import traceback
from typing import Dict, Optional

import numpy as np

from tools.bench.profiling import breakdown, kernel_ms
from tools.bench.results import (csv, provenance, row_key, save_json, stamp, table,
                                    write_table)


def parse(argv=None) -> argparse.Namespace:
    from tools.bench.variants import VARIANTS
    p = argparse.ArgumentParser(prog='python -m tools.bench.cli',
                                description=__doc__.split('\n')[0])
    p.add_argument('--models', default='tiny')
    p.add_argument('--res', default='512')
    p.add_argument('--objects', default='1')
    p.add_argument('--variants', default=','.join(VARIANTS))
    p.add_argument('--frames', type=int, default=60, help='measured frames per row')
    p.add_argument('--slow-frames', type=int, default=30,
                   help='measured frames for official_eager rows with objects*model weight > 6')
    p.add_argument('--warmup', type=int, default=16, help='unmeasured frames after the prompts')
    p.add_argument('--profile-frames', type=int, default=5)
    p.add_argument('--pace-hz', default='0',
                   help='comma list of rates, each row measured once per rate: frames start '
                        'at that rate (a camera\'s cadence: the host idles between frames, as '
                        'in the node); 0: back to back; paced rows get the variant suffix '
                        '_pacedNhz')
    p.add_argument('--clock-keeper-us', default='0',
                   help='comma list: each row measured once per value with the GPU clock '
                        'keeper queuing a spin of that length after each frame '
                        '(sam2_ros/engine/clock_keeper.py; 0: none); rows with one get the '
                        'variant suffix _keepN')
    p.add_argument('--census', action='store_true',
                   help='print each row\'s kernel census (kernel groups: count and ms per frame) '
                        'and keep its kernel table (every kernel) in the extra file')
    p.add_argument('--device', default='cuda')
    p.add_argument('--precision', default='bf16', choices=('bf16', 'fp32'))
    p.add_argument('--out', default=None,
                   help='JSON list of rows (rows of the same key are replaced)')
    p.add_argument('--table', default=None, help='markdown file: the marked section is replaced')
    p.add_argument('--only', default=None,
                   help='explicit rows model@res:objects:variant;... instead of the full product')
    a = p.parse_args(argv)
    a.models, a.res, a.objects = csv(a.models), csv(a.res, int), csv(a.objects, int)
    a.variants = csv(a.variants)
    a.paces = csv(a.pace_hz, float)
    a.keepers = csv(a.clock_keeper_us, float)
    bad = [v for v in a.variants if v not in VARIANTS]
    if bad:
        p.error(f'unknown variants {bad}; known: {sorted(VARIANTS)}')
    return a


def _measured(a, model: str, objects: int, variant: str) -> int:
    weight = {'tiny': 1, 'small': 1.3, 'base_plus': 2, 'large': 3}.get(model, 1) * objects
    if variant == 'official_eager' and weight > 6:
        return min(a.frames, a.slow_frames)
    return a.frames


def run_row(a, model: str, res: int, objects: int, variant: str,
            pace_hz: float = 0.0, keeper_us: float = 0.0) -> Dict[str, object]:
    import torch
    from sam2_ros.engine import clock_keeper
    from tools.bench import variants as V
    n_meas = _measured(a, model, objects, variant)
    spec = V.Spec(model, res, objects, frames=1 + a.warmup + n_meas + 3 * a.profile_frames,
                  device=a.device, precision=a.precision)
    cuda = torch.device(a.device).type == 'cuda'
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    if variant in V.COMPILED:
        torch._dynamo.reset()
    t0 = time.perf_counter()
    run = V.VARIANTS[variant](spec)
    try:
        setup_s = time.perf_counter() - t0
        # after the set-up (as the node: at activate, after configure)
        keeper = clock_keeper.keep(a.device, keeper_us)
        warm = []
        for _ in range(a.warmup):
            t = time.perf_counter()
            run.step()
            warm.append(time.perf_counter() - t)
        ms = []
        start = time.perf_counter()
        for k in range(n_meas):
            if pace_hz > 0:          # the next frame's due time, as a camera delivers it
                time.sleep(max(0.0, start + k / pace_hz - time.perf_counter()))
            t = time.perf_counter()
            masks = run.step()
            ms.append((time.perf_counter() - t) * 1e3)
            # every object of every camera (two-camera variants: `objects` per camera)
            assert len(masks) == objects * run.info.get('cameras', 1), len(masks)
            assert masks[0].shape == (V.SRC_H, V.SRC_W), masks[0].shape
        p50, p99 = float(np.percentile(ms, 50)), float(np.percentile(ms, 99))
        clock_keeper.release(a.device)      # the kernel census counts the frames' kernels only
        if cuda:
            torch.cuda.synchronize()        # the last spin has ended
        gk = kernel_ms(run, a.profile_frames, a.device)
        peak = torch.cuda.max_memory_allocated() / 2 ** 20 if cuda else None
        parts = breakdown(run, a.profile_frames * 2, a.device)
        compile_s = run.compile_s
        if variant in V.COMPILED:
            # compile happens lazily in the prompt and warm-up frames: their extra time
            compile_s = setup_s + sum(warm) - (1 + a.warmup) * p50 / 1e3
        stats = dict(run.info.get('stats') or {})
        top = run.info.get('top_kernels_ms')
        n_kernels = run.info.get('kernels_per_frame')
        groups = run.info.get('kernel_groups')
        table = run.info.get('kernel_table') if a.census else None
        timeline = run.info.get('gpu_timeline')
        steady = steady_attention(run.info.get('tracker'))
    finally:
        clock_keeper.release(a.device)
        run.close()
        del run
        if variant in V.COMPILED:
            torch._dynamo.reset()
    if pace_hz > 0:
        variant = f'{variant}_paced{pace_hz:g}hz'
    kept = keeper_us > 0 and keeper.device.type == 'cuda'   # a CPU row has none
    if kept:                  # no suffix claims a keeper the row did not have
        variant = f'{variant}_keep{keeper_us:g}'
    row = dict(model=model, res=res, objects=objects, variant=variant,
               ms_p50=round(p50, 3), ms_p99=round(p99, 3), fps=round(1e3 / p50, 2),
               gpu_kernel_ms=None if gk is None else round(gk, 3),
               kernels_per_frame=n_kernels,
               peak_mib=None if peak is None else round(peak, 1),
               compile_s=None if compile_s is None else round(compile_s, 2))
    extra = {'measured_frames': n_meas, 'setup_s': round(setup_s, 2)}
    if kept:                  # its spins, skips and failure
        extra['clock_keeper'] = {'spins': keeper.spins, 'skipped': keeper.skipped,
                                 'error': keeper.error}
    if parts:
        extra['breakdown_ms'] = parts
    if stats:
        extra['stats'] = {k: int(v) for k, v in stats.items()}
    if top:
        extra['top_kernels_ms'] = top
    if groups:
        extra['kernel_groups'] = groups
    if table:                 # --census: every kernel, launches and ms per frame
        extra['kernel_table'] = table
    if timeline:
        extra['gpu_timeline'] = timeline
    if steady:
        extra['steady_attention'] = steady
    return row, extra


def steady_attention(tracker) -> Optional[dict]:
    """What configure chose for steady-state objects per (batch, cond) bucket (only those
    not sam2's call) and, with steady_attention 'auto', each candidate's ms per replay by batch
    size; None without step graphs."""
    graphs = getattr(getattr(tracker, 'runner', None), 'graphs', None)
    if graphs is None:
        return None
    steps = graphs.steps
    return {'choice': {f'{k.batch}x{k.cond}': v for k, v in steps.steady_choice.items()},
            'candidate_ms': {str(b): {n: round(t * 1e3, 4) for n, t in times.items()}
                             for b, times in steps.candidate_times.items()}}


def _rows(a):
    if a.only:
        for item in a.only.split(';'):
            mr, o, v = item.strip().split(':')
            m, r = mr.split('@')
            yield m, int(r), int(o), v
        return
    for m in a.models:
        for r in a.res:
            for o in a.objects:
                for v in a.variants:
                    yield m, r, o, v


def census_line(row: dict, groups: Dict[str, list]) -> str:
    """'census model@res xN variant: K kernels, T ms | group count/ms, ...' (most time first)."""
    body = ', '.join(f'{g} {c:g}/{ms:.3f}' for g, (c, ms) in groups.items())
    return (f"census {row['model']}@{row['res']} x{row['objects']} {row['variant']}: "
            f"{row['kernels_per_frame']} kernels, {row['gpu_kernel_ms']} ms | {body}")


def environment(device: str) -> Dict[str, str]:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.device(device).type == 'cuda' \
        else platform.processor() or 'cpu'
    return {'command': 'python -m tools.bench.cli ' + ' '.join(sys.argv[1:]),
            'GPU': gpu, 'torch': torch.__version__,
            'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}


def main(argv=None) -> int:
    a = parse(argv)
    import torch
    env = environment(a.device)
    if argv is not None:
        env['command'] = 'python -m tools.bench.cli ' + ' '.join(argv)
    prov = provenance(a.device, 'python -m tools.bench.cli',
                      sys.argv[1:] if argv is None else argv)
    env['run'], env['commit'] = prov['run'], prov['commit']
    print('#', env, flush=True)
    rows, failed = [], []
    side = (os.path.splitext(a.out)[0] + '_extra.json') if a.out else None
    extras = {}
    from sam2_ros.engine import clock_keeper
    # a device without a keeper (the CPU) measures each row once, not once per keeper
    keepers = [k for k in a.keepers if k == 0 or clock_keeper.keeps_clocks(a.device)] or [0.0]
    for m, r, o, v, pace, keep in ((*row, pace, keep) for row in _rows(a) for pace in a.paces
                                   for keep in dict.fromkeys(keepers)):
        t = time.perf_counter()
        try:
            with torch.inference_mode():
                row, extra = run_row(a, m, r, o, v, pace, keep)
        except Exception as exc:  # noqa: BLE001 - one failing row must not lose the others
            traceback.print_exc()
            failed.append({'model': m, 'res': r, 'objects': o, 'variant': v,
                           'error': repr(exc)[:500]})
            print(f'FAILED {m}@{r} x{o} {v}: {exc!r}', flush=True)
            continue
        rows.append(stamp(row, prov))
        extras['|'.join(map(str, row_key(row)[:4]))] = extra     # the GPU is the run's
        print(json.dumps(row), f'# {time.perf_counter() - t:.1f}s', extra, flush=True)
        if a.census and extra.get('kernel_groups'):
            print(census_line(row, extra['kernel_groups']), flush=True)
            sites = (extra.get('gpu_timeline') or {}).get('host_gaps_at')
            if sites:       # where the GPU waited for the host: before -> after, n, ms
                print(f"host gaps {row['model']}@{row['res']} x{row['objects']} "
                      f"{row['variant']}: " + ', '.join(
                          f'{before} -> {after} {n:g}/{ms:.3f}'
                          for before, after, n, ms in sites), flush=True)
        if a.out:                            # after every row: a timeout keeps what was done
            save_json(a.out, rows)
            json.dump({'env': env, 'rows': extras, 'failed': failed}, open(side, 'w'), indent=1)
    if a.out:
        save_json(a.out, rows)
        json.dump({'env': env, 'rows': extras, 'failed': failed}, open(side, 'w'), indent=1)
        all_rows = json.load(open(a.out))
    else:
        all_rows = rows
    text = table(all_rows, env)
    if a.table:
        write_table(a.table, text)
    print(text)
    return 1 if failed and not rows else 0


if __name__ == '__main__':
    sys.exit(main())
