"""Ctrl-C at any point of the node's start-up exits cleanly: status 0, no traceback, no abort.
`ros2 launch` stops every process right after starting them when one of them dies at once
(replay.launch.py with a bag whose player fails); the node then got SIGINT while Python's
default handler was still in place, during its imports (rclpy, torch), and died with a
KeyboardInterrupt traceback (exit -2).

Each point is reached by waiting for a log line, never by a sleep: 'import' and 'tracker' are
the test-only pauses of SAM2_ROS_TEST_PAUSE_CONFIGURE (the node waits there until Ctrl-C),
the others are the node's own lines (the signal lands then or a little later: either way the
exit must be clean)."""

from __future__ import annotations

import signal

import pytest

from ros_helpers import DomainLease, start_node

from sam2_ros.ros.interruption import PAUSE_ENV

pytestmark = pytest.mark.slow

# (the pause asked for, the log line after which Ctrl-C is sent, what the log then shows)
POINTS = {
    'during the imports': ('import', r'start-up paused before import',
                           'stopped (Ctrl-C) before the node started'),
    'during the model build': ('tracker', r'configure paused before tracker',
                               'configure interrupted (Ctrl-C)'),
    'right after the tracker is ready': (None, r'tracker ready', None),
    'while spinning, active': (None, r'\]: active: ', None),
}


@pytest.mark.parametrize('point', list(POINTS))
def test_ctrl_c_at_each_start_up_point_exits_0_without_a_traceback(tmp_path, point):
    pause, line, says = POINTS[point]
    lease = DomainLease()
    env = lease.env()
    if pause is not None:
        env[PAUSE_ENV] = pause
    node = start_node(lease, tmp_path, env=env)
    try:
        node.wait_log(line, 120)
        node.p.send_signal(signal.SIGINT)
        node.p.wait(120)            # a failure guard only
        log = node.log()
        assert node.p.returncode == 0, f'exit {node.p.returncode}:\n{log[-3000:]}'
        for bad in ('Traceback', 'KeyboardInterrupt', 'terminate called', 'Exception ignored',
                    'autostart failed', 'FATAL'):
            assert bad not in log, f'{bad!r} in:\n{log[-3000:]}'
        if says is not None:
            assert says in log, log[-3000:]
    finally:
        node.stop()
        lease.release()
