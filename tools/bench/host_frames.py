"""What the host took from each timed frame: the timing thread's run-queue wait and the
machine's hypervisor steal.

Why: the slowest frames of the interaction rows on the shared GPU hosts are often frames with
no interaction at all, several times the median and in clusters a few frames apart, on
hosts whose node-latency rows show hypervisor steal at the same time of the run. A frame
whose thread waited for a CPU (``/proc/thread-self/schedstat``: time runnable but not
running), or during which the hypervisor took time from the machine (``steal`` of
``/proc/stat``, in clock ticks), lost that time to the host, not to the tracker. The rows say
so per slow frame, and give the p99 of the frames the host left alone beside the p99 of all
frames (targets are read on all frames). Linux only: elsewhere the values are None.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

import numpy as np

from tools.bench import host_watch

# a frame counts as disturbed from this much run-queue wait of its thread (scheduler noise
# below it is normal on any machine), or any steal
WAIT_MS = 0.5


def thread_wait_ns() -> Optional[int]:
    """Run-queue wait of the calling thread so far (ns), None without schedstat."""
    try:
        with open('/proc/thread-self/schedstat') as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def steal_ticks() -> Optional[int]:
    try:
        return host_watch.steal_ticks()
    except (OSError, IndexError, ValueError):
        return None


class HostFrames:
    """``start`` before a frame's clock starts, ``take`` after it stops: that frame's
    ``cpu_wait_ms`` and ``steal_ms`` (None where the host does not say)."""

    def __init__(self) -> None:
        self.wait0: Optional[int] = None
        self.steal0: Optional[int] = None
        self.tick_ms = 1e3 / os.sysconf('SC_CLK_TCK') if hasattr(os, 'sysconf') else 10.0

    def start(self) -> None:
        self.wait0, self.steal0 = thread_wait_ns(), steal_ticks()

    def take(self) -> Dict[str, Optional[float]]:
        wait, steal = thread_wait_ns(), steal_ticks()
        return {
            'cpu_wait_ms': None if wait is None or self.wait0 is None
            else round((wait - self.wait0) / 1e6, 3),
            'steal_ms': None if steal is None or self.steal0 is None
            else round((steal - self.steal0) * self.tick_ms, 1)}


def disturbed(frame: Dict[str, Optional[float]]) -> bool:
    """True where the host took time from the frame (see WAIT_MS)."""
    return (frame.get('cpu_wait_ms') or 0.0) >= WAIT_MS or (frame.get('steal_ms') or 0.0) > 0


def summary(ms: List[float], frames: List[Dict[str, Optional[float]]]) -> Dict[str, object]:
    """A row's host account: frames disturbed, the total wait and steal, and the p50/p99 of
    the undisturbed frames (None where the host says nothing)."""
    if not frames or all(f.get('cpu_wait_ms') is None for f in frames):
        return {'disturbed_frames': None}
    quiet = [m for m, f in zip(ms, frames) if not disturbed(f)]
    return {
        'disturbed_frames': len(ms) - len(quiet),
        'cpu_wait_ms_total': round(sum(f.get('cpu_wait_ms') or 0.0 for f in frames), 3),
        'steal_ms_total': round(sum(f.get('steal_ms') or 0.0 for f in frames), 1),
        'undisturbed_ms_p50': round(float(np.percentile(quiet, 50)), 3) if quiet else None,
        'undisturbed_ms_p99': round(float(np.percentile(quiet, 99)), 3) if quiet else None}


def cell(row: Dict[str, object]) -> str:
    """A table's cell for a row's account: undisturbed p99/p50 and, in parentheses, the
    frames the host disturbed; '-' where the row has none."""
    host = row.get('host') or {}
    p50, p99 = host.get('undisturbed_ms_p50'), host.get('undisturbed_ms_p99')
    if host.get('disturbed_frames') is None or not p50 or p99 is None:
        return '-'
    return f"{p99 / p50:.2f} ({host['disturbed_frames']})"
