"""Helpers of the ROS tests: a node in a subprocess, a client node in the test process,
synthetic frames, and bounded waits.

Every test that talks DDS takes its own ROS_DOMAIN_ID, reserved with an flock on a file in the
temp directory (released by the kernel even if the test process dies), so tests of other
sessions on the same machine never see our traffic; discovery stays on localhost.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import pytest

from conftest import LEAN
from sam2_ros.ros import node_client
from sam2_ros.ros.inputs import stamp_ns
from tools.domain import lease_domain
from sam2_ros.ros.node_client import LoggedProcess, NodeClient, NodeProcess
# the tests' names for the harness's helpers
from sam2_ros.ros.node_client import header_msg as header, prompt_msg, wait_until  # noqa: F401
from sam2_ros.synthetic import SyntheticCamera

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# The test node: the smallest model input sam2 builds at (64), tiny frames (a frame at 256 costs
# several times the CPU of one at 64) and the lean random tiny model of the core's long-stream
# tests (conftest.LEAN: the same sam2 modules and calls, a fraction of a frame's CPU time).
TEST_PARAMS: Dict[str, Any] = {
    'model_size': 'tiny', 'image_size': 64, 'random_weights': True, 'seed': 0,
    'extra_hydra_overrides': list(LEAN),
    'device': 'cpu', 'precision': 'fp32', 'use_cuda_graphs': False, 'max_objects': 4,
    'image_topic': '/camera/image_raw', 'process_every_frame': True,
    'stale_timeout_s': 1.0, 'diagnostics_period_s': 0.5, 'autostart': True,
    # the node scenarios wait for the state a prompt on the last frame re-publishes (and
    # compare with add_prompt in process); the default, deferral to the next frame, is
    # test_ros_deferred_corrections.py's
    'corrections_on_next_frame': False,
}
W, H = 160, 120
COMPRESSED_TOPIC = '/camera/image_raw/compressed'


def require_messages():
    """The generated messages, or a clear FAILURE (not a skip): the suite needs them."""
    try:
        from sam2_ros import msg
        return msg
    except ImportError as exc:
        pytest.fail(f'sam2_ros.msg is not importable ({exc}); build it with scripts/setup.sh '
                    f'and run the tests with .venv/bin/python', pytrace=False)


# Lock files of the leases held now. Every Proc inherits them: a child that outlives its test
# (its parent killed) keeps its domain locked, so no later test shares a domain with it.
_LEASE_FDS: set = set()


# Intra-op threads of the nodes the tests start. One: on CI's 2 cores, with two pytest
# workers and the CLI tests' process beside them, a node's second OpenMP thread mostly spun
# (tiny tensors at image size 64) on a core another test needed. In-process references of a
# node's outputs use the same count (the same reduction order).
NODE_THREADS = 1


class DomainLease:
    """An exclusive ROS_DOMAIN_ID for one test."""

    def __init__(self) -> None:
        self.domain_id, self._fh = lease_domain()
        _LEASE_FDS.add(self._fh.fileno())

    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(ROS_DOMAIN_ID=str(self.domain_id), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
                   PYTHONUNBUFFERED='1', TQDM_DISABLE='1',
                   OMP_NUM_THREADS=str(NODE_THREADS))
        env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(ROOT), env.get('PYTHONPATH')]))
        return env

    def release(self) -> None:
        if self._fh is not None:
            _LEASE_FDS.discard(self._fh.fileno())
            self._fh.close()
            self._fh = None


class Proc(LoggedProcess):
    """A subprocess (``ros2 launch``, a player...) with its output in a file, run from the
    repository, holding the domain locks; always stopped on exit."""

    def __init__(self, args: List[str], env: Dict[str, str], log_path: Path) -> None:
        super().__init__(args, log_path, env=env, cwd=ROOT, pass_fds=tuple(_LEASE_FDS))


def write_params(path: Path, **overrides: Any) -> Path:
    node_client.write_params(path, dict(TEST_PARAMS, **overrides))
    return path


def start_node(lease: DomainLease, tmp: Path, name: str = 'node', extra: List[str] = (),
               env: Optional[Dict[str, str]] = None, **overrides: Any) -> NodeProcess:
    """The node with TEST_PARAMS and ``overrides`` (``<name>.yaml``, log ``<name>.log``) in the
    lease's domain (``env``: the lease's environment with changes)."""
    return NodeProcess(dict(TEST_PARAMS, **overrides), tmp / f'{name}.yaml',
                       tmp / f'{name}.log', env=env or lease.env(), ros_args=extra, cwd=ROOT,
                       pass_fds=tuple(_LEASE_FDS))


class Client(NodeClient):
    """A plain rclpy node in the test process: publishes inputs (raw and compressed images,
    prompts, clicks), collects every mask, overlay, state and diagnostics message."""

    _count = 0

    def __init__(self, lease: DomainLease, node_name: str = 'sam2_tracker') -> None:
        os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
        require_messages()
        Client._count += 1
        self.diags: List[Any] = []
        super().__init__(f'sam2_test_client_{Client._count}',
                         [(f'/{node_name}', '/camera/image_raw')], domain_id=lease.domain_id,
                         subscribe=('mask', 'overlay', 'state'), depth=50, image_depth=50)
        link = self.link
        self.pub_image, self.pub_prompt, self.pub_click = (link.pub_image, link.pub_prompt,
                                                           link.pub_click)
        self.masks, self.overlays, self.states = link.masks, link.overlays, link.states

    def add_entities(self) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from sensor_msgs.msg import CompressedImage

        self.pub_compressed = self.node.create_publisher(CompressedImage, COMPRESSED_TOPIC,
                                                         self.qos)
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self.appender(self.diags),
                                      self.qos)

    def appender(self, store: List[Any]) -> Callable[[Any], None]:
        """A subscription callback that appends each message to ``store`` (under the lock)."""
        def cb(msg: Any) -> None:
            with self.link.lock:
                store.append(msg)
        return cb

    def snapshot(self, store: List[Any]) -> List[Any]:
        with self.link.lock:
            return list(store)

    def wait_connected(self, timeout: float = 60.0, compressed: bool = False) -> None:
        """Until the node subscribes to our image (raw or compressed), prompt and click topics
        (it is active) and we see its mask and state publishers. ``pub_image`` is the
        attribute's: a test may replace it (another camera's topic)."""
        images = self.pub_compressed if compressed else self.pub_image
        wait_until(lambda: self.link.connected(images), timeout,
                   'the node to subscribe (active) and to publish')

    def send_prompts(self, *msgs: Any, timeout: float = 30.0) -> None:
        """Publish prompts for frames not sent yet, then wait until the node's diagnostics
        report all of them held (``waiting_prompts``): prompts and frames are different topics
        with no order between them, and a fixed sleep was not always enough on a loaded 2-core
        machine. The caller makes sure no earlier prompt is still waiting."""
        n_diag = len(self.snapshot(self.diags))
        for m in msgs:
            self.pub_prompt.publish(m)

        def held() -> bool:
            for d in self.snapshot(self.diags)[n_diag:]:
                values = {kv.key: kv.value for kv in d.status[0].values}
                if int(values.get('waiting_prompts', 0)) >= len(msgs):
                    return True
            return False
        wait_until(held, timeout, f'diagnostics: the node holds {len(msgs)} prompt(s)')

    def wait_inactive_outputs(self, timeout: float = 60.0) -> None:
        """After a deactivate: until everything the node sent while active has arrived, told
        by its diagnostics (not tracking, and a state received for every frame it processed)
        and a mask for every state. An overlay is sent after its frame's state (by another
        thread with the pipelined outputs), so overlays may still come: compare them by stamp,
        not by count."""
        def settled() -> bool:
            diags = self.snapshot(self.diags)[-1:]
            if not diags or 'not tracking' not in diags[-1].status[0].message:
                return False
            values = {kv.key: kv.value for kv in diags[-1].status[0].values}
            states = len(self.snapshot(self.states))
            return (values.get('processed_frames') == str(states)
                    and len(self.snapshot(self.masks)) == states)
        wait_until(settled, timeout, "diagnostics: not tracking, every processed frame's "
                                     'state and mask received')

    def states_for(self, stamp_ns: int) -> List[Any]:
        return [s for s in self.snapshot(self.states) if stamp_of(s.header) == stamp_ns]

    def wait_state(self, stamp_ns: int, timeout: float = 30.0, count: int = 1) -> Any:
        return wait_until(lambda: len(self.states_for(stamp_ns)) >= count and
                          self.states_for(stamp_ns)[count - 1], timeout,
                          f'TrackingState #{count} for stamp {stamp_ns}')


# ----------------------------------------------------------------------------- messages

def stamp_of(header: Any) -> int:
    return stamp_ns(header.stamp)


def image_msg(rgb: np.ndarray, stamp_ns: int, encoding: str = 'rgb8') -> Any:
    """An Image of ``rgb`` in ``encoding`` (converted here with cv2, independently of the node)."""
    import cv2
    from sensor_msgs.msg import Image

    conv = {'rgb8': None, 'bgr8': cv2.COLOR_RGB2BGR, 'rgba8': cv2.COLOR_RGB2RGBA,
            'bgra8': cv2.COLOR_RGB2BGRA, 'mono8': cv2.COLOR_RGB2GRAY}
    arr = rgb if conv.get(encoding) is None else cv2.cvtColor(rgb, conv[encoding])
    arr = np.ascontiguousarray(arr)
    m = Image()
    m.header = header(stamp_ns)
    m.height, m.width = arr.shape[:2]
    m.encoding = encoding
    m.step = arr.shape[1] * (1 if arr.ndim == 2 else arr.shape[2])
    m.data = arr.tobytes()
    return m


def compressed_msg(rgb: np.ndarray, stamp_ns: int, fmt: str = 'png') -> Any:
    import cv2
    from sensor_msgs.msg import CompressedImage

    ok, buf = cv2.imencode('.' + fmt, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    m = CompressedImage()
    m.header = header(stamp_ns)
    m.format = fmt
    m.data = buf.tobytes()
    return m


def click_msg(x: float, y: float, stamp_ns: int) -> Any:
    from geometry_msgs.msg import PointStamped

    m = PointStamped()
    m.header = header(stamp_ns)
    m.point.x, m.point.y = float(x), float(y)
    return m


def mask_array(msg: Any) -> np.ndarray:
    assert msg.encoding == 'mono8' and msg.step == msg.width
    return np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width)


def camera(w: int = W, h: int = H, seed: int = 0) -> SyntheticCamera:
    """The ROS tests' synthetic camera: two discs that never overlap within 40 frames (object 1
    moves right along the upper third, object 2 left and down from the middle)."""
    return SyntheticCamera(w, h, objects=2, seed=seed,
                           starts=[(w * 0.2, h / 3), (w * 0.75, h / 2)],
                           velocities=[(3, 0), (-2, 1)])


def frames(n: int, w: int = W, h: int = H, seed: int = 0) -> List[np.ndarray]:
    """Frames 0..n-1 of ``camera(w, h, seed)``: [h, w, 3] uint8 RGB."""
    return camera(w, h, seed).frames(n)


def stamp(i: int) -> int:
    """Stamp of frame i: 1000 s + i * 100 ms (non-zero, so it never means 'next frame')."""
    return 1_000_000_000_000 + i * 100_000_000


class Lifecycle:
    """Service clients of /sam2_tracker/change_state and /get_state on the test client."""

    def __init__(self, client: 'Client', timeout: float = 120.0) -> None:
        from lifecycle_msgs.srv import ChangeState, GetState

        self.node = client.node
        self.timeout = timeout
        self.change = self.node.create_client(ChangeState, '/sam2_tracker/change_state')
        self.get = self.node.create_client(GetState, '/sam2_tracker/get_state')
        assert self.change.wait_for_service(timeout_sec=60), 'lifecycle services missing'
        assert self.get.wait_for_service(timeout_sec=10)
        # wait_for_service sees the server's request reader; the server's response writer may
        # not have matched our response reader yet, and a response sent before that is lost
        # for good (seen once in 4 loaded runs: the first get_state never answered). Warm up
        # both services with requests that change nothing, resent until one is answered.
        self._first_answer(self.get, GetState.Request())
        probe = ChangeState.Request()
        probe.transition.id = 0  # 'create': valid from no primary state, always refused
        assert self._first_answer(self.change, probe).success is False

    def _first_answer(self, cli, req, per_try: float = 5.0):
        end = time.monotonic() + self.timeout
        while time.monotonic() < end:
            fut = cli.call_async(req)
            t = time.monotonic() + per_try
            while time.monotonic() < t and not fut.done():
                time.sleep(0.02)
            if fut.done():
                return fut.result()
        raise AssertionError(f'{cli.srv_name}: no answer within {self.timeout:.0f} s')

    def _call(self, cli, req):
        fut = cli.call_async(req)
        wait_until(fut.done, self.timeout, f'{cli.srv_name} response')
        return fut.result()

    def transition(self, tid: int) -> bool:
        from lifecycle_msgs.srv import ChangeState

        req = ChangeState.Request()
        req.transition.id = tid
        return self._call(self.change, req).success

    def state(self) -> str:
        from lifecycle_msgs.srv import GetState

        return self._call(self.get, GetState.Request()).current_state.label


def info_msg(cam: Any) -> Any:
    """sensor_msgs/CameraInfo of a ``sam2_ros.stereo.Camera`` (K, R, P, size, frame)."""
    from sensor_msgs.msg import CameraInfo

    msg = CameraInfo()
    msg.header.frame_id = cam.frame_id
    msg.width, msg.height = cam.width, cam.height
    msg.k = [float(v) for v in cam.K.ravel()]
    msg.r = [float(v) for v in cam.R.ravel()]
    msg.p = [float(v) for v in cam.P.ravel()]
    return msg


def states_of_a_pair(wait_state: Callable[[Any, int, float], Any], clients: List[Any],
                     images, first_s: int, tries: int = 10,
                     wait_s: float = 12.0) -> Tuple[int, list]:
    """Publish images[j] on clients[j].pub_image with one stamp until ``wait_state(client,
    stamp_ns, s)`` returns every client's state for it, a new stamp (first_s + 1, ...) each
    try: (pairs sent, their states). Why: our subscription seeing the node's state publisher
    does not mean that publisher already sees our subscription, and a state it sends before
    is lost (volatile); a loaded machine (the tests beside these on CI) widens that window."""
    for k in range(tries):
        ns = stamp(first_s + k)
        for c, img in zip(clients, images):
            c.pub_image.publish(image_msg(img, ns))
        try:
            return k + 1, [wait_state(c, ns, wait_s) for c in clients]
        except AssertionError as exc:
            if 'timed out' not in str(exc):          # the launch ended: no use trying again
                raise
    raise AssertionError(f'no state for any of {tries} pairs of frames in {tries * wait_s} s')
