"""One tracker for a stereo camera: both images on one model and one GPU (parameter cameras).

    ros2 launch sam2_ros stereo.launch.py checkpoint:=/path/sam2.1_hiera_tiny.pt \\
        [namespace:=stereo] [cameras:=left,right] [camera_image:=image_raw] \\
        [positions_rectified:=false] [pair_tolerance_ms:=0] [camera_period_ms:=16.7] \\
        [device:=cuda:0] [rviz:=auto|true|false] [rviz_frame:=left_camera_optical_frame]

A stereo driver publishes <namespace>/left/image_raw, <namespace>/left/camera_info and the
same under right/. The node <namespace>/sam2_tracker reads them (camera namespaces are
relative), takes prompts on ~/left/prompt, ~/right/prompt (clicks ~/<camera>/click),
publishes ~/left/{mask,overlay,state,objects}, the same for right, and ~/positions (the 3D
centroids of objects tracked in both, in the left camera's frame). The other tracker
arguments (model, image_size, params_file, ...) are tracker.launch.py's.

rviz:=auto (default) starts RViz with config/stereo.rviz where rviz2 is installed (true: stop
before anything starts if it is not; false: never): both cameras' overlays and ~/positions
(its display is vision_msgs_rviz_plugins', a package of its own), remapped onto this launch's
namespace and its first two cameras. RViz's fixed frame must be the frame_id of the left
camera's camera_info (the positions' frame): rviz_frame:=FRAME sets it, left out the layout's
left_camera_optical_frame.

As every override argument, cameras, camera_image, positions_rectified, pair_tolerance_ms
and camera_period_ms left out take the params_file's values (config/tracker.yaml: image_raw,
false, 0.0 and 33.3 ms, a 30 Hz camera; camera_period_ms:=16.7 for 60 Hz;
positions_rectified:=true with camera_image:=image_rect), except that cameras falls back to
left,right where the params file names none: this launch file is for a node serving several
cameras.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from sam2_ros.ros import launch_common as common

# the cameras of a stereo driver, where neither the argument nor the params file names any
DEFAULT_CAMERAS = ['left', 'right']


def cameras_of(given: list, in_params_file) -> list:
    """The cameras the node serves: the argument's, else the params file's, else
    DEFAULT_CAMERAS; ValueError for fewer than two or repeated names."""
    cameras = given or in_params_file or DEFAULT_CAMERAS
    if not isinstance(cameras, list) or len(cameras) < 2 or len(set(cameras)) != len(cameras):
        source = 'the cameras argument' if given else 'params_file'
        raise ValueError(f'stereo.launch.py needs two or more distinct cameras, {source} gives '
                         f'{cameras!r}')
    return cameras


def _setup(context, *args, **kwargs):
    arg = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    # `namespace:=''` cannot be typed on ros2 launch's command line: 'none' or '/' for none
    ns = '' if arg('namespace').strip().lower() in ('', 'none', '/') else arg('namespace')
    given = common.to_value('str_array', arg('cameras'), 'cameras')
    in_params_file = common.params_file_param(context, 'cameras', ns)
    cameras = cameras_of(given, in_params_file)
    frame = arg('rviz_frame').strip()
    # first: rviz:=true without rviz2 starts nothing
    rviz = common.rviz_actions(context, config=common.STEREO_RVIZ_CONFIG,
                               remappings=common.stereo_rviz_remappings(ns, cameras),
                               arguments=['-f', frame] if frame else [])
    # the argument given reaches the node as an override (STEREO_OVERRIDES); the default only
    # where the params file names none, so a params file's own cameras are never overridden
    fixed = {'autostart': True}
    if not given and not in_params_file:
        fixed['cameras'] = list(DEFAULT_CAMERAS)
    tracker = common.tracker_node(context, namespace=ns, more=common.STEREO_OVERRIDES, **fixed)
    return (common.dds_profile_actions(context)
            + [tracker, common.shutdown_on_failure(tracker, 'the tracker node')] + rviz)


def generate_launch_description():
    declared = [a for a in common.declare_common()
                if a.name not in ('image_topic', 'namespace')]
    return LaunchDescription([
        DeclareLaunchArgument('namespace', default_value='stereo',
                              description="the stereo camera's namespace ('none' or '/' = "
                                          "none)"),
        DeclareLaunchArgument('rviz_frame', default_value='',
                              description="RViz's fixed frame: the frame_id of the left "
                                          "camera's camera_info, the frame of ~/positions. "
                                          "Left out: config/stereo.rviz's "
                                          "(left_camera_optical_frame)"),
    ] + common.declare_overrides(common.STEREO_OVERRIDES, notes={
        'cameras': "the params_file's cameras, or left,right where it names none; "
                   "comma-separated, the left first"}) + declared + [
        OpaqueFunction(function=_setup)])
