"""Retention of the precompiled cache (``engine/cuda/cache_files.py``): the most recently used
files stay, older ones and a killed compile's temporary files go, a load marks its file used."""

from __future__ import annotations

import os

from sam2_ros.engine.cuda import cache_files


def _file(d, name, mtime):
    p = d / name
    p.write_bytes(b'x')
    os.utime(p, (mtime, mtime))
    return p


def test_prune_keeps_the_most_recently_used_and_drops_stale_tmp(tmp_path):
    now = 1_000_000.0
    bins = [_file(tmp_path, f'heads_b{i}-k.bin', now - 100 * i) for i in range(5)]
    fresh_tmp = _file(tmp_path, 'a.tmp', now - 60)          # a compile running now
    stale_tmp = _file(tmp_path, 'b.tmp', now - 2 * cache_files.STALE_TMP_S)
    other = _file(tmp_path, 'notes.txt', now - 1e6)          # not ours to delete
    deleted = cache_files.prune(tmp_path, keep=3, now=now)
    assert sorted(deleted) == sorted([bins[3], bins[4], stale_tmp])
    assert all(p.exists() for p in (*bins[:3], fresh_tmp, other))


def test_a_touched_file_counts_as_recent(tmp_path):
    old = _file(tmp_path, 'encoder-old.bin', 1000.0)
    new = _file(tmp_path, 'encoder-new.bin', 2000.0)
    cache_files.touch(old)                                    # loaded by this start
    assert cache_files.prune(tmp_path, keep=1) == [new]
    assert old.exists()


def test_missing_directory_and_files_are_no_error(tmp_path):
    assert cache_files.prune(tmp_path / 'absent') == []
    cache_files.touch(tmp_path / 'absent.bin')
