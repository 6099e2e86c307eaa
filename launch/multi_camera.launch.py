"""One tracker per camera, each in the camera's namespace with its own device and topics.

    ros2 launch sam2_ros multi_camera.launch.py cameras:=front,rear devices:=cuda:0,cuda:1 \\
        checkpoint:=/path/sam2.1_hiera_tiny.pt [image_topics:=/front/image_raw,/rear/image_raw]

Camera NAME gets the node /NAME/sam2_tracker, reading `image_topics` (default
/NAME/image_raw) and publishing /NAME/sam2_tracker/{mask,overlay,state,prompt,click}.
`devices` is one device for all cameras or one per camera ('' = from params_file). With two
cameras, `positions:=true` also starts positions_node: the 3D positions of the objects both
trackers follow, from /NAME/camera_info, on /sam2_positions/positions. The other
tracker arguments (model, image_size, checkpoint, params_file, ...) apply to every camera; see
tracker.launch.py. RViz is not started (its layout shows one camera).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from sam2_ros.ros import launch_common as common


def _split(text: str):
    return [t.strip() for t in text.split(',') if t.strip()]


def per_camera(name: str, values, cameras, default):
    """A comma list of one value per camera, one value for all, or none (``default``)."""
    if not values:
        return [default(c) for c in cameras]
    if len(values) == 1:
        return values * len(cameras)
    if len(values) != len(cameras):
        raise ValueError(f'{name}: {len(values)} values for {len(cameras)} cameras {cameras}')
    return values


def _setup(context, *args, **kwargs):
    arg = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    cameras = _split(arg('cameras'))
    if not cameras or len(set(cameras)) != len(cameras):
        raise ValueError(f'cameras must be distinct names, got {arg("cameras")!r}')
    topics = per_camera('image_topics', _split(arg('image_topics')), cameras,
                        lambda c: f'/{c}/image_raw')
    devices = per_camera('devices', _split(arg('devices')), cameras, lambda c: None)
    nodes = []
    for cam, topic, dev in zip(cameras, topics, devices):
        fixed = {'image_topic': topic, 'autostart': True}
        if dev is not None:
            fixed['device'] = dev   # precision: the device's unless given (the node's rule)
        nodes.append(common.tracker_node(context, namespace=cam, **fixed))
    if arg('positions').lower() in ('true', '1'):
        if len(cameras) != 2:
            raise ValueError(f'positions:=true needs two cameras (left,right), got {cameras}')
        from launch_ros.actions import Node
        nodes.append(Node(package=common.PACKAGE, executable='positions_node',
                          name='sam2_positions', output='screen',
                          parameters=[{'left': cameras[0], 'right': cameras[1],
                                       'rectified': arg('rectified').lower() in ('true', '1')}]))
    return common.dds_profile_actions(context) + nodes


def generate_launch_description():
    declared = [a for a in common.declare_common() if a.name not in ('rviz', 'image_topic')]
    return LaunchDescription([
        DeclareLaunchArgument('cameras', default_value='cam0,cam1',
                              description='comma-separated camera names (= namespaces)'),
        DeclareLaunchArgument('image_topics', default_value='',
                              description="comma list, one per camera; '' = /<camera>/image_raw"),
        DeclareLaunchArgument('devices', default_value='',
                              description="comma list, one per camera or one for all; "
                                          "'' = device argument / params_file"),
        DeclareLaunchArgument('positions', default_value='false',
                              description='two cameras (left,right): also start positions_node '
                                          '(3D positions on /sam2_positions/positions)'),
        DeclareLaunchArgument('rectified', default_value='false',
                              description='positions: the images are rectified (image_rect)'),
    ] + declared + [OpaqueFunction(function=_setup)])
