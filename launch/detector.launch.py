"""The tracker prompted by a detector: the detector's vision_msgs/Detection2DArray topic is
remapped onto the tracker's ~/detections, and its objects come out as Detection2DArray on
~/objects (optionally remapped too). Start your detector beside it (same image topic, and it
must stamp its detections with the stamp of the image they were computed on).

    ros2 launch sam2_ros detector.launch.py checkpoint:=/path/sam2.1_hiera_tiny.pt \\
        detections_topic:=/detector/detections [objects_topic:=/tracked/objects] \\
        [image_topic:=/camera/image_raw] [device:=cpu] [params_file:=my.yaml] [namespace:=cam0]

The association parameters (detection_min_score, detection_class_ids, detection_match_iou,
detection_drift_iou, detection_max_age_frames) come from params_file and can be changed at run
time with `ros2 param set`; see docs/ros.md "Detector in, objects out".
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from sam2_ros.ros import launch_common as common


def _setup(context, *args, **kwargs):
    arg = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    rviz = common.rviz_actions(context)   # first: rviz:=true without rviz2 starts nothing
    remaps = [('~/detections', arg('detections_topic'))]
    if arg('objects_topic') not in ('', 'default'):
        remaps.append(('~/objects', arg('objects_topic')))
    tracker = common.tracker_node(context, namespace=arg('namespace'), remappings=remaps,
                                  autostart=True)
    return (common.dds_profile_actions(context)
            + [tracker, common.shutdown_on_failure(tracker, 'the tracker node')] + rviz)


def generate_launch_description():
    return LaunchDescription(common.declare_common() + [
        DeclareLaunchArgument('detections_topic', default_value='/detections',
                              description="the detector's vision_msgs/Detection2DArray topic "
                                          "(remapped onto the tracker's ~/detections)"),
        DeclareLaunchArgument('objects_topic', default_value='default',
                              description='where the tracked objects go (Detection2DArray); '
                                          "default = ~/objects (/sam2_tracker/objects)"),
        DeclareLaunchArgument('namespace', default_value='',
                              description='namespace of the node (e.g. the camera name)'),
        OpaqueFunction(function=_setup)])
