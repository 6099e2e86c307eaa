"""Launch the sam2_tracker node (it configures and activates itself) and, if installed, RViz.

    ros2 launch sam2_ros tracker.launch.py checkpoint:=/path/sam2.1_hiera_tiny.pt \\
        [image_topic:=/camera/image_raw] [model:=tiny] [image_size:=1024] [device:=cuda] \\
        [params_file:=my.yaml] [rviz:=auto|true|false] [dds_profile:=none] [namespace:=cam0]
    # CPU, no checkpoint (random weights: the pipeline runs, masks are meaningless):
    ros2 launch sam2_ros tracker.launch.py device:=cpu random_weights:=true image_size:=512

Arguments left empty take the value of params_file (config/tracker.yaml by default); those
given override it. `ros2 launch sam2_ros tracker.launch.py --show-args` lists them all.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from sam2_ros.ros import launch_common as common


def _setup(context, *args, **kwargs):
    rviz = common.rviz_actions(context)   # first: rviz:=true without rviz2 starts nothing
    namespace = LaunchConfiguration('namespace').perform(context)
    tracker = common.tracker_node(context, namespace=namespace, autostart=True)
    # a tracker that cannot start (no checkpoint, no GPU) ends the launch, exit status 1
    return (common.dds_profile_actions(context)
            + [tracker, common.shutdown_on_failure(tracker, 'the tracker node')] + rviz)


def generate_launch_description():
    return LaunchDescription(common.declare_common() + [
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace of the node (e.g. the camera name)'),
        OpaqueFunction(function=_setup)])
