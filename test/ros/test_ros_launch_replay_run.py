"""`ros2 launch sam2_ros replay.launch.py` for real, as a user replays a bag: our player when
rosbag2 is missing, with nothing of the venv on PATH, and the launch stopping (tracker
included) when the player fails. The tools and helpers are those of test_ros_launch_run.py.
"""

from __future__ import annotations

import re

import pytest

from ros_helpers import stamp, wait_until
from test_ros_launch_run import (CPU_ARGS, alive, exit_of, launched, node_pids, ros2,
                                 sigint_and_check_clean)

pytestmark = [pytest.mark.slow, pytest.mark.ros_cli]


def test_replay_launch_default_player_without_venv_on_path(tmp_path):
    """Defect 4: the default player must not need `ros2 bag` (absent here) or `ros2` on PATH:
    player:=auto takes our player when rosbag2 is missing, and every path is absolute.
    ``wait_for:=/clock:2`` (the node and this client) holds the bag until the client has seen
    the node's publishers: the whole bag plays in a quarter of a second, and a state published
    before the client's reader matched would be lost (a timeout in one CI run)."""
    from rosgraph_msgs.msg import Clock

    from test_ros_replay import N, write_bag

    ros2()
    # with a camera_info topic the node does not take: the player waits for the node's own
    bag = write_bag(tmp_path / 'bag', 'mcap', camera_info=True)
    with launched(tmp_path, 'replay', 'replay.launch.py', f'bag:={bag}', 'rate:=2.0',
                  'wait_for:=/clock:2', *CPU_ARGS, 'max_objects:=2',
                  path_without_venv=True) as run:
        c = run.client()
        run.proc.wait_log(r'\]: active:', 180)
        c.wait_connected(60)
        clocks = []   # the player's second /clock subscriber: playback starts now
        c.node.create_subscription(Clock, '/clock', clocks.append, 10)
        st = run.wait_state(c, stamp(N - 1), 120)
        assert [o.object_id for o in st.objects] == [1, 2]
        assert clocks, 'no /clock from the player'
        run.proc.wait_log(r'\[bag_replay-\d+\]', 30)   # our player, not `ros2 bag`
        assert 'deprecated' not in run.proc.log().lower(), run.proc.log()
        run.close_clients()
        sigint_and_check_clean(run.proc, node_pids(run.proc))


def test_replay_launch_stops_when_the_player_fails(tmp_path):
    """Defect: a bag the player cannot read (here one whose metadata.yaml is no bag's) used to
    leave the tracker running and the launch waiting forever; now the launch stops, tracker
    included, with exit status 1."""
    ros2()
    not_a_bag = tmp_path / 'not_a_bag'
    not_a_bag.mkdir()
    (not_a_bag / 'metadata.yaml').write_text('not: a bag\n')
    with launched(tmp_path, 'replay_bad', 'replay.launch.py', f'bag:={not_a_bag}',
                  'player:=sam2_ros', 'rviz:=false', 'dds_profile:=none', *CPU_ARGS) as run:
        rc, log = exit_of(run.proc, 240, 'its player failed')
        assert rc == 1, log[-3000:]
        assert f'cannot replay {not_a_bag}' in log, log[-3000:]
        assert 'the bag player exited with status 1' in log, log[-3000:]
        started = re.search(r'\[tracker_node-\d+\]: process started with pid \[(\d+)\]', log)
        assert started, log[-3000:]
        wait_until(lambda: not alive([int(started.group(1))]), 10, 'the tracker to exit')


def test_replay_launch_ctrl_c_while_the_player_waits_is_clean(tmp_path):
    """A tracker on another image topic than the bag's: the player says what it waits for
    (it was silent for the whole wait_timeout, fixed at 300 s), here within wait_timeout:=600.
    Ctrl-C then used to end the player with status 130, logged by launch as an error
    (`process has died`), at times with a KeyboardInterrupt traceback; now it says it stopped
    and exits 0 (`process has finished cleanly`), and so does the launch."""
    from test_ros_replay import write_bag

    ros2()
    bag = write_bag(tmp_path / 'bag', 'mcap')
    with launched(tmp_path, 'replay_wait', 'replay.launch.py', f'bag:={bag}', 'rviz:=false',
                  'dds_profile:=none', 'wait_timeout:=600', 'image_topic:=/other/image_raw',
                  *CPU_ARGS) as run:
        # the second report at the latest (35 s): the tracker subscribed by then
        run.proc.wait_log(r"\[bag_replay-\d+\] \[INFO\] .*waiting for /sam2_tracker to subscribe "
                          r"to the bag's image topics \['/camera/image_raw'\] \(\d+ of 600 s\)"
                          r".*it subscribes to \[[^\]]*'/other/image_raw'", 180)
        log = sigint_and_check_clean(run.proc, node_pids(run.proc))
        assert re.search(r'\[bag_replay-\d+\] \[INFO\] .*stopped while waiting for '
                         r'/sam2_tracker by SIGINT', log), log[-3000:]
        assert re.search(r'\[bag_replay-\d+\]: process has finished cleanly', log), log[-3000:]
        for bad in ('process has died', 'Traceback', 'KeyboardInterrupt', 'bag finished'):
            assert bad not in log, f'{bad!r} in:\n{log[-3000:]}'


def test_replay_launch_exit_when_done_ends_the_launch_with_the_bag(tmp_path):
    """exit_when_done:=true: once the bag is played the launch stops by itself, tracker
    included, status 0 (by default it keeps the tracker running: it used to say nothing)."""
    from test_ros_replay import write_bag

    ros2()
    bag = write_bag(tmp_path / 'bag', 'mcap')
    with launched(tmp_path, 'replay_done', 'replay.launch.py', f'bag:={bag}', 'rviz:=false',
                  'dds_profile:=none', 'exit_when_done:=true', *CPU_ARGS) as run:
        run.proc.wait_log(r'\]: active:', 180)
        pids = node_pids(run.proc)
        rc, log = exit_of(run.proc, 240, 'the bag')
        assert rc == 0, log[-3000:]
        assert re.search(r'\[bag_replay-\d+\] \[INFO\] .*bag finished: replayed 8 messages',
                         log), log[-3000:]
        assert 'stopping the launch (exit_when_done:=true)' in log, log[-3000:]
        assert 'process has died' not in log, log[-3000:]
        wait_until(lambda: not alive(pids), 30, f'the tracker {pids} to exit')
