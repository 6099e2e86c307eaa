"""stereo.launch.py's RViz: config/stereo.rviz shows what the stereo node publishes (both
cameras' overlays and ~/positions, each with a display for its message type), remapped onto
the launch's namespace and cameras; rviz:=auto|true|false starts or leaves out rviz2 as in
the other launch files. The topics expected are those the node's own code creates (its Rig's
publishers, resolved as rclpy resolves them), not a list written here."""

from types import SimpleNamespace

import pytest
import yaml

from ros_helpers import require_messages
from test_ros_launch import ROOT, launch_actions, require_launch

CONFIG = ROOT / 'config' / 'stereo.rviz'


def display_types():
    """The message type each RViz display class of config/stereo.rviz shows."""
    from sensor_msgs.msg import Image
    from vision_msgs.msg import Detection3DArray

    return {'rviz_default_plugins/Image': Image,
            'vision_msgs_rviz_plugins/Detection3DArray': Detection3DArray}


def shown():
    """(display class, topic) of each display of config/stereo.rviz that subscribes."""
    cfg = yaml.safe_load(CONFIG.read_text())
    return [(d['Class'], d['Topic']['Value']) for d in cfg['Visualization Manager']['Displays']
            if 'Topic' in d]


def published(namespace, cameras):
    """{topic: message type} the node sam2_tracker in ``namespace`` serving ``cameras``
    publishes with the default options: its Rig's outputs and positions, as at configure."""
    require_messages()
    from rclpy.expand_topic_name import expand_topic_name

    from sam2_ros.ros import messages
    from sam2_ros.ros.launch_common import NODE_NAME
    from sam2_ros.ros.options import NodeOptions
    from sam2_ros.ros.quiet_tick import QuietTick
    from sam2_ros.ros.rig import Rig

    made = {}

    def create(msg_type, topic, qos):
        made[expand_topic_name(topic, NODE_NAME, '/' + namespace)] = msg_type
        return SimpleNamespace(topic=topic)
    node = SimpleNamespace(opts=NodeOptions(cameras=list(cameras)),
                           cfg=SimpleNamespace(device='cpu'),
                           get_logger=lambda: SimpleNamespace(warning=lambda text: None),
                           create_lifecycle_publisher=create,
                           destroy_lifecycle_publisher=lambda pub: None,
                           diag=QuietTick(lambda: None))
    Rig(list(cameras)).create_outputs(node, messages.vision_interfaces())
    return made


def launch_defaults():
    """stereo.launch.py's namespace argument default and default cameras."""
    import importlib.util

    from launch import LaunchContext

    spec = importlib.util.spec_from_file_location('stereo_launch',
                                                  ROOT / 'launch' / 'stereo.launch.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = {e.name: e for e in mod.generate_launch_description().entities
            if hasattr(e, 'default_value')}
    ns = ''.join(s.perform(LaunchContext()) for s in args['namespace'].default_value)
    return ns, list(mod.DEFAULT_CAMERAS), args['rviz_frame'].description


@pytest.mark.parametrize('namespace, cameras', [
    (None, None),                                   # the launch's defaults: stereo, left,right
    ('rig', ['cam_l', 'cam_r']), ('', ['a', 'b', 'c'])])
def test_stereo_rviz_shows_the_overlays_and_positions_the_node_publishes(namespace, cameras):
    """Each display's topic, remapped as stereo.launch.py remaps it, is one the node publishes
    with the message type the display reads: both overlays of the first two cameras (the pair
    of ~/positions) and ~/positions. The file's own topics are the launch defaults' (nothing to
    remap there), so it also works opened by hand."""
    require_launch()
    from sam2_ros.ros.launch_common import stereo_rviz_remappings

    default_ns, default_cameras, _ = launch_defaults()
    if namespace is None:
        namespace, cameras = default_ns, default_cameras
        assert stereo_rviz_remappings(namespace, cameras) == []
    remap = dict(stereo_rviz_remappings(namespace, cameras))
    topics = published(namespace, cameras)
    types = display_types()
    displays = [(cls, remap.get(topic, topic)) for cls, topic in shown()]
    assert displays and all(cls in types for cls, _ in displays), displays
    for cls, topic in displays:
        assert topics.get(topic) is types[cls], (topic, sorted(topics))
    overlays = {t for t in topics if t.endswith('/overlay')
                and any(f'/{c}/' in t for c in cameras[:2])}
    assert {t for cls, t in displays if cls.endswith('/Image')} == overlays
    assert len(overlays) == 2
    assert sum(cls.endswith('/Detection3DArray') for cls, _ in displays) == 1


def test_stereo_rviz_parses_and_its_fixed_frame_is_the_documented_one():
    """YAML with the structure of config/sam2_ros.rviz, reliable subscriptions (the node's
    outputs are reliable); the rviz_frame argument's description names the layout's fixed
    frame (the left camera's frame, which the positions carry)."""
    require_launch()
    cfg = yaml.safe_load(CONFIG.read_text())
    single = yaml.safe_load((ROOT / 'config' / 'sam2_ros.rviz').read_text())
    assert set(cfg) == set(single)
    manager = cfg['Visualization Manager']
    assert all(d['Topic']['Reliability Policy'] == 'Reliable'
               for d in manager['Displays'] if 'Topic' in d)
    frame = manager['Global Options']['Fixed Frame']
    assert frame and f'({frame})' in launch_defaults()[2]


def record_nodes(monkeypatch, installed):
    """The keyword arguments of every launch_ros Node the launch files create from now on
    (rviz2 installed or not)."""
    import launch_ros.actions

    from sam2_ros.ros import launch_common

    nodes = []
    real = launch_ros.actions.Node

    def node(**kwargs):
        nodes.append(kwargs)
        return real(**kwargs)        # a real action: event handlers may target it
    monkeypatch.setattr(launch_ros.actions, 'Node', node)
    monkeypatch.setattr(launch_common, 'package_installed', lambda name: installed)
    return nodes


def rviz_of(nodes):
    return [n for n in nodes if n['executable'] == 'rviz2']


@pytest.mark.parametrize('mode, installed, started', [
    ('auto', True, True), ('true', True, True), ('false', True, False),
    ('auto', False, False), ('false', False, False)])
def test_stereo_launch_starts_rviz_per_the_rviz_argument(monkeypatch, mode, installed, started):
    """rviz2 with config/stereo.rviz, remapped onto the launch's namespace and cameras, the
    fixed frame rviz_frame's where given; none with rviz:=false or without rviz2 (auto says
    so); the tracker in every case."""
    require_launch()
    from launch.actions import LogInfo

    from sam2_ros.ros.launch_common import share_dir

    nodes = record_nodes(monkeypatch, installed)
    actions = launch_actions('stereo.launch.py', rviz=mode, namespace='rig',
                             cameras='cam_l, cam_r')
    assert [n['executable'] for n in nodes].count('tracker_node') == 1
    rviz = rviz_of(nodes)
    assert len(rviz) == started
    if started:
        assert rviz[0]['arguments'] == ['-d', f'{share_dir()}/config/stereo.rviz']
        assert dict(rviz[0]['remappings']) == {
            '/stereo/sam2_tracker/left/overlay': '/rig/sam2_tracker/cam_l/overlay',
            '/stereo/sam2_tracker/right/overlay': '/rig/sam2_tracker/cam_r/overlay',
            '/stereo/sam2_tracker/positions': '/rig/sam2_tracker/positions'}
        nodes.clear()
        launch_actions('stereo.launch.py', rviz=mode, rviz_frame='zed_left')
        framed = rviz_of(nodes)[0]
        assert framed['arguments'][2:] == ['-f', 'zed_left']
        assert framed['remappings'] == []        # the defaults: the file's own topics
    said = [a for a in actions if isinstance(a, LogInfo)]
    assert bool(said) == (mode == 'auto' and not installed)


def test_stereo_launch_with_rviz_true_and_no_rviz2_starts_nothing(monkeypatch):
    """rviz:=true without rviz2 stops the launch before the tracker is made."""
    require_launch()
    nodes = record_nodes(monkeypatch, False)
    with pytest.raises(RuntimeError, match='rviz:=true but rviz2 is not installed'):
        launch_actions('stereo.launch.py', rviz='true')
    assert nodes == []
