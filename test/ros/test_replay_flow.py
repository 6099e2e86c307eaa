"""Flow control of the bag player (``sam2_ros.ros.replay``, ``--max-ahead``) against a fake slow
tracker node, on a fake time line: no DDS, no real waiting.

The player publishes a real bag (rosbags, sqlite3) into a fake rclpy node that records every
message with the fake time it went out and tracks the image topic's frames one after another,
``cost(i)`` seconds each. The player's ``time.monotonic`` / ``time.sleep`` are the fake clock's
(sleeping advances it) and its ``spin`` is the fake node's: as an executor's ``spin_once``, it
hands over the next tracked frame's state (stamped as its frame, as the node's ``~/state``),
advancing the clock to when it is in, or by the whole timeout when none comes. A frame received
and not tracked yet is one the node holds (its DDS reader and FIFO): that backlog is what must
stay bounded.
"""

import collections
import logging
import types

import numpy as np
import pytest

from ros_helpers import image_msg, prompt_msg, require_messages, stamp

IMAGE, PROMPT, STATE = '/camera/image_raw', '/sam2_tracker/prompt', '/sam2_tracker/state'
SPACING_NS = 100_000_000      # 10 Hz camera
T0 = 5_000_000_000            # bag time of frame 0


def write_bag(path, n, prompt_frames=(0,)):
    """n frames of 4x4 pixels at 10 Hz, a prompt 30 ms before each frame of prompt_frames."""
    from rclpy.serialization import serialize_message
    from rosbags.rosbag2 import StoragePlugin, Writer

    from sam2_ros.ros.bag_player import project_typestore

    require_messages()
    ts = project_typestore()
    with Writer(path, version=9, storage_plugin=StoragePlugin.SQLITE3) as w:
        img = w.add_connection(IMAGE, 'sensor_msgs/msg/Image', typestore=ts)
        pr = w.add_connection(PROMPT, 'sam2_ros/msg/Prompt', typestore=ts)
        for i in range(n):
            if i in prompt_frames:
                w.write(pr, T0 + i * SPACING_NS - 30_000_000,
                        serialize_message(prompt_msg(1, stamp(i), box=(0, 0, 2, 2))))
            w.write(img, T0 + i * SPACING_NS,
                    serialize_message(image_msg(np.zeros((4, 4, 3), np.uint8), stamp(i))))
    return str(path)


def state_cdr(st):
    """The node's ~/state for the frame stamped ``st`` (sec, nanosec), serialized."""
    from rclpy.serialization import serialize_message

    from sam2_ros.msg import TrackingState

    m = TrackingState()
    m.header.stamp.sec, m.header.stamp.nanosec = st
    return serialize_message(m)


class FakeTime:
    """The replay module's ``time``: sleeping advances the clock at once."""

    def __init__(self):
        self.t = 100.0

    def monotonic(self):
        return self.t

    def sleep(self, dt):
        self.t += max(0.0, dt)


class SlowTracker:
    """A fake rclpy node behind the player (see the module docstring)."""

    def __init__(self, clock, cost):
        self.clock, self.cost = clock, cost
        self.sent = []         # (fake time, topic, payload) of every message, in order
        self.clocks = []       # (fake time, /clock ns)
        self.done = []         # fake time each frame's tracking ends, in arrival order
        self.stamps = []
        self.backlog = []      # frames held (received, not tracked) as each frame arrives
        self.answered = 0
        self.on_state = None

    def get_logger(self):
        return logging.getLogger('test_replay_flow')

    def create_publisher(self, cls, topic, qos):
        return types.SimpleNamespace(publish=lambda m: self.receive(topic, m))

    def create_subscription(self, cls, topic, callback, qos, raw=False):
        assert topic == STATE and raw
        self.on_state = callback

    def receive(self, topic, m):
        now = self.clock.t
        if topic == '/clock':
            self.clocks.append((now, m.clock.sec * 10**9 + m.clock.nanosec))
            return
        self.sent.append((now, topic, m))
        if topic == IMAGE:
            from sam2_ros.ros.image_cdr import header_stamp

            start = max([now] + self.done[-1:])
            self.done.append(start + self.cost(len(self.done)))
            self.stamps.append(header_stamp(m))
            self.backlog.append(sum(d > now for d in self.done))

    def spin(self, timeout):
        """As an executor's spin_once: the next tracked frame's state, waited for up to
        ``timeout`` (at once when it is in already)."""
        i = self.answered
        if i < len(self.done) and self.done[i] <= self.clock.t + timeout:
            self.clock.t = max(self.clock.t, self.done[i])
            self.on_state(state_cdr(self.stamps[i]))
            self.answered += 1
        else:
            self.clock.t += timeout

    def frame_times(self):
        return [t for t, topic, _ in self.sent if topic == IMAGE]


class TickingTime(FakeTime):
    """A clock that moves ``tick`` s at every reading too (a loaded machine: time passes
    between two readings of one step)."""

    def __init__(self, tick):
        super().__init__()
        self.tick = tick

    def monotonic(self):
        self.t += self.tick
        return self.t


def play(monkeypatch, bag, cost, max_ahead, timeout=60.0, clock=None):
    """(fake node, player) after the bag was played; max_ahead 0: no flow control."""
    from sam2_ros.ros import bag_player

    clock = clock or FakeTime()
    monkeypatch.setattr(bag_player, 'time', clock)
    node = SlowTracker(clock, cost)
    player = bag_player.BagPlayer(node, bag, rate=1.0)
    player.spin = node.spin
    if max_ahead:
        player.follow([STATE], max_ahead, timeout)
    player.play()
    player.close()
    return node, player


def test_a_slow_node_holds_the_player_at_max_ahead_frames(tmp_path, monkeypatch):
    """A node taking 0.5 s a frame on a 10 Hz bag: without flow control it ends up holding most
    of the bag (the defect: 31 of 40 frames); with --max-ahead 8 it never holds more than 8,
    and every message still goes out once, in the recorded order."""
    bag = write_bag(tmp_path / 'bag', 40, prompt_frames=(0, 20))
    free, _ = play(monkeypatch, bag, lambda i: 0.5, 0)
    assert max(free.backlog) > 30
    node, player = play(monkeypatch, bag, lambda i: 0.5, 8)
    assert max(node.backlog) <= 8
    assert [(topic, bytes(m)) for _, topic, m in node.sent] == \
        [(topic, bytes(m)) for _, topic, m in free.sent]
    assert player.held > 0 and player.counts == {IMAGE: 40, PROMPT: 2}
    assert [ns for _, ns in node.clocks] == sorted(ns for _, ns in node.clocks)


def test_after_a_pause_the_recorded_spacing_resumes_and_clock_stands_still(tmp_path,
                                                                          monkeypatch):
    """The node's first frame takes 3 s (a graph capture), the others 10 ms; --max-ahead 5:
    frames 0-4 go out on time, frame 5 waits for frame 0's state with /clock at its own bag
    time, then frames 6.. follow frame 5 at the recorded 100 ms (no burst to catch up)."""
    bag = write_bag(tmp_path / 'bag', 15)
    node, player = play(monkeypatch, bag, lambda i: 3.0 if i == 0 else 0.01, 5)
    t = node.frame_times()
    start = node.sent[0][0]          # the prompt, 30 ms before frame 0
    np.testing.assert_allclose(np.array(t[:5]) - start, 0.03 + 0.1 * np.arange(5), atol=1e-9)
    assert t[5] - t[0] == pytest.approx(3.0, abs=1e-9)    # frame 0's state is in
    np.testing.assert_allclose(np.diff(t[5:]), 0.1, atol=1e-9)
    assert player.paused_s == pytest.approx(t[5] - (t[0] + 0.5), abs=1e-9)
    frame5_ns = T0 + 5 * SPACING_NS
    during = [ns for when, ns in node.clocks if t[4] < when < t[5]]
    assert during and max(during) == frame5_ns and during.count(frame5_ns) > 50
    assert max(node.backlog) <= 5


def test_a_node_that_never_answers_stops_the_replay(tmp_path, monkeypatch):
    """No state at all (a stuck node): at most max_ahead frames go out, then, after the
    progress timeout, ReplayStalled says what happened; nothing more is published."""
    from sam2_ros.ros.bag_player import ReplayStalled

    bag = write_bag(tmp_path / 'bag', 12)
    with pytest.raises(ReplayStalled, match=r"/sam2_tracker/state.* 4 frames.*--max-ahead 0"):
        play(monkeypatch, bag, lambda i: float('inf'), 4, timeout=5.0)


def test_a_state_answers_its_frame_and_all_before_it_only():
    """A state releases the first pending frame of its stamp and the frames before it (dropped
    by a live node, or their state lost); a stamp not pending (a frame's state published again
    after a prompt) or bytes that are not CDR release nothing."""
    from sam2_ros.ros.bag_player import BagPlayer

    p = types.SimpleNamespace(pending=collections.deque([(1, 0), (2, 0), (3, 0), (4, 0)]))
    BagPlayer.on_state(p, state_cdr((3, 0)))
    assert list(p.pending) == [(4, 0)]
    for raw in (state_cdr((1, 0)), b'junk'):
        BagPlayer.on_state(p, raw)
        assert list(p.pending) == [(4, 0)]
    p.pending = collections.deque([(5, 0), (5, 0), (6, 0)])   # two cameras, one stamp
    BagPlayer.on_state(p, state_cdr((5, 0)))
    assert list(p.pending) == [(5, 0), (6, 0)]


def test_the_progress_topics_are_the_nodes_tracking_states_and_the_options():
    from sam2_ros.ros.bag_player import MAX_AHEAD, BagPlayer
    from sam2_ros.ros.replay import parse_args

    graph = [('/sam2_tracker/state', ['sam2_ros/msg/TrackingState']),
             ('/sam2_tracker/mask', ['sensor_msgs/msg/Image']),
             ('/sam2_tracker/left/state', ['sam2_ros/msg/TrackingState'])]
    asked = []
    node = types.SimpleNamespace(get_publisher_names_and_types_by_node=lambda base, ns: (
        asked.append((base, ns)) or graph))
    p = types.SimpleNamespace(node=node)
    p.node_graph = types.MethodType(BagPlayer.node_graph, p)
    assert BagPlayer.state_topics(p, '/sam2_tracker') == ['/sam2_tracker/left/state',
                                                          '/sam2_tracker/state']
    assert asked == [('sam2_tracker', '/')]

    def missing(base, ns):
        raise RuntimeError('NodeNameNonExistentError')
    node.get_publisher_names_and_types_by_node = missing
    assert BagPlayer.state_topics(p, '/ns/sam2_tracker') == []
    args = parse_args(['bag'])
    assert (args.max_ahead, args.progress_topic) == (MAX_AHEAD, None) and MAX_AHEAD > 0
    for bad in (['--max-ahead', '-1'], ['--progress-timeout', '0']):
        with pytest.raises(SystemExit):
            parse_args(['bag', *bad])


@pytest.mark.parametrize('tick_us', [1060, 1270, 2250, 2390, 2530, 2810])
def test_clock_never_goes_back_when_time_passes_between_readings(tmp_path, monkeypatch,
                                                                  tick_us):
    """/clock between messages is the bag time now, never past the next message's time: the
    player read the time twice a step (is the message due? how far along?), the second reading
    put /clock past the message's time and /clock then stepped back to it when the message
    went out, which a node under use_sim_time takes for a restarted bag (it resets). Ticks
    of 1-2.8 ms a reading: each stepped /clock back 1 to 14 times in this bag."""
    bag = write_bag(tmp_path / 'bag', 20, prompt_frames=(0, 7, 13))
    node, player = play(monkeypatch, bag, lambda i: 0.01, 0, clock=TickingTime(tick_us * 1e-6))
    ns = [n for _, n in node.clocks]
    assert len(ns) > 40 and player.counts == {IMAGE: 20, PROMPT: 3}
    assert all(b >= a for a, b in zip(ns, ns[1:])), 'steps back'
    assert ns[-1] == T0 + 19 * SPACING_NS           # the last message's own time
