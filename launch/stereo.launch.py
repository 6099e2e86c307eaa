"""One tracker for a stereo camera: both images on one model and one GPU (parameter cameras).

    ros2 launch sam2_ros stereo.launch.py checkpoint:=/path/sam2.1_hiera_tiny.pt \\
        [namespace:=stereo] [cameras:=left,right] [camera_image:=image_raw] \\
        [pair_tolerance_ms:=0] [camera_period_ms:=16.7] [device:=cuda:0]

A stereo driver publishes <namespace>/left/image_raw, <namespace>/left/camera_info and the
same under right/. The node <namespace>/sam2_tracker reads them (camera namespaces are
relative), takes prompts on ~/left/prompt, ~/right/prompt (clicks ~/<camera>/click),
publishes ~/left/{mask,overlay,state,objects}, the same for right, and ~/positions (the 3D
centroids of objects tracked in both, in the left camera's frame). The other tracker
arguments (model, image_size, params_file, ...) are tracker.launch.py's. No RViz (its layout
shows one camera).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from sam2_ros.ros import launch_common as common


def _float(arg, name: str) -> float:
    try:
        return float(arg(name))
    except ValueError:
        raise ValueError(f'launch argument {name} must be a number, got {arg(name)!r}') from None


def _setup(context, *args, **kwargs):
    arg = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    cameras = [c.strip() for c in arg('cameras').split(',') if c.strip()]
    if len(cameras) < 2 or len(set(cameras)) != len(cameras):
        raise ValueError(f'cameras must be two or more distinct names, got {arg("cameras")!r}')
    fixed = {'cameras': cameras, 'camera_image': arg('camera_image'), 'autostart': True,
             'pair_tolerance_ms': _float(arg, 'pair_tolerance_ms'),
             'camera_period_ms': _float(arg, 'camera_period_ms')}
    # `namespace:=''` cannot be typed on ros2 launch's command line: 'none' or '/' for none
    ns = '' if arg('namespace').strip().lower() in ('', 'none', '/') else arg('namespace')
    return common.dds_profile_actions(context) + [
        common.tracker_node(context, namespace=ns, **fixed)]


def generate_launch_description():
    declared = [a for a in common.declare_common()
                if a.name not in ('rviz', 'image_topic', 'namespace')]
    return LaunchDescription([
        DeclareLaunchArgument('namespace', default_value='stereo',
                              description="the stereo camera's namespace ('none' or '/' = "
                                          "none)"),
        DeclareLaunchArgument('cameras', default_value='left,right',
                              description='comma-separated camera namespaces, the left first'),
        DeclareLaunchArgument('camera_image', default_value='image_raw',
                              description='the image topic under each camera namespace'),
        DeclareLaunchArgument('pair_tolerance_ms', default_value='0.0',
                              description='stamps this close are one pair (0 = equal stamps)'),
        DeclareLaunchArgument('camera_period_ms', default_value='16.7',
                              description='frame period: a lone frame waits at most this long'),
    ] + declared + [OpaqueFunction(function=_setup)])
