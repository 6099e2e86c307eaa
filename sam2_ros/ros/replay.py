"""Replay a rosbag2 bag (sqlite3 or MCAP) without rosbag2: images, prompts, /clock.

rosbag2 (``ros2 bag play``) is not installable from PyPI; this player reads bags with the pure
Python ``rosbags`` library and publishes each message's recorded CDR bytes unchanged through
rclpy (``Publisher.publish(bytes)``), so no message is deserialized and re-serialized and custom
types such as ``sam2_ros/msg/Prompt`` need only their generated Python class to be importable.
Messages keep their recorded spacing (divided by ``--rate``) and ``/clock`` follows bag time,
so a node with ``use_sim_time:=true`` sees the recorded time line.

    python -m sam2_ros.ros.replay BAG [--rate 1.0] [--topics T ...] [--wait]
        [--wait-node /sam2_tracker] [--no-clock]
        [--in-order]

``--in-order`` makes a replay reproducible across topics: each message is acknowledged by
every subscriber before the next one goes out. Without it, a message on one topic can overtake
an earlier one on another when discovery is still completing on the subscriber's side (the
publisher sees the subscription, the subscription does not see the publisher yet, and a
reliable sample then waits for a retransmission): a prompt recorded before its frame arrives
after it.

:func:`project_typestore` gives a rosbags typestore that knows our msg/*.msg, for writing
bags that contain prompts (see test/ros/test_ros_replay.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

CLOCK_HZ = 40.0  # /clock updates while waiting between messages (as rosbag2's default)
ACK_TIMEOUT_S = 10.0   # --in-order: longest wait for one message's acknowledgements
IMAGE_TYPES = ('sensor_msgs/msg/Image', 'sensor_msgs/msg/CompressedImage')


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
    args = ap.parse_args(list(argv))
    if args.rate <= 0:
        ap.error('--rate must be > 0')
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
        self.clock_pub = None
        if clock:
            from rosgraph_msgs.msg import Clock

            self.clock_pub = node.create_publisher(Clock, '/clock', 10)
        self.counts: Dict[str, int] = {t: 0 for t in self.pubs}

    def wait_for_subscribers(self, timeout: float, every_topic: bool = True,
                             extra: Optional[Dict[str, int]] = None) -> List[str]:
        """Wait until every replayed topic has a subscriber (``every_topic``) and each topic
        of ``extra`` has its count; returns the topics still short after ``timeout``."""
        want = {t: 1 for t in self.pubs} if every_topic else {}
        want.update(extra or {})
        pubs = dict(self.pubs)
        if self.clock_pub is not None:
            pubs['/clock'] = self.clock_pub
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
        ns, _, base = name.rpartition('/')
        end, ready = time.monotonic() + timeout, None
        while True:
            try:
                subs = {t for t, _ in self.node.get_subscriber_names_and_types_by_node(
                    base, ns or '/')}
            except Exception:  # noqa: BLE001 - rclpy's NodeNameNonExistentError: not up yet
                subs = set()
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

    def _publish_clock(self, t_ns: int) -> None:
        if self.clock_pub is not None:
            from rosgraph_msgs.msg import Clock

            msg = Clock()
            msg.clock.sec, msg.clock.nanosec = divmod(int(t_ns), 1_000_000_000)
            self.clock_pub.publish(msg)

    def play(self) -> float:
        """Publish everything; returns the wall seconds taken."""
        t_bag0: Optional[int] = None
        t_wall0 = time.monotonic()
        for conn, t_ns, raw in self.reader.messages(connections=self.connections):
            if t_bag0 is None:
                t_bag0 = t_ns
            due = t_wall0 + (t_ns - t_bag0) * 1e-9 / self.rate
            while True:  # sleep in /clock-sized steps, keeping /clock moving
                now = time.monotonic()
                if now >= due:
                    break
                time.sleep(min(due - now, 1.0 / CLOCK_HZ))
                if self.clock_pub is not None and due - time.monotonic() > 0:
                    elapsed = (time.monotonic() - t_wall0) * self.rate
                    self._publish_clock(t_bag0 + int(elapsed * 1e9))
            self._publish_clock(t_ns)
            self.pubs[conn.topic].publish(bytes(raw))
            self.counts[conn.topic] += 1
            if self.in_order:
                self.unacked += not self._acked(self.pubs[conn.topic], ACK_TIMEOUT_S)
        return time.monotonic() - t_wall0

    def wait_acked(self, timeout: float = 10.0) -> bool:
        """Reliable delivery of the last messages before the process exits."""
        return all(self._acked(p, timeout) for p in self.pubs.values())

    @staticmethod
    def _acked(pub: Any, timeout: float) -> bool:
        from rclpy.duration import Duration

        return pub.wait_for_all_acked(Duration(seconds=timeout))

    def close(self) -> None:
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
        time.sleep(args.start_delay)
        seconds = player.play()
        acked = player.wait_acked()
        log.info(f'replayed {sum(player.counts.values())} messages in {seconds:.2f} s '
                 f'({", ".join(f"{t}: {n}" for t, n in player.counts.items())})'
                 f'{"" if acked else "; some were not acknowledged by all subscribers"}'
                 f'{f"; {player.unacked} not acknowledged in order" if player.unacked else ""}')
        return 0
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
