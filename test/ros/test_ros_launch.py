"""Launch files, RViz layout and entry points, checked statically (always) and loaded (when
`launch_ros` imports). They are also run for real with `ros2 launch` in test_ros_launch_run.py
where the ROS 2 CLI is installed (the ../shared/ros_cli bundle or a ROS install). Static checks:
they parse, define generate_launch_description, declare the documented arguments, name
executables that CMakeLists.txt installs and config files that exist."""

import ast
import importlib.util
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT.parent / 'shared' / 'ros_cli'
COMMON = {'model', 'checkpoint', 'image_size', 'device', 'random_weights', 'params_file',
          'dds_profile'}
LAUNCH = {
    'tracker.launch.py': COMMON | {'image_topic', 'rviz', 'namespace'},
    'replay.launch.py': COMMON | {'bag', 'rate', 'player', 'rviz', 'wait_for'},
    'multi_camera.launch.py': COMMON | {'cameras', 'image_topics', 'devices', 'positions',
                                        'rectified'},
    'stereo.launch.py': COMMON | {'namespace', 'cameras', 'camera_image', 'pair_tolerance_ms',
                                  'camera_period_ms', 'positions_rectified', 'rviz',
                                  'rviz_frame'},
    'detector.launch.py': COMMON | {'image_topic', 'rviz', 'namespace', 'detections_topic',
                                    'objects_topic'},
}
# the arguments, executables and config files the launch files share live here
COMMON_PY = ROOT / 'sam2_ros' / 'ros' / 'launch_common.py'


def launch_available() -> bool:
    try:
        return importlib.util.find_spec('launch_ros') is not None
    except (ImportError, ValueError):
        return False


def installed_executables():
    text = (ROOT / 'CMakeLists.txt').read_text()
    return set(re.findall(r'"(\w+)=sam2_ros\.[\w.]+"', text))


def string_constants(tree):
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def declared_args(tree):
    out = set()
    for call in ast.walk(tree):
        # CheckingArgument: launch_common's params_file, which also checks the arguments given
        if isinstance(call, ast.Call) and getattr(call.func, 'id', '') in (
                'DeclareLaunchArgument', 'CheckingArgument') and \
                isinstance(call.args[0], ast.Constant):
            out.add(call.args[0].value)
    return out


@pytest.mark.parametrize('name', sorted(LAUNCH))
def test_launch_file_static(name):
    tree = ast.parse((ROOT / 'launch' / name).read_text(), name)
    common = ast.parse(COMMON_PY.read_text(), str(COMMON_PY))
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert 'generate_launch_description' in funcs
    declared = (declared_args(tree) | set(_override_args('TRACKER_ARGS'))
                | declared_args(common))
    if 'STEREO_OVERRIDES' in (ROOT / 'launch' / name).read_text():
        declared |= set(_override_args('STEREO_ARGS'))
    assert declared >= LAUNCH[name]
    strings = string_constants(tree) | string_constants(common)
    executables = {s for s in strings if s in {'tracker_node', 'bag_replay', 'rviz2'}}
    assert 'tracker_node' in executables
    assert executables - {'rviz2'} <= installed_executables()
    for cfg in ('tracker.yaml', 'sam2_ros.rviz', 'fastdds_large_frames.xml'):
        assert cfg in strings and (ROOT / 'config' / cfg).is_file()
    # no deprecated conditions (issue 14, defect 5): everything is decided in OpaqueFunctions
    assert 'LaunchConfigurationEquals' not in (ROOT / 'launch' / name).read_text()


def _override_args(table):
    """The launch arguments of launch_common's ``table`` (TRACKER_ARGS, STEREO_ARGS: pairs of
    launch argument and node parameter) without importing launch (absent without the ROS
    CLI)."""
    tree = ast.parse(COMMON_PY.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], 'id', '') == table:
            return [arg for arg, _ in ast.literal_eval(node.value)]
    raise AssertionError(f'launch_common.py has no {table}')


@pytest.mark.skipif(not launch_available(), reason='launch_ros is not installed (not on PyPI); '
                    'the ast checks above cover the launch files')
@pytest.mark.parametrize('name', sorted(LAUNCH))
def test_launch_file_loads(name):  # pragma: no cover - needs a full ROS 2 install
    spec = importlib.util.spec_from_file_location(name.replace('.', '_'),
                                                  ROOT / 'launch' / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.generate_launch_description().entities


def require_launch() -> None:
    """ROS 2's launch, as the ros2 launch tests need it: a failure where the offline bundle
    is present but not installed, a skip only where neither it nor a ROS 2 install exists."""
    if not launch_available():
        if BUNDLE.is_dir():
            pytest.fail(f'{BUNDLE} exists but launch_ros is not installed: run '
                        f'scripts/setup.sh', pytrace=False)
        pytest.skip(f'no ROS 2 launch: neither a ROS 2 install nor {BUNDLE}')


def _replay_setup(**args):
    return _launch_setup('replay.launch.py', **args)


def _launch_setup(name, **args):
    """The command line of each process launch file ``name`` would start with ``args`` over
    its defaults (substitutions that need a running launch shown as '?')."""
    return [[''.join(getattr(s, 'text', '?') for s in part) for part in a.cmd]
            for a in launch_actions(name, **args) if hasattr(a, 'cmd')]


def launch_actions(name, **args):
    """The actions launch file ``name``'s OpaqueFunction returns for ``args`` over its
    defaults."""
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, OpaqueFunction

    spec = importlib.util.spec_from_file_location(name.replace('.', '_'), ROOT / 'launch' / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ctx = LaunchContext()
    entities = mod.generate_launch_description().entities
    for e in entities:
        if isinstance(e, DeclareLaunchArgument) and e.default_value is not None:
            ctx.launch_configurations[e.name] = ''.join(s.perform(ctx) for s in e.default_value)
    ctx.launch_configurations.update(args)
    [setup] = [e for e in entities if isinstance(e, OpaqueFunction)]
    return setup.execute(ctx)


def test_replay_wait_for_reaches_our_player(tmp_path):
    """wait_for -> one --wait-topic per entry; player:=auto takes our player then (ros2 bag
    play cannot wait for subscribers), and player:=ros2bag with wait_for is refused. Needs
    ROS 2's launch, as the ros2 launch tests do: a failure where the offline bundle is present
    but not installed, a skip only where neither it nor a ROS 2 install exists."""
    require_launch()
    bag = str(tmp_path)     # the setup checks that the bag exists, not what it holds
    (tmp_path / 'metadata.yaml').write_text('not read here\n')
    cmds = _replay_setup(bag=bag, wait_for='/clock:2, /camera/image_raw:2')
    player = [c for c in cmds if bag in c]
    assert len(player) == 1, cmds
    tail = player[0][player[0].index(bag):]
    # the player waits for the tracker's own subscriptions, not for every topic of the bag,
    # and plays in order (a prompt never overtakes its frame)
    assert tail[:11] == [bag, '--rate', '1.0', '--in-order', '--wait-node', '/sam2_tracker',
                         '--wait-timeout', '300', '--wait-topic', '/clock:2', '--wait-topic'], \
        tail
    assert tail[11] == '/camera/image_raw:2', tail
    plain = [c for c in _replay_setup(bag=bag, player='sam2_ros') if bag in c]
    assert '--wait-topic' not in plain[0]
    # player:=auto is ours whatever is installed: it waits for the node, a timer does not
    assert [c for c in _replay_setup(bag=bag) if bag in c] == plain
    with pytest.raises(RuntimeError, match='wait_for needs player:=sam2_ros'):
        _replay_setup(bag=bag, player='ros2bag', wait_for='/clock:2')


def test_replay_launch_with_a_bag_that_does_not_exist_starts_nothing(tmp_path):
    """A wrong bag: path used to start the tracker beside a player that died at once, and the
    launch waited forever; now the setup refuses it before anything starts."""
    require_launch()
    with pytest.raises(FileNotFoundError, match=r"bag '.*/nope' does not exist.*nothing was "
                                                r'started'):
        _replay_setup(bag=str(tmp_path / 'nope'))
    with pytest.raises(FileNotFoundError, match='a folder without metadata.yaml, not a rosbag2 '
                                                'bag'):
        _replay_setup(bag=str(tmp_path))      # e.g. the folder that holds the bag


@pytest.mark.parametrize('player', ['sam2_ros', 'ros2bag'])
def test_replay_launch_stops_when_the_player_fails(tmp_path, monkeypatch, player):
    """The player exiting with an error (a bag it cannot read) ends the launch with an error,
    whichever player; a player that finishes, or one stopped by the launch's own shutdown
    (Ctrl-C), does not."""
    require_launch()
    from launch import LaunchContext
    from launch.actions import RegisterEventHandler
    from launch.events.process import ProcessExited

    from sam2_ros.ros import launch_common

    monkeypatch.setattr(launch_common, 'package_installed', lambda name: True)   # rosbag2
    (tmp_path / 'metadata.yaml').write_text('not read here\n')
    actions = launch_actions('replay.launch.py', bag=str(tmp_path), player=player)
    handlers = [a for a in actions if isinstance(a, RegisterEventHandler)]
    assert len(handlers) == 2, actions     # the failure's, then when_done's (bag finished)
    handler = handlers[0].event_handler
    procs = [a for a in actions if hasattr(a, 'cmd')] + [
        sub for a in actions for sub in getattr(a, 'actions', [])]     # ros2bag: in a timer
    player_proc = [p for p in procs if any(getattr(s, 'text', '') == str(tmp_path)
                                           for part in p.cmd for s in part)]
    assert len(player_proc) == 1, procs

    def exited(code, proc=player_proc[0]):
        return ProcessExited(action=proc, name='player', cmd=['player'], cwd=None, env=None,
                             pid=1, returncode=code)
    ctx = LaunchContext()
    tracker = [p for p in procs if p not in player_proc][0]
    assert not handler.matches(ProcessExited(action=tracker, name='tracker', cmd=['t'],
                                             cwd=None, env=None, pid=2, returncode=1))
    assert handler.matches(exited(1))
    with pytest.raises(RuntimeError, match='the bag player exited with status 1'):
        handler.handle(exited(1), ctx)
    assert not handler.handle(exited(0), ctx)
    ctx._set_is_shutdown(True)      # what the launch service sets on Ctrl-C
    assert not handler.handle(exited(-2), ctx)


def test_launch_arguments_are_typed_and_described_by_their_knobs():
    """Each override argument's type and description are its node parameter's knob (they had
    drifted: the checkpoint's); the stereo ones' too."""
    require_launch()
    from sam2_ros.ros import launch_common, params

    specs = {s.name: s for s in params.PARAMS}
    for o in launch_common.OVERRIDES + launch_common.STEREO_OVERRIDES:
        assert (o.kind, o.description) == (specs[o.param].kind, specs[o.param].description)
    described = {a.name: a.description for a in launch_common.declare_common()}
    assert described['checkpoint'].startswith(specs['checkpoint'].description)
    assert described['model'].startswith(specs['model_size'].description)
    assert 'the params_file value of model_size' in described['model']


def test_launch_argument_text_becomes_the_parameters_type():
    require_launch()
    from sam2_ros.ros.launch_common import to_value

    assert to_value('float', '16', 'p') == 16.0 and to_value('int', '16', 'i') == 16
    assert to_value('str_array', ' left, right,', 'c') == ['left', 'right']
    assert to_value('bool', 'True', 'b') is True
    for kind, text in (('float', 'abc'), ('float', 'nan'), ('int', '1.5'), ('bool', 'yes')):
        with pytest.raises(ValueError, match='launch argument x must be'):
            to_value(kind, text, 'x')


def stereo_parameters(monkeypatch, **args):
    """The parameters stereo.launch.py gives its node over the params file, for ``args``."""
    from sam2_ros.ros import launch_common

    given = []

    def node(context, namespace='', remappings=(), more=(), **fixed):
        given.append(launch_common.overrides(context, more, **fixed))
    monkeypatch.setattr(launch_common, 'tracker_node', node)
    launch_actions('stereo.launch.py', **args)
    return given[0]


def test_stereo_launch_leaves_camera_options_to_the_params_file(tmp_path, monkeypatch):
    """The audit's case: a params file's camera_period_ms, pair_tolerance_ms, camera_image and
    cameras reach the node (they were overridden by the launch's defaults, 16.7 ms among
    them); an argument given overrides the file; cameras is left,right only where the file
    names none (config/tracker.yaml's [])."""
    require_launch()
    mine = tmp_path / 'my_stereo.yaml'
    mine.write_text('/**:\n  ros__parameters:\n    camera_period_ms: 50.0\n'
                    '    pair_tolerance_ms: 5.0\n    camera_image: image_rect\n')
    assert stereo_parameters(monkeypatch, params_file=str(mine)) == {
        'autostart': True, 'cameras': ['left', 'right']}
    assert stereo_parameters(monkeypatch, params_file=str(ROOT / 'config' / 'tracker.yaml'))[
        'cameras'] == ['left', 'right']
    assert stereo_parameters(
        monkeypatch, params_file=str(mine), camera_period_ms='16.7', pair_tolerance_ms='2',
        camera_image='image_raw', cameras='a, b, c') == {
        'autostart': True, 'cameras': ['a', 'b', 'c'], 'camera_image': 'image_raw',
        'pair_tolerance_ms': 2.0, 'camera_period_ms': 16.7}
    # rectified images: the positions' setting goes with them (a bool, as the knob says)
    assert stereo_parameters(monkeypatch, params_file=str(mine), positions_rectified='true')[
        'positions_rectified'] is True
    # a later section for the node (its namespace, or a wildcard) names cameras: the file's,
    # not left,right (rcl applies every matching section, the last one wins)
    named = tmp_path / 'named.yaml'
    for section in ('/**/sam2_tracker', '/*/sam2_tracker', '/rig/sam2_tracker'):
        named.write_text(f'/**:\n  ros__parameters:\n    cameras: []\n'
                         f'{section}:\n  ros__parameters:\n    cameras: [front, back]\n')
        assert 'cameras' not in stereo_parameters(monkeypatch, params_file=str(named),
                                                  namespace='rig'), section
    # ... a section of another node does not (the last file: /rig/sam2_tracker's)
    assert stereo_parameters(monkeypatch, params_file=str(named), namespace='other')[
        'cameras'] == ['left', 'right']
    for bad in ('left', 'a,a'):
        with pytest.raises(ValueError, match='two or more distinct cameras'):
            stereo_parameters(monkeypatch, cameras=bad)


def test_multi_camera_positions_starts_the_positions_node_for_two_cameras():
    """positions:=true adds positions_node (left, right: the two cameras); more or fewer
    cameras are refused."""
    require_launch()
    def positions_nodes(**args):
        return [a for a in launch_actions('multi_camera.launch.py', **args)
                if getattr(a, 'node_executable', None) == 'positions_node']
    assert len(positions_nodes(cameras='left,right', positions='true')) == 1
    assert not positions_nodes(cameras='left,right')
    with pytest.raises(ValueError, match='two cameras'):
        positions_nodes(cameras='a,b,c', positions='true')


def test_entry_points_exist():
    from sam2_ros.ros import demo, node, positions_node, replay

    for mod in (node, replay, demo, positions_node):
        assert callable(mod.main)
    assert {'tracker_node', 'bag_replay', 'demo', 'positions_node'} <= installed_executables()


def test_rviz_layout_shows_camera_mask_overlay():
    cfg = yaml.safe_load((ROOT / 'config/sam2_ros.rviz').read_text())
    displays = cfg['Visualization Manager']['Displays']
    topics = {d['Topic']['Value'] for d in displays if d['Class'].endswith('/Image')}
    tracker = yaml.safe_load((ROOT / 'config/tracker.yaml').read_text())
    image_topic = tracker['/**']['ros__parameters']['image_topic']
    assert topics == {image_topic, '/sam2_tracker/mask', '/sam2_tracker/overlay'}
    assert all(d['Topic']['Reliability Policy'] == 'Reliable' for d in displays)


def test_rviz_follows_the_launchs_namespace_and_image_topic(tmp_path):
    """config/sam2_ros.rviz shows /camera/image_raw, /sam2_tracker/mask and overlay: RViz
    started by a launch is remapped onto that launch's node (namespace) and camera
    (image_topic, or the params file's)."""
    require_launch()
    from launch import LaunchContext

    from sam2_ros.ros.launch_common import rviz_remappings

    rviz = (ROOT / 'config' / 'sam2_ros.rviz').read_text()
    for topic in ('/camera/image_raw', '/sam2_tracker/mask', '/sam2_tracker/overlay'):
        assert f'Value: {topic}' in rviz

    def remaps(**args):
        ctx = LaunchContext()
        ctx.launch_configurations.update(args)
        return dict(rviz_remappings(ctx))

    assert remaps(params_file=str(ROOT / 'config' / 'tracker.yaml')) == {}
    assert remaps(namespace='cam0', image_topic='/my_cam/image_raw') == {
        '/camera/image_raw': '/my_cam/image_raw',
        '/sam2_tracker/mask': '/cam0/sam2_tracker/mask',
        '/sam2_tracker/overlay': '/cam0/sam2_tracker/overlay'}
    assert remaps(namespace='cam0', image_topic='image_raw')['/camera/image_raw'] == \
        '/cam0/image_raw'
    params = tmp_path / 'p.yaml'
    params.write_text('/**:\n  ros__parameters:\n    image_topic: /front/image_rect\n')
    assert remaps(params_file=str(params)) == {'/camera/image_raw': '/front/image_rect'}


def test_stereo_launch_takes_none_for_no_namespace(monkeypatch):
    """`ros2 launch` refuses `namespace:=`: 'none' (or '/') starts the node without one."""
    require_launch()
    from sam2_ros.ros import launch_common

    given = []
    monkeypatch.setattr(launch_common, 'tracker_node',
                        lambda context, namespace='', **kw: given.append(namespace))
    for value in ('none', '/', 'rig'):
        launch_actions('stereo.launch.py', namespace=value)
    assert given == ['', '', 'rig']
