"""Benchmark rows on disk and on paper: JSON files merged by row key, the markdown table with
speedups, and the provenance (run id, date, commit, GPU, command) every row carries.

Shared by the engine benchmark (``cli.py``) and the interaction benchmark
(``interaction.py``); nothing here imports torch at module level.
"""

from __future__ import annotations

import datetime
import json
import os
import secrets
import subprocess
from typing import Dict, List, Optional

KEYS = ('model', 'res', 'objects', 'variant', 'ms_p50', 'ms_p99', 'fps', 'gpu_kernel_ms',
        'peak_mib', 'compile_s')
BEGIN, END = '<!-- bench:begin -->', '<!-- bench:end -->'


def csv(s: str, cast=str) -> List:
    """'a,b,' -> [cast('a'), cast('b')]: the comma lists of the benchmark options."""
    return [cast(x) for x in s.split(',') if x.strip()]


def row_key(row: dict) -> tuple:
    """What identifies a row across runs: a newer row of the same key replaces the older. The
    GPU is part of it: a row measured on another card (an H100 when no H200 was lent) sits
    beside the H200's, never in its place."""
    return (row['model'], row['res'], row['objects'], row['variant'], row.get('gpu'))


def gpu_short(row: dict) -> str:
    """'H200', 'H100', ... from a row's ``gpu`` (the device name); '-' without one."""
    name = str(row.get('gpu') or '-')
    word = next((w for w in name.split() if w[:1] in 'HABL' and w[1:4].isdigit()), None)
    return name if word is None else word.split('-')[0]    # 'A100-SXM4-80GB' -> 'A100'


def save_json(path: str, rows: List[dict], key=row_key) -> None:
    """Merge ``rows`` into the JSON list at ``path``: a row replaces an older one of the same
    ``key(row)`` (another benchmark family passes its own key)."""
    old = []
    if os.path.exists(path):
        try:
            old = json.load(open(path))
        except ValueError:
            old = []
    new = {key(r): r for r in rows}
    merged = [r for r in old if key(r) not in new] + rows
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(merged, f, indent=1)


def fmt(v, nd: int = 2) -> str:
    """A table cell: '-' for a missing value, floats with ``nd`` decimals."""
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
                   f"{fmt(r['ms_p50'])} | {fmt(r['ms_p99'])} | {fmt(r['fps'], 1)} | {ratio} | "
                   f"{fmt(r['gpu_kernel_ms'])} | {wk} | {fmt(r['peak_mib'], 0)} | "
                   f"{fmt(r['compile_s'])} |")
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


def save_probe(path: str, rows: List[dict]) -> None:
    """A probe's output (tools/probes): its rows and the GPU they ran on, one file per run
    (probes guide work; benchmark rows are what the docs quote)."""
    import torch
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    with open(path, 'w') as f:
        json.dump({'gpu': torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu',
                   'rows': rows}, f, indent=1)


def run_id() -> str:
    """One id per benchmark invocation (UTC time plus a random suffix, so two runs started
    the same second differ): a ratio between rows is only taken between rows of one run."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime('%Y%m%dT%H%M%SZ') + '-' + secrets.token_hex(3)


def git_commit() -> Optional[str]:
    """$SAM2_ROS_COMMIT when set, else the short hash of the checkout this package runs
    from (with '+dirty' when sam2_ros/ differs from it), else None. The variable wins: the GPU
    machine's copy of the tree may come with a stale .git (its HEAD is not the tree's), so
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
