"""Replay a recorded bag into the tracker with simulated time (and RViz when installed).

    ros2 launch sam2_ros replay.launch.py bag:=/path/to/bag checkpoint:=/path/model.pt \\
        [rate:=1.0] [player:=auto|ros2bag|sam2_ros] [wait_for:=TOPIC:N] [rviz:=auto|true|false]
        [wait_timeout:=300] [exit_when_done:=false|true]

player:=ros2bag runs `ros2 bag play --clock` (needs rosbag2) after `start_delay` seconds, the
time the node needs to load the model; player:=sam2_ros runs our rosbag2-free player
(sam2_ros.ros.replay), which waits for the node's subscriptions instead, and for the
subscribers named in wait_for (e.g. a recorder's), and plays in order (each message
acknowledged before the next: a prompt never overtakes its frame); player:=auto (the default)
takes ours: a fixed start delay loses the first frames when the model loads slower. The node
runs with use_sim_time,
process_every_frame (no frame dropped, deterministic results) and corrections_on_next_frame
false (a prompt played just after its frame is applied to it, the frame re-published). The
tracker arguments are those of tracker.launch.py (`--show-args`). A bag path that does not
exist starts nothing; a player that fails (a bag it cannot read) stops the launch, status 1.
Our player waits up to wait_timeout seconds for the node, saying every 30 s what it waits for.
When the bag is played the tracker keeps running (its topics, RViz; the launch says so, Ctrl-C
ends it); exit_when_done:=true ends the launch then, status 0.
"""

import os
import shutil
import sys

from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, ExecuteProcess, LogInfo, OpaqueFunction,
                            RegisterEventHandler, Shutdown, TimerAction)
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration

from sam2_ros.ros import launch_common as common


def ros2_executable() -> str:
    """`ros2` of the running launch (the venv's or the ROS install's), even off PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), 'ros2')
    return beside if os.access(beside, os.X_OK) else (shutil.which('ros2') or 'ros2')


def when_done(process, exit_when_done: bool):
    """An event handler for ``process`` (the player) exiting 0 (the bag played): say so, and
    with ``exit_when_done`` end the launch (status 0); without it the tracker keeps running
    for its topics and RViz. Errors are shutdown_on_failure's; exits of the launch's own
    shutdown (Ctrl-C) are that shutdown."""
    def on_exit(event, context):
        if event.returncode != 0 or context.is_shutdown:
            return None
        if exit_when_done:
            return [LogInfo(msg='bag finished (the player\'s summary is above): stopping the '
                                'launch (exit_when_done:=true)'),
                    Shutdown(reason='bag finished (exit_when_done:=true)')]
        return [LogInfo(msg='bag finished (the player\'s summary is above); the tracker keeps '
                            'running (its topics, RViz): Ctrl-C to stop, or exit_when_done:=true '
                            'to end the launch with the bag')]

    return RegisterEventHandler(OnProcessExit(target_action=process, on_exit=on_exit))


def _setup(context, *args, **kwargs):
    arg = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    player = arg('player')
    wait_for = [t.strip() for t in arg('wait_for').split(',') if t.strip()]
    has_rosbag2 = common.package_installed('ros2bag')
    if player == 'auto':   # only ours waits for the node and plays in order: reproducible
        player = 'sam2_ros'
    elif player == 'ros2bag' and wait_for:
        raise RuntimeError('wait_for needs player:=sam2_ros (ros2 bag play starts after '
                           'start_delay instead); nothing was started')
    elif player == 'ros2bag' and not has_rosbag2:
        raise RuntimeError('player:=ros2bag but rosbag2 (ros2bag) is not installed; nothing '
                           'was started. Use player:=sam2_ros or player:=auto')
    bag, rate = arg('bag'), arg('rate')
    wait_timeout = common.to_value('float', arg('wait_timeout'), 'wait_timeout')
    if wait_timeout <= 0:
        raise ValueError(f'launch argument wait_timeout must be > 0, got {wait_timeout:g}')
    exit_when_done = common.to_value('bool', arg('exit_when_done'), 'exit_when_done')
    # before anything starts: a player of a wrong path died at once and left the tracker
    # waiting for frames, the launch with it
    if not os.path.exists(bag):
        raise FileNotFoundError(f'bag {bag!r} does not exist (a rosbag2 directory, sqlite3 or '
                                f'mcap); nothing was started')
    if os.path.isdir(bag) and not os.path.isfile(os.path.join(bag, 'metadata.yaml')):
        raise FileNotFoundError(f'bag {bag!r} is a folder without metadata.yaml, not a rosbag2 '
                                f'bag (its parent folder? `ros2 bag reindex` writes a lost '
                                f'one); nothing was started')
    rviz = common.rviz_actions(context, use_sim_time=True)
    if player == 'ros2bag':
        process = ExecuteProcess(
            cmd=[ros2_executable(), 'bag', 'play', bag, '--clock', '--rate', rate],
            output='screen')
        play = TimerAction(period=float(arg('start_delay')), actions=[process])
    else:
        from launch_ros.actions import Node

        process = play = Node(package='sam2_ros', executable='bag_replay',
                              name='sam2_bag_replay', output='screen',
                              arguments=[bag, '--rate', rate, '--in-order', '--wait-node',
                                         f'/{common.NODE_NAME}', '--wait-timeout',
                                         f'{wait_timeout:g}'] +
                              [a for t in wait_for for a in ('--wait-topic', t)])
    # a bag the player cannot read (or a node it waited for in vain) ends the launch too
    on_failure = common.shutdown_on_failure(process, 'the bag player')
    # a prompt recorded for a frame but played just after it is applied to that frame and
    # the frame re-published (not deferred to the next one), so a frame's state does not
    # depend on how the player interleaved the two
    tracker = common.tracker_node(context, use_sim_time=True, process_every_frame=True,
                                  autostart=True, corrections_on_next_frame=False)
    return common.dds_profile_actions(context) + [
        on_failure, when_done(process, exit_when_done), tracker, play] + rviz


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument('bag', description='rosbag2 directory (sqlite3 or mcap)'),
        DeclareLaunchArgument('rate', default_value='1.0', description='playback speed'),
        DeclareLaunchArgument('player', default_value='auto',
                              choices=['auto', 'ros2bag', 'sam2_ros'],
                              description='ros2bag (ros2 bag play after start_delay), '
                                          'sam2_ros (bag_replay: waits for the node, in '
                                          'order), auto: sam2_ros'),
        DeclareLaunchArgument('start_delay', default_value='15.0',
                              description='seconds before ros2 bag play starts'),
        DeclareLaunchArgument('wait_for', default_value='',
                              description='player:=sam2_ros: also wait for these subscriber '
                                          'counts, comma-separated TOPIC[:N] of replayed '
                                          'topics or /clock, e.g. /camera/image_raw:2 (the '
                                          'node and a recorder)'),
        DeclareLaunchArgument('wait_timeout', default_value='300',
                              description='player:=sam2_ros: seconds to wait for the tracker '
                                          'to subscribe to the bag\'s image topics (a model '
                                          'load fits); then the launch stops, status 1'),
        DeclareLaunchArgument('exit_when_done', default_value='false',
                              choices=['false', 'true'],
                              description='true: end the launch (tracker included, status 0) '
                                          'when the bag is played; false: the tracker keeps '
                                          'running (Ctrl-C to stop)'),
    ] + common.declare_common() + [OpaqueFunction(function=_setup)])
