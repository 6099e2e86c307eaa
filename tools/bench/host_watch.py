"""The host's CPU contention during a node latency run: how long each process's threads waited
for a CPU (the kernel's run-queue wait, ``/proc/<pid>/task/<tid>/schedstat``) and how much time
the hypervisor took from the machine (``steal`` of ``/proc/stat``), in short windows.

Why: a run's slow frames were scattered and their slow part differed (the engine one frame,
DDS in another, a camera's ``publish()`` for half a second), with the GPU work unchanged. A
thread that waits for a CPU, or a virtual CPU that is not running, explains such frames; this
says which process waited, and when, so a slow frame can be told from a slow node.

It runs as a process of its own (``python -m tools.bench.host_watch --root PID --out F``), so
reading ``/proc`` never holds the benchmark client's GIL: every ``--period-ms`` it writes one
JSON line ``{"t0": ..., "t": ..., "wait_ms": {label: ms}, "steal_ms": ..., ...}``, the
increments of the window from t0 to t (monotonic s), ``label`` being ``<comm>:<pid>`` of each
process below ``--root`` (found again every second). ``attach`` gives each frame the waits of
the windows its image -> mask span overlaps.
Linux only; elsewhere (or without schedstat) the file stays empty and frames get None.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

PROC = Path('/proc')
CLK_TCK = os.sysconf('SC_CLK_TCK') if hasattr(os, 'sysconf') else 100


def children_of(root: int) -> Dict[int, str]:
    """Every process below ``root`` (and ``root``): pid -> ``comm:pid``."""
    children: Dict[int, List[int]] = {}
    comm: Dict[int, str] = {}
    for d in PROC.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / 'stat').read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        name, rest = stat[stat.index('(') + 1:stat.rindex(')')], stat[stat.rindex(')') + 2:]
        children.setdefault(int(rest.split()[1]), []).append(int(d.name))
        comm[int(d.name)] = name
    out, todo = {}, [root]
    while todo:
        p = todo.pop()
        if p in comm and p not in out:
            out[p] = f'{comm[p]}:{p}'
            todo += children.get(p, [])
    return out


def wait_ns(pid: int) -> int:
    """Run-queue wait of every thread of ``pid`` so far (ns); threads that ended are lost,
    which the increments below clamp at 0."""
    total = 0
    try:
        tasks = list((PROC / str(pid) / 'task').iterdir())
    except OSError:
        return 0
    for t in tasks:
        try:
            total += int((t / 'schedstat').read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total


def minor_faults(pid: int) -> int:
    """Minor page faults of every thread of ``pid`` so far (a fresh page touched: a large
    buffer malloc handed back to the kernel and took again, or a new shared-memory page)."""
    try:
        stat = (PROC / str(pid) / 'stat').read_text()
    except OSError:
        return 0
    return int(stat[stat.rindex(')') + 2:].split()[7])      # field 10: minflt


def compact_stalls() -> int:
    """The kernel's direct-compaction stalls so far (``/proc/vmstat``): an allocation that
    waited while memory was compacted for a huge page."""
    try:
        for line in (PROC / 'vmstat').read_text().splitlines():
            if line.startswith('compact_stall '):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def steal_ticks() -> int:
    with open(PROC / 'stat') as f:
        fields = f.readline().split()     # cpu user nice system idle iowait irq softirq steal
    return int(fields[8]) if len(fields) > 8 else 0


def watch(root: int, period_s: float, out: Path) -> None:
    """Write one line per window to ``out`` until SIGTERM/SIGINT."""
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(1))
    procs, rescan = children_of(root), time.monotonic() + 1.0
    last = {p: wait_ns(p) for p in procs}
    faults = {p: minor_faults(p) for p in procs}
    steal0, stalls0 = steal_ticks(), compact_stalls()
    prev = time.monotonic()
    with open(out, 'w') as f:
        while not stop and (PROC / str(root)).exists():
            time.sleep(period_s)
            now = time.monotonic()
            if now > rescan:
                procs, rescan = children_of(root), now + 1.0
            waits, faulted = {}, {}
            for p, label in procs.items():
                w, m = wait_ns(p), minor_faults(p)
                waits[label] = round(max(0, w - last.get(p, w)) / 1e6, 3)
                faulted[label] = max(0, m - faults.get(p, m))
                last[p], faults[p] = w, m
            steal, stalls = steal_ticks(), compact_stalls()
            # the window is [t0, t]: reading /proc takes time too, so windows are longer
            # than the period, and each says where it began
            f.write(json.dumps({'t0': round(prev, 4), 't': round(now, 4), 'wait_ms': waits,
                                'minflt': faulted,
                                'steal_ms': round((steal - steal0) * 1e3 / CLK_TCK, 1),
                                'compact_stalls': stalls - stalls0}) + '\n')
            f.flush()
            steal0, stalls0, prev = steal, stalls, now


class HostWatch:
    """The watcher's process for the benchmark: ``start()``, ``stop()``, then ``samples()``."""

    def __init__(self, out: Path, root: Optional[int] = None, period_ms: float = 20.0) -> None:
        self.out = Path(out)
        self.root = os.getpid() if root is None else root
        self.period_ms = period_ms
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        if not sys.platform.startswith('linux'):
            return
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'tools.bench.host_watch', '--root', str(self.root),
             '--period-ms', str(self.period_ms), '--out', str(self.out)],
            cwd=Path(__file__).resolve().parents[2])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def samples(self) -> List[Dict[str, Any]]:
        if not self.out.exists():
            return []
        out = []
        for line in self.out.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:            # the last line cut by the stop
                pass
        return out


def attach(frames: List[Dict[str, Any]], t_pub: Iterable[float],
           samples: List[Dict[str, Any]], period_s: float) -> None:
    """Each frame's ``host_wait_ms`` (run-queue wait of every watched thread in the windows
    its image -> mask span overlaps), ``host_wait_top`` (the process that waited most there),
    ``host_steal_ms``, ``host_minflt`` (minor page faults of every watched process) and
    ``host_compact_stalls``; None without samples or a mask."""
    keys = ('host_wait_ms', 'host_wait_top', 'host_steal_ms', 'host_minflt',
            'host_compact_stalls')
    for f, t0 in zip(frames, t_pub):
        f.update(dict.fromkeys(keys))
        if not samples or f.get('e2e_mask_ms') is None:
            continue
        t1 = t0 + f['e2e_mask_ms'] / 1e3
        win = [s for s in samples if s.get('t0', s['t'] - period_s) < t1 and s['t'] > t0]
        if not win:
            continue
        per = waits_by_process(win)
        f['host_wait_ms'] = round(sum(per.values()), 3)
        f['host_wait_top'] = max(per, key=per.get) if per else None
        f['host_steal_ms'] = round(sum(s['steal_ms'] for s in win), 1)
        f['host_minflt'] = sum(sum(s.get('minflt', {}).values()) for s in win)
        f['host_compact_stalls'] = sum(s.get('compact_stalls', 0) for s in win)


def thp_mode() -> Optional[str]:
    """Transparent huge pages: the kernel's setting (``[madvise]`` in ``always [madvise]
    never``), None where unreadable."""
    try:
        text = Path('/sys/kernel/mm/transparent_hugepage/enabled').read_text()
    except OSError:
        return None
    return text[text.find('[') + 1:text.find(']')] if '[' in text else text.strip()


def waits_by_process(samples: List[Dict[str, Any]]) -> Dict[str, float]:
    """Run-queue wait (ms) per process label, summed over ``samples``."""
    per: Dict[str, float] = {}
    for s in samples:
        for label, ms in s['wait_ms'].items():
            per[label] = per.get(label, 0.0) + ms
    return per


def totals(samples: List[Dict[str, Any]]) -> Tuple[Dict[str, float], float]:
    """Run-queue wait per process over the run (ms, largest first) and the steal (ms)."""
    per = waits_by_process(samples)
    ranked = dict(sorted(((k, round(v, 1)) for k, v in per.items()), key=lambda kv: -kv[1]))
    return ranked, round(sum(s['steal_ms'] for s in samples), 1)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--root', type=int, required=True)
    ap.add_argument('--period-ms', type=float, default=20.0)
    ap.add_argument('--out', required=True)
    a = ap.parse_args(argv)
    watch(a.root, a.period_ms / 1e3, Path(a.out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
