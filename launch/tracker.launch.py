"""Launch the sam2_tracker node (configures and activates itself) and, optionally, RViz.

    ros2 launch sam2_ros tracker.launch.py checkpoint:=/path/sam2.1_hiera_tiny.pt \
        image_topic:=/camera/image_raw [model:=tiny] [params_file:=my.yaml] [rviz:=false] \
        [dds_profile:='']   # default: config/fastdds_large_frames.xml for the node and RViz

Needs a ROS 2 installation with `launch`/`launch_ros` (not installable from PyPI; without them
run `python -m sam2_ros.ros.node --ros-args --params-file config/tracker.yaml -p autostart:=true`).
Arguments given here override the params file.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.conditions import IfCondition, LaunchConfigurationNotEquals
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description():
    share = get_package_share_directory('sam2_ros')
    arg = LaunchConfiguration
    declared = [
        DeclareLaunchArgument('model', default_value='tiny',
                              description='SAM 2.1 size: tiny, small, base_plus, large'),
        DeclareLaunchArgument('checkpoint', default_value='',
                              description='official SAM 2.1 .pt file matching the model size'),
        DeclareLaunchArgument('image_topic', default_value='/camera/image_raw',
                              description='input sensor_msgs/Image topic'),
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
            'image_topic': ParameterValue(arg('image_topic'), value_type=str),
            'autostart': True,
        }])
    rviz = Node(package='rviz2', executable='rviz2', name='rviz2', output='log',
                arguments=['-d', os.path.join(share, 'config', 'sam2_ros.rviz')],
                condition=IfCondition(arg('rviz')))
    return LaunchDescription(declared + [dds, tracker, rviz])
