"""The parts of the node latency benchmark: the tracker nodes under test (one per camera, in the
camera's namespace, or one for every camera, with the benchmark's parameters), the transport
settings, and the client that timestamps what comes back for every camera. Starting, stopping
and connecting are :mod:`sam2_ros.ros.node_client`'s, shared with the demo and the tests.

Kept apart from ``node_latency.py`` (the CLI, the measurement loop and the report) so that
each file holds one concern; nothing here measures anything by itself.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import yaml

from tools.bench.results import csv
from sam2_ros.ros import image_cdr
from sam2_ros.ros.inputs import stamp_ns
from sam2_ros.ros.node_client import (DEFAULT_IMAGE_TOPIC, NodeClient, NodeLink, NodeProcess,
                                  node_prefix)

ROOT = Path(__file__).resolve().parents[2]
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
    return f'/{ns}/image_raw' if ns else DEFAULT_IMAGE_TOPIC


# --input: what the camera publishes, and the node's input_type for it
INPUTS = ('raw', 'jpeg')
INPUT_TYPE = {'raw': 'raw', 'jpeg': 'compressed'}


def output_prefix(ns: str, one_node: bool) -> str:
    """Where camera ``ns``'s prompts go and its outputs come from: its own node's private
    topics, or with one node for every camera that node's ``~/<ns>/...``."""
    return f'{node_prefix()}/{ns}' if one_node else node_prefix(ns)


def camera_topic(ns: str, input_kind: str = 'raw') -> str:
    """Where the camera publishes: the image topic, or for JPEG the compressed topic the
    node subscribes (image_transport's ``<topic>/compressed``, the node's own rule)."""
    from sam2_ros.ros.node_cli import input_topic

    return input_topic(image_topic(ns), INPUT_TYPE[input_kind])


# ----------------------------------------------------------------------------- node process

# The benchmark's flags that set one node parameter each, as given (unset: the YAML's):
# (flag, parameter, type, what the help adds)
NODE_FLAGS = (
    ('--pipeline', 'pipeline', bool, ''),
    ('--tune-malloc', 'tune_malloc', bool,
     ', also applied to this receiving process (sam2_ros/ros/malloc.py)'),
    ('--receiver-process', 'image_receiver_process', bool,
     ': raw images received by a process of their own per camera'),
    ('--stall-trace-ms', 'stall_trace_ms', float,
     ": 0 is off; a tracking call past this many ms is logged with every thread's stack "
     '(sam2_ros/ros/stall_trace.py)'),
    ('--merge-buckets', 'merge_step_buckets', bool,
     ': objects of different step buckets in one padded replay'),
    ('--gpu-overlay', 'overlay_on_gpu', bool,
     ": the overlay rendered on the tracker's GPU, or on the host"),
    ('--opencv-threads', 'opencv_threads', int, ": 0, OpenCV's pool of a thread per core"),
    ('--publish-without-gil', 'publish_without_gil', bool,
     ': the mask and overlay bytes published through rcl with the GIL released'),
    ('--clock-keeper-us', 'gpu_clock_keeper_us', float,
     ": one GPU thread spinning while active, so the clocks stay up (0: off)"),
    ('--gil-switch-ms', 'gil_switch_interval_ms', float,
     ": Python's GIL switch interval in the node (0: Python's 5 ms)"),
    ('--masks-from-worker', 'masks_from_worker', bool,
     ": the tracking worker publishes each frame's masks itself (pipeline on)"),
    ('--shared-publisher', 'shared_publisher', bool,
     ': with --one-node, one publisher thread for every camera (masks first)'),
    ('--executor', 'executor', str, ": single (rclpy's SingleThreadedExecutor) or events "
     '(rclpy.experimental.EventsExecutor)'),
)


def node_flag_values(args: argparse.Namespace) -> Dict[str, Any]:
    """{parameter: value} of the NODE_FLAGS given on the command line."""
    out = {}
    for flag, param, kind, _ in NODE_FLAGS:
        value = getattr(args, flag[2:].replace('-', '_'), None)
        if value is not None:
            out[param] = kind(value)
    return out


def start_node(args: argparse.Namespace, env: Dict[str, str], workdir: Path, log_path: Path,
               ns: str = '', device: Optional[str] = None,
               cameras: Sequence[str] = ()) -> NodeProcess:
    """The tracker node of one camera: ``--params-file`` with the benchmark's overrides;
    with ``cameras`` (namespaces) the one node of all of them (images on ``/<ns>/image_raw``,
    a frame waits at most one camera period for its partner, stamps paired exactly)."""
    base = yaml.safe_load(Path(args.params_file).read_text()) or {}
    values = dict(next(iter(base.values()), {}).get('ros__parameters', {})) if base else {}
    values.update({
        'model_size': args.model, 'image_size': args.image_size,
        'device': device or args.device,
        'precision': args.precision, 'use_cuda_graphs': bool(args.cuda_graphs),
        'checkpoint': args.checkpoint, 'random_weights': not args.checkpoint,
        'process_every_frame': True, 'publish_overlay': bool(args.overlay),
        'autostart': True, 'image_topic': image_topic(ns),
        'input_type': INPUT_TYPE[getattr(args, 'input', 'raw')],
        # each frame's receipt, decode, engine and publish times (node_latency_frames.py)
        'timing_log': str(workdir / f'node_timing{ns}.jsonl'),
        # the camera's size is known, as on a rig: its I/O graphs are captured at configure
        'io_resolution': [args.width, args.height],
        'max_objects': max(int(values.get('max_objects', 8)), args.objects),
    })
    if cameras:
        values.update({'cameras': list(cameras), 'camera_image': 'image_raw',
                       'camera_period_ms': 1000.0 / args.rate, 'pair_tolerance_ms': 0.0})
    if args.graph_mode:
        values['graph_mode'] = args.graph_mode
    values.update(node_flag_values(args))
    if getattr(args, 'precompile', None):
        values['precompile'] = csv(args.precompile)
    return NodeProcess(values, workdir / f'node_params{ns}.yaml', log_path, env=env, ns=ns,
                       cwd=ROOT)


# ----------------------------------------------------------------------------- ROS client

class CameraLink(NodeLink):
    """One camera's node seen from the client: mask, state (and overlay, as RViz would
    subscribe) in, with receipt times by header stamp (the camera processes publish). Masks
    and overlays are taken serialized and only their header is read (``image_cdr``): a
    consumer's own conversion of each 0.9 MB mask would delay the next camera's mask in this
    one client, which is not the node's latency (rows say ``client_masks: serialized``)."""

    raw_outputs = ('mask', 'overlay')

    def __init__(self, client: NodeClient, prefix: str, image_topic: str) -> None:
        self.mask_t: Dict[int, float] = {}
        self.state_t: Dict[int, float] = {}
        self.states_by_stamp: Dict[int, Any] = {}
        self.overlays_received = 0
        super().__init__(client, prefix, image_topic)

    def on_mask(self, raw: bytes) -> None:
        t = time.monotonic()
        stamp = stamp_ns(image_cdr.image_from_cdr(raw).header.stamp)
        with self.lock:
            self.mask_t.setdefault(stamp, t)

    def on_state(self, msg: Any) -> None:
        t = time.monotonic()
        with self.lock:
            s = stamp_ns(msg.header.stamp)
            self.state_t.setdefault(s, t)
            self.states_by_stamp.setdefault(s, msg)

    def on_overlay(self, raw: bytes) -> None:
        with self.lock:
            self.overlays_received += 1


class Client(NodeClient):
    """One rclpy node in the benchmark process with a :class:`CameraLink` per camera namespace
    (``''`` = the default topics). Subscribers only: the frames and prompts leave from the
    camera processes, so no callback here can delay them."""

    link_class = CameraLink

    def __init__(self, domain_id: int, overlay: bool = False,
                 namespaces: Sequence[str] = ('',),
                 image_topics: Optional[Sequence[str]] = None,
                 prefixes: Optional[Sequence[str]] = None, executor: str = 'events') -> None:
        outputs = ('mask', 'state') + (('overlay',) if overlay else ())
        # No rclpy signal handlers: ours (main) turn SIGINT/SIGTERM into exceptions, so the
        # finally block always stops the node subprocesses. The mask subscription first: when
        # both are ready the executor takes it first.
        super().__init__(f'sam2_node_latency_{os.getpid()}',
                         list(zip(prefixes or [node_prefix(ns) for ns in namespaces],
                                  image_topics or [image_topic(ns) for ns in namespaces])),
                         domain_id=domain_id, signal_handlers=False, publish=(),
                         subscribe=outputs, expect=outputs, depth=100, spin_period=0.02,
                         executor=executor)
