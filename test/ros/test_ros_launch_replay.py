"""replay.launch.py's wait_timeout and exit_when_done, checked on the actions its setup returns
(as test_ros_launch.py checks launch files); run for real in test_ros_launch_replay_run.py."""

import pytest

from test_ros_launch import launch_actions, require_launch


def replay_actions(tmp_path, **args):
    """The actions of replay.launch.py for a bag folder (its metadata not read) and ``args``."""
    (tmp_path / 'metadata.yaml').write_text('not read here\n')
    return launch_actions('replay.launch.py', bag=str(tmp_path), **args)


def player_of(actions, bag):
    procs = [a for a in actions if hasattr(a, 'cmd')] + [
        sub for a in actions for sub in getattr(a, 'actions', [])]     # ros2bag: in a timer
    [player] = [p for p in procs if any(getattr(s, 'text', '') == bag
                                        for part in p.cmd for s in part)]
    return player


def player_cmd(actions, bag):
    cmd = [''.join(getattr(s, 'text', '?') for s in part) for part in player_of(actions, bag).cmd]
    return cmd[cmd.index(bag):]


def test_wait_timeout_reaches_our_player(tmp_path):
    """It was 300 s, fixed; now the wait_timeout argument (default 300), a positive number."""
    require_launch()
    bag = str(tmp_path)
    cmd = player_cmd(replay_actions(tmp_path), bag)
    assert cmd[cmd.index('--wait-timeout') + 1] == '300', cmd
    cmd = player_cmd(replay_actions(tmp_path, wait_timeout='45'), bag)
    assert cmd[cmd.index('--wait-timeout') + 1] == '45', cmd
    for bad in ('0', '-5', 'soon'):
        with pytest.raises(ValueError, match='wait_timeout'):
            replay_actions(tmp_path, wait_timeout=bad)
    with pytest.raises(ValueError, match='exit_when_done must be true or false'):
        replay_actions(tmp_path, exit_when_done='maybe')


@pytest.mark.parametrize('player', ['sam2_ros', 'ros2bag'])
@pytest.mark.parametrize('exit_when_done', ['false', 'true'])
def test_a_finished_bag_is_said_and_ends_the_launch_only_with_exit_when_done(
        tmp_path, monkeypatch, player, exit_when_done):
    """The launch used to go on in silence after the bag (a user waited 300 s). The player
    exiting 0 now logs that the bag is finished and, by default, that the tracker keeps
    running (Ctrl-C to stop); with exit_when_done:=true it shuts the launch down. A failed
    player is shutdown_on_failure's, and exits during the launch's own shutdown change
    nothing."""
    require_launch()
    from launch import LaunchContext
    from launch.actions import LogInfo, RegisterEventHandler, Shutdown
    from launch.events.process import ProcessExited

    from sam2_ros.ros import launch_common

    monkeypatch.setattr(launch_common, 'package_installed', lambda name: True)   # rosbag2
    actions = replay_actions(tmp_path, player=player, exit_when_done=exit_when_done)
    proc = player_of(actions, str(tmp_path))

    def exited(code):
        return ProcessExited(action=proc, name='p', cmd=['p'], cwd=None, env=None, pid=1,
                             returncode=code)

    handlers = [a.event_handler for a in actions if isinstance(a, RegisterEventHandler)]
    assert all(h.matches(exited(0)) for h in handlers)
    # the failure handler does nothing on a player that finished; when_done acts
    [done] = [h for h in handlers if h.handle(exited(0), LaunchContext())]
    ctx = LaunchContext()
    out = done.handle(exited(0), ctx)
    [log] = [a for a in out if isinstance(a, LogInfo)]
    text = ''.join(s.perform(ctx) for s in log.msg)
    assert text.startswith('bag finished'), text
    shutdown = [a for a in out if isinstance(a, Shutdown)]
    if exit_when_done == 'true':
        assert len(shutdown) == 1 and 'stopping the launch' in text, out
    else:
        assert not shutdown and 'the tracker keeps running' in text and 'Ctrl-C' in text, text
    assert done.handle(exited(1), ctx) is None           # the failure handler's case
    ctx._set_is_shutdown(True)                            # Ctrl-C: the launch stops anyway
    assert done.handle(exited(0), ctx) is None
