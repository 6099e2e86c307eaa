"""Replay a recorded bag into the tracker with simulated time, and show it in RViz.

    ros2 launch sam2_ros replay.launch.py bag:=/path/to/bag checkpoint:=/path/model.pt \
        [rate:=1.0] [player:=ros2bag|sam2_ros] [rviz:=true]

player:=ros2bag runs `ros2 bag play --clock` (needs rosbag2) after `start_delay` seconds, the
time the node needs to load the model; player:=sam2_ros runs our rosbag2-free player
(sam2_ros.ros.replay), which waits for the node's subscriptions instead. The node runs with
use_sim_time and process_every_frame (no frame dropped, deterministic results).
Needs `launch`/`launch_ros` (not installable from PyPI; see docs/ros.md for the plain commands).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, ExecuteProcess, SetEnvironmentVariable,
                            TimerAction)
from launch.conditions import (IfCondition, LaunchConfigurationEquals,
                               LaunchConfigurationNotEquals)
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description():
    share = get_package_share_directory('sam2_ros')
    arg = LaunchConfiguration
    declared = [
        DeclareLaunchArgument('bag', description='rosbag2 directory (sqlite3 or mcap)'),
        DeclareLaunchArgument('rate', default_value='1.0', description='playback speed'),
        DeclareLaunchArgument('player', default_value='ros2bag',
                              description='ros2bag (ros2 bag play) or sam2_ros (bag_replay)'),
        DeclareLaunchArgument('start_delay', default_value='15.0',
                              description='seconds before ros2 bag play starts'),
        DeclareLaunchArgument('model', default_value='tiny', description='SAM 2.1 size'),
        DeclareLaunchArgument('checkpoint', default_value='', description='SAM 2.1 .pt file'),
        DeclareLaunchArgument('params_file',
                              default_value=os.path.join(share, 'config', 'tracker.yaml'),
                              description='all node parameters (see docs/ros.md)'),
        DeclareLaunchArgument('rviz', default_value='true', description='start RViz'),
        DeclareLaunchArgument('dds_profile',
                              default_value=os.path.join(share, 'config',
                                                         'fastdds_large_frames.xml'),
                              description='Fast DDS XML profile for the processes started '
                                          'here (large shared-memory segments for camera '
                                          "frames); '' = Fast DDS defaults"),
    ]
    # before any process starts, so the node and RViz (and the player) all use it
    dds = SetEnvironmentVariable('FASTDDS_DEFAULT_PROFILES_FILE', arg('dds_profile'),
                                 condition=LaunchConfigurationNotEquals('dds_profile', ''))
    tracker = Node(
        package='sam2_ros', executable='tracker_node', name='sam2_tracker', output='screen',
        parameters=[arg('params_file'), {
            'model_size': ParameterValue(arg('model'), value_type=str),
            'checkpoint': ParameterValue(arg('checkpoint'), value_type=str),
            'use_sim_time': True,
            'process_every_frame': True,
            'autostart': True,
        }])
    ros2bag = TimerAction(
        period=arg('start_delay'),
        actions=[ExecuteProcess(cmd=['ros2', 'bag', 'play', arg('bag'), '--clock',
                                     '--rate', arg('rate')], output='screen')],
        condition=LaunchConfigurationEquals('player', 'ros2bag'))
    ours = Node(package='sam2_ros', executable='bag_replay', name='sam2_bag_replay',
                output='screen', arguments=[arg('bag'), '--rate', arg('rate'), '--wait',
                                            '--wait-timeout', '300'],
                condition=LaunchConfigurationEquals('player', 'sam2_ros'))
    rviz = Node(package='rviz2', executable='rviz2', name='rviz2', output='log',
                arguments=['-d', os.path.join(share, 'config', 'sam2_ros.rviz')],
                parameters=[{'use_sim_time': True}], condition=IfCondition(arg('rviz')))
    return LaunchDescription(declared + [dds, tracker, ros2bag, ours, rviz])
