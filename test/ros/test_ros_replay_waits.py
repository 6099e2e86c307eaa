"""The bag player's waits (``sam2_ros.ros.replay``): what it says while it waits for the node,
and how a signal or a shut-down context ends a wait or the playing.

The waits run against a fake node (its graph and publishers' subscriber counts set by the
test) on the fake time line of test_replay_flow.py: sleeping advances the clock, so minutes of
waiting take none. The signals are sent to a real player process (``python -m
sam2_ros.ros.replay``) once its node is in the graph (its handlers are set before its node
exists), with no tracker running; the bounds on its exit are for a hang, not timings.
"""

import signal
import subprocess
import types

import pytest

from ros_helpers import PYTHON, DomainLease, Proc, wait_until
from test_replay_flow import IMAGE, PROMPT, STATE, FakeTime, SlowTracker, write_bag

NODE = '/sam2_tracker'


class Logged:
    """A logger recording (fake time, level, text)."""

    def __init__(self, clock):
        self.clock, self.lines = clock, []

    def __getattr__(self, level):
        return lambda text: self.lines.append((self.clock.t, level, text))


class GraphNode:
    """A fake rclpy node whose graph says NODE subscribes to ``subs``; a publisher counts one
    subscriber on each of those."""

    def __init__(self, clock, subs, context=None):
        self.clock, self.subs, self.log = clock, subs, Logged(clock)
        if context is not None:
            self.context = context

    def get_logger(self):
        return self.log

    def create_publisher(self, cls, topic, qos):
        return types.SimpleNamespace(publish=lambda m: None,
                                     get_subscription_count=lambda: int(topic in self.subs))

    def get_subscriber_names_and_types_by_node(self, base, ns):
        assert (ns, base) == ('/', 'sam2_tracker')
        return [(t, ['some/msg/Type']) for t in self.subs]


def player_on(monkeypatch, tmp_path, node_of_clock, **kwargs):
    """(fake clock, fake node, BagPlayer) on a bag of IMAGE and PROMPT."""
    from sam2_ros.ros import bag_player

    clock = FakeTime()
    monkeypatch.setattr(bag_player, 'time', clock)
    node = node_of_clock(clock)
    bag = tmp_path / 'bag'
    bag = str(bag) if bag.exists() else write_bag(bag, 3)
    return clock, node, bag_player.BagPlayer(node, bag, rate=1.0, **kwargs)


def test_a_node_on_another_image_topic_is_reported_while_waited_for(tmp_path, monkeypatch):
    """A tracker whose image_topic is not the bag's (the user's 5 silent minutes): the player
    says what it waits for and what the node subscribes to after 5 s, then every 30 s, and
    the same reason when the wait times out."""
    theirs = ['/camera/color/image_raw', PROMPT]
    clock, node, player = player_on(monkeypatch, tmp_path,
                                    lambda c: GraphNode(c, theirs))
    start = clock.t
    why = player.wait_for_node(NODE, timeout=100.0)
    lines = node.log.lines
    assert [round(t - start) for t, _, _ in lines] == [5, 35, 65, 95]
    assert all(level == 'info' for _, level, _ in lines)
    text = lines[0][2]
    assert text.startswith(f"waiting for {NODE} to subscribe to the bag's image topics "
                           f"['{IMAGE}'] (5 of 100 s): "), text
    assert f"none of the bag's image topics ['{IMAGE}']: set image_topic" in text, text
    assert f'it subscribes to {theirs}' in text, text
    assert why == text.split('): ', 1)[1]
    player.close()


def test_a_node_not_started_yet_and_a_quick_one_are_reported_or_not(tmp_path, monkeypatch):
    """A node not in the graph: the report says no subscription of it was seen. A node that
    subscribes within 5 s: not a word, and the wait ends."""
    clock, node, player = player_on(monkeypatch, tmp_path, lambda c: GraphNode(c, []))
    assert 'no subscription of /sam2_tracker seen' in player.wait_for_node(NODE, 10.0)
    assert [round(t - 100.0) for t, _, _ in node.log.lines] == [5]
    assert 'no subscription of /sam2_tracker seen' in node.log.lines[0][2]
    node.log.lines.clear()
    node.subs = [IMAGE, PROMPT]
    assert player.wait_for_node(NODE, 10.0) == ''
    assert node.log.lines == []
    player.close()


def test_subscribers_waited_for_are_reported(tmp_path, monkeypatch):
    clock, node, player = player_on(monkeypatch, tmp_path, lambda c: GraphNode(c, [IMAGE]))
    assert player.wait_for_subscribers(8.0, every_topic=False, extra={IMAGE: 2}) == [IMAGE]
    [(_, _, text)] = node.log.lines
    assert text == f'waiting for subscribers (5 of 8 s): {IMAGE} has 1 of 2', text
    player.close()


def test_a_shut_down_context_ends_every_wait_at_once(tmp_path, monkeypatch):
    """rclpy's SIGTERM handler shuts the context down and the process goes on: the waits
    (for the node, for subscribers, --start-delay) used to sleep on to their timeout (300 s
    under replay.launch.py); now each raises ReplayStopped at its next step."""
    from sam2_ros.ros.bag_player import ReplayStopped

    ctx = types.SimpleNamespace(up=True)
    ctx.ok = lambda: ctx.up
    clock, node, player = player_on(monkeypatch, tmp_path, lambda c: GraphNode(c, [], ctx))
    assert 'no subscription' in player.wait_for_node(NODE, 1.0)    # up: waits its timeout
    ctx.up = False
    for wait in (lambda: player.wait_for_node(NODE, 300.0),
                 lambda: player.wait_for_subscribers(300.0),
                 lambda: player.delay(300.0)):
        start = clock.t
        with pytest.raises(ReplayStopped, match='stopped while'):
            wait()
        assert clock.t == start           # not one step slept
    player.close()


def test_a_stop_ends_the_playing_and_the_wait_for_the_nodes_state(tmp_path, monkeypatch):
    """The player's stop (main's: a signal was received) ends the playing between two
    messages, and a pause at --max-ahead before its progress timeout (ReplayStopped, not
    ReplayStalled: the node is not stuck, the user stopped the replay)."""
    from sam2_ros.ros.bag_player import ReplayStopped

    made = []

    def slow_node(clock):      # a node that never answers
        made.append(SlowTracker(clock, lambda i: float('inf')))
        return made[-1]
    clock, node, player = player_on(monkeypatch, tmp_path, slow_node,
                                    stop=lambda: len(made[-1].sent) >= 3)
    player.spin = node.spin
    with pytest.raises(ReplayStopped, match='stopped while playing'):
        player.play()
    assert len(node.sent) == 3 and sum(player.counts.values()) == 3    # of 4
    player.close()
    held = []
    clock, node, player = player_on(monkeypatch, tmp_path, slow_node,
                                    stop=lambda: held[0].held > 0)
    held.append(player)
    player.spin = node.spin
    player.follow([STATE], 1, 1000.0)
    start = clock.t
    with pytest.raises(ReplayStopped, match="while waiting for the node's state"):
        player.play()
    assert clock.t - start < 1.0 and player.held == 1 and len(node.sent) == 2
    player.close()


@pytest.mark.slow
@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_a_player_waiting_for_a_node_quietly_with_status_0(tmp_path, monkeypatch,
                                                                          sig):
    """No tracker: the player waits for it (up to 300 s, as replay.launch.py runs it). SIGTERM
    used to be ignored for those 300 s, and SIGINT ended it with status 130 (an error under
    `ros2 launch`) and at times a KeyboardInterrupt traceback from destroy_node; now either
    ends it at once, one line saying so, exit 0, no traceback. SIGINT is sent twice (the
    terminal's Ctrl-C and `ros2 launch`'s own reach a launched player both)."""
    import rclpy

    monkeypatch.setenv('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')   # as the player's
    lease = DomainLease()
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=lease.domain_id)
    watcher = rclpy.create_node('replay_signal_test', context=ctx)
    player = None
    try:
        player = Proc([PYTHON, '-m', 'sam2_ros.ros.replay', write_bag(tmp_path / 'bag', 3),
                       '--in-order', '--wait-node', NODE, '--wait-timeout', '300'],
                      lease.env(), tmp_path / 'player.log')
        # its node exists: its handlers are set (they are, before rclpy is imported)
        wait_until(lambda: 'sam2_bag_replay' in watcher.get_node_names()
                   or player.p.poll() is not None, 120, 'the player node in the graph')
        assert player.p.poll() is None, player.log()
        for _ in range(2 if sig == signal.SIGINT else 1):
            player.p.send_signal(sig)
        try:
            rc = player.p.wait(60)      # a bound for a hang (the 300 s wait), not a timing
        except subprocess.TimeoutExpired:
            raise AssertionError(f'the player still runs after {sig.name}:\n'
                                 f'{player.log()}') from None
        log = player.log()
        assert rc == 0, log
        assert f'stopped while waiting for {NODE} by {sig.name}: 0 messages replayed' in log
        assert 'Traceback' not in log and 'KeyboardInterrupt' not in log, log
    finally:
        if player is not None:
            player.stop()
        watcher.destroy_node()
        ctx.try_shutdown()
        lease.release()
