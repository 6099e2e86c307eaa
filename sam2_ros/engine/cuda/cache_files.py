"""Retention of the precompiled parts' cache files (``precompiled.py``).

Why: every change of model, resolution, batch bucket, torch, Triton, GPU or our engine keys a
new file (tens of MB each); without retention a robot upgraded for years fills its disk with
files no start will load again. The directory keeps the ``KEEP_FILES`` most recently used
files (a load touches its file) and drops the rest when a new file is written; a temporary
file older than ``STALE_TMP_S`` is what a killed compile left and is dropped too.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import List

log = logging.getLogger(__name__)

KEEP_FILES = 32           # well above one configuration's parts (encoder + a heads per bucket)
STALE_TMP_S = 3600.0      # a compile takes minutes at most


def touch(path: Path) -> None:
    """Mark ``path`` used now (its mtime), so retention keeps it; a read-only cache is fine."""
    try:
        os.utime(path)
    except OSError:
        pass


def prune(directory: Path, keep: int = KEEP_FILES, now: float = None) -> List[Path]:
    """Delete all but the ``keep`` most recently used ``.bin`` files of ``directory`` and its
    stale ``.tmp`` files; returns what was deleted. Errors (a file gone meanwhile, a read-only
    directory) leave that file alone."""
    now = time.time() if now is None else now
    deleted: List[Path] = []
    try:
        entries = [p for p in directory.iterdir() if p.is_file()]
    except OSError:
        return deleted
    bins = sorted((p for p in entries if p.suffix == '.bin'), key=_mtime, reverse=True)
    old = bins[keep:] + [p for p in entries
                         if p.suffix == '.tmp' and now - _mtime(p) > STALE_TMP_S]
    for p in old:
        try:
            p.unlink()
            deleted.append(p)
        except OSError:
            pass
    if deleted:
        log.info('precompiled cache %s: deleted %d unused file(s), kept the %d most recent',
                 directory, len(deleted), keep)
    return deleted


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
