"""What a click does in each click_mode as the node's host converts it (NodeHost.convert, no
DDS): a negative click needs an object to remove the clicked area from, and a multi-camera
node's worker log lines name their camera."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from sam2_ros.engine.errors import UnknownObjectError
from sam2_ros.ros.mailbox import PromptItem
from sam2_ros.ros.node_host import NodeHost
from sam2_ros.ros.worker import FrameItem, Mailbox, TrackingWorker

from test_detections_late import WorldTracker
from test_ros_worker import host, outputs


def node_host(tracker, values, held=(), opts=None, lines=None):
    node = SimpleNamespace(get_parameter=lambda name: SimpleNamespace(value=values[name]))
    log = SimpleNamespace(log=lambda lvl, t: (lines if lines is not None else []).append(t))
    return NodeHost(node, tracker, SimpleNamespace(max_objects=8), opts, None, log,
                    held_ids=lambda: list(held))


def click(x=40.0, y=40.0, stamp=5):
    return PromptItem(SimpleNamespace(x=x, y=y), 'click', stamp)


def test_a_negative_click_on_an_object_not_tracked_is_refused_and_starts_nothing():
    """docs/ros.md: negative removes the clicked area from object click_object_id; with no
    such object the click is an error, not a new object of one negative point."""
    tr = WorldTracker()
    h = node_host(tr, {'click_mode': 'negative', 'click_object_id': 1})
    with pytest.raises(UnknownObjectError, match='click_mode negative: object 1 '
                                                 r'\(click_object_id\) is not tracked'):
        h.convert(click())
    published, logs = [], []
    w = TrackingWorker(tr, Mailbox(True, 4, 8),
                       host(lambda m: np.zeros((120, 160, 3), np.uint8), h.convert,
                            log=lambda lvl, t: logs.append((lvl, t))),
                       outputs(published.append))
    w.handle_frame(FrameItem(None, 5, 'header', 0.0))
    w.handle_prompt(click())
    w.handle_frame(FrameItem(None, 6, 'header', 0.0))
    assert tr.objs == {} and w.counters.prompt_errors == 1
    assert published[-1].errors[0].startswith('rejected click (stamp 5 ns): UnknownObjectError')


@pytest.mark.parametrize('tracked, held', [([1], ()), ([], (1,))])
def test_a_negative_click_on_an_object_tracked_or_starting_is_a_negative_point(tracked, held):
    tr = WorldTracker()
    tr.objs = dict.fromkeys(tracked, 0)
    _, p = node_host(tr, {'click_mode': 'negative', 'click_object_id': 1}, held).convert(click())
    assert p.obj_id == 1 and p.labels.tolist() == [0]


def test_a_multi_camera_node_names_the_camera_in_its_worker_log_lines():
    lines = []
    tr = SimpleNamespace(camera=1)     # rig.py sets each camera's host to its CameraTracker
    node_host(tr, {}, opts=SimpleNamespace(cameras=['left', 'right']), lines=lines).log(
        'info', 'detection 0 (a 0.90, box 1, 2, 3, 4) starts object 1')
    node_host(tr, {}, opts=SimpleNamespace(cameras=[]), lines=lines).log('info', 'one camera')
    assert lines == ['camera right: detection 0 (a 0.90, box 1, 2, 3, 4) starts object 1',
                     'one camera']
