"""The node's handle of a receiving process (node parameter ``image_receiver_process``).

An :class:`ImageReceiver` starts :mod:`~sam2_ros.ros.receiver_process` for one raw image topic
and a thread that turns its frame ring's records (:mod:`~sam2_ros.ros.frame_ring`) into the
same :class:`~sam2_ros.ros.image_cdr.CdrImage` a serialized subscription gives (the pixels a
view of shared memory), with the receiving process's receipt time. If the process exits while
the node runs (it crashed, or was killed) it is restarted, at most once a second, and the
error logged; if it does not become ready at start, ``start`` raises and the caller falls back
to a subscription in the node's process. What it counts (frames, refused messages, restarts,
the reading thread's failures, slots held, the receiving process's waits for a slot, the ring's
size) is in the node's diagnostics (:meth:`ImageReceiver.stats`, ``diagnostics.receiver_*``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple

import numpy as np

from sam2_ros.engine.frame_in import MAX_SIDE
from sam2_ros.ros import frame_ring
from sam2_ros.ros.cv_bridge_compat import ENCODING_CHANNELS
from sam2_ros.ros.image_cdr import header_stamp, image_from_cdr, refused_image, subscribe_images

OnImage = Callable[[Any, float], None]      # (CdrImage, receipt time.monotonic())
Log = Callable[[str, str], None]            # (level, text)
READY_TIMEOUT_S = 30.0                      # a cold interpreter importing rclpy: seconds
# slots beyond the FIFO: the frame being tracked, the last one (re-published on a correction),
# those the mask and overlay publishers hold, one being written
SPARE_SLOTS = 8
# The largest message the receiving process hands over: twice the largest raw frame the tracker
# takes (MAX_SIDE pixels a side, 4 channels), room for row padding and the header. Not
# max_image_pixels, which bounds compressed input only (a raw frame's bytes are already
# received): the receiving process is a transport and takes the frames a subscription in the
# node's process takes. It bounds the ring's slots; a larger message is refused, reported
# like any bad frame.
MAX_MESSAGE_BYTES = 2 * MAX_SIDE * MAX_SIDE * max(ENCODING_CHANNELS.values())


@dataclass
class ReceiverStats:
    """An :class:`ImageReceiver`'s counts since it started (the node's activation)."""

    pid: Optional[int]              # the receiving process, None: not running
    ready: bool                     # subscribed (False while it restarts)
    frames: int                     # handed to the node
    refused: int                    # messages not handed over (too large, unreadable)
    restarts: int                   # the receiving process restarted (exited or killed)
    read_failures: int              # reading its frames failed (a lost ring, a callback's
                                    # bug): each one also a restart
    new_restarts: int               # restarts since the previous stats(take=True)
    last_restart_t: Optional[float]     # time.monotonic() of the last restart
    last_restart: str               # why: 'exited with code -9', 'reading failed: ...'
    slots_held: int                 # slots the node holds (frames queued, tracked, published)
    slot_waits: int                 # the receiving process waited for a free slot
    ring_bytes: int                 # the current ring's shared memory


class ImageReceiver:
    """Raw images of ``topic`` (absolute) received in a process of their own; ``on_image`` is
    called in this handle's thread, in arrival order. ``slots`` bounds the frames the node can
    hold at once (FIFO, worker, overlay); ``max_bytes`` the largest message handed over. A
    message not handed over (larger, or unreadable) is logged and, where its stamp is known,
    handed to ``on_image`` as an ``image_cdr.refused_image``: its decode fails with the reason,
    so the node reports the frame like any bad frame."""

    def __init__(self, topic: str, on_image: OnImage, log: Log, *, name: str, slots: int,
                 max_bytes: int, reliability: str, depth: int, tune_malloc: bool,
                 env: Optional[Dict[str, str]] = None, camera: int = 0) -> None:
        self.topic, self.on_image, self.log, self.name = topic, on_image, log, name
        self.camera = int(camera)       # the node's camera index (its diagnostics status)
        self.max_bytes = int(max_bytes)
        self.env = child_env(os.environ if env is None else env)
        self.argv = ['--topic', topic, '--name', name, '--slots', str(int(slots)),
                     '--max-bytes', str(int(max_bytes)), '--reliability', reliability,
                     '--depth', str(int(depth))] + (['--tune-malloc'] if tune_malloc else [])
        self.proc: Optional[subprocess.Popen] = None
        self.reader: Optional[frame_ring.RingReader] = None
        self.thread: Optional[threading.Thread] = None
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.frames = 0                 # handed to on_image
        self.restarts = 0
        self.read_failures = 0          # the reading thread failed (then a restart)
        self.last_restart_t: Optional[float] = None
        self.last_restart = ''
        self.restarts_taken = 0         # restarts already reported (stats(take=True))
        self.waits_before = 0           # slot waits of the processes before this one
        self.rejected = 0               # too large or unreadable

    @property
    def held(self) -> int:
        """Slots the node holds (frames queued, tracked or being published)."""
        return self.reader.held if self.reader is not None else 0

    def stats(self, take: bool = False) -> ReceiverStats:
        """The counts now; ``take``: the restarts counted in ``new_restarts`` are not counted
        there again (diagnostics warn of each restart at least once, whatever its period)."""
        restarts, reader, proc = self.restarts, self.reader, self.proc
        new = restarts - self.restarts_taken
        if take:
            self.restarts_taken = restarts
        running = proc is not None and proc.poll() is None
        return ReceiverStats(
            pid=proc.pid if running else None, ready=self.ready.is_set(), frames=self.frames,
            refused=self.rejected, restarts=restarts, read_failures=self.read_failures,
            new_restarts=new, last_restart_t=self.last_restart_t,
            last_restart=self.last_restart, slots_held=self.held,
            slot_waits=self.waits_before + (reader.writer_waits if reader is not None else 0),
            ring_bytes=reader.ring_bytes if reader is not None else 0)

    def start(self) -> None:
        """The process and the reading thread; RuntimeError if the process is not subscribed
        within READY_TIMEOUT_S."""
        self.stopping.clear()
        self._spawn()
        self.thread = threading.Thread(target=self.read_frames, name=f'{self.name}_ring',
                                       daemon=True)
        self.thread.start()
        if not self.ready.wait(READY_TIMEOUT_S):
            self.stop()
            raise RuntimeError(f'the receiving process for {self.topic} did not start within '
                               f'{READY_TIMEOUT_S:.0f} s')

    def _spawn(self) -> None:
        mine, theirs = frame_ring.socket_pair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, '-m', 'sam2_ros.ros.receiver_process',
                 '--fd', str(theirs.fileno())] + self.argv,
                pass_fds=(theirs.fileno(),), env=self.env)
        finally:
            theirs.close()
        self.attach_reader(mine)

    def attach_reader(self, sock: Any) -> None:
        """Read the frames of a new receiving process (at the end of ``sock``)."""
        if self.reader is not None:      # the new process counts its waits from 0
            self.waits_before += self.reader.writer_waits
        self.reader = frame_ring.RingReader(sock)

    def read_frames(self) -> None:
        """The reading thread: frames handed to ``on_image`` until ``stop``; a process that
        exits or a read that fails is counted and the process started again."""
        while not self.stopping.is_set():
            failure = ''
            try:
                frame_ring.serve(self.reader, self._frame, self._record)
            except Exception as exc:  # noqa: BLE001 - a lost ring, a callback's bug: the input
                if self.stopping.is_set():        # must not end silently with this thread
                    break
                self.log('error', f'reading the frames of {self.topic} failed: {exc!r}; '
                                  f'restarting its receiving process')
                self.read_failures += 1
                failure = f'reading failed: {exc!r}'[:200]
                frame_ring.close(self.reader.sock)
                if self.proc is not None:
                    self.proc.kill()
            if self.stopping.is_set():
                break
            code = self.proc.wait() if self.proc is not None else None
            self.log('error', f'the receiving process of {self.topic} exited (code {code}); '
                              'restarting it')
            self.last_restart = failure or f'exited with code {code}'
            self.last_restart_t = time.monotonic()
            self.restarts += 1
            time.sleep(1.0)          # a process failing at once is not restarted in a loop
            if not self.stopping.is_set():
                self.ready.clear()
                self._spawn()

    def _frame(self, rec: frame_ring.Record, view: np.ndarray) -> None:
        try:
            msg = image_from_cdr(memoryview(view))
        except ValueError as exc:
            self._refuse(header_stamp(view), f'unreadable image message: {exc}', rec.t)
            return
        self.frames += 1
        self.on_image(msg, rec.t)

    def _record(self, rec: frame_ring.Record) -> None:
        if rec.kind == frame_ring.READY:
            self.ready.set()
        elif rec.kind == frame_ring.TOO_LARGE:
            self._refuse((rec.sec, rec.nanosec),
                         f'image message of {rec.nbytes} bytes dropped: more than the '
                         f'{self.max_bytes} bytes the receiving process hands over '
                         f'(image_receiver_process; the tracker takes frames of at most '
                         f'{MAX_SIDE}x{MAX_SIDE} pixels)', rec.t)

    def _refuse(self, stamp: Optional[Tuple[int, int]], reason: str, t: float) -> None:
        """A message not handed over: counted and logged; with its stamp, handed on as a
        refused image (the worker reports it in the next TrackingState's errors and counts
        it as a frame error, as a bad frame of a subscription in the node's process)."""
        self.rejected += 1
        self.log('error', f'{self.topic}: {reason}')
        if stamp is not None:
            self.on_image(refused_image(*stamp, reason), t)

    def stop(self, timeout: float = 5.0) -> None:
        """The process terminated (the socket closed first, so a receiver waiting for a slot
        returns), the thread joined."""
        self.stopping.set()
        if self.reader is not None:
            frame_ring.close(self.reader.sock)
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)
        self.thread = None


def child_env(base: Mapping[str, str]) -> Dict[str, str]:
    """``base`` (the node's environment: ROS domain, RMW, Fast DDS profile) with this
    package's root on PYTHONPATH, so ``-m sam2_ros.ros.receiver_process`` imports what the
    node runs."""
    env = dict(base)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env['PYTHONPATH'] = os.pathsep.join([root] + [p for p in env.get('PYTHONPATH', '').split(
        os.pathsep) if p])
    return env


def image_qos(o: Any) -> Any:
    """The image subscription's QoS for the node's options ``o`` (reliability, and with
    ``process_every_frame`` a history that keeps every frame: the FIFO blocks, so DDS must keep
    the backlog, not overwrite it)."""
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    rel = (ReliabilityPolicy.RELIABLE if o.qos_reliability == 'reliable'
           else ReliabilityPolicy.BEST_EFFORT)
    if o.process_every_frame:
        return QoSProfile(history=HistoryPolicy.KEEP_ALL, reliability=rel)
    return QoSProfile(depth=o.qos_depth, reliability=rel)


def image_input(node: Any, topic: str, on_image: OnImage, qos: Any, opts: Any,
                index: int = 0) -> Any:
    """The node's input of raw images on ``topic``: an :class:`ImageReceiver` with
    ``opts.image_receiver_process`` (a subscription in the node's process if it cannot start,
    the reason logged), else a subscription (serialized or converted, as
    ``opts.take_serialized_images`` says). Either calls ``on_image(msg, receipt time)``."""
    if opts.image_receiver_process:
        logger = node.get_logger()
        receiver = ImageReceiver(
            node.resolve_topic_name(topic), on_image,
            lambda level, text: getattr(logger, level)(text, throttle_duration_sec=2.0),
            name=f'{node.get_name()}_receiver{index}', slots=int(opts.fifo_size) + SPARE_SLOTS,
            max_bytes=MAX_MESSAGE_BYTES,
            reliability=opts.qos_reliability,
            depth=0 if opts.process_every_frame else int(opts.qos_depth),
            tune_malloc=bool(opts.tune_malloc), camera=index)
        try:
            receiver.start()
            logger.info(f'{receiver.topic}: received by a process of its own (pid '
                        f'{receiver.proc.pid}), frames read from shared memory')
            return receiver
        except (RuntimeError, OSError) as exc:
            logger.error(f'image_receiver_process: {exc}; receiving {topic} in the node\'s '
                         'process instead')
    return subscribe_images(node, topic, lambda m: on_image(m, time.monotonic()), qos,
                            opts.take_serialized_images)


def find_receiver(inputs: Iterable[Any], camera: int = 0) -> Optional[ImageReceiver]:
    """Camera ``camera``'s receiving process among a node's inputs (``image_input``'s and the
    other subscriptions); None if its images are received in the node's process."""
    for sub in inputs:
        if isinstance(sub, ImageReceiver) and sub.camera == camera:
            return sub
    return None


def close_input(node: Any, sub: Any) -> None:
    """Undo what ``image_input`` or ``create_subscription`` made."""
    if isinstance(sub, ImageReceiver):
        sub.stop()
    else:
        node.destroy_subscription(sub)
