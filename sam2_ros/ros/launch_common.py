"""What the launch files share: the launch arguments that override node parameters, the RViz
and Fast DDS profile handling, and the tracker ``Node`` action.

Why a module: three launch files (one camera, several cameras, bag replay) need the same
arguments with the same meaning, and launch files cannot import each other. Only launch files
import it (it needs ``launch``/``launch_ros``, which a venv without the ros_cli bundle lacks).

An override argument left at its default ``''`` changes nothing: the value comes from
``params_file``. So a params file of one's own is never silently overridden by a launch default.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from launch.actions import DeclareLaunchArgument, LogInfo, SetEnvironmentVariable
from launch.launch_context import LaunchContext
from launch.substitutions import LaunchConfiguration

PACKAGE = 'sam2_ros'
NODE_NAME = 'sam2_tracker'
RVIZ_IMAGE = '/camera/image_raw'    # the camera topic config/sam2_ros.rviz shows
# `ros2 launch` refuses empty values on the command line (`name:=`), so "Fast DDS defaults"
# needs a word of its own; '' still works where launch files include each other.
NO_PROFILE = ('', 'none', 'default')
RVIZ_CHOICES = ('auto', 'true', 'false')


class Override(NamedTuple):
    arg: str        # launch argument
    param: str      # node parameter
    kind: type      # str, int or bool
    description: str


OVERRIDES = (
    Override('model', 'model_size', str, 'SAM 2.1 size: tiny, small, base_plus, large'),
    Override('checkpoint', 'checkpoint', str, 'official SAM 2.1 .pt file matching the model'),
    Override('image_size', 'image_size', int, 'model input side in px, multiple of 32'),
    Override('device', 'device', str, 'torch device: cuda, cuda:1, cpu'),
    Override('precision', 'precision', str, 'bf16 or fp32; by default the node picks bf16 on '
                                            'CUDA, fp32 on the CPU'),
    Override('random_weights', 'random_weights', bool,
             'true: random model weights (tests and demos only, masks are meaningless)'),
    Override('use_cuda_graphs', 'use_cuda_graphs', bool, 'CUDA graphs on CUDA devices'),
    Override('image_topic', 'image_topic', str, 'input image topic'),
    Override('input_type', 'input_type', str, "'raw' (Image) or 'compressed' "
                                              "(CompressedImage on <image_topic>/compressed)"),
    Override('max_objects', 'max_objects', int, 'capacity of the object table'),
)


def share_dir() -> str:
    from ament_index_python.packages import get_package_share_directory

    return get_package_share_directory(PACKAGE)


def declare_common(rviz_default: str = 'auto') -> List[DeclareLaunchArgument]:
    """The arguments every launch file of ours takes."""
    share = share_dir()
    out = [DeclareLaunchArgument(o.arg, default_value='',
                                 description=f"{o.description}; '' = from params_file")
           for o in OVERRIDES]
    out += [
        DeclareLaunchArgument('params_file',
                              default_value=os.path.join(share, 'config', 'tracker.yaml'),
                              description='all node parameters (see docs/ros.md)'),
        DeclareLaunchArgument('log_level', default_value='info',
                              description='node log level: debug, info, warn, error'),
        DeclareLaunchArgument('rviz', default_value=rviz_default, choices=list(RVIZ_CHOICES),
                              description='auto: start RViz when rviz2 is installed; true: '
                                          'required (stop if absent); false: never'),
        DeclareLaunchArgument('dds_profile',
                              default_value=os.path.join(share, 'config',
                                                         'fastdds_large_frames.xml'),
                              description='Fast DDS XML profile for the processes started here '
                                          '(large shared-memory segments for camera frames); '
                                          'none = Fast DDS defaults'),
    ]
    return out


def to_value(kind: type, text: str, name: str) -> Any:
    """A launch argument's text -> the parameter's Python value (ValueError naming it)."""
    if kind is str:
        return text
    if kind is bool:
        low = text.strip().lower()
        if low not in ('true', 'false', '1', '0'):
            raise ValueError(f"launch argument {name} must be true or false, got {text!r}")
        return low in ('true', '1')
    try:
        return int(text)
    except ValueError:
        raise ValueError(f'launch argument {name} must be an integer, got {text!r}') from None


def overrides(context: LaunchContext, **fixed: Any) -> Dict[str, Any]:
    """Node parameters from the override arguments that were given (non-empty), plus ``fixed``."""
    values: Dict[str, Any] = {}
    for o in OVERRIDES:
        text = context.launch_configurations.get(o.arg, '')   # undeclared in some files
        if text != '':
            values[o.param] = to_value(o.kind, text, o.arg)
    values.update(fixed)
    return values


def dds_profile_actions(context: LaunchContext) -> List[Any]:
    """FASTDDS_DEFAULT_PROFILES_FILE for every process started after it (node, RViz, player),
    unless dds_profile is one of NO_PROFILE (then the variable is left as the caller set it)."""
    path = LaunchConfiguration('dds_profile').perform(context)
    if path.strip().lower() in NO_PROFILE:
        return []
    if not os.path.isfile(path):
        raise FileNotFoundError(f'dds_profile {path!r} does not exist (none = Fast DDS defaults)')
    return [SetEnvironmentVariable('FASTDDS_DEFAULT_PROFILES_FILE', path)]


def package_installed(name: str) -> bool:
    from ament_index_python.packages import PackageNotFoundError, get_package_prefix

    try:
        get_package_prefix(name)
        return True
    except PackageNotFoundError:
        return False


def rviz_actions(context: LaunchContext, use_sim_time: bool = False) -> List[Any]:
    """RViz per the rviz argument. Call it before creating any other process: with rviz:=true
    and no rviz2 it raises, so the launch stops before anything started.

    Why: a missing rviz2 used to fail the whole launch after the tracker had started, leaving
    it orphaned; 'auto' (the default) starts without RViz and says so.
    """
    from launch_ros.actions import Node

    mode = LaunchConfiguration('rviz').perform(context).lower()
    if mode == 'false':
        return []
    if not package_installed('rviz2'):
        if mode == 'true':
            raise RuntimeError('rviz:=true but rviz2 is not installed (package not found); '
                               'nothing was started. Use rviz:=auto or rviz:=false')
        return [LogInfo(msg='rviz2 is not installed: starting without RViz '
                            '(rviz:=false silences this)')]
    return [Node(package='rviz2', executable='rviz2', name='rviz2', output='log',
                 arguments=['-d', os.path.join(share_dir(), 'config', 'sam2_ros.rviz')],
                 parameters=[{'use_sim_time': use_sim_time}],
                 remappings=rviz_remappings(context))]


def rviz_remappings(context: LaunchContext) -> List[Tuple[str, str]]:
    """The topics of config/sam2_ros.rviz (the default camera topic and the node's outputs
    without a namespace) remapped to the node's of this launch: its ``namespace`` and
    ``image_topic`` (the argument, else the params file's)."""
    ns = context.launch_configurations.get('namespace', '').strip('/')
    image = context.launch_configurations.get('image_topic', '') or \
        params_file_value(context, 'image_topic') or RVIZ_IMAGE
    if not image.startswith('/'):            # relative: in the node's namespace
        image = f'/{ns}/{image}' if ns else f'/{image}'
    node = f'/{ns}/{NODE_NAME}' if ns else f'/{NODE_NAME}'
    pairs = [(RVIZ_IMAGE, image)] + [(f'/{NODE_NAME}/{t}', f'{node}/{t}')
                                      for t in ('mask', 'overlay')]
    return [(a, b) for a, b in pairs if a != b]


def params_file_value(context: LaunchContext, name: str) -> str:
    """``name`` as the launch's params file sets it for the tracker ('' if it does not)."""
    import yaml

    path = context.launch_configurations.get('params_file', '')
    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError):
        return ''
    for key in ('/**', NODE_NAME, f'/{NODE_NAME}'):
        value = ((doc.get(key) or {}).get('ros__parameters') or {}).get(name)
        if isinstance(value, str):
            return value
    return ''


def tracker_node(context: LaunchContext, namespace: str = '', remappings=(),
                 **fixed: Any) -> Any:
    """The sam2_tracker node: params_file, then the given override arguments, then ``fixed``."""
    from launch_ros.actions import Node

    params_file = LaunchConfiguration('params_file').perform(context)
    level = LaunchConfiguration('log_level').perform(context)
    return Node(package=PACKAGE, executable='tracker_node', name=NODE_NAME,
                namespace=namespace or None, output='screen',
                parameters=[params_file, overrides(context, **fixed)],
                remappings=list(remappings), ros_arguments=['--log-level', level])
