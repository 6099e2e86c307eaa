"""Markdown pieces of the generated doc tables (``report.py``, ``report_image.py``): a results
file read, table rows, cells and the provenance lines every table starts with."""

from __future__ import annotations

import json
import os
import re
from typing import Dict, List, Optional

from tools.bench.results import fmt


def load(name: str, results: str):
    """The JSON of results file ``name`` in folder ``results``."""
    with open(os.path.join(results, name)) as f:
        return json.load(f)


def sig3(v) -> str:
    """Three significant digits: differences span 0 to 1e-2 and IoUs sit near 1."""
    return '-' if v is None else '0' if v == 0 else f'{v:.3g}'


def table(head: List[str], rows: List[List]) -> List[str]:
    return (['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
            + ['| ' + ' | '.join(str(c) for c in r) + ' |' for r in rows])


def prov(rows: List[dict]) -> List[str]:
    """One line per distinct (date, commit, gpu, command) of ``rows``, newest first."""
    seen: Dict[tuple, None] = {}
    for r in rows:
        seen[(r.get('date'), r.get('commit'), r.get('gpu'), r.get('command'))] = None
    out = []
    for date, commit, gpu, cmd in sorted(seen, key=lambda k: str(k[0]), reverse=True):
        # the date only: a doc is read for what was measured, the minute is in the file
        out.append(f'- {fmt(date and date[:10])}, commit {fmt(commit)}, {fmt(gpu)}: '
                   f'`{short_command(cmd)}`')
    return out


def short_command(cmd: Optional[str]) -> str:
    """A bench command with its ``--only`` row list counted rather than spelled out (the
    full command stays in the results file): the matrix's lists run to 30 rows."""
    if cmd is None:
        return '-'
    return re.sub(r'--only (\S+)', lambda m: f"--only <{len(m.group(1).split(';'))} rows>"
                  if m.group(1).count(';') > 5 else m.group(0), cmd)
