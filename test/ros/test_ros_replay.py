"""Bag replay without rosbag2: the test writes rosbag2 bags (sqlite3 and MCAP) with rosbags,
incl. our custom Prompt type, of the same recording; sam2_ros.ros.replay plays each into a
fresh node (process_every_frame, use_sim_time); both replays give the same masks and states,
equal to the in-process tracker, and /clock follows bag time."""

import contextlib

import numpy as np
import pytest

from ros_helpers import (NODE_THREADS, PYTHON, TEST_PARAMS, Client, DomainLease, Proc, frames,
                         image_msg, mask_array, prompt_msg, require_messages, stamp, stamp_of,
                         start_node)

from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.slow
N = 6
PROMPT_TOPIC = '/sam2_tracker/prompt'
BOX1, PTS2 = (10, 20, 50, 60), [(120, 60)]


@contextlib.contextmanager
def player_node(name):
    """An rclpy node of its own context and DDS domain, for a BagPlayer in the test."""
    import rclpy

    lease = DomainLease()
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=lease.domain_id)
    node = rclpy.create_node(name, context=ctx)
    try:
        yield node
    finally:
        node.destroy_node()
        ctx.try_shutdown()
        lease.release()


def write_bag(path, storage, camera_info=False):
    """The recording; camera_info: plus a /camera/camera_info per frame, a topic the tracker
    does not take (a camera driver records it)."""
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import CameraInfo
    from rosbags.rosbag2 import StoragePlugin, Writer

    from sam2_ros.ros.bag_player import project_typestore

    require_messages()
    ts = project_typestore()
    plugin = {'sqlite3': StoragePlugin.SQLITE3, 'mcap': StoragePlugin.MCAP}[storage]
    t0 = 5_000_000_000  # bag time, independent of the header stamps
    with Writer(path, version=9, storage_plugin=plugin) as w:
        img = w.add_connection('/camera/image_raw', 'sensor_msgs/msg/Image', typestore=ts)
        pr = w.add_connection(PROMPT_TOPIC, 'sam2_ros/msg/Prompt', typestore=ts)
        # prompts are recorded 30 ms before the frame their header stamp names
        w.write(pr, t0 - 30_000_000, serialize_message(prompt_msg(1, stamp(0), box=BOX1)))
        w.write(pr, t0 + 2 * 100_000_000 - 30_000_000,
                serialize_message(prompt_msg(2, stamp(2), points=PTS2, labels=[1])))
        info = w.add_connection('/camera/camera_info', 'sensor_msgs/msg/CameraInfo',
                                typestore=ts) if camera_info else None
        for i, f in enumerate(frames(N, seed=11)):
            w.write(img, t0 + i * 100_000_000, serialize_message(image_msg(f, stamp(i))))
            if info is not None:
                w.write(info, t0 + i * 100_000_000, serialize_message(CameraInfo()))
    return path


def replay_once(tmp_path, bag, tag, wait=('--wait',), messages=8):
    """Fresh node + replay subprocess; returns ({stamp: mask array}, {stamp: state}, clocks)."""
    lease = DomainLease()
    node = start_node(lease, tmp_path, f'node_{tag}', max_objects=2,
                      extra=['-p', 'use_sim_time:=true'])
    c = Client(lease)
    from rosgraph_msgs.msg import Clock
    clocks = []
    c.node.create_subscription(
        Clock, '/clock', lambda m: clocks.append(m.clock.sec * 10**9 + m.clock.nanosec), 100)
    player = None
    try:
        node.wait_log(r'\]: active:', 90)
        c.wait_connected(30)
        # /clock:2 = the node (use_sim_time) and this client
        player = Proc([PYTHON, '-m', 'sam2_ros.ros.replay', str(bag), *wait,
                       '--wait-topic', '/clock:2', '--wait-timeout', '60'], lease.env(),
                      tmp_path / f'replay_{tag}.log')
        c.wait_state(stamp(N - 1), 90)
        assert player.p.wait(30) == 0, player.log()
        assert f'replayed {messages} messages' in player.log()
        masks = {stamp_of(m.header): mask_array(m) for m in c.snapshot(c.masks)}
        states = {stamp_of(s.header): s for s in c.snapshot(c.states)}
    finally:
        if player is not None:
            player.stop()
        c.close()
        node.stop()
        lease.release()
    return masks, states, clocks


def summary(state):
    return [(o.object_id, o.state, o.area, o.score, o.frames_since_prompt) for o in
            state.objects]


@pytest.fixture(scope='module')
def reference():
    """Masks of the core run in process on the bag's frames and prompts (computed once)."""
    import torch

    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.tracker import StreamingTracker

    threads = torch.get_num_threads()
    torch.set_num_threads(NODE_THREADS)  # as the node: the same reduction order
    try:
        keys = ('model_size', 'image_size', 'random_weights', 'seed', 'device', 'precision',
                'use_cuda_graphs', 'extra_hydra_overrides')
        tr = StreamingTracker(TrackerConfig(max_objects=2,
                                            **{k: TEST_PARAMS[k] for k in keys}))
        out = {}
        for i, f in enumerate(frames(N, seed=11)):
            if i == 0:
                tr.queue_prompt(Prompt(1, box=BOX1))
            if i == 2:
                tr.queue_prompt(Prompt(2, points=np.array(PTS2, np.float32),
                                       labels=np.array([1])))
            out[stamp(i)] = tr.track(f).label_mask()
    finally:
        torch.set_num_threads(threads)   # the worker's other tests: one thread (conftest)
    return out


def test_replays_identical_across_storages_and_fresh_nodes(tmp_path, reference):
    """The same recording as an sqlite3 and as an MCAP bag (with camera_info too), each replayed
    into a fresh node: both runs equal the in-process core run (masks, bitwise) and each other
    (masks, object states, areas, scores), so a replay is deterministic whatever the storage."""
    # --in-order, as replay.launch.py plays: each prompt is held by the node before its frame
    # goes out (without it a loaded machine can deliver a prompt after the frame it names,
    # and the node then applies it to the next frame: another replay)
    runs = [replay_once(tmp_path, write_bag(tmp_path / 'bag_sqlite3', 'sqlite3'), 'sqlite3',
                        wait=('--in-order', '--wait'))]
    # MCAP with a topic the tracker does not take: the player waits for the tracker's own
    # subscriptions (--wait-node, as replay.launch.py runs it), not for every topic; and
    # follows the node's ~/state with at most 2 frames ahead (flow control on a real node)
    runs.append(replay_once(tmp_path, write_bag(tmp_path / 'bag_mcap', 'mcap', True), 'mcap',
                            wait=('--in-order', '--wait-node', '/sam2_tracker', '--max-ahead',
                                  '2'), messages=8 + N))
    for masks, states, clocks in runs:
        assert sorted(states) == [stamp(i) for i in range(N)]
        assert all(s.errors == [] and s.dropped_frames == 0 for s in states.values())
        assert [o.object_id for o in states[stamp(N - 1)].objects] == [1, 2]
        assert clocks and min(clocks) >= 4_900_000_000 and max(clocks) >= 5_500_000_000
        for st, ref in reference.items():  # equal to the core run in process
            np.testing.assert_array_equal(masks[st], ref)
    (m1, s1, _), (m2, s2, _) = runs
    for st in s1:
        np.testing.assert_array_equal(m1[st], m2[st])
        assert summary(s1[st]) == summary(s2[st])


def test_wait_topic_syntax_and_unreadable_bag(tmp_path):
    import subprocess

    from sam2_ros.ros.replay import parse_wait_topic

    assert parse_wait_topic('/clock:2') == ('/clock', 2)
    assert parse_wait_topic('/clock') == ('/clock', 1)
    lease = DomainLease()
    try:
        p = subprocess.run([PYTHON, '-m', 'sam2_ros.ros.replay', str(tmp_path / 'no_bag')],
                           env=lease.env(), capture_output=True, text=True, timeout=60)
    finally:
        lease.release()
    assert p.returncode == 1 and 'cannot replay' in p.stderr + p.stdout


@pytest.mark.parametrize('in_order', [False, True])
def test_in_order_waits_for_each_messages_acknowledgements(tmp_path, in_order):
    """--in-order: after each message the player waits for its topic's acknowledgements
    (one wait per message, in the recorded order); without it, none until the end."""
    from sam2_ros.ros.bag_player import BagPlayer

    bag = write_bag(tmp_path / 'bag', 'mcap')
    waits = []
    with player_node('in_order_test') as node:
        player = BagPlayer(node, str(bag), rate=50.0, clock=False, in_order=in_order)
        for topic, pub in player.pubs.items():
            pub.wait_for_all_acked = lambda timeout, t=topic: waits.append(t) or True
        player.play()
        player.close()
    prompt = PROMPT_TOPIC
    want = [prompt, '/camera/image_raw', '/camera/image_raw', prompt] + \
        ['/camera/image_raw'] * (N - 2)
    assert waits == (want if in_order else [])
    assert player.unacked == 0


def test_a_vendor_type_and_a_recorded_clock_are_skipped_and_a_node_without_the_images_waits(
        tmp_path):
    """A robot's bag carries types not installed here and a simulator's /clock: those topics
    are not replayed (a warning each), the rest is. A topic asked for that the bag lacks is
    named. A node that takes the prompts but none of the bag's images (image_topic or
    input_type not the bag's) is not ready: the reason says which topics the bag has."""
    from rclpy.serialization import serialize_message
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import get_types_from_msg

    from sam2_ros.ros.bag_player import BagPlayer, project_typestore

    require_messages()
    ts = project_typestore()
    ts.register(get_types_from_msg('int32 x', 'foo_msgs/msg/Bar'))
    bag = tmp_path / 'vendor'
    with Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        img = w.add_connection('/camera/image_raw', 'sensor_msgs/msg/Image', typestore=ts)
        pr = w.add_connection(PROMPT_TOPIC, 'sam2_ros/msg/Prompt', typestore=ts)
        bar = w.add_connection('/arm/state', 'foo_msgs/msg/Bar', typestore=ts)
        clk = w.add_connection('/clock', 'rosgraph_msgs/msg/Clock', typestore=ts)
        Bar, Clock = ts.types['foo_msgs/msg/Bar'], ts.types['rosgraph_msgs/msg/Clock']
        w.write(pr, 1, serialize_message(prompt_msg(1, stamp(0), box=BOX1)))
        w.write(bar, 2, bytes(ts.serialize_cdr(Bar(x=1), 'foo_msgs/msg/Bar')))
        w.write(clk, 3, bytes(ts.serialize_cdr(Clock(clock=ts.types[
            'builtin_interfaces/msg/Time'](sec=0, nanosec=3)), 'rosgraph_msgs/msg/Clock')))
        w.write(img, 4, serialize_message(image_msg(frames(1, seed=11)[0], stamp(0))))
    warnings = []
    with player_node('vendor_bag_test') as node:
        node.get_logger().warning = warnings.append
        player = BagPlayer(node, str(bag), rate=50.0)
        assert sorted(player.pubs) == ['/camera/image_raw', PROMPT_TOPIC]
        assert player.image_topics == ['/camera/image_raw']
        assert any('/arm/state' in t and 'foo_msgs/msg/Bar' in t for t in warnings), warnings
        assert any("bag's /clock" in t for t in warnings), warnings
        # the node subscribes to the prompts only: not ready, and the reason says why
        node.get_subscriber_names_and_types_by_node = lambda base, ns: [
            (PROMPT_TOPIC, ['sam2_ros/msg/Prompt'])]
        why = player.wait_for_node('/sam2_tracker', timeout=0.3)
        assert "none of the bag's image topics ['/camera/image_raw']" in why, why
        player.close()
        with pytest.raises(ValueError, match=r"has no topic \['/camera/typo'\]"):
            BagPlayer(node, str(bag), topics=['/camera/image_raw', '/camera/typo'])
