"""The parts of the node latency benchmark: the tracker nodes under test
(each in its own process group, one per camera, in the camera's namespace), the transport
settings, and the client that publishes frames and prompts for every camera and timestamps
what comes back.

Kept apart from ``node_latency.py`` (the CLI, the measurement loop and the report) so that
each file holds one concern; nothing here measures anything by itself.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import yaml

from sam2_ros.bench.results import csv
from sam2_ros.ros.conversions import image_data

ROOT = Path(__file__).resolve().parents[2]
NODE = 'sam2_tracker'
PROFILE = ROOT / 'config' / 'fastdds_large_frames.xml'
# --transport: the environment both processes of a link get. 'default': Fast DDS's builtin
# transports (its 512 KiB shared-memory segments cannot hold a 720p frame: UDP fragments);
# 'udp': UDPv4 only; 'shm': the shipped profile (32 MiB shared-memory segments, UDP beside).
TRANSPORTS = {'default': {}, 'udp': {'FASTDDS_BUILTIN_TRANSPORTS': 'UDPv4'},
              'shm': {'FASTDDS_DEFAULT_PROFILES_FILE': str(PROFILE)}}
TRANSPORT_VARS = ('FASTDDS_DEFAULT_PROFILES_FILE', 'FASTDDS_BUILTIN_TRANSPORTS')


def transport_env(env: Dict[str, str], transport: str) -> Dict[str, str]:
    """``env`` with the variables of ``transport`` set and the other transport variables
    removed (an inherited profile would silently change what is measured)."""
    out = {k: v for k, v in env.items() if k not in TRANSPORT_VARS}
    out.update(TRANSPORTS[transport])
    return out


def camera_ns(index: int, cameras: int) -> str:
    """'' for a single camera (the node's default topics), else 'cam0', 'cam1', ..."""
    return '' if cameras == 1 else f'cam{index}'


def image_topic(ns: str) -> str:
    return f'/{ns}/image_raw' if ns else '/camera/image_raw'


def node_prefix(ns: str) -> str:
    return f'/{ns}/{NODE}' if ns else f'/{NODE}'


def stamp_ns(st: Any) -> int:
    return int(st.sec) * 1_000_000_000 + int(st.nanosec)


# ----------------------------------------------------------------------------- camera

# ----------------------------------------------------------------------------- node process

class NodeProcess:
    """The tracker node in its own process group; stop() is idempotent and always works."""

    def __init__(self, args: argparse.Namespace, env: Dict[str, str], workdir: Path,
                 log_path: Path, ns: str = '', device: Optional[str] = None) -> None:
        base = yaml.safe_load(Path(args.params_file).read_text()) or {}
        values = dict(next(iter(base.values()), {}).get('ros__parameters', {})) if base else {}
        values.update({
            'model_size': args.model, 'image_size': args.image_size,
            'device': device or args.device,
            'precision': args.precision, 'use_cuda_graphs': bool(args.cuda_graphs),
            'checkpoint': args.checkpoint, 'random_weights': not args.checkpoint,
            'process_every_frame': True, 'publish_overlay': bool(args.overlay),
            'autostart': True, 'image_topic': image_topic(ns),
            # the camera's size is known, as on a rig: its I/O graphs are captured at configure
            'io_resolution': [args.width, args.height],
            'max_objects': max(int(values.get('max_objects', 8)), args.objects),
        })
        if args.graph_mode:
            values['graph_mode'] = args.graph_mode
        if args.pipeline is not None:
            values['pipeline'] = bool(args.pipeline)
        if args.tune_malloc is not None:
            values['tune_malloc'] = bool(args.tune_malloc)
        if getattr(args, 'precompile', None):
            values['precompile'] = csv(args.precompile)
        # An empty YAML list is "not set" for rcl, but safe_dump of [] would be an untyped
        # empty array parameter: leave such entries out (= the node's default).
        values = {k: v for k, v in values.items() if v != []}
        self.params_path = workdir / f'node_params{ns}.yaml'
        self.params_path.write_text(yaml.safe_dump({'/**': {'ros__parameters': values}}))
        self.params = values
        self.argv = [sys.executable, '-m', 'sam2_ros.ros.node', '--ros-args', '--params-file',
                     str(self.params_path)] + (['-r', f'__ns:=/{ns}'] if ns else [])
        self.log_path = log_path
        self._log = open(log_path, 'wb')
        self.p = subprocess.Popen(self.argv, cwd=ROOT, env=env, stdout=self._log,
                                  stderr=subprocess.STDOUT, start_new_session=True)

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors='replace')[-n:]
        except OSError:
            return ''

    def stop(self, timeout: float = 15.0) -> Optional[int]:
        if self.p.poll() is None:
            try:
                self.p.send_signal(signal.SIGINT)
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait(10)
        if not self._log.closed:
            self._log.close()
        return self.p.returncode


# ----------------------------------------------------------------------------- ROS client

class CameraLink:
    """One camera's topics on the client: image and prompt out; mask, state (and overlay, as
    RViz would subscribe) in, with receipt times by header stamp."""

    def __init__(self, node: Any, m: Any, ns: str, overlay: bool) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image

        self.ns, self.lock = ns, threading.Lock()
        # RELIABLE depth 10 for large frames (BEST_EFFORT loses most of them over UDP).
        img_qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        prefix = node_prefix(ns)
        self.pub_image = node.create_publisher(Image, image_topic(ns), img_qos)
        self.pub_prompt = node.create_publisher(m.Prompt, f'{prefix}/prompt', qos)
        self.mask_t: Dict[int, float] = {}
        self.state_t: Dict[int, float] = {}
        self.states: Dict[int, Any] = {}
        # mask subscription first: when both are ready the executor takes it first
        self.sub_mask = node.create_subscription(Image, f'{prefix}/mask', self._on_mask, qos)
        self.sub_state = node.create_subscription(m.TrackingState, f'{prefix}/state',
                                                  self._on_state, qos)
        self.overlays = 0
        self.sub_overlay = node.create_subscription(
            Image, f'{prefix}/overlay', self._on_overlay, qos) if overlay else None

    def _on_mask(self, msg: Any) -> None:
        t = time.monotonic()
        with self.lock:
            self.mask_t.setdefault(stamp_ns(msg.header.stamp), t)

    def _on_state(self, msg: Any) -> None:
        t = time.monotonic()
        with self.lock:
            s = stamp_ns(msg.header.stamp)
            self.state_t.setdefault(s, t)
            self.states.setdefault(s, msg)

    def _on_overlay(self, msg: Any) -> None:
        with self.lock:
            self.overlays += 1

    def connected(self) -> bool:
        return (self.pub_image.get_subscription_count() > 0
                and self.pub_prompt.get_subscription_count() > 0
                and self.sub_mask.get_publisher_count() > 0
                and self.sub_state.get_publisher_count() > 0
                and (self.sub_overlay is None or self.sub_overlay.get_publisher_count() > 0))


class Client:
    """One rclpy node in the benchmark process with a :class:`CameraLink` per camera namespace
    (``''`` = the default topics); its executor runs on a thread of its own."""

    def __init__(self, domain_id: int, overlay: bool = False, namespaces=('',)) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        from sam2_ros.ros.conversions import interfaces

        self.m = interfaces()
        self.ctx = rclpy.Context()
        # No rclpy signal handlers: ours (main) turn SIGINT/SIGTERM into exceptions, so the
        # finally block always stops the node subprocesses.
        rclpy.init(context=self.ctx, domain_id=domain_id,
                   signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(f'sam2_node_latency_{os.getpid()}', context=self.ctx)
        self.links = [CameraLink(self.node, self.m, ns, overlay) for ns in namespaces]
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self._stop = False
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop and self.ctx.ok():
            self.executor.spin_once(timeout_sec=0.02)

    def connected(self) -> bool:
        return all(link.connected() for link in self.links)

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        try:
            self.executor.shutdown()
            self.node.destroy_node()
        finally:
            self.ctx.try_shutdown()


def image_msg(rgb: np.ndarray) -> Any:
    from sensor_msgs.msg import Image

    m = Image()
    m.header.frame_id = 'camera'
    m.height, m.width = rgb.shape[:2]
    m.encoding = 'rgb8'
    m.step = rgb.shape[1] * 3
    m.data = image_data(np.ascontiguousarray(rgb))   # one copy of the pixels, as the node
    return m


def set_stamp(header: Any, ns: int) -> None:
    header.stamp.sec, header.stamp.nanosec = divmod(int(ns), 1_000_000_000)
