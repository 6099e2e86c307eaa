"""The bag player behind ``python -m sam2_ros.ros.replay`` (that module's docstring: what it
does, flow control, waits, signals, exit statuses): :class:`BagPlayer` publishes one bag's
recorded messages with their timing on an rclpy node; :func:`project_typestore` gives a rosbags
typestore that knows our msg/*.msg, for writing bags that contain prompts (see
test/ros/test_ros_replay.py)."""

from __future__ import annotations

import collections
import importlib
import time
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

from sam2_ros.ros.image_cdr import header_stamp

CLOCK_HZ = 40.0  # /clock updates while waiting between messages (as rosbag2's default)
ACK_TIMEOUT_S = 10.0   # --in-order: longest wait for one message's acknowledgements
ACK_SLICE_S = 0.1      # acknowledgements are waited for in slices: a signal ends the wait
IMAGE_TYPES = ('sensor_msgs/msg/Image', 'sensor_msgs/msg/CompressedImage')
STATE_TYPE = 'sam2_ros/msg/TrackingState'
MAX_AHEAD = 32   # frames out unanswered: the node's FIFO (fifo_size 16) and as many in DDS
PROGRESS_TIMEOUT_S = 60.0   # longest pause without an answer (a first frame's capture fits)
# a wait says what it waits for after REPORT_AFTER_S (a node loading its model takes that
# long), then every REPORT_EVERY_S: a wrong image_topic was 5 silent minutes
REPORT_AFTER_S, REPORT_EVERY_S = 5.0, 30.0


class ReplayStalled(RuntimeError):
    """The node answered none of the frames ahead within the progress timeout."""


class ReplayStopped(Exception):
    """A signal (Ctrl-C, SIGTERM) or a shut-down rclpy context stopped the player."""


def context_down(node: Any) -> bool:
    """Whether ``node``'s rclpy context is shut down (False for a node without one)."""
    ctx = getattr(node, 'context', None)
    return ctx is not None and not ctx.ok()


class WaitReport:
    """Logs what a wait waits for once ``after`` s went by, then every ``every`` s."""

    def __init__(self, log: Callable[[str], None], what: str, timeout: float,
                 after: float = REPORT_AFTER_S, every: float = REPORT_EVERY_S) -> None:
        self.log, self.what, self.timeout, self.every = log, what, timeout, every
        self.start = time.monotonic()
        self.due = self.start + after

    def __call__(self, reason: Callable[[], str]) -> None:
        now = time.monotonic()
        if now >= self.due:
            self.due = now + self.every
            self.log(f'waiting for {self.what} ({now - self.start:.0f} of {self.timeout:.0f} s'
                     f'): {reason()}')


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


class BagPlayer:
    """Publishes one bag's messages on an rclpy node with their recorded timing."""

    def __init__(self, node: Any, bag: str, *, rate: float = 1.0,
                 topics: Optional[List[str]] = None, clock: bool = True,
                 qos_depth: int = 100, in_order: bool = False,
                 stop: Optional[Callable[[], bool]] = None) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from rosbags.rosbag2 import Reader

        self.node, self.rate, self.in_order = node, rate, in_order
        # asked between the steps of every wait (stop or a shut-down context: ReplayStopped)
        self.stop = stop or (lambda: False)
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
        report = WaitReport(self.node.get_logger().info, 'subscribers', timeout)
        while True:
            count = {t: pubs[t].get_subscription_count() for t in want}
            short = [t for t, n in want.items() if count[t] < n]
            if not short or time.monotonic() > end:
                return short
            report(lambda: ', '.join(f'{t} has {count[t]} of {want[t]}' for t in short))
            self.nap(0.05, 'waiting for subscribers')

    def wait_for_node(self, name: str, timeout: float, settle: float = 0.5,
                      report_after: float = REPORT_AFTER_S,
                      report_every: float = REPORT_EVERY_S) -> str:
        """Wait until the node ``name`` (fully qualified) subscribes to replayed topics and each
        of them has a subscriber, the same set for ``settle`` s (a node's subscriptions are
        discovered one by one); '' then, else why not after ``timeout``. Topics of the bag the
        node does not take (camera_info, tf, another camera) are not waited for. Why it still
        waits is logged after ``report_after`` s, then every ``report_every`` s."""
        end, ready = time.monotonic() + timeout, None
        report = WaitReport(self.node.get_logger().info, f'{name} to subscribe to the bag\'s '
                            f'image topics {self.image_topics}', timeout, report_after,
                            report_every)
        while True:
            subs = sorted({t for t, _ in self.node_graph('subscriber', name)})
            why = self.why_not_ready(name, subs)
            taken = [t for t in sorted(self.pubs) if t in subs]
            if not why:
                if ready is not None and ready[0] == taken and \
                        time.monotonic() - ready[1] >= settle:
                    return ''
                ready = ready if ready is not None and ready[0] == taken else (
                    taken, time.monotonic())
            else:
                ready = None
            if time.monotonic() > end:
                return why or f'{name} subscribes to {taken}, still changing'
            report(lambda: why or f'{name} subscribes to {taken}, settling')
            self.nap(0.05, f'waiting for {name}')

    def why_not_ready(self, name: str, subs: List[str]) -> str:
        """Why node ``name``, subscribed to ``subs``, is not ready for the replay; '' if it
        is. A node that takes none of the bag's images (image_topic or input_type not the
        bag's) would see no frame: not ready, whatever else it takes."""
        taken = [t for t in sorted(self.pubs) if t in subs]
        theirs = f'; it subscribes to {subs}'
        if not subs:
            return (f'no subscription of {name} seen (not started yet, still configuring, '
                    f'or another node name or ROS_DOMAIN_ID)')
        if self.image_topics and not set(taken) & set(self.image_topics):
            return (f'{name} subscribes to none of the bag\'s image topics '
                    f'{self.image_topics}: set image_topic (and input_type: compressed for a '
                    f'CompressedImage topic) to one of them{theirs}')
        if not taken:
            return f'{name} subscribes to none of the replayed topics {sorted(self.pubs)}{theirs}'
        unmatched = [t for t in taken if self.pubs[t].get_subscription_count() < 1]
        return f'{name} subscribes to {taken}, not matched yet: {unmatched}' if unmatched else ''

    def nap(self, seconds: float, doing: str) -> None:
        """time.sleep, unless the player was asked to stop (ReplayStopped saying ``doing``)."""
        self.check_stop(doing)
        time.sleep(seconds)

    def check_stop(self, doing: str) -> None:
        if self.stop() or context_down(self.node):
            raise ReplayStopped(f'stopped while {doing}')

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
            self.check_stop('waiting for the node\'s state')
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
                self.nap(min(due - now, 1.0 / CLOCK_HZ), 'playing')
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

    def _acked(self, pub: Any, timeout: float) -> bool:
        from rclpy.duration import Duration

        end = time.monotonic() + timeout
        while not pub.wait_for_all_acked(Duration(seconds=min(
                ACK_SLICE_S, max(0.0, end - time.monotonic())))):
            if time.monotonic() >= end:
                return False
            self.check_stop('waiting for acknowledgements')
        return True

    def delay(self, seconds: float) -> None:
        """``seconds`` before the first message (--start-delay), ended by a stop too."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.nap(min(left, 0.05), 'waiting (--start-delay)')

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(timeout_sec=0.0)
        self.reader.close()

