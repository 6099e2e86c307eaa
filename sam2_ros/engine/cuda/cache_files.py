"""Retention of the precompiled parts' cache files (``precompiled.py``).

Why: every change of model, resolution, batch bucket, torch, Triton, GPU or our engine keys a
new file (tens of MB each); without retention a robot upgraded for years fills its disk with
files no start will load again. When a new file is written, the directory keeps the
``KEEP_FILES`` most recently used files (a load touches its file) and drops the others that no
start has used for ``UNUSED_S`` (so two configurations sharing the folder do not evict each
other's files between restarts); a temporary file older than ``STALE_TMP_S`` is what a killed
compile left and is dropped too. Only names this package writes are touched
(``OURS``/``TMP_PREFIX``): ``precompile_dir`` may be a folder other programs use.
"""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path
from typing import List

log = logging.getLogger(__name__)

KEEP_FILES = 32           # well above one configuration's parts (encoder + a heads per bucket)
UNUSED_S = 7 * 86400.0    # beyond KEEP_FILES, a file is dropped after a week without a load
STALE_TMP_S = 3600.0      # a compile takes minutes at most
OURS = re.compile(r'^[a-z0-9_]+-[0-9a-f]{20}\.bin$')     # precompiled.py: <part>-<key>.bin
TMP_PREFIX = 'sam2_ros-'  # precompiled.py's temporary files


def touch(path: Path) -> None:
    """Mark ``path`` used now (its mtime), so retention keeps it; a read-only cache is fine."""
    try:
        os.utime(path)
    except OSError:
        pass


def prune(directory: Path, keep: int = KEEP_FILES, now: float = None) -> List[Path]:
    """Delete our cache files of ``directory`` beyond the ``keep`` most recently used that no
    start used for ``UNUSED_S``, and our stale temporary files; returns what was deleted.
    Errors (a file gone meanwhile, a read-only directory) leave that file alone."""
    now = time.time() if now is None else now
    deleted: List[Path] = []
    try:
        entries = [p for p in directory.iterdir() if p.is_file()]
    except OSError:
        return deleted
    bins = sorted((p for p in entries if OURS.match(p.name)), key=_mtime, reverse=True)
    old = [p for p in bins[keep:] if now - _mtime(p) > UNUSED_S] + [
        p for p in entries if p.name.startswith(TMP_PREFIX) and p.suffix == '.tmp'
        and now - _mtime(p) > STALE_TMP_S]
    for p in old:
        try:
            p.unlink()
            deleted.append(p)
        except OSError:
            pass
    if deleted:
        log.info('precompiled cache %s: deleted %d file(s) unused for a week beyond the %d '
                 'most recent', directory, len(deleted), keep)
    return deleted


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
