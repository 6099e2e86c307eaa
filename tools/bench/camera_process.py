"""The node latency benchmark's camera: one process per synthetic camera that publishes its
box prompts, correction clicks and frames (rgb8 Images, or JPEG CompressedImages encoded
before the run), and nothing else.

Why a process of its own: a deadline miss is "the mask arrived after the camera's next image
was published", so the next image's publish time is the deadline. When the camera shared the
benchmark's process with the mask/state/overlay subscribers, their callbacks and the GIL
would delay or advance its frames (irregular next-image gaps), and an early frame shortens
the deadline. A real camera keeps its period; here the
camera's only work is drawing and publishing, on a drift-free schedule (frame ``k`` is due at
``start + k * period``: a late frame does not push the later ones), slept to and, for the last
``spin_ms``, busy-waited to (``time.sleep`` alone wakes up late: :func:`spin_until`).

Everything timed is on ``time.monotonic()`` (CLOCK_MONOTONIC, one clock for every process of
the host), so the receiving process compares its receipt times directly with the publish
times this process sends back. Each frame's header stamp is the wall clock at its due time:
the receiver matches masks and states to frames by it. A frame is published as serialized
bytes built before it is due (``publish: serialized``, the default), as a C++ camera driver
hands the middleware one serialized copy; ``message`` publishes an rclpy message instead,
converted and serialized inside ``publish()``, whose copies then count in the rows' DDS in.

The protocol over the :func:`multiprocessing.Pipe` (child -> parent / parent -> child):
``('ready', pid)`` once the node subscribes to the image and prompt topics; ``('start',)``;
during the paced warm-up ``('wait_state', stamp_ns)`` answered by ``('go',)`` once the
receiver has that frame's state (so one-off costs leave no backlog), or by ``('go', t)``: the
frame is due at monotonic time ``t`` (the receiver gives the cameras of one node one ``t``, so
their schedules stay in step after the warm-up); at the end
``('done', result)`` with every frame's stamp and publish time, after which the child keeps
its publishers until ``('stop',)``, which ends it at any point. The child is a spawned
interpreter (never a fork of a process running rclpy) with the parent's environment, so the
same ROS domain, Fast DDS transport variables and profile apply; ``tune_malloc`` is applied
here exactly when the receiving process applies it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Dict, List, Optional

NODE_PREFIX = 'sam2_camera_'


@dataclass
class CameraConfig:
    """What one camera process needs (picklable: it crosses to a spawned interpreter)."""
    index: int
    domain_id: int
    image_topic: str
    prompt_topic: str
    width: int
    height: int
    objects: int
    frames: int            # measured frames; one extra is published after them
    warmup: int
    rate: float
    corrections_every: float = 0.0
    tune_malloc: bool = True
    spin_ms: float = 1.0
    input: str = 'raw'     # 'raw': rgb8 Image; 'jpeg': CompressedImage, encoded before the run
    jpeg_quality: int = 90
    # 0: each frame stamped with the wall clock at publish; else frame i is stamped
    # stamp_base_ns + i * period (prompts at stamp_base_ns): the cameras of one node stamp a
    # frame pair alike, as a hardware-synchronized stereo camera does, so the node pairs them
    stamp_base_ns: int = 0
    # 'serialized': each frame's message serialized before it is due and published as bytes
    # (one copy of the pixels, as a C++ driver's publish); 'message': an rclpy message, which
    # publish() converts and serializes under the GIL in the camera process (copies the pixels
    # twice more), time the rows' DDS in then includes
    publish: str = 'serialized'
    # the next frame is drawn and serialized this long before it is due, in the idle time
    # before it (a real driver's CPU is idle there too); 0: right after the previous frame's
    # publish(), where the work ran beside that frame's delivery to the node and inflated its
    # DDS in (on the CI VM at 10 Hz: node DDS in p50 2.3-2.6 ms against 1.6-1.7 ms, the DDS
    # probe's own 1.5-1.7)
    prepare_ms: float = 3.0


def node_name(pid: int) -> str:
    """The rclpy node name of the camera process ``pid`` (the receiver checks that the image
    topic's only publisher is this node, i.e. that frames come from the other process)."""
    return f'{NODE_PREFIX}{pid}'


def sleep_until(t: float) -> None:
    """Sleep (in slices of at most 50 ms) until monotonic time ``t``."""
    while (left := t - time.monotonic()) > 0:
        time.sleep(min(left, 0.05))


def spin_until(t: float) -> None:
    """Busy-wait until monotonic time ``t``: what ``time.sleep`` cannot do, wake on time. On
    a loaded machine sleep alone wakes up late by a scheduler tick; a short spin after it
    brings publish() close to the due time (the rows' ``camera_late_ms`` records how close).
    Tails left are CPU contention with the node, which no spin removes."""
    while time.monotonic() < t:
        pass


JPEG_FORMAT = 'rgb8; jpeg compressed bgr8'     # image_transport's format for an rgb8 camera


def encode_jpeg(rgb: Any, quality: int) -> Any:
    """[H, W, 3] uint8 RGB -> the JPEG's bytes as the ``array.array('B')`` rclpy keeps as a
    message's data (cv2: libjpeg-turbo, 4:2:0, as camera drivers' compressed transport)."""
    import array

    import cv2
    import numpy as np

    ok, buf = cv2.imencode('.jpg', np.ascontiguousarray(rgb[..., ::-1]),
                           [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise RuntimeError('JPEG encoding failed')
    data = array.array('B')
    data.frombytes(memoryview(buf.reshape(-1)))
    return data


def frame_messages(cfg: CameraConfig, cam: Any, total: int) -> Optional[List[Any]]:
    """--input jpeg: every frame's CompressedImage, encoded now, before the run (so encoding
    never delays a frame); raw: None (each rgb8 frame is drawn just before it is due)."""
    if cfg.input == 'raw':
        return None
    from sensor_msgs.msg import CompressedImage

    from sam2_ros.ros.node_client import header_msg

    msgs = []
    for i in range(total):
        m = CompressedImage(header=header_msg(0), format=JPEG_FORMAT)
        m.data = encode_jpeg(cam.frame(i), cfg.jpeg_quality)
        msgs.append(m)
    return msgs


def object_point(cam: Any, obj: int, i: int) -> tuple:
    """Centre of object ``obj``'s disc on frame ``i`` of a SyntheticCamera: where a click
    lands."""
    x, y = cam.centers(i)[obj - 1]
    return float(x), float(y)


def send_prompts(pub_prompt: Any, cam: Any, objects: int, stamp: int) -> None:
    """Box prompts on objects 1..N, stamped ``stamp``: the node applies them before the first
    frame whose stamp is >= theirs, i.e. frame 0, however the topics interleave."""
    from sam2_ros.ros.node_client import prompt_msg

    for k in range(objects):
        pub_prompt.publish(prompt_msg(k + 1, stamp, box=cam.boxes(0)[k]))


def send_click(pub_prompt: Any, cam: Any, obj: int, i: int) -> None:
    """A correction: one positive point on object ``obj`` where it is on frame ``i``, for the
    next frame (stamp 0), as a click from an operator."""
    from sam2_ros.ros.node_client import prompt_msg

    pub_prompt.publish(prompt_msg(obj, 0, points=[object_point(cam, obj, i)], labels=[1]))


class _Stopped(Exception):
    """The parent sent ('stop',) or went away."""


def _recv(conn: Connection) -> tuple:
    try:
        msg = conn.recv()
    except EOFError:
        raise _Stopped from None
    if msg[0] == 'stop':
        raise _Stopped
    return msg


def _check_stop(conn: Connection) -> None:
    if conn.poll():
        _recv(conn)


def camera_main(conn: Connection, cfg: CameraConfig) -> None:
    """The child's body (a :mod:`multiprocessing` target: module level, picklable)."""
    # Ctrl-C reaches the whole process group: the parent decides when the camera stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if cfg.tune_malloc:
        from sam2_ros.ros.malloc import keep_large_buffers

        keep_large_buffers()
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rclpy.signals import SignalHandlerOptions
    from sensor_msgs.msg import CompressedImage, Image

    from sam2_ros.ros.messages import interfaces
    from sam2_ros.synthetic import SyntheticCamera

    m = interfaces()
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=cfg.domain_id,
               signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node(node_name(os.getpid()), context=ctx)
    try:
        # the QoS the benchmark's image and prompt publishers always had
        pub_image = node.create_publisher(
            Image if cfg.input == 'raw' else CompressedImage, cfg.image_topic,
            QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
        pub_prompt = node.create_publisher(
            m.Prompt, cfg.prompt_topic,
            QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
        cam = SyntheticCamera(cfg.width, cfg.height, objects=max(2, cfg.objects),
                              seed=cfg.index)
        encoded = frame_messages(cfg, cam, cfg.frames + 1)   # before 'ready': not timed
        # publishers need no executor; discovery runs on the middleware's threads
        while pub_image.get_subscription_count() == 0 or \
                pub_prompt.get_subscription_count() == 0:
            _check_stop(conn)
            time.sleep(0.05)
        conn.send(('ready', os.getpid()))
        _recv(conn)   # ('start',)
        conn.send(('done', _publish(conn, cfg, cam, encoded, pub_image, pub_prompt)))
        # Keep the publishers until told to stop: a RELIABLE writer destroyed right after its
        # last publish() can take unacknowledged samples with it (the last frame got lost).
        while True:
            _recv(conn)
    except _Stopped:
        pass
    finally:
        node.destroy_node()
        ctx.try_shutdown()


def _publish(conn: Connection, cfg: CameraConfig, cam: Any, encoded: Optional[List[Any]],
             pub_image: Any, pub_prompt: Any) -> Dict[str, Any]:
    """Prompts, then the frames at ``cfg.rate`` with clicks: the order and timing of the
    single-process benchmark (prompts 0.3 s before frame 0, a click right before the frame it
    precedes), now without subscribers sharing the process. ``encoded``: the JPEG messages
    (None: rgb8 frames drawn as they come)."""
    prompt_ns = cfg.stamp_base_ns or time.time_ns()
    send_prompts(pub_prompt, cam, cfg.objects, prompt_ns)
    time.sleep(0.3)

    total = cfg.frames + 1  # the extra last frame only carries publish_ms of the one before
    period, spin_s = 1.0 / cfg.rate, max(0.0, cfg.spin_ms) * 1e-3
    sent: List[Dict[str, Any]] = []
    t_start, last_click, n_clicks = time.monotonic(), None, 0
    for i in range(total):
        _check_stop(conn)
        if i <= cfg.warmup and sent:
            # Warm-up is paced: each frame waits for the previous one's state, so one-off
            # costs (I/O graphs for a new resolution, the first prompt) leave no backlog.
            conn.send(('wait_state', sent[-1]['stamp_ns']))
            go = _recv(conn)   # ('go',) or ('go', t)
            t_start = (go[1] if len(go) > 1 else time.monotonic()) - i * period
        due = t_start + i * period
        # stamped with the wall clock's time at the due time (or the pair's common stamp), and
        # drawn and serialized prepare_ms before it is due, so the work never delays the frame
        # nor runs beside the previous frame's delivery
        if cfg.prepare_ms > 0:
            sleep_until(due - max(cfg.prepare_ms * 1e-3, spin_s))
        ns = (cfg.stamp_base_ns + round(i * period * 1e9) if cfg.stamp_base_ns else
              max(time.time_ns() + round((due - time.monotonic()) * 1e9), prompt_ns))
        msg = frame_payload(cfg, cam, encoded, i, ns)
        sleep_until(due - spin_s)
        # A click goes out when the camera wakes for the frame it precedes, before the spin,
        # so sending it does not delay the frame (with --camera-spin-ms 0: right before it).
        click = None
        if cfg.corrections_every and cfg.warmup < i < cfg.frames and (
                last_click is None or time.monotonic() - last_click >= cfg.corrections_every):
            click = n_clicks % cfg.objects + 1
            n_clicks, last_click = n_clicks + 1, time.monotonic()
            send_click(pub_prompt, cam, click, i)
        spin_until(due)
        t_pub = time.monotonic()
        pub_image.publish(msg)
        t_ret = time.monotonic()
        sent.append({'index': i, 'stamp_ns': ns, 't_pub': t_pub, 't_ret': t_ret,
                     'late_ms': (t_pub - due) * 1e3, 'correction': click,
                     'publish_call_ms': (t_ret - t_pub) * 1e3, 'bytes': len(msg)
                     if isinstance(msg, bytes) else len(msg.data)})
    return {'pid': os.getpid(), 'node': node_name(os.getpid()), 'sent': sent,
            't_start': t_start, 'clicks': n_clicks, 'spin_ms': cfg.spin_ms}


def frame_payload(cfg: CameraConfig, cam: Any, encoded: Optional[List[Any]], i: int,
                  ns: int) -> Any:
    """Frame ``i`` stamped ``ns`` as ``publish()`` takes it: the message (``cfg.publish``
    'message'), or its serialized bytes ('serialized'; rgb8 written by ``image_to_cdr``)."""
    from rclpy.serialization import serialize_message

    from sam2_ros.ros.image_cdr import image_to_cdr
    from sam2_ros.ros.images import image_msg
    from sam2_ros.ros.node_client import header_msg, set_stamp

    if encoded is None:
        if cfg.publish == 'serialized':
            return image_to_cdr(cam.frame(i), 'rgb8', header_msg(ns))
        return image_msg(cam.frame(i), 'rgb8', header_msg(ns))
    msg = encoded[i]
    set_stamp(msg.header, ns)
    return serialize_message(msg) if cfg.publish == 'serialized' else msg


class CameraProcess:
    """The parent's handle on one camera process; :meth:`stop` is idempotent."""

    def __init__(self, cfg: CameraConfig) -> None:
        ctx = mp.get_context('spawn')
        self.cfg = cfg
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=camera_main, args=(child, cfg), daemon=True,
                                name=f'sam2_camera{cfg.index}')
        self.proc.start()
        child.close()
        self.pid: Optional[int] = None       # the child's, from its 'ready'
        self.result: Optional[Dict[str, Any]] = None

    def send(self, *msg: Any) -> None:
        self.conn.send(tuple(msg))

    def alive(self) -> bool:
        return self.proc.is_alive()

    def stop(self, timeout: float = 10.0) -> Optional[int]:
        if self.proc.is_alive():
            try:
                self.conn.send(('stop',))
            except (BrokenPipeError, OSError):
                pass
            self.proc.join(timeout)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
        self.conn.close()
        return self.proc.exitcode

