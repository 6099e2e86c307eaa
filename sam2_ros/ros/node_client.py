"""The tracker node in a subprocess and a client that talks to it over ROS 2: one harness for
the demo (``sam2_ros.ros.demo``), the node latency benchmark (``tools.bench``) and the ROS
tests, so that starting, stopping and connecting to the node are done, and fixed, once.

* :class:`LoggedProcess` / :class:`NodeProcess`: a subprocess in its own session with its
  output in a file, and the node started from a parameter YAML; stopped with SIGINT (a clean
  shutdown, as Ctrl-C) and then SIGKILL of the whole process group, whatever happened.
* :class:`NodeClient` / :class:`NodeLink`: one rclpy node in this process with the topics of
  one or more tracker nodes, spun on a thread of its own. What each subscription records is a
  method of the link (a subclass changes it); which topics exist and their QoS are arguments,
  because the three users differ there (and must keep doing so: the benchmark's numbers
  depend on them).
* message helpers shared by the three; ``stamp_ns`` is :mod:`sam2_ros.ros.inputs`'.

rclpy and the messages are imported inside the functions: the module itself imports without
a ROS installation.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import yaml

from sam2_ros.ros.executor import make_executor

NODE_NAME = 'sam2_tracker'
DEFAULT_IMAGE_TOPIC = '/camera/image_raw'
PUBLISH = ('image', 'prompt', 'click')
OUTPUTS = ('mask', 'overlay', 'state')


class WaitFailed(AssertionError):
    """A bounded wait that failed: the time ran out or the process it waited on exited. An
    AssertionError, so a test shows it as a failed check (and the tests' wrappers that add a
    launch's log to failed checks see it); the demo and the benchmark catch it by name."""


def wait_until(pred: Callable[[], Any], timeout: float, what: str, poll: float = 0.02) -> Any:
    """Poll ``pred`` until it returns something truthy (returned); :class:`WaitFailed` naming
    ``what`` after ``timeout`` s. ``pred`` may raise to end the wait early."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(poll)
    raise WaitFailed(f'timed out after {timeout:.0f} s waiting for {what}')


def node_prefix(ns: str = '', name: str = NODE_NAME) -> str:
    """The node's private topics' prefix: ``/<ns>/sam2_tracker`` or ``/sam2_tracker``."""
    return f'/{ns}/{name}' if ns else f'/{name}'


# ----------------------------------------------------------------------------- processes

def _default_sigint() -> None:
    """In the child before exec: SIGINT handled by default and not blocked, whatever the parent
    did to it (an ignored or blocked signal is inherited across exec, and the node is stopped
    with SIGINT as Ctrl-C does)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class LoggedProcess:
    """A subprocess in a session of its own (Ctrl-C in a terminal does not reach it: its
    parent decides when it stops) with stdout and stderr in ``log_path``. ``pass_fds``: file
    descriptors the child inherits (the tests' domain locks: a child that outlives its test
    keeps its ROS domain locked)."""

    def __init__(self, argv: Sequence[str], log_path: Path, env: Optional[Dict[str, str]] = None,
                 cwd: Optional[Path] = None, pass_fds: Sequence[int] = ()) -> None:
        self.argv = list(argv)
        self.log_path = Path(log_path)
        self._log = open(self.log_path, 'wb')
        self.p = subprocess.Popen(self.argv, cwd=cwd, env=env, stdout=self._log,
                                  stderr=subprocess.STDOUT, start_new_session=True,
                                  preexec_fn=_default_sigint, pass_fds=tuple(pass_fds))

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors='replace')
        except OSError:
            return ''

    def log_tail(self, n: int = 3000) -> str:
        return self.log()[-n:]

    def alive(self) -> bool:
        return self.p.poll() is None

    def wait_log(self, pattern: str, timeout: float) -> re.Match:
        """The first match of ``pattern`` in the log; fails at once (with the log's tail) when
        the process exits without having logged it, instead of after the whole timeout."""
        def find() -> Optional[re.Match]:
            m = re.search(pattern, self.log())
            if m is None and not self.alive():
                raise WaitFailed(f'process exited ({self.p.returncode}) before logging '
                                 f'{pattern!r}')
            return m
        try:
            return wait_until(find, timeout, f'log line {pattern!r}')
        except WaitFailed as exc:
            raise WaitFailed(f'{exc}\n--- log ---\n{self.log_tail()}') from None

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        """SIGINT (a clean shutdown), then SIGKILL of the process group if it has not ended
        after ``timeout`` s. Idempotent; returns the exit status."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait(10)
        self._log.close()
        return self.p.returncode


def write_params(path: Path, values: Dict[str, Any]) -> Dict[str, Any]:
    """``values`` as a node parameter file for every node (``/**``); returns what was written.
    An empty YAML list is "not set" for rcl, but safe_dump of [] would be an untyped empty
    array parameter: such entries are left out (= the node's default)."""
    values = {k: v for k, v in values.items() if v != []}
    Path(path).write_text(yaml.safe_dump({'/**': {'ros__parameters': values}}))
    return values


class NodeProcess(LoggedProcess):
    """``python -m sam2_ros.ros.node`` with its parameters in ``params_path`` (written here
    from ``params``), in namespace ``ns`` if given, with further ``ros_args`` (e.g. remaps)."""

    def __init__(self, params: Dict[str, Any], params_path: Path, log_path: Path,
                 env: Optional[Dict[str, str]] = None, ns: str = '',
                 ros_args: Sequence[str] = (), cwd: Optional[Path] = None,
                 pass_fds: Sequence[int] = ()) -> None:
        self.params_path = Path(params_path)
        self.params = write_params(self.params_path, params)
        self.ns = ns
        argv = [sys.executable, '-m', 'sam2_ros.ros.node', '--ros-args', '--params-file',
                str(self.params_path), *(['-r', f'__ns:=/{ns}'] if ns else []), *ros_args]
        super().__init__(argv, log_path, env=env, cwd=cwd, pass_fds=pass_fds)

    def check(self, what: str) -> None:
        """:class:`WaitFailed` with the log's tail if the node has exited before ``what``."""
        if not self.alive():
            raise WaitFailed(f'the node exited ({self.p.returncode}) before {what}; '
                             f'{self.log_path}:\n{self.log_tail()}')


# ----------------------------------------------------------------------------- client

class NodeLink:
    """One tracker node's topics on a :class:`NodeClient`'s rclpy node: publishers
    ``pub_image``/``pub_prompt``/``pub_click`` and subscriptions ``sub_mask``/``sub_overlay``/
    ``sub_state`` (None where the client did not ask for them). By default the subscriptions
    keep every message in ``masks``/``overlays``/``states`` (under ``lock``); a subclass
    overrides :meth:`on_mask`, :meth:`on_overlay`, :meth:`on_state` to keep something else
    (the benchmark: receipt times by stamp, so its callbacks stay short). The outputs named in
    ``raw_outputs`` are taken serialized: their callbacks get the message's bytes, which
    rclpy does not convert (a 720p mask or overlay costs the conversion a copy of 0.9 or
    2.7 MB under the GIL, and the next message waits for it)."""

    raw_outputs: Tuple[str, ...] = ()

    def __init__(self, client: 'NodeClient', prefix: str, image_topic: str) -> None:
        from geometry_msgs.msg import PointStamped
        from sensor_msgs.msg import Image

        self.prefix, self.image_topic = prefix, image_topic
        self.lock = threading.Lock()
        self.masks: List[Any] = []
        self.overlays: List[Any] = []
        self.states: List[Any] = []
        self.expect = client.expect
        node, m, qos = client.node, client.m, client.qos
        pubs = {'image': (Image, image_topic, client.image_qos),
                'prompt': (m.Prompt, f'{prefix}/prompt', qos),
                'click': (PointStamped, f'{prefix}/click', qos)}
        types = {'mask': Image, 'overlay': Image, 'state': m.TrackingState}
        self.pub_image = self.pub_prompt = self.pub_click = None
        self.sub_mask = self.sub_overlay = self.sub_state = None
        for name in client.publish:
            setattr(self, f'pub_{name}', node.create_publisher(*pubs[name]))
        # in the order asked: when several are ready the executor takes the first created
        for name in client.subscribe:
            setattr(self, f'sub_{name}', node.create_subscription(
                types[name], f'{prefix}/{name}', getattr(self, f'on_{name}'), qos,
                raw=name in self.raw_outputs))

    def on_mask(self, msg: Any) -> None:
        with self.lock:
            self.masks.append(msg)

    def on_overlay(self, msg: Any) -> None:
        with self.lock:
            self.overlays.append(msg)

    def on_state(self, msg: Any) -> None:
        with self.lock:
            self.states.append(msg)

    def connected(self, image_pub: Any = None) -> bool:
        """The node subscribes to our publishers (it is active) and we see its publishers of
        the expected outputs: a sample sent before the two match is lost (reliable QoS only
        resends to matched readers). ``image_pub``: the publisher of the frames the node reads
        instead of ``pub_image`` (the tests' compressed images)."""
        image = self.pub_image if image_pub is None else image_pub
        return (all(p.get_subscription_count() > 0 for p in (image, self.pub_prompt,
                                                              self.pub_click) if p is not None)
                and all(getattr(self, f'sub_{name}').get_publisher_count() > 0
                        for name in self.expect))


class NodeClient:
    """One rclpy node (in a Context of its own unless ``context`` is given) with a
    :class:`NodeLink` (``link_class``) for each ``(node prefix, image topic)`` in ``links``;
    its executor spins on a daemon thread until :meth:`close`.

    ``publish`` / ``subscribe``: which of :data:`PUBLISH` / :data:`OUTPUTS` exist (subscribed
    in the order given); ``expect``: the outputs whose publishers :meth:`connected` waits
    for. Every topic is RELIABLE with ``depth``, the images with ``image_depth``.
    ``signal_handlers``: None = rclpy's default (installed for the default context only),
    False = never (the caller turns signals into exceptions itself), True = always.
    Subclasses add publishers or subscriptions in :meth:`add_entities`, which runs before
    the thread starts (entities changed while the executor spins raced with it).
    ``executor``: 'single' or 'events' (``executor.make_executor``)."""

    link_class = NodeLink

    def __init__(self, name: str,
                 links: Sequence[Tuple[str, str]] = ((node_prefix(), DEFAULT_IMAGE_TOPIC),), *,
                 domain_id: Optional[int] = None, context: Any = None,
                 signal_handlers: Optional[bool] = None, publish: Sequence[str] = PUBLISH,
                 subscribe: Sequence[str] = OUTPUTS, expect: Sequence[str] = ('mask', 'state'),
                 depth: int = 10, image_depth: int = 10, spin_period: float = 0.05,
                 executor: str = 'single') -> None:
        import rclpy
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from rclpy.signals import SignalHandlerOptions

        from sam2_ros.ros.messages import interfaces

        self.m = interfaces()
        self.publish, self.subscribe = tuple(publish), tuple(subscribe)
        self.expect = tuple(expect)
        self.qos = QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)
        self.image_qos = QoSProfile(depth=image_depth, reliability=ReliabilityPolicy.RELIABLE)
        self.ctx = rclpy.Context() if context is None else context
        handlers = None if signal_handlers is None else (
            SignalHandlerOptions.ALL if signal_handlers else SignalHandlerOptions.NO)
        rclpy.init(context=self.ctx, domain_id=domain_id, signal_handler_options=handlers)
        self.node = rclpy.create_node(name, context=self.ctx)
        self.links = [self.link_class(self, prefix, topic) for prefix, topic in links]
        self.link = self.links[0]
        self.add_entities()
        self._spin_period = spin_period
        self.executor = make_executor(executor, self.ctx)
        self.executor.add_node(self.node)
        self._stop = False
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def add_entities(self) -> None:
        """Further publishers and subscriptions of a subclass (none here)."""

    def _spin(self) -> None:
        while not self._stop and self.ctx.ok():
            self.executor.spin_once(timeout_sec=self._spin_period)

    def connected(self) -> bool:
        return all(link.connected() for link in self.links)

    def wait_connected(self, timeout: float = 60.0, proc: Optional[NodeProcess] = None) -> None:
        """Until :meth:`connected`; fails early if ``proc`` (the node) exits."""
        def ready() -> bool:
            if proc is not None:
                proc.check('it became active')
            return self.connected()
        wait_until(ready, timeout, 'the node to subscribe (active) and to publish')

    def close(self) -> None:
        import rclpy

        self._stop = True
        self._thread.join(5)
        try:
            self.executor.shutdown()
            self.node.destroy_node()
        finally:
            # the default context: rclpy's signal handlers are uninstalled with it
            rclpy.try_shutdown(context=self.ctx)


# ----------------------------------------------------------------------------- messages

def set_stamp(header: Any, ns: int) -> None:
    header.stamp.sec, header.stamp.nanosec = divmod(int(ns), 1_000_000_000)


def header_msg(ns: int, frame_id: str = 'camera') -> Any:
    """A std_msgs/Header stamped ``ns`` (integer nanoseconds)."""
    from std_msgs.msg import Header

    h = Header(frame_id=frame_id)
    set_stamp(h, ns)
    return h


def prompt_msg(obj_id: int, stamp_ns: int = 0, action: int = 0, points: Sequence = (),
               labels: Sequence = (), box: Optional[Sequence[float]] = None,
               frame_id: str = 'camera') -> Any:
    """A sam2_ros/Prompt; stamp 0 means 'the next frame', a box is (x0, y0, x1, y1)."""
    from geometry_msgs.msg import Point32

    from sam2_ros.ros.messages import interfaces

    m = interfaces().Prompt()
    m.header = header_msg(stamp_ns, frame_id)
    m.object_id, m.action = obj_id, action
    m.points = [Point32(x=float(x), y=float(y), z=0.0) for x, y in points]
    m.labels = [int(v) for v in labels]
    if box is not None:
        m.has_box, m.box = True, [float(v) for v in box]
    return m
