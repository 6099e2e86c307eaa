"""Per-frame timestamps of the node, as JSON lines (parameter ``timing_log``; benchmarks).

One line per published frame: its header stamp and the :class:`~sam2_ros.ros.mailbox.FrameTimes`
of its way through the node (receipt, decode, engine, mask and state sent), on
``time.monotonic()``. ``tools/bench/node_latency.py`` reads them beside its camera's publish
times and its own receipt times (the same clock on one host) to split image -> mask into DDS
in, hand-offs, decode, engine, mask building and DDS out. Lines are flushed as written, so a
reader sees every frame published so far; a frame re-published after a prompt has no line.
Nothing here imports ROS.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Dict, Optional, TextIO

from sam2_ros.ros.mailbox import FrameTimes


class TimingLog:
    """Appends one JSON line per frame to ``path``; written by one thread at a time (the
    node's publisher)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._file: Optional[TextIO] = open(self.path, 'a', buffering=1)   # line-buffered

    def write(self, stamp_ns: int, times: FrameTimes) -> None:
        if self._file is not None:
            self._file.write(json.dumps({'stamp_ns': stamp_ns, **dataclasses.asdict(times)})
                             + '\n')

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read(path: str) -> Dict[int, Dict[str, float]]:
    """stamp_ns -> that frame's times (the first line of a stamp; a missing file: none)."""
    out: Dict[int, Dict[str, float]] = {}
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            out.setdefault(int(rec.pop('stamp_ns')), rec)
    return out
