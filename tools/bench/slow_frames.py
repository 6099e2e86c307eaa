"""The slowest frames of a node latency run, per camera, with their split:

    python -m tools.bench.slow_frames RUN.json [-n 5]

Why: a row's p99 and misses say that frames were late, not which or why. A one-off stall
(one slow track call queueing the frames behind it) and frames slow on every correction look
alike in the row; the frame index, its correction flag and the split (``node_latency_frames``)
tell them apart. Reads the per-run JSON ``tools.bench.node_latency --out`` writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional

from tools.bench.results import fmt

COLUMNS = ('index', 'e2e_mask_ms', 'node_engine_ms', 'dds_in_ms', 'queue_ms', 'prompts_ms',
           'handoff_out_ms', 'publish_mask_ms', 'publish_call_ms', 'camera_late_ms',
           'correction', 'queued', 'host_wait_ms', 'host_wait_top', 'host_steal_ms',
           'host_minflt', 'host_compact_stalls')


def slowest(frames: List[Dict[str, Any]], n: int) -> List[Dict[str, Any]]:
    """The n measured (not warm-up) frames of the largest image -> mask time, slowest first;
    a frame whose mask never came counts as slowest."""
    measured = [f for f in frames if not f.get('warmup')]

    def key(f: Dict[str, Any]) -> float:
        ms = f.get('e2e_mask_ms')
        return float('inf') if ms is None else ms
    return sorted(measured, key=key, reverse=True)[:n]


def lines(run: Dict[str, Any], n: int) -> List[str]:
    out = []
    for cam in run.get('cameras') or [{'index': 0, 'ns': '', 'frames': run['frames']}]:
        out.append(f"camera {cam['index']} {cam.get('ns') or '-'}: " + ' '.join(COLUMNS))
        for f in slowest(cam['frames'], n):
            out.append('  ' + ' '.join(fmt(f.get(c)) for c in COLUMNS))
    waits = (run.get('host') or {}).get('cpu_wait_ms')
    if waits:        # the run's CPU waits per process (host_watch.py), largest first
        out.append('cpu wait ms: ' + ', '.join(f'{k} {v}' for k, v in list(waits.items())[:6])
                   + f"; steal {run['host'].get('steal_ms')} ms")
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog='python -m tools.bench.slow_frames',
                                description=__doc__.split('\n')[0])
    p.add_argument('run', help="a node latency run's JSON (node_latency --out)")
    p.add_argument('-n', type=int, default=5, help='frames per camera')
    a = p.parse_args(argv)
    with open(a.run) as fh:
        print('\n'.join(lines(json.load(fh), a.n)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
