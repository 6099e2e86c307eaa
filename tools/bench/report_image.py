"""The image-mode tables of docs/image_mode.md and the resize-alone table of
docs/performance.md, from ``h200_image.json`` (sections of ``report.py``)."""

from __future__ import annotations

import os
from typing import Dict, List, Optional

from tools.bench.markdown import load as _load, prov as _prov, table as _table
from tools.bench.results import fmt as _f


def _image_runs(results: str) -> Optional[List[List[dict]]]:
    """The rows of ``h200_image.json`` grouped by run, newest run first; None until that
    file exists. The file keeps the newest row of each key (``save_json``), so an older run
    shows only what no later run measured again, in a table of its own (speeds compare
    within one run)."""
    if not os.path.exists(os.path.join(results, 'h200_image.json')):
        return None
    rows = [r for r in _load('h200_image.json', results) if r.get('run')]
    runs: Dict[str, List[dict]] = {}
    for r in sorted(rows, key=lambda r: (str(r.get('date')), r['run']), reverse=True):
        runs.setdefault(r['run'], []).append(r)
    return list(runs.values())


_NOT_YET = ['| results |', '|---|', '| not measured yet: `scripts/gpu/gpu_image_mode.sh` '
            'writes `h200_image.json` |']


def image_mode(results: str) -> List[str]:
    """Image mode against SAM (``h200_image.json``, ``python -m tools.bench.image_mode``):
    per run, newest first, one row per variant and model with p50 / p99 per precision and
    prompt count (GPU kernel and decoder times stay in the file), then the ratios the blog's
    claim is about (the newest run's, and an older run's where it measured SAM). Until that
    file exists, a one-row table saying so."""
    runs = _image_runs(results)
    if runs is None:
        return list(_NOT_YET)
    out: List[str] = []
    for rows in runs:
        table = _image_table(rows)
        if not table:
            continue
        out += ([''] if out else []) + _prov(rows[:1]) + [''] + table
        if rows is runs[0] or any(r['variant'] == 'sam' for r in rows):
            out += [''] + _image_ratios(rows)
    return out


def _box(n: int) -> str:
    return f"{n} box{'es' if n != 1 else ''}"


def _image_table(rows: List[dict]) -> List[str]:
    """One row per variant and model: p50 / p99 per (precision, prompts), then the encoder
    time and peak memory of the first (precision, prompts) and the memory-module calls per
    prompt count."""
    from tools.bench import image_mode as im
    rows = [r for r in rows if not r['variant'].startswith('preprocess')]
    keys = sorted({(r['precision'], r['prompts']) for r in rows})
    if not keys:
        return []
    first = keys[0]
    by: Dict[tuple, Dict[tuple, dict]] = {}
    for r in rows:
        by.setdefault((r['variant'], r['model']), {})[(r['precision'], r['prompts'])] = r

    def order(vm):
        v, m = vm
        return (im.VARIANTS.index(v) if v in im.VARIANTS else 9, im.ORDER.get(m, 9))

    def cell(r):
        if r is None:
            return '-'
        return 'failed' if r.get('error') else f"{_f(r['ms_p50'])} / {_f(r['ms_p99'])}"

    body = []
    for vm in sorted(by, key=order):
        cells = by[vm]
        r0 = cells.get(first) or {}
        calls = []
        for n in sorted({k[1] for k in cells}):
            r = next((cells[k] for k in keys if k[1] == n and k in cells), {})
            a, e = r.get('memory_attention_calls'), r.get('memory_encoder_calls')
            calls.append('-' if a is None else f'{a} / {e}')
        body.append(list(vm) + [cell(cells.get(k)) for k in keys] + [
            _f(r0.get('encoder_ms_p50')), _f(r0.get('peak_mib'), 0),
            '; '.join(calls) if any(c != '-' for c in calls) else '-'])
    return _table(['variant', 'model'] + [f'{p}, {_box(n)}: ms p50 / p99' for p, n in keys] + [
        f'encoder ms ({first[0]}, {_box(first[1])})', f'peak MiB ({first[0]})',
        'memory attention / encoder calls (' + '; '.join(
            _box(n) for n in sorted({k[1] for k in keys})) + ')'], body)


def preprocess(results: str) -> List[str]:
    """The frame resize alone (``image_mode --preprocess`` rows of the newest image-mode
    run): per source size and model input size, ms per frame (GPU kernel ms) per method."""
    pre = next(([r for r in rows if r['variant'].startswith('preprocess')]
                for rows in _image_runs(results) or []
                if any(r['variant'].startswith('preprocess') for r in rows)), [])
    if not pre:
        return list(_NOT_YET)
    methods = list(dict.fromkeys(r['variant'][len('preprocess_'):] for r in pre))
    by: Dict[str, Dict[str, dict]] = {}
    for r in pre:
        by.setdefault(f"{r['model']} -> {r['res']}", {})[r['variant'][len('preprocess_'):]] = r
    body = [[k] + [f"{_f(c[m]['ms_p50'], 3)} ({_f(c[m]['gpu_kernel_ms'], 3)})" if m in c
                   else '-' for m in methods] for k, c in by.items()]
    return _prov(pre[:1]) + [''] + _table(['source -> S'] + methods, body)


def _image_ratios(rows: List[dict]) -> List[str]:
    """Per precision and prompt count: SAM 2.1 per-image p50 over SAM's of comparable size
    (tiny and small vs ViT-B, base_plus vs ViT-L, large vs ViT-H), each cell through sam2's
    image predictor / through ours ('-' where a row is missing)."""
    ms = {(r['variant'], r['model'], r['precision'], r['prompts']): r['ms_p50'] for r in rows
          if not r.get('error') and r.get('ms_p50') and not r['variant'].startswith('pre')}
    pairs = [('tiny', 'vit_b'), ('small', 'vit_b'), ('base_plus', 'vit_l'), ('large', 'vit_h')]
    body = []
    for prec, n in sorted({(k[2], k[3]) for k in ms}):
        cells = []
        for m, sam in pairs:
            b = ms.get(('sam', sam, prec, n))
            got = [ms.get((fam, m, prec, n)) for fam in ('sam2_predictor', 'ours')]
            cells.append('-' if not b or not any(got) else ' / '.join(
                f'{a / b:.2f}' if a else '-' for a in got))
        body.append([prec, n] + cells)
    return ['Per-image time (p50) over SAM\'s, each cell `sam2_predictor` / `ours` (below 1: '
            'faster than SAM):', ''] + _table(
        ['precision', 'prompts', 'tiny / ViT-B', 'small / ViT-B', 'base_plus / ViT-L',
         'large / ViT-H'], body)
