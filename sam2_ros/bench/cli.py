"""Benchmark CLI: official SAM 2 predictor variants and ours, side by side in one process.

    python -m sam2_ros.bench.cli --models tiny --res 512 --objects 1,3,10 \
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
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import secrets
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional

import numpy as np

KEYS = ('model', 'res', 'objects', 'variant', 'ms_p50', 'ms_p99', 'fps', 'gpu_kernel_ms',
        'peak_mib', 'compile_s')
BEGIN, END = '<!-- bench:begin -->', '<!-- bench:end -->'
TOP_KERNELS = 12   # kernels with the most GPU time per frame, kept in the extra JSON


def _csv(s: str, cast=str) -> List:
    return [cast(x) for x in s.split(',') if x.strip()]


def parse(argv=None) -> argparse.Namespace:
    from sam2_ros.bench.variants import VARIANTS
    p = argparse.ArgumentParser(prog='python -m sam2_ros.bench.cli',
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
    p.add_argument('--device', default='cuda')
    p.add_argument('--precision', default='bf16', choices=('bf16', 'fp32'))
    p.add_argument('--out', default=None,
                   help='JSON list of rows (rows of the same key are replaced)')
    p.add_argument('--table', default=None, help='markdown file: the marked section is replaced')
    p.add_argument('--only', default=None,
                   help='explicit rows model@res:objects:variant;... instead of the full product')
    a = p.parse_args(argv)
    a.models, a.res, a.objects = _csv(a.models), _csv(a.res, int), _csv(a.objects, int)
    a.variants = _csv(a.variants)
    bad = [v for v in a.variants if v not in VARIANTS]
    if bad:
        p.error(f'unknown variants {bad}; known: {sorted(VARIANTS)}')
    return a


def _sync(device: str) -> None:
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
    _sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(frames):
            run.step()
        _sync(device)
    total_us = 0.0
    per_name: Dict[str, float] = {}
    intervals = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            tr = getattr(e, 'time_range', None)
            if tr is not None:
                intervals.append((tr.start, tr.end))
            name = e.name.lower()
            if name.startswith('memcpy') or name.startswith('memset'):
                continue
            us = e.device_time if hasattr(e, 'device_time') else e.cuda_time
            total_us += us
            per_name[e.name[:90]] = per_name.get(e.name[:90], 0.0) + us
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]
    run.info['top_kernels_ms'] = [[n, round(us / 1e3 / frames, 4)] for n, us in top]
    run.info['gpu_timeline'] = gpu_timeline(intervals, frames)
    return total_us / 1e3 / frames


def gpu_timeline(intervals: List[tuple], frames: int, short_us: float = 20.0) -> Dict[str, float]:
    """Where the GPU is idle, per frame, from the device intervals (start, end) in us of all
    kernels and copies. A gap shorter than ``short_us`` between consecutive device operations
    is launch latency (inside a CUDA graph, or between eagerly queued kernels); a longer one
    is the GPU waiting for the host (Python before the first kernel of a frame, after the
    last, or when the host falls behind). The gap after the last interval is not seen."""
    if not intervals or frames <= 0:
        return {}
    ivs = sorted(intervals)
    short = long_ = 0.0
    n_short = n_long = 0
    end = ivs[0][1]
    for s, e in ivs[1:]:
        gap = s - end
        if gap > 0:
            if gap < short_us:
                short, n_short = short + gap, n_short + 1
            else:
                long_, n_long = long_ + gap, n_long + 1
        end = max(end, e)
    return {'device_ops_per_frame': round(len(ivs) / frames, 1),
            'busy_ms_per_frame': round((end - ivs[0][0] - short - long_) / 1e3 / frames, 4),
            'short_gaps_ms_per_frame': round(short / 1e3 / frames, 4),
            'short_gaps_per_frame': round(n_short / frames, 1),
            'host_gaps_ms_per_frame': round(long_ / 1e3 / frames, 4),
            'host_gaps_per_frame': round(n_long / frames, 1)}


def breakdown(run, frames: int, device: str) -> Optional[Dict[str, float]]:
    """Where a frame of ours goes (ms per frame, each part bracketed by CUDA syncs, so the
    parts do not overlap): preprocessing, image encoder, object steps (select, gather,
    replay or eager step, bank write, score read), results (upsample, masks and stats to
    host). 'other' is the rest of track() plus the caller."""
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

    tr.runner.encode_frame = timed('preprocess+encoder', tr.runner.encode_frame)
    tr._track_objects = timed('objects', tr._track_objects)
    tr._result = timed('results', tr._result)
    try:
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(frames):
            run.step()
        total = time.perf_counter() - t
    finally:
        for k in ('_track_objects', '_result'):
            tr.__dict__.pop(k, None)
        tr.runner.__dict__.pop('encode_frame', None)
    out = {k: round(v * 1e3 / frames, 3) for k, v in acc.items()}
    out['total'] = round(total * 1e3 / frames, 3)
    out['other'] = round(out['total'] - sum(v for k, v in out.items() if k != 'total'), 3)
    return out


def _measured(a, model: str, objects: int, variant: str) -> int:
    weight = {'tiny': 1, 'small': 1.3, 'base_plus': 2, 'large': 3}.get(model, 1) * objects
    if variant == 'official_eager' and weight > 6:
        return min(a.frames, a.slow_frames)
    return a.frames


def run_row(a, model: str, res: int, objects: int, variant: str) -> Dict[str, object]:
    import torch
    from sam2_ros.bench import variants as V
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
        warm = []
        for _ in range(a.warmup):
            t = time.perf_counter()
            run.step()
            warm.append(time.perf_counter() - t)
        ms = []
        for _ in range(n_meas):
            t = time.perf_counter()
            masks = run.step()
            ms.append((time.perf_counter() - t) * 1e3)
            assert len(masks) == objects and masks[0].shape == (V.SRC_H, V.SRC_W), \
                (len(masks), masks[0].shape)
        p50, p99 = float(np.percentile(ms, 50)), float(np.percentile(ms, 99))
        gk = kernel_ms(run, a.profile_frames, a.device)
        peak = torch.cuda.max_memory_allocated() / 2 ** 20 if cuda else None
        parts = breakdown(run, a.profile_frames * 2, a.device)
        compile_s = run.compile_s
        if variant in V.COMPILED:
            # compile happens lazily in the prompt and warm-up frames: their extra time
            compile_s = setup_s + sum(warm) - (1 + a.warmup) * p50 / 1e3
        stats = dict(run.info.get('stats') or {})
        top = run.info.get('top_kernels_ms')
        timeline = run.info.get('gpu_timeline')
    finally:
        run.close()
        del run
        if variant in V.COMPILED:
            torch._dynamo.reset()
    row = dict(model=model, res=res, objects=objects, variant=variant,
               ms_p50=round(p50, 3), ms_p99=round(p99, 3), fps=round(1e3 / p50, 2),
               gpu_kernel_ms=None if gk is None else round(gk, 3),
               peak_mib=None if peak is None else round(peak, 1),
               compile_s=None if compile_s is None else round(compile_s, 2))
    extra = {'measured_frames': n_meas, 'setup_s': round(setup_s, 2)}
    if parts:
        extra['breakdown_ms'] = parts
    if stats:
        extra['stats'] = {k: int(v) for k, v in stats.items()}
    if top:
        extra['top_kernels_ms'] = top
    if timeline:
        extra['gpu_timeline'] = timeline
    return row, extra


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


def _key(row):
    return (row['model'], row['res'], row['objects'], row['variant'])


def save_json(path: str, rows: List[dict]) -> None:
    old = []
    if os.path.exists(path):
        try:
            old = json.load(open(path))
        except ValueError:
            old = []
    new = {_key(r): r for r in rows}
    merged = [r for r in old if _key(r) not in new] + rows
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(merged, f, indent=1)


def _fmt(v, nd=2):
    if v is None:
        return '-'
    return f'{v:.{nd}f}' if isinstance(v, float) else str(v)


def table(rows: List[dict], header: Dict[str, str]) -> str:
    """Markdown: header lines, then one table with speedups vs official_eager (fps ratio),
    each taken only against the official_eager row of the same run (rows from different
    runs saw different GPU clocks and neighbours: their ratio would mislead)."""
    base = {(r['model'], r['res'], r['objects'], r.get('run')): r['fps'] for r in rows
            if r['variant'] == 'official_eager'}
    order = {'tiny': 0, 'small': 1, 'base_plus': 2, 'large': 3}
    vorder = ['official_eager', 'official_vos', 'official_compile_default',
              'ours_eager_noprecast', 'ours_eager', 'ours_graph_noprecast', 'ours_graph',
              'ours_graph_noio', 'ours_graph_compiled', 'ours_graph_batched',
              'ours_graph_batched_compiled']
    rows = sorted(rows, key=lambda r: (
        order.get(r['model'], 9), r['res'], r['objects'],
        vorder.index(r['variant']) if r['variant'] in vorder else 9))
    out = [f'- {k}: {v}' for k, v in header.items()]
    out += ['', '| model | res | objects | variant | ms p50 | ms p99 | fps | x official_eager '
                '| GPU kernel ms | wall / kernel | peak MiB | compile_s |',
            '|---|---|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        b = base.get((r['model'], r['res'], r['objects'], r.get('run')))
        ratio = f"{r['fps'] / b:.2f}x" if b else '-'
        wk = f"{r['ms_p50'] / r['gpu_kernel_ms']:.2f}" if r.get('gpu_kernel_ms') else '-'
        out.append(f"| {r['model']} | {r['res']} | {r['objects']} | {r['variant']} | "
                   f"{_fmt(r['ms_p50'])} | {_fmt(r['ms_p99'])} | {_fmt(r['fps'], 1)} | {ratio} | "
                   f"{_fmt(r['gpu_kernel_ms'])} | {wk} | {_fmt(r['peak_mib'], 0)} | "
                   f"{_fmt(r['compile_s'])} |")
    return '\n'.join(out) + '\n'


def write_table(path: str, text: str) -> None:
    """Replace the marked section of ``path`` (appended if absent)."""
    doc = open(path).read() if os.path.exists(path) else '# Benchmarks\n'
    block = f'{BEGIN}\n{text}{END}'
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip('\n') + '\n\n' + block + '\n'
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        f.write(doc)


def environment(device: str) -> Dict[str, str]:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.device(device).type == 'cuda' \
        else platform.processor() or 'cpu'
    return {'command': 'python -m sam2_ros.bench.cli ' + ' '.join(sys.argv[1:]),
            'GPU': gpu, 'torch': torch.__version__,
            'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}


def run_id() -> str:
    """One id per benchmark invocation (UTC time plus a random suffix, so two runs started
    the same second differ): a ratio between rows is only taken between rows of one run."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime('%Y%m%dT%H%M%SZ') + '-' + secrets.token_hex(3)


def git_commit() -> Optional[str]:
    """$SAM2_ROS_COMMIT when set, else the short hash of the checkout this package runs
    from (with '+dirty' when sam2_ros/ differs from it), else None. The variable wins: the GPU
    machine's copy of the tree comes with a stale .git (it answered 80d7076 at dedbfb9), so
    there only the caller knows what was measured."""
    env = os.environ.get('SAM2_ROS_COMMIT')
    if env:
        return env
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True,
                             text=True, timeout=10, cwd=pkg)
        if out.returncode != 0 or not out.stdout.strip():
            return None
        dirty = subprocess.run(['git', 'diff', '--quiet', 'HEAD', '--', '.'], cwd=pkg,
                               capture_output=True, timeout=10).returncode == 1
        return out.stdout.strip() + ('+dirty' if dirty else '')
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(device: str, prog: str, argv: List[str]) -> Dict[str, Optional[str]]:
    """The fields every row of one invocation shares: run id, date, commit, GPU, command."""
    import torch
    gpu = torch.cuda.get_device_name(torch.device(device)) \
        if torch.device(device).type == 'cuda' else 'cpu'
    return {'run': run_id(),
            'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
            'commit': git_commit(), 'gpu': gpu, 'command': ' '.join([prog, *argv])}


def stamp(row: dict, prov: Dict[str, Optional[str]]) -> dict:
    """Set the row's ``run`` to this invocation's; add the other provenance fields where the
    row has none (a row that brings its own keeps it)."""
    row['run'] = prov['run']
    for k, v in prov.items():
        row.setdefault(k, v)
    return row


def main(argv=None) -> int:
    a = parse(argv)
    import torch
    env = environment(a.device)
    if argv is not None:
        env['command'] = 'python -m sam2_ros.bench.cli ' + ' '.join(argv)
    prov = provenance(a.device, 'python -m sam2_ros.bench.cli',
                      sys.argv[1:] if argv is None else argv)
    env['run'], env['commit'] = prov['run'], prov['commit']
    print('#', env, flush=True)
    rows, failed = [], []
    side = (os.path.splitext(a.out)[0] + '_extra.json') if a.out else None
    extras = {}
    for m, r, o, v in _rows(a):
        t = time.perf_counter()
        try:
            with torch.inference_mode():
                row, extra = run_row(a, m, r, o, v)
        except Exception as exc:  # noqa: BLE001 - one failing row must not lose the others
            traceback.print_exc()
            failed.append({'model': m, 'res': r, 'objects': o, 'variant': v,
                           'error': repr(exc)[:500]})
            print(f'FAILED {m}@{r} x{o} {v}: {exc!r}', flush=True)
            continue
        rows.append(stamp(row, prov))
        extras['|'.join(map(str, _key(row)))] = extra
        print(json.dumps(row), f'# {time.perf_counter() - t:.1f}s', extra, flush=True)
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
