"""Render the tables of docs/performance.md, reliability.md and image_mode.md from the results.

    python -m tools.bench.report            # rewrite the marked sections in place
    python -m tools.bench.report --check    # exit 1 if a doc is not what the files give

Every number in these docs' tables comes from a results file through this module, so
a table can not drift from the data it claims to show: each section sits between
``<!-- report:NAME:begin -->`` and ``<!-- report:NAME:end -->`` and is rewritten whole. The
prose around the sections is the doc's own. Each table states the date, commit, GPU and
command of its rows (from the rows' provenance fields; '-' where a source recorded none).
The image-mode sections are rendered by ``report_image.py``, the markdown pieces shared by
both come from ``markdown.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Callable, Dict, List, Optional

from tools.bench.markdown import load as _load, prov as _prov, sig3 as _g, table as _table
from tools.bench.report_image import image_mode, preprocess
from tools.bench.results import fmt as _f, gpu_short

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, 'benchmarks', 'results')
DOC = os.path.join(ROOT, 'docs', 'performance.md')
# every doc with marked sections (soak, equivalence and drift live in reliability.md, image
# mode in image_mode.md)
DOCS = (DOC, os.path.join(ROOT, 'docs', 'reliability.md'),
        os.path.join(ROOT, 'docs', 'image_mode.md'))
MODELS = {'tiny': 0, 'small': 1, 'base_plus': 2, 'large': 3}




def _h200(rows: List[dict]) -> List[dict]:
    """The rows measured on the H200 (rows of another card sit beside them in the file)."""
    return [r for r in rows if _is_h200(r)]


def _is_h200(row: dict) -> bool:
    return 'H200' in str(row.get('gpu', 'H200'))      # rows from before the GPU was kept


def engine_current(results: str) -> List[str]:
    """The newest engine run (one `run` id) with an official_eager row, or the newest run
    where none has one (a run of a few rows, e.g. paced ones, is not the headline run):
    ratios are only taken within one run. The H200's rows only (the targets are its)."""
    rows = [r for r in _h200(_load('h200.json', results)) if r.get('run')]
    with_official = [r for r in rows if r['variant'] == 'official_eager'] or rows
    run = max(with_official, key=lambda r: (r['date'], r['run']))['run']
    rows = [r for r in rows if r['run'] == run]
    base = {(r['model'], r['res'], r['objects']): r['ms_p50'] for r in rows
            if r['variant'] == 'official_eager'}
    body = []
    for r in rows:
        b = base.get((r['model'], r['res'], r['objects']))
        body.append([f"{r['model']}@{r['res']}", r['objects'], r['variant'], _f(r['ms_p50']),
                     _f(r['ms_p99']), _f(r['gpu_kernel_ms']), _f(r.get('kernels_per_frame'), 0),
                     f"{b / r['ms_p50']:.2f}x" if b else '-', _f(r['compile_s'])])
    return _prov(rows[:1]) + [''] + _table(
        ['model', 'objects', 'variant', 'ms p50', 'ms p99', 'GPU kernel ms', 'kernels',
         'x official_eager (same run)', 'capture s'], body)


def _prov_runs(rows: List[dict]) -> List[str]:
    """Like _prov, but one line per date, commit and command with its ``--only`` list left
    out (the matrix script calls the bench once per group of rows; each row's full command
    is in the file)."""
    seen: Dict[tuple, int] = {}
    for r in rows:
        cmd = r.get('command') and re.sub(r'--only \S+', '--only <rows>', r['command'])
        k = (r.get('date') and r['date'][:10], r.get('commit'), r.get('gpu'), cmd)
        seen[k] = seen.get(k, 0) + 1
    return [f"- {_f(d)}, commit {_f(c)}, {_f(g)} ({n} result{'s' if n > 1 else ''}): `{_f(cmd)}`"
            for (d, c, g, cmd), n in sorted(seen.items(), key=lambda kv: str(kv[0][:2]),
                                            reverse=True)]


MATRIX_OBJECTS = (1, 3, 10)


def engine_matrix(results: str) -> List[str]:
    """Every model, resolution and object count, newest row per key: ms p50 per frame of the
    default configuration (``ours_graph_batched``) and of ``official_eager``, one cell per
    object count. ``ours_eager`` and ``ours_graph`` of the same keys stay in the file. The
    H200's rows only."""
    rows = _h200(_load('h200.json', results))
    cols = ('ours_graph_batched', 'official_eager')
    by: Dict[tuple, Dict[tuple, dict]] = {}
    for r in rows:
        if r['variant'] in cols:
            by.setdefault((MODELS.get(r['model'], 9), r['model'], r['res']),
                          {})[(r['objects'], r['variant'])] = r
    body = []
    for k in sorted(by):
        cells = by[k]
        commits = sorted({str(c.get('commit')) for c in cells.values()})
        body.append([f'{k[1]}@{k[2]}'] + [' / '.join(
            _f(cells[(n, v)]['ms_p50']) if (n, v) in cells else '-' for v in cols)
            if any((n, v) in cells for v in cols) else '-'
            for n in MATRIX_OBJECTS] + [', '.join(commits)])
    used = [r for r in rows if r['variant'] in cols]
    return _prov_runs(used) + [''] + _table(
        ['model'] + [f"{n} object{'s' if n > 1 else ''}" for n in MATRIX_OBJECTS]
        + ['commit'], body)


def interaction(results: str) -> List[str]:
    rows = _load('h200_interaction.json', results)
    body = [[f"{r['model']}@{r['res']}", gpu_short(r), r['objects'], r['variant'],
             r.get('corrections', 'immediate'), _f(r['ms_p50']),
             _f(r['ms_p99']), f"{r['ms_p99'] / r['ms_p50']:.2f}",
             _f((r.get('steady') or {}).get('p99_over_p50')), _f(r['ms_max']),
             r['eager_steps'], f"{r.get('prompt_graph_steps')} / {r.get('prompt_steps')}",
             r['fallbacks']] for r in rows]
    return _prov(rows) + [''] + _table(
        ['model', 'GPU', 'objects', 'graph_mode', 'corrections', 'ms p50', 'ms p99', 'p99 / p50',
         'steady p99 / p50', 'ms max', 'eager steps', 'prompt graphs / prompts', 'fallbacks'],
        body)


# the node's targets at 720p60 on the H200, image -> mask p99 (ms) with no deadline miss (a
# mask after the camera's next image), per camera: one camera by input and object count
# (issue 27), one node serving two cameras by objects per camera (issue 28); two nodes for two
# cameras are the comparison, without a target
NODE_TARGET_P99_MS = {(1, 'raw'): {1: 8.0, 3: 10.0, 8: 12.0}, (1, 'jpeg'): {1: 7.0, 8: 12.0},
                      (2, 'raw'): {1: 10.0, 3: 12.0}}


def node_target(r: dict) -> str:
    """'met' / 'missed' against the targets, '-' where none applies (other rates, sizes,
    object counts, two nodes for two cameras, or a row from before deadline misses were
    counted)."""
    cameras = r.get('cameras', 1)
    if cameras > 1 and r.get('node_per_camera', True):
        return '-'
    if not _is_h200(r):                             # the targets are the H200 host's
        return f'- ({gpu_short(r)})'
    target = NODE_TARGET_P99_MS.get((cameras, r.get('input', 'raw')), {}).get(r['objects'])
    if target is None or r.get('camera_hz') != 60 or (r['width'], r['height']) != (1280, 720) \
            or r.get('deadline_misses') is None or r.get('e2e_mask_p99') is None:
        return '-'
    ok = r['e2e_mask_p99'] <= target and r['deadline_misses'] == 0
    return f"{'met' if ok else 'missed'} (p99 <= {target:g}, 0 misses)"


def _node_prov(rows: List[dict]) -> List[str]:
    """One line per run of the matrix script (each row's command is in the file), one per
    command for rows from before runs had ids."""
    runs: Dict[str, List[dict]] = {}
    for r in rows:
        if r.get('run'):
            runs.setdefault(r['run'], []).append(r)
    out = [f"- {_f(g[0].get('date'))}, commit {_f(g[0].get('commit'))}, {_f(g[0].get('gpu'))}, "
           f"run {run}: {len(g)} rows of `scripts/gpu/gpu_node_latency.sh` (each row's "
           f"`python -m tools.bench.node_latency ...` command is in the file)"
           for run, g in runs.items()]
    old = [r for r in rows if not r.get('run')]
    if not old:
        return out
    cmds = sorted({str(r.get('command')) for r in old})
    common = os.path.commonprefix(cmds).rsplit(' --', 1)[0] if len(cmds) > 1 else cmds[0]
    dates = sorted({_f(r.get('date') and r['date'][:10]) for r in old})
    return out + [f"- {', '.join(dates)}, {_f(old[0].get('gpu'))}: {len(old)} rows from before "
                  f"runs had ids, `{common} ...` (each row's command and commit are in the file)"]


def node_latency(results: str) -> List[str]:
    """The node rows of h200_node_latency.json, then its DDS probe rows (``kind`` dds_probe:
    one image between two processes, the transport alone)."""
    rows = _load('h200_node_latency.json', results)
    probes = [r for r in rows if r.get('kind') == 'dds_probe']
    rows = [r for r in rows if r.get('kind') != 'dds_probe']
    rows = sorted(rows, key=lambda r: (str(r.get('date')), r.get('run') or ''), reverse=True)
    body = []
    for r in rows:
        misses = r.get('deadline_misses')
        body.append([
            f"{_f(r['camera_hz'], 0)} Hz {r['width']}x{r['height']}",
            f"{r['cameras']} ({r['camera']}: {r.get('device')})", r['objects'], _nodes(r),
            _f(r.get('graph_mode')), _f(r.get('transport')), _f(r.get('input', 'raw')),
            {True: 'yes', False: 'no'}.get(r.get('image_receiver_process'), '-'),
            'yes' if r.get('overlay') else 'no',
            {True: 'on', False: 'off'}.get(r.get('pipeline'), '-'),
            {True: 'on', False: 'off'}.get(r.get('tune_malloc'), '-'), _other(r),
            r.get('corrections', 0),
            f"{_f(r.get('e2e_mask_p50'), 1)} / {_f(r.get('e2e_mask_p99'), 1)}",
            _f(r.get('e2e_state_p99'), 1), _f(r.get('engine_p50'), 1),
            '-' if misses is None else f"{misses} / {r['frames']}", _split(r), node_target(r),
            f"{_f(r.get('date'))}, {_f(r.get('commit'))}, {gpu_short(r)}"])
    out = _node_prov(rows) + [''] + _table(
        ['camera', 'cameras (this one: device)', 'objects', 'node per camera', 'graph_mode',
         'transport', 'input', 'receiver process',
         'overlay subscribed', 'pipeline', 'tune_malloc', 'precompile, other', 'corrections',
         'image -> mask p50 / p99 ms',
         'image -> state p99 ms', 'engine p50 ms', 'deadline misses / frames',
         'split p50 / p99 ms: DDS in, hand-offs, decode, engine, mask publish, DDS out',
         'target', 'date, commit, GPU'], body)
    probe = [[p['name'], _f(p['p50_ms']), _f(p['p90_ms']), _f(p['p99_ms']), _f(p['max_ms']),
              f"{p['received']} / {p['sent']}"] for p in probes]
    return out + ['', 'One 720p rgb8 image between two processes (`dds_probe`, same machine; '
                  'the `dds_probe` rows of the same file; 30 Hz, rclpy messages both sides '
                  'where a row names nothing else):', ''] + _prov(probes) + [
        ''] + _table(
        ['transport and settings', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'received'], probe)


# settings a row's variant names that no column shows (node_latency_rows.variant)
_OTHER = re.compile(r'^(cv\d+|separatebuckets|hostoverlay|stalltrace|cudaeager|events|'
                    r'pubpercam|workermasks|prep[\d.]+|gil[\d.]+|keep[\d.]+|evclient|nogil)$')


def _other(r: dict) -> str:
    """The precompiled parts and the variant's other settings: 'cv1' (opencv_threads 1),
    'separatebuckets' (merge_step_buckets off), 'hostoverlay' (overlay_on_gpu off),
    'stalltrace', 'cudaeager', 'events' (the events executor), 'pubpercam' (shared_publisher
    off: a publisher thread per camera), 'workermasks' (masks_from_worker), 'prep3' (the
    camera prepared each frame 3 ms before it was due; rows without it prepared it right after
    the previous publish, beside that frame's delivery), 'gil0.5' (the node's GIL switch
    interval in ms), 'nogil' (publish_without_gil), 'keep500' (the GPU clock keeper's spin
    in us), 'evclient' (the
    benchmark's client on the events executor); 'camera msg' where
    the row says its camera published rclpy messages (rows from before ``camera_publish``
    say nothing: they all did); 'steal N ms' where the hypervisor took 100 ms or more of CPU
    time from the machine during the row (``host_steal_ms``)."""
    tags = [t for t in str(r.get('variant', '')).split('_') if _OTHER.match(t)]
    parts = ([r['precompile']] if r.get('precompile') else []) + tags
    if r.get('camera_publish') == 'message':
        parts.append('camera msg')
    if (r.get('host_steal_ms') or 0) >= 100:      # the hypervisor took CPU time: a noisy row
        parts.append(f"steal {r['host_steal_ms']:.0f} ms")
    return ', '.join(parts) or '-'


def _nodes(r: dict) -> str:
    """'yes': a tracker node per camera; 'no': one node served every camera of the row's rig
    ('-' for one camera, or a row without the field)."""
    if r.get('cameras', 1) < 2 or r.get('node_per_camera') is None:
        return '-'
    return 'yes' if r['node_per_camera'] else 'no'


def _split(r: dict) -> str:
    """The row's image -> mask split (tools/bench/node_latency_frames.py), p50/p99 each;
    '-' for rows measured before the node logged its timestamps."""
    names = ('dds_in', 'handoff', 'decode', 'engine_span', 'publish_mask', 'dds_out')
    if r.get('dds_in_p50') is None:
        return '-'
    return ', '.join(f"{_f(r.get(n + '_p50'), 1)}/{_f(r.get(n + '_p99'), 1)}" for n in names)


def soak(results: str) -> List[str]:
    d = _load('h200_soak.json', results)
    body = []
    for r in d['runs']:
        c, w = r['config'], r['windows']
        body.append([f"{c['model']}@{c['image_size']} {c['graph_mode']}", c['frames'],
                     f"{c['objects']} (churn {c['churn']}, correction every {c['correct_every']})",
                     f"{min(x['p50_ms'] for x in w)}-{max(x['p50_ms'] for x in w)}",
                     f"{w[-1]['p99_ms']}", r['stats'].get('eager_steps'),
                     r['summary']['cuda_allocated_change_mib'],
                     r['summary']['host_rss_change_mib'],
                     sum(x['failed_frames'] for x in w), sum(x['fallbacks'] for x in w),
                     f"{_f(r['date'])}, {_f(r['commit'])}"])
    return _prov(d['runs']) + [''] + _table(
        ['run', 'frames', 'objects', 'p50 ms (windows)', 'p99 ms (last window)', 'eager steps',
         'CUDA allocated change MiB', 'host RSS change MiB', 'failed', 'fallbacks',
         'date, commit'], body)


def equivalence(results: str) -> List[str]:
    d = _load('h200_equivalence.json', results)
    body = []
    for k, v in d.items():
        if k.startswith('_') or not isinstance(v, dict):
            continue
        worst = v.get('worst', {}).get('logits', v.get('worst_logits'))
        px = v.get('mask_px_differ')
        if k == 'memory_flat':
            body.append([k, '-', '-', f"allocated at frame 100 = at frame 1000: "
                         f"{v['allocated_100'] == v['allocated_1000']}"])
            continue
        if k == 'graph_pools':
            body.append([k, '-', '-', f"recapture {v.get('private_pool_recapture')}, modes "
                         f"{v.get('two_models_resident_modes')}"])
            continue
        st = v.get('stats') or v.get('graph_stats') or {}
        note = ', '.join(f'{s} {st[s]}' for s in ('frames', 'eager_steps', 'prompt_graph_steps')
                         if s in st)
        body.append([k, _g(worst),
                     '-' if px is None else f'{px:.2e}', note or '-'])
    return [f"- {d.get('_note', '-')}", ''] + _table(
        ['comparison', 'max abs logit diff', 'mask pixels differing (fraction)', 'notes'], body)


def drift(results: str) -> List[str]:
    d = _load('h200_drift.json', results)
    body = [[r['precision'], f"{r['model']}@{r['res']}", r['frames'], r['frozen_distance'],
             _g(r['max_abs_logit_diff']), f"{r['min_mask_iou']:.5f}",
             f"{r['mean_mask_iou']:.5f}", _g(r['max_score_diff'])] for r in d['results']]
    return [f"- {d.get('date', '-')}, commit {d.get('commit', '-')}, {d['gpu']}, torch "
            f"{d['torch']}: `{d['command']}`", ''] + _table(
        ['precision', 'model', 'frames', 'frozen distance', 'max abs logit diff',
         'min mask IoU', 'mean mask IoU', 'max score diff'], body)


SECTIONS: Dict[str, Callable[[str], List[str]]] = {
    'engine-current': engine_current, 'engine-matrix': engine_matrix,
    'interaction': interaction, 'node-latency': node_latency, 'soak': soak,
    'equivalence': equivalence, 'drift': drift, 'image-mode': image_mode,
    'preprocess': preprocess}


def render(doc: str, results: str = RESULTS) -> str:
    """``doc`` with every marked section replaced by its table; a marker without its
    section name in SECTIONS, or an unterminated one, is an error (a typo would otherwise
    leave a stale table in place silently)."""
    for name, fn in SECTIONS.items():
        begin, end = f'<!-- report:{name}:begin -->', f'<!-- report:{name}:end -->'
        if begin not in doc:
            continue
        if end not in doc:
            raise ValueError(f'{begin} without {end}')
        i, j = doc.index(begin) + len(begin), doc.index(end)
        doc = doc[:i] + '\n' + '\n'.join(fn(results)) + '\n' + doc[j:]
    return doc


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog='python -m tools.bench.report',
                                description=__doc__.split('\n')[0])
    p.add_argument('--doc', action='append', default=None,
                   help='a doc to render (repeatable); default: ' +
                        ', '.join(os.path.relpath(d, ROOT) for d in DOCS))
    p.add_argument('--results', default=RESULTS)
    p.add_argument('--check', action='store_true', help='exit 1 if a doc is out of date')
    a = p.parse_args(argv)
    stale = []
    for path in a.doc or DOCS:
        with open(path) as f:
            doc = f.read()
        new = render(doc, a.results)
        if new == doc:
            continue
        if a.check:
            stale.append(path)
        else:
            with open(path, 'w') as f:
                f.write(new)
    for path in stale:
        print(f'{path} is out of date: run python -m tools.bench.report', file=sys.stderr)
    return 1 if stale else 0


if __name__ == '__main__':
    sys.exit(main())
