"""sam2_ros/ros/malloc.py: the allocator setting that keeps 720p message buffers reused."""

import platform

import pytest

from sam2_ros.ros import malloc


@pytest.mark.skipif(platform.system() != 'Linux' or not platform.libc_ver()[0] == 'glibc',
                    reason='mallopt is glibc-only (CI and the rigs run glibc Linux)')
def test_thresholds_are_set_on_glibc():
    assert malloc.keep_large_buffers() is True


def test_refused_threshold_is_reported(monkeypatch):
    class Refusing:
        def mallopt(self, param, value):
            return 0 if param == malloc.M_TRIM_THRESHOLD else 1
    monkeypatch.setattr(malloc, '_libc', lambda: Refusing())
    assert malloc.keep_large_buffers() is False


def test_without_glibc_nothing_is_done(monkeypatch):
    monkeypatch.setattr(malloc, '_libc', lambda: None)
    assert malloc.keep_large_buffers() is False
