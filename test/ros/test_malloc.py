"""tune_malloc: glibc's thresholds are raised (sam2_ros/ros/malloc.py), and the node does it at
configure only when its parameter is on."""

import platform
from types import SimpleNamespace

import pytest

from sam2_ros.ros import malloc


class FakeLibc:
    def __init__(self, ok=1):
        self.calls, self.ok = [], ok

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return self.ok

    def gnu_get_libc_version(self):
        return b'2.39'


def test_keep_large_buffers_raises_mmap_and_trim_thresholds(monkeypatch):
    libc = FakeLibc()
    monkeypatch.setattr(malloc, 'glibc', lambda: libc)
    assert malloc.keep_large_buffers() is True
    assert libc.calls == [(malloc.M_MMAP_THRESHOLD, 32 << 20),
                          (malloc.M_TRIM_THRESHOLD, 256 << 20)]


def test_refused_or_not_glibc(monkeypatch):
    monkeypatch.setattr(malloc, 'glibc', lambda: FakeLibc(ok=0))
    assert malloc.keep_large_buffers() is False
    monkeypatch.setattr(malloc, 'glibc', lambda: None)
    assert malloc.keep_large_buffers() is False


def test_real_libc_takes_the_thresholds_only_if_it_is_glibc():
    # glibc (CI, the rigs) takes both thresholds; any other C library is a documented no-op
    assert malloc.keep_large_buffers() is (platform.libc_ver()[0] == 'glibc')


@pytest.mark.parametrize('on', [True, False])
def test_node_tunes_only_when_asked(monkeypatch, on):
    calls, warnings = [], []
    monkeypatch.setattr(malloc, 'keep_large_buffers', lambda: calls.append(1) or True)
    tuning = malloc.Tuning()                    # the node's (sam2_ros/ros/node.py)
    tuning.apply(on, warnings.append)
    tuning.apply(on, warnings.append)           # once per process
    assert calls == ([1] if on else []) and warnings == []


@pytest.mark.parametrize('threads', [0, 1, 3])
def test_node_sets_opencv_threads_only_when_asked(monkeypatch, threads):
    """opencv_threads (sam2_ros/ros/process_tuning.py, with tune_malloc in one call at
    configure): cv2.setNumThreads(n) for n > 0; 0 leaves OpenCV's pool as it was."""
    import cv2

    from sam2_ros.ros.process_tuning import ProcessTuning

    monkeypatch.setattr(malloc, 'keep_large_buffers', lambda: True)
    before = cv2.getNumThreads()
    try:
        tuning = ProcessTuning()
        tuning.apply(SimpleNamespace(tune_malloc=True, opencv_threads=threads,
                                     gil_switch_interval_ms=0.0,
                                     gpu_clock_keeper_us=0.0), print)
        assert cv2.getNumThreads() == (threads if threads else before)
        assert tuning.malloc.tuned and tuning.opencv_threads == threads
    finally:
        cv2.setNumThreads(before)


def test_gil_switch_interval_is_set_and_restored(monkeypatch):
    """gil_switch_interval_ms > 0 sets Python's switch interval; 0 (a reconfigure back)
    restores the interval the process had before."""
    import sys

    from sam2_ros.ros.options import NodeOptions
    from sam2_ros.ros.process_tuning import ProcessTuning

    monkeypatch.setattr(malloc, 'keep_large_buffers', lambda: True)
    before = sys.getswitchinterval()
    try:
        tuning = ProcessTuning()
        opts = SimpleNamespace(tune_malloc=False, opencv_threads=0, gil_switch_interval_ms=0.5,
                               gpu_clock_keeper_us=0.0)
        tuning.apply(opts, print)
        assert sys.getswitchinterval() == pytest.approx(0.0005)
        opts.gil_switch_interval_ms = 0.0
        tuning.apply(opts, print)
        assert sys.getswitchinterval() == pytest.approx(before)
    finally:
        sys.setswitchinterval(before)
    for bad in (-1.0, 101.0):
        with pytest.raises(ValueError, match='gil_switch_interval_ms'):
            NodeOptions(gil_switch_interval_ms=bad).validate()
    with pytest.raises(ValueError, match='gpu_clock_keeper_us'):
        NodeOptions(gpu_clock_keeper_us=-5.0).validate()
