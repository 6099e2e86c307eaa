"""Retention of the precompiled cache (``engine/cuda/cache_files.py``): beyond the most recently
used files, ours unused for a week go, and a killed compile's temporary files; a load marks
its file used; other programs' files in the folder are never touched."""

from __future__ import annotations

import os

from sam2_ros.engine.cuda import cache_files

KEY = '0123456789abcdef0123'
WEEK = cache_files.UNUSED_S


def _file(d, name, mtime):
    p = d / name
    p.write_bytes(b'x')
    os.utime(p, (mtime, mtime))
    return p


def test_prune_drops_old_unused_files_beyond_the_most_recent_and_stale_tmp(tmp_path):
    now = 1e9
    bins = [_file(tmp_path, f'heads_b{i}-{KEY}.bin', now - i * WEEK) for i in range(5)]
    fresh_tmp = _file(tmp_path, 'sam2_ros-a.tmp', now - 60)          # a compile running now
    stale_tmp = _file(tmp_path, 'sam2_ros-b.tmp', now - 2 * cache_files.STALE_TMP_S)
    deleted = cache_files.prune(tmp_path, keep=2, now=now)
    # beyond the 2 newest, those unused for 2, 3 and 4 weeks go
    assert sorted(deleted) == sorted([bins[2], bins[3], bins[4], stale_tmp])
    assert all(p.exists() for p in (*bins[:2], fresh_tmp))


def test_files_used_within_the_week_are_kept_beyond_the_count(tmp_path):
    """Two configurations sharing the folder do not evict each other between restarts."""
    now = 1e9
    bins = [_file(tmp_path, f'encoder{i}-{KEY}.bin', now - 3600 * i) for i in range(4)]
    assert cache_files.prune(tmp_path, keep=1, now=now) == []
    assert all(p.exists() for p in bins)


def test_other_programs_files_are_never_deleted(tmp_path):
    now = 1e9
    theirs = [_file(tmp_path, n, now - 10 * WEEK) for n in
              ('pytorch_model.bin', 'notes.tmp', 'weights-abc.bin', f'Encoder-{KEY}.bin')]
    ours = _file(tmp_path, f'encoder-{KEY}.bin', now - 10 * WEEK)
    assert cache_files.prune(tmp_path, keep=0, now=now) == [ours]
    assert all(p.exists() for p in theirs)


def test_a_touched_file_counts_as_recent(tmp_path):
    old = _file(tmp_path, f'encoder-{"1" * 20}.bin', 1000.0)
    new = _file(tmp_path, f'encoder-{"2" * 20}.bin', 2000.0)
    cache_files.touch(old)                                    # loaded by this start
    assert cache_files.prune(tmp_path, keep=1, now=2000.0 + 2 * WEEK) == [new]
    assert old.exists()


def test_missing_directory_and_files_are_no_error(tmp_path):
    assert cache_files.prune(tmp_path / 'absent') == []
    cache_files.touch(tmp_path / 'absent.bin')
