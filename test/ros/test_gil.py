"""The node's gil_switch_interval_ms (sam2_ros/ros/gil.py): set at configure, restored at
cleanup, 0 leaves Python's own interval, out-of-range values refused."""

import sys

import pytest

from sam2_ros.ros.gil import SwitchInterval
from sam2_ros.ros.options import NodeOptions


@pytest.fixture
def original():
    before = sys.getswitchinterval()
    yield before
    sys.setswitchinterval(before)


def test_apply_sets_the_interval_and_restore_brings_back_the_one_it_replaced(original):
    s = SwitchInterval()
    s.apply(0.5)
    assert sys.getswitchinterval() == pytest.approx(0.0005)
    s.apply(2.0)                     # a second configure: the first original is kept
    assert sys.getswitchinterval() == pytest.approx(0.002)
    s.restore()
    assert sys.getswitchinterval() == original
    s.restore()                      # nothing set: nothing changes
    assert sys.getswitchinterval() == original


def test_zero_leaves_pythons_interval(original):
    s = SwitchInterval()
    s.apply(0.0)
    assert sys.getswitchinterval() == original and s.saved is None


@pytest.mark.parametrize('bad', [-1.0, 101.0])
def test_out_of_range_interval_is_refused(bad):
    with pytest.raises(ValueError, match='gil_switch_interval_ms'):
        NodeOptions(gil_switch_interval_ms=bad).validate()
    assert NodeOptions(gil_switch_interval_ms=0.0).validate()
