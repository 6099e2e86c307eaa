"""Replay a rosbag2 bag (sqlite3 or MCAP) without rosbag2: images, prompts, /clock.

rosbag2 (``ros2 bag play``) is not installable from PyPI; this player reads bags with the pure
Python ``rosbags`` library and publishes each message's recorded CDR bytes unchanged through
rclpy (``Publisher.publish(bytes)``), so no message is deserialized and re-serialized and custom
types such as ``sam2_ros/msg/Prompt`` need only their generated Python class to be importable.
Messages keep their recorded spacing (divided by ``--rate``) and ``/clock`` follows bag time,
so a node with ``use_sim_time:=true`` sees the recorded time line.

    python -m sam2_ros.ros.replay BAG [--rate 1.0] [--topics T ...] [--wait]
        [--wait-node /sam2_tracker] [--no-clock] [--in-order]
        [--max-ahead 32] [--progress-topic T ...] [--progress-timeout 60]

``--in-order`` makes a replay reproducible across topics: each message is acknowledged by
every subscriber before the next one goes out. Without it, a message on one topic can overtake
an earlier one on another when discovery is still completing on the subscriber's side (the
publisher sees the subscription, the subscription does not see the publisher yet, and a
reliable sample then waits for a retransmission): a prompt recorded before its frame arrives
after it.

``--max-ahead N`` (flow control): the player reads one message at a time, but a node slower
than the bag would hold the rest of it in its image reader (KEEP_ALL with
``process_every_frame``; DDS acknowledges a sample once held: acks bound nothing). The node's
``~/state`` (stamped as its frame) says a frame was taken: at most N go out unanswered; at N
the player pauses (bag time, ``/clock`` stand still) until a state answers the oldest, then
goes on with the recorded spacing (no burst); no answer in ``--progress-timeout`` s stops it
(exit 3). States: ``--progress-topic``, else the ``--wait-node`` node's; neither: no bound.

:func:`project_typestore` gives a rosbags typestore that knows our msg/*.msg, for writing
bags that contain prompts (see test/ros/test_ros_replay.py).
"""

from __future__ import annotations

import argparse
import collections
import importlib
import sys
import time
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from sam2_ros.ros.image_cdr import header_stamp

CLOCK_HZ = 40.0  # /clock updates while waiting between messages (as rosbag2's default)
ACK_TIMEOUT_S = 10.0   # --in-order: longest wait for one message's acknowledgements
IMAGE_TYPES = ('sensor_msgs/msg/Image', 'sensor_msgs/msg/CompressedImage')
STATE_TYPE = 'sam2_ros/msg/TrackingState'
MAX_AHEAD = 32   # frames out unanswered: the node's FIFO (fifo_size 16) and as many in DDS
PROGRESS_TIMEOUT_S = 60.0   # longest pause without an answer (a first frame's capture fits)


class ReplayStalled(RuntimeError):
    """The node answered none of the frames ahead within the progress timeout."""


def msg_dir() -> Path:
    """Directory with our .msg files: the installed share/sam2_ros/msg, else the source tree."""
    try:
        from ament_index_python.packages import get_package_share_directory

        share = Path(get_package_share_directory('sam2_ros')) / 'msg'
        if share.is_dir():
            return share
    except Exception:  # not installed as an ament package (plain source tree)
        pass
    return Path(__file__).resolve().parents[2] / 'msg'


def project_typestore(store: str = 'ros2_kilted') -> Any:
    """A rosbags typestore with the standard ROS 2 types plus ``sam2_ros/msg/*``."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    ts = get_typestore(Stores(store))
    types: Dict[str, Any] = {}
    for path in sorted(msg_dir().glob('*.msg')):
        types.update(get_types_from_msg(path.read_text(), f'sam2_ros/msg/{path.stem}'))
    ts.register(types)
    return ts


def message_class(msgtype: str) -> Any:
    """'sensor_msgs/msg/Image' -> the rclpy message class (ImportError names the package)."""
    pkg, kind, name = msgtype.split('/')
    return getattr(importlib.import_module(f'{pkg}.{kind}'), name)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog='sam2_ros.ros.replay', description=__doc__.split('\n')[0])
    ap.add_argument('bag', help='rosbag2 directory (sqlite3 or mcap storage)')
    ap.add_argument('--rate', type=float, default=1.0, help='playback speed factor')
    ap.add_argument('--topics', nargs='*', default=None, help='only these topics')
    ap.add_argument('--wait', action='store_true',
                    help='wait until every replayed topic has a subscriber before playing')
    ap.add_argument('--wait-node', default='', metavar='NODE',
                    help='wait until NODE (e.g. /sam2_tracker) subscribes to replayed topics '
                         'and each of those has a subscriber; the bag\'s other topics '
                         '(camera_info, tf) are played without waiting')
    ap.add_argument('--wait-topic', action='append', default=[], metavar='TOPIC[:N]',
                    help='also wait for N (default 1) subscribers on TOPIC, e.g. /clock:2 '
                         '(repeatable; replayed topics or /clock)')
    ap.add_argument('--wait-timeout', type=float, default=60.0,
                    help='seconds, for --wait, --wait-node and --wait-topic')
    ap.add_argument('--no-clock', action='store_true', help='do not publish /clock')
    ap.add_argument('--start-delay', type=float, default=0.0,
                    help='seconds between discovery and the first message')
    ap.add_argument('--qos-depth', type=int, default=100, help='publisher history depth')
    ap.add_argument('--in-order', action='store_true',
                    help='publish each message only after every subscriber acknowledged the one '
                         'before (on any topic): the recorded order across topics is kept, '
                         'the recorded spacing only where the subscribers keep up')
    ap.add_argument('--max-ahead', type=int, default=MAX_AHEAD, metavar='N',
                    help='frames out unanswered by the node\'s state before the player pauses '
                         '(0: no flow control)')
    ap.add_argument('--progress-topic', nargs='*', default=None, metavar='TOPIC',
                    help='TrackingState topics (default: the --wait-node node\'s)')
    ap.add_argument('--progress-timeout', type=float, default=PROGRESS_TIMEOUT_S,
                    help='seconds paused without an answer before the replay stops (exit 3)')
    args = ap.parse_args(list(argv))
    if args.rate <= 0:
        ap.error('--rate must be > 0')
    if args.max_ahead < 0 or args.progress_timeout <= 0:
        ap.error('--max-ahead must be >= 0 and --progress-timeout > 0')
    return args


def parse_wait_topic(text: str) -> Tuple[str, int]:
    """'/clock:2' -> ('/clock', 2); '/clock' -> ('/clock', 1)."""
    head, sep, tail = text.rpartition(':')
    if sep and tail.isdigit():
        return head, int(tail)
    return text, 1


class BagPlayer:
    """Publishes one bag's messages on an rclpy node with their recorded timing."""

    def __init__(self, node: Any, bag: str, *, rate: float = 1.0,
                 topics: Optional[List[str]] = None, clock: bool = True,
                 qos_depth: int = 100, in_order: bool = False) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from rosbags.rosbag2 import Reader

        self.node, self.rate, self.in_order = node, rate, in_order
        self.unacked = 0       # in-order messages not acknowledged within ACK_TIMEOUT_S
        # flow control (follow()): stamps of the frames out that no state answered yet
        self.pending: Deque[Tuple[int, int]] = collections.deque()
        self.max_ahead, self.progress_topics, self.progress_timeout = 0, [], PROGRESS_TIMEOUT_S
        self.held, self.paused_s, self.clock_ns, self._executor = 0, 0.0, 0, None  # held: at N
        self.reader = Reader(bag)
        self.reader.open()
        conns = [c for c in self.reader.connections if topics is None or c.topic in topics]
        missing = sorted(set(topics or ()) - {c.topic for c in self.reader.connections})
        if missing:
            raise ValueError(f'{bag} has no topic {missing}; it has '
                             f'{sorted({c.topic for c in self.reader.connections})}')
        qos = QoSProfile(depth=qos_depth, reliability=ReliabilityPolicy.RELIABLE)
        self.pubs: Dict[str, Any] = {}
        self.connections = []
        for c in conns:
            if clock and c.topic == '/clock':      # ours is published: two clocks would jump
                node.get_logger().warning('not replaying the bag\'s /clock: the player '
                                          'publishes /clock (--no-clock plays the bag\'s)')
                continue
            try:
                cls = message_class(c.msgtype)
            except Exception as exc:  # noqa: BLE001 - a vendor type not installed here
                node.get_logger().warning(f'not replaying {c.topic}: its type {c.msgtype} is '
                                          f'not importable ({exc})')
                continue
            self.connections.append(c)
            if c.topic not in self.pubs:
                self.pubs[c.topic] = node.create_publisher(cls, c.topic, qos)
        if not self.connections:
            raise ValueError(f'no messages to play in {bag} (topics: {topics})')
        # the topics a tracker node must take for the replay to mean anything
        self.image_topics = sorted({c.topic for c in self.connections
                                    if c.msgtype in IMAGE_TYPES})
        self.clock_pub = node.create_publisher(message_class('rosgraph_msgs/msg/Clock'),
                                               '/clock', 10) if clock else None
        self.counts: Dict[str, int] = {t: 0 for t in self.pubs}

    def wait_for_subscribers(self, timeout: float, every_topic: bool = True,
                             extra: Optional[Dict[str, int]] = None) -> List[str]:
        """Wait until every replayed topic has a subscriber (``every_topic``) and each topic
        of ``extra`` has its count; returns the topics still short after ``timeout``."""
        want = {t: 1 for t in self.pubs} if every_topic else {}
        want.update(extra or {})
        pubs = {**self.pubs, **({'/clock': self.clock_pub} if self.clock_pub else {})}
        unknown = set(want) - set(pubs)
        if unknown:
            raise ValueError(f'cannot wait for {sorted(unknown)}: not published by this replay')
        end = time.monotonic() + timeout
        while True:
            short = [t for t, n in want.items() if pubs[t].get_subscription_count() < n]
            if not short or time.monotonic() > end:
                return short
            time.sleep(0.05)

    def wait_for_node(self, name: str, timeout: float, settle: float = 0.5) -> str:
        """Wait until the node ``name`` (fully qualified) subscribes to replayed topics and each
        of them has a subscriber, the same set for ``settle`` s (a node's subscriptions are
        discovered one by one); '' then, else why not after ``timeout``. Topics of the bag the
        node does not take (camera_info, tf, another camera) are not waited for."""
        end, ready = time.monotonic() + timeout, None
        while True:
            subs = {t for t, _ in self.node_graph('subscriber', name)}
            taken = sorted(t for t in self.pubs if t in subs)
            # a node that takes none of the bag's images (image_topic or input_type not the
            # bag's) would see no frame: not ready, whatever else it takes
            images_taken = not self.image_topics or set(taken) & set(self.image_topics)
            if taken and images_taken and \
                    all(self.pubs[t].get_subscription_count() >= 1 for t in taken):
                if ready is not None and ready[0] == taken and \
                        time.monotonic() - ready[1] >= settle:
                    return ''
                ready = ready if ready is not None and ready[0] == taken else (
                    taken, time.monotonic())
            else:
                ready = None
            if time.monotonic() > end:
                if taken and not images_taken:
                    return (f'{name} subscribes to {taken} but to none of the bag\'s image '
                            f'topics {self.image_topics}: set image_topic (and input_type: '
                            f'compressed for a CompressedImage topic) to one of them')
                return (f'{name} subscribes to none of the replayed topics {sorted(self.pubs)}'
                        if not taken else f'{name} subscribes to {taken}, not all matched')
            time.sleep(0.05)

    def node_graph(self, kind: str, name: str) -> List[Tuple[str, List[str]]]:
        """(topic, types) of node ``name``'s ``kind`` ('subscriber'/'publisher'), [] unseen."""
        ns, _, base = name.rpartition('/')
        try:
            return getattr(self.node, f'get_{kind}_names_and_types_by_node')(base, ns or '/')
        except Exception:  # noqa: BLE001
            return []

    def state_topics(self, name: str) -> List[str]:
        """The TrackingState topics node ``name`` publishes (a rig's: one per camera)."""
        return sorted(t for t, types in self.node_graph('publisher', name) if STATE_TYPE in types)

    def follow(self, topics: List[str], max_ahead: int,
               timeout: float = PROGRESS_TIMEOUT_S) -> None:
        """Flow control (module docstring): at most ``max_ahead`` frames unanswered on topics."""
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)  # as the node's
        for t in topics:  # raw: only the header stamp is read, not the objects
            self.node.create_subscription(message_class(STATE_TYPE), t, self.on_state, qos,
                                          raw=True)
        self.max_ahead, self.progress_topics, self.progress_timeout = max_ahead, topics, timeout

    def on_state(self, raw: bytes) -> None:
        """A state answers the first pending frame of its stamp and all before it (the node
        takes frames in the order published: those were dropped in live mode, or their state
        lost); another stamp (a state published again after a prompt) releases nothing."""
        stamp = header_stamp(raw)
        if stamp in self.pending:
            while self.pending.popleft() != stamp:
                pass

    def spin(self, timeout: float) -> None:
        """Take the node's states, waiting up to ``timeout`` s for one."""
        if self._executor is None:  # made only for flow control: nothing else has callbacks
            from rclpy.executors import SingleThreadedExecutor

            self._executor = SingleThreadedExecutor(context=self.node.context)
            self._executor.add_node(self.node)
        self._executor.spin_once(timeout_sec=timeout)

    def _hold(self, t_ns: int) -> float:
        """At the bound, wait for the node's answer, /clock standing still at ``t_ns``;
        returns the seconds paused. No answer in ``progress_timeout``: ReplayStalled (going
        on would pile the bag up in the node again, or crawl at one frame per timeout)."""
        if len(self.pending) < self.max_ahead:
            return 0.0
        start, self.held = time.monotonic(), self.held + 1
        while len(self.pending) >= self.max_ahead:
            if time.monotonic() - start > self.progress_timeout:
                raise ReplayStalled(
                    f'no state on {self.progress_topics} answered the first of '
                    f'{len(self.pending)} frames (stamp {"{}.{:09d}".format(*self.pending[0])})'
                    f' in {self.progress_timeout:.0f} s: stopped '
                    f'(is the node stuck? --max-ahead 0 plays without flow control)')
            self._publish_clock(t_ns)
            self.spin(1.0 / CLOCK_HZ)
        self.paused_s += (paused := time.monotonic() - start)
        return paused

    def _publish_clock(self, t_ns: int) -> None:
        """/clock at ``t_ns``, never below the last one: a node resets on a clock going back."""
        self.clock_ns = max(self.clock_ns, int(t_ns))
        if self.clock_pub is not None:
            msg = message_class('rosgraph_msgs/msg/Clock')()
            msg.clock.sec, msg.clock.nanosec = divmod(self.clock_ns, 1_000_000_000)
            self.clock_pub.publish(msg)

    def play(self) -> float:
        """Publish everything; returns the wall seconds taken."""
        t_bag0: Optional[int] = None
        t_wall0 = start = time.monotonic()
        self.clock_ns = 0       # a new time line: a second play may start before the last
        for conn, t_ns, raw in self.reader.messages(connections=self.connections):
            if t_bag0 is None:
                t_bag0 = t_ns
            due = t_wall0 + (t_ns - t_bag0) * 1e-9 / self.rate
            # sleep in /clock-sized steps, /clock moving; one reading of the time a step: a
            # second one could pass the message's time, and /clock then step back to it
            while (now := time.monotonic()) < due:
                self._publish_clock(min(t_ns, t_bag0 + int((now - t_wall0) * self.rate * 1e9)))
                time.sleep(min(due - now, 1.0 / CLOCK_HZ))
            frame = self.max_ahead > 0 and conn.msgtype in IMAGE_TYPES
            if frame:  # the time line moves by the pause: the recorded spacing resumes
                t_wall0 += self._hold(t_ns)
            self._publish_clock(t_ns)
            self.pubs[conn.topic].publish(bytes(raw))
            self.counts[conn.topic] += 1
            stamp = header_stamp(raw) if frame else None
            if stamp is not None:  # (None: not CDR, so no state can answer it)
                self.pending.append(stamp)
            if self.in_order:
                self.unacked += not self._acked(self.pubs[conn.topic], ACK_TIMEOUT_S)
        return time.monotonic() - start

    def wait_acked(self, timeout: float = 10.0) -> bool:
        """Reliable delivery of the last messages before the process exits."""
        return all(self._acked(p, timeout) for p in self.pubs.values())

    @staticmethod
    def _acked(pub: Any, timeout: float) -> bool:
        from rclpy.duration import Duration

        return pub.wait_for_all_acked(Duration(seconds=timeout))

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(timeout_sec=0.0)
        self.reader.close()


def main(argv: Optional[List[str]] = None) -> int:
    import rclpy
    from rclpy.utilities import remove_ros_args

    argv = list(sys.argv if argv is None else argv)
    args = parse_args(remove_ros_args(argv)[1:])
    rclpy.init(args=argv)
    node = rclpy.create_node('sam2_bag_replay')
    log = node.get_logger()
    player = None
    try:
        player = BagPlayer(node, args.bag, rate=args.rate, topics=args.topics,
                           clock=not args.no_clock, qos_depth=args.qos_depth,
                           in_order=args.in_order)
        extra = dict(parse_wait_topic(w) for w in args.wait_topic)
        why = player.wait_for_node(args.wait_node, args.wait_timeout) if args.wait_node else ''
        if why:
            log.error(f'after {args.wait_timeout:.0f} s: {why}')
            return 2
        if args.wait or extra:
            short = player.wait_for_subscribers(args.wait_timeout, args.wait, extra)
            if short:
                log.error(f'too few subscribers after {args.wait_timeout:.0f} s on {short}')
                return 2
        if args.max_ahead:
            topics = args.progress_topic if args.progress_topic is not None else (
                player.state_topics(args.wait_node) if args.wait_node else [])
            if topics:
                player.follow(topics, args.max_ahead, args.progress_timeout)
            elif args.wait_node:
                log.warning(f'{args.wait_node} publishes no {STATE_TYPE}: no flow control '
                            f'(--progress-topic names the node\'s state topic)')
        time.sleep(args.start_delay)
        seconds = player.play()
        acked = player.wait_acked()
        paused = f'; {player.held} frames waited for the node ({player.paused_s:.1f} s)'
        log.info(f'replayed {sum(player.counts.values())} messages in {seconds:.2f} s '
                 f'({", ".join(f"{t}: {n}" for t, n in player.counts.items())})'
                 f'{"" if acked else "; some were not acknowledged by all subscribers"}'
                 f'{f"; {player.unacked} not acknowledged in order" if player.unacked else ""}'
                 f'{paused if player.held else ""}')
        return 0
    except ReplayStalled as exc:
        log.error(str(exc))
        return 3
    except Exception as exc:  # unreadable bag, unknown message package, bad topic name...
        log.error(f'cannot replay {args.bag}: {type(exc).__name__}: {exc}')
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if player is not None:
            player.close()
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == '__main__':
    sys.exit(main())
