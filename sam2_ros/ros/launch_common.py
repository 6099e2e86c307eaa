"""What the launch files share: the launch arguments that override node parameters, the RViz
and Fast DDS profile handling, and the tracker ``Node`` action.

Why a module: three launch files (one camera, several cameras, bag replay) need the same
arguments with the same meaning, and launch files cannot import each other. Only launch files
import it (it needs ``launch``/``launch_ros``, which a venv without the ros_cli bundle lacks).
It reads the node's parameter definitions (``sam2_ros.ros.params``, which imports torch: about
a second and 200 MB in the ``ros2 launch`` process) because the override arguments' types and
descriptions are the parameters' knobs, not a second copy of them.

An override argument left at its default ``''`` changes nothing: the value comes from
``params_file``. So a params file of one's own is never silently overridden by a launch default.

`ros2 launch` keeps an argument the launch file does not declare without a word (a misspelt
``image_sise:=256`` ran at the default): ``params_file``, which every launch file declares
through :func:`declare_common`, is a :class:`CheckingArgument` that names those given on the
command line, with the closest declared one.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from launch.actions import (DeclareLaunchArgument, LogInfo, RegisterEventHandler,
                            SetEnvironmentVariable)
from launch.launch_context import LaunchContext
from launch.substitutions import LaunchConfiguration

PACKAGE = 'sam2_ros'
NODE_NAME = 'sam2_tracker'
RVIZ_IMAGE = '/camera/image_raw'    # the camera topic config/sam2_ros.rviz shows
RVIZ_CONFIG = 'sam2_ros.rviz'       # one camera's layout (share/sam2_ros/config)
# stereo.launch.py's layout: the node /stereo/sam2_tracker (that launch file's default
# namespace) with cameras left, right; remapped onto the launch's (stereo_rviz_remappings)
STEREO_RVIZ_CONFIG = 'stereo.rviz'
STEREO_RVIZ_NAMESPACE = 'stereo'
STEREO_RVIZ_CAMERAS = ('left', 'right')
# `ros2 launch` refuses empty values on the command line (`name:=`), so "Fast DDS defaults"
# needs a word of its own; '' still works where launch files include each other.
NO_PROFILE = ('', 'none', 'default')
RVIZ_CHOICES = ('auto', 'true', 'false')
# Arguments launch itself reads (ros2 launch's --launch-prefix becomes launch-prefix:=...): given
# on the command line, they are not the launch file's to declare.
LAUNCH_OWN_ARGS = ('launch-prefix', 'launch-prefix-filter', 'emulate_tty')


class Override(NamedTuple):
    arg: str            # launch argument
    param: str          # node parameter
    kind: str           # the parameter's knob kind (sam2_ros.knobs.KINDS)
    description: str    # the parameter's knob doc


# Launch argument -> the node parameter it overrides. Its type and description are the
# parameter's knob (TrackerConfig, NodeOptions), read below, so they cannot drift from the
# node's (they did: the checkpoint's said nothing of model_size or random_weights).
TRACKER_ARGS = (('model', 'model_size'), ('checkpoint', 'checkpoint'),
                ('image_size', 'image_size'), ('device', 'device'), ('precision', 'precision'),
                ('random_weights', 'random_weights'), ('use_cuda_graphs', 'use_cuda_graphs'),
                ('image_topic', 'image_topic'), ('input_type', 'input_type'),
                ('max_objects', 'max_objects'))
# stereo.launch.py's too: one node serving several cameras. Not in every launch file:
# multi_camera.launch.py's `cameras` is a node per camera.
STEREO_ARGS = (('cameras', 'cameras'), ('camera_image', 'camera_image'),
               ('positions_rectified', 'positions_rectified'),
               ('pair_tolerance_ms', 'pair_tolerance_ms'),
               ('camera_period_ms', 'camera_period_ms'))


def knob_overrides(pairs: Sequence[Tuple[str, str]]) -> Tuple[Override, ...]:
    """(launch argument, node parameter) pairs -> Overrides typed and described by the
    parameters' knobs (sam2_ros.ros.params)."""
    from sam2_ros.ros import params

    specs = {s.name: s for s in params.PARAMS}
    return tuple(Override(arg, param, specs[param].kind, specs[param].description)
                 for arg, param in pairs)


OVERRIDES = knob_overrides(TRACKER_ARGS)
STEREO_OVERRIDES = knob_overrides(STEREO_ARGS)


def share_dir() -> str:
    from ament_index_python.packages import get_package_share_directory

    return get_package_share_directory(PACKAGE)


def declare_common(rviz_default: str = 'auto') -> List[DeclareLaunchArgument]:
    """The arguments every launch file of ours takes (params_file checks those given)."""
    share = share_dir()
    out = declare_overrides(OVERRIDES)
    out += [
        CheckingArgument('params_file',
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


class CheckingArgument(DeclareLaunchArgument):
    """A launch argument that, declared, also warns of each argument given on the command line
    (``context.argv``: what `ros2 launch` passes, not the declared defaults) that the launch
    file does not declare, with the closest declared name, as the node does for parameters.
    An argument (not an action of its own) so that the launch files' filters of
    declare_common's list by name keep working. The declared names are the launch file's
    (``current_launch_file_path``, loaded again: an action cannot see the description it is
    in); not known (a description built in code), nothing is said. Where another launch file
    includes ours, its command-line arguments are named too: they are not ours (the warning
    says "ignored by" the file)."""

    def execute(self, context: LaunchContext) -> Any:
        import launch.logging

        path = str(context.get_locals_as_dict().get('current_launch_file_path', ''))
        if path.endswith('.py') and os.path.isfile(path):
            logger = launch.logging.get_logger('launch.user')
            for line in unknown_argument_lines(context.argv, declared_arguments(path),
                                               os.path.basename(path)):
                logger.warning(line)
        return super().execute(context)


def declared_arguments(path: str) -> List[str]:
    """The names of the arguments the Python launch file at ``path`` declares."""
    from launch.launch_description_sources import get_launch_description_from_python_launch_file

    description = get_launch_description_from_python_launch_file(path)
    return [a.name for a in description.get_launch_arguments()]


def unknown_argument_lines(argv: Sequence[str], declared: Sequence[str],
                           launch_file: str) -> List[str]:
    """A warning per ``name:=value`` of ``argv`` that ``declared`` lacks (nor launch reads
    itself), with the closest declared name if one is close."""
    from sam2_ros.ros import params

    given = [a.split(':=', 1)[0] for a in argv if ':=' in a]
    lines = []
    for name, close in params.unknown([g for g in given if g not in LAUNCH_OWN_ARGS],
                                      list(declared)):
        hint = f"did you mean {close!r}? " if close else ''
        lines.append(f'launch argument {name!r} is not an argument of {launch_file}: ignored by '
                     f'it ({hint}`ros2 launch sam2_ros {launch_file} --show-args` lists them)')
    return lines


def declare_overrides(which: Sequence[Override], notes: Optional[Mapping[str, str]] = None
                      ) -> List[DeclareLaunchArgument]:
    """An argument per Override, default '' (the params_file's value); ``notes``: an
    argument's own words for what it does left out, instead of that."""
    notes = notes or {}
    return [DeclareLaunchArgument(o.arg, default_value='', description=(
        f"{o.description}. Left out: {notes.get(o.arg, f'the params_file value of {o.param}')}"))
        for o in which]


def to_value(kind: str, text: str, name: str) -> Any:
    """A launch argument's text -> the parameter's ROS value, by its knob kind (ValueError
    naming it). Only the type: the node checks the value as it does a params file's."""
    if kind == 'str':
        return text
    if kind == 'str_array':
        return [t.strip() for t in text.split(',') if t.strip()]
    if kind == 'bool':
        low = text.strip().lower()
        if low not in ('true', 'false', '1', '0'):
            raise ValueError(f"launch argument {name} must be true or false, got {text!r}")
        return low in ('true', '1')
    if kind == 'float':
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(f'launch argument {name} must be a number, got {text!r}')
        return value
    if kind == 'int':
        try:
            return int(text)
        except ValueError:
            raise ValueError(f'launch argument {name} must be an integer, got {text!r}') from None
    raise ValueError(f'launch argument {name}: no launch argument of kind {kind!r}')


def overrides(context: LaunchContext, more: Sequence[Override] = (),
              **fixed: Any) -> Dict[str, Any]:
    """Node parameters from the override arguments (OVERRIDES, then ``more``) that were given
    (non-empty), plus ``fixed``."""
    values: Dict[str, Any] = {}
    for o in OVERRIDES + tuple(more):
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


def rviz_actions(context: LaunchContext, use_sim_time: bool = False,
                 config: str = RVIZ_CONFIG,
                 remappings: Optional[Sequence[Tuple[str, str]]] = None,
                 arguments: Sequence[str] = ()) -> List[Any]:
    """RViz per the rviz argument. Call it before creating any other process: with rviz:=true
    and no rviz2 it raises, so the launch stops before anything started. ``config``: the
    layout (a file of share/sam2_ros/config); ``remappings``: its topics onto this launch's
    (None: :func:`rviz_remappings`, config/sam2_ros.rviz's); ``arguments``: more of rviz2's
    (``-f FRAME``: the fixed frame).

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
    if remappings is None:
        remappings = rviz_remappings(context)
    return [Node(package='rviz2', executable='rviz2', name='rviz2', output='log',
                 arguments=['-d', os.path.join(share_dir(), 'config', config)] + list(arguments),
                 parameters=[{'use_sim_time': use_sim_time}],
                 remappings=list(remappings))]


def rviz_remappings(context: LaunchContext) -> List[Tuple[str, str]]:
    """The topics of config/sam2_ros.rviz (the default camera topic and the node's outputs
    without a namespace) remapped to the node's of this launch: its ``namespace`` and
    ``image_topic`` (the argument, else the params file's)."""
    ns = context.launch_configurations.get('namespace', '').strip('/')
    image = context.launch_configurations.get('image_topic', '') or \
        params_file_value(context, 'image_topic', ns) or RVIZ_IMAGE
    if not image.startswith('/'):            # relative: in the node's namespace
        image = f'/{ns}/{image}' if ns else f'/{image}'
    node = f'/{ns}/{NODE_NAME}' if ns else f'/{NODE_NAME}'
    pairs = [(RVIZ_IMAGE, image)] + [(f'/{NODE_NAME}/{t}', f'{node}/{t}')
                                      for t in ('mask', 'overlay')]
    return [(a, b) for a, b in pairs if a != b]


def stereo_rviz_remappings(namespace: str, cameras: Sequence[str]) -> List[Tuple[str, str]]:
    """The topics of config/stereo.rviz (node /stereo/sam2_tracker, cameras left, right)
    remapped to those of the node in ``namespace`` ('' for none) serving ``cameras``: the
    first two cameras' overlays (the pair ~/positions triangulates) and ~/positions."""
    ns = namespace.strip('/')
    node = f'/{ns}/{NODE_NAME}' if ns else f'/{NODE_NAME}'
    shown = f'/{STEREO_RVIZ_NAMESPACE}/{NODE_NAME}'
    pairs = [(f'{shown}/{a}/overlay', f'{node}/{b}/overlay')
             for a, b in zip(STEREO_RVIZ_CAMERAS, cameras)]
    pairs.append((f'{shown}/positions', f'{node}/positions'))
    return [(a, b) for a, b in pairs if a != b]


def params_file_value(context: LaunchContext, name: str, namespace: str = '') -> str:
    """``name`` as the launch's params file sets it for the tracker ('' if it does not, or
    not as a string)."""
    value = params_file_param(context, name, namespace)
    return value if isinstance(value, str) else ''


def params_file_param(context: LaunchContext, name: str, namespace: str = '') -> Any:
    """``name`` as the launch's params file sets it for the tracker in ``namespace``, or None:
    for a launch default that applies only where the file is silent. As rcl reads the file:
    every section whose node name matches (``/**``, ``*`` wildcards) applies, the last one
    setting ``name`` wins."""
    import yaml

    path = context.launch_configurations.get('params_file', '')
    try:
        with open(path) as fh:
            doc = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError):
        return None
    ns = namespace.strip('/')
    node = f'/{ns}/{NODE_NAME}' if ns else f'/{NODE_NAME}'
    found = None
    for key, section in (doc.items() if isinstance(doc, dict) else ()):
        values = section.get('ros__parameters') if isinstance(section, dict) else None
        if isinstance(values, dict) and values.get(name) is not None and \
                node_name_matches(str(key), node):
            found = values[name]
    return found


def node_name_matches(key: str, node: str) -> bool:
    """Whether a params file's section ``key`` applies to the node named ``node`` (fully
    qualified): ``/**`` stands for any namespaces, ``*`` for one name; a key without a leading
    ``/`` is absolute too."""
    pattern = re.escape('/' + key.lstrip('/')).replace(r'/\*\*', '(?:/[^/]+)*')
    return re.fullmatch(pattern.replace(r'\*', '[^/]+'), node) is not None


def shutdown_on_failure(process: Any, what: str) -> Any:
    """An event handler that ends the launch, exit status 1, when ``process`` exits with an
    error (as a launch argument refused in the setup does: the error raised in the launch).

    Why: a process the others depend on (a bag player) that dies would otherwise leave the
    launch running with nothing to do, forever; its own error is above in the log."""
    from launch.event_handlers import OnProcessExit

    def on_exit(event: Any, context: LaunchContext) -> None:
        # exits while the launch stops (Ctrl-C) are that stop, not a failure
        if event.returncode != 0 and not context.is_shutdown:
            raise RuntimeError(f'{what} exited with status {event.returncode} (its error is '
                               f'above); stopping the launch')

    return RegisterEventHandler(OnProcessExit(target_action=process, on_exit=on_exit))


def tracker_node(context: LaunchContext, namespace: str = '',
                 remappings: Sequence[Tuple[str, str]] = (),
                 more: Sequence[Override] = (), **fixed: Any) -> Any:
    """The sam2_tracker node: params_file, then the given override arguments (OVERRIDES and
    ``more``), then ``fixed``."""
    from launch_ros.actions import Node

    params_file = LaunchConfiguration('params_file').perform(context)
    level = LaunchConfiguration('log_level').perform(context)
    return Node(package=PACKAGE, executable='tracker_node', name=NODE_NAME,
                namespace=namespace or None, output='screen',
                parameters=[params_file, overrides(context, more, **fixed)],
                remappings=list(remappings), ros_arguments=['--log-level', level])
