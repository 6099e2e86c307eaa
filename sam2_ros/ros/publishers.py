"""The node's result publishers: created at configure, deactivated with the node, flushed and
destroyed at cleanup / shutdown; what a frame sends, and the overlay.

Mask, state (and objects) first, each built with one copy of the image data
(:func:`sam2_ros.ros.images.image_msg`); the masks (``~/mask`` raw, ``~/mask/compressed`` PNG,
both from one label mask) and the overlay only while someone subscribes to them (RViz, a
recorder: a reliable writer delivers only to matched readers anyway). For a compressed input
the overlay goes out as a JPEG too (``~/overlay/compressed``); a frame decoded on the GPU is
copied to the host for it only then. With ``timing_log`` set, each frame's timestamps are
appended there (:mod:`sam2_ros.ros.timing_log`). Whether these run in the worker thread or
on their own threads is the output stage's business (:mod:`sam2_ros.ros.pipeline`, parameter
``pipeline``); this object is its :class:`~sam2_ros.ros.pipeline.Outputs`. Publishers live
from configure to cleanup: a reliable writer destroyed at deactivate would need to wait for
acknowledgements, which for small messages come with Fast DDS's periodic heartbeat (up to
3 s).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
from rclpy.duration import Duration
from rclpy.qos import QoSProfile, ReliabilityPolicy

from sam2_ros.engine.decode import to_host
from sam2_ros.overlay import render_overlay
from sam2_ros.overlay_device import DeviceOverlay
from sam2_ros.ros import image_cdr, images, inputs, mask_compressed, messages, rcl_publish
from sam2_ros.ros.mailbox import FrameTimes, Published
from sam2_ros.ros.timing_log import TimingLog
from sam2_ros.ros.totals import Totals

OUTPUT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
# On cleanup / shutdown, wait up to this long in all for subscribers to acknowledge what was
# already published (the last frame's mask and state), then destroy the publishers.
FLUSH_TIMEOUT_S = 1.0
# The publishers whose messages a subscriber must not lose when the node lets them go.
RESULT_TOPICS = ('mask', 'mask_compressed', 'state', 'objects')
MASK_TOPICS = ('mask', 'mask_compressed')
OVERLAY_TOPICS = ('overlay', 'overlay_compressed')   # for eyes only: never waited for
# A reader acknowledges when a writer's heartbeat asks (Fast DDS: every 3 s by default, 0.1 s
# with config/fastdds_large_frames.xml); a sample published longer ago than this has been
# acknowledged (or re-sent and then acknowledged) by every reader still alive.
ACKED_AFTER_S = 3.5


def overlay_device_of(opts: Any, device: Any) -> Optional[str]:
    """Where the node renders its overlay: the tracker's CUDA device with ``overlay_on_gpu``,
    else None (the host)."""
    dev = str(device)
    return dev if opts.overlay_on_gpu and dev.startswith('cuda') else None


class Publishers:
    """mask (raw and PNG), state, overlay (optional; raw, and JPEG for a compressed input) and
    objects (optional) of one configured node.

    ``node`` is the lifecycle node (its publishers, context and logger); ``pubs`` maps the
    names above to publishers (None: off); ``totals`` gives the counts of earlier activations
    (TrackingState counts since start); ``class_of(obj_id)`` the class an object was prompted
    with (``~/objects``); ``serial``: the overlay delays the next frame (``pipeline: false``);
    ``timing_log``: where each frame's times go (None: nowhere), closed at release.
    """

    def __init__(self, node: Any, pubs: Dict[str, Any], totals: Totals,
                 class_of: Callable[[int], str], serial: bool,
                 timing_log: Optional[TimingLog] = None, serialized: bool = False,
                 overlay_device: Optional[str] = None,
                 on_frame_out: Optional[Callable[[float], None]] = None,
                 without_gil: bool = False) -> None:
        self.node, self.pubs, self.totals = node, pubs, totals
        # told time.monotonic() after each frame's state (the diagnostics' quiet_tick.py)
        self.on_frame_out = on_frame_out
        self.class_of, self.serial = class_of, serial
        # the overlay rendered on this device (overlay_on_gpu), None: on the host
        self.device_overlay = DeviceOverlay(overlay_device) if overlay_device else None
        # copies GPU-decoded frames to the host for a host-rendered overlay (made on first use)
        self.host_copier: Optional[DeviceOverlay] = None
        # raw images as serialized bytes (one copy) or as rclpy messages
        self.image = image_cdr.image_to_cdr if serialized else images.image_msg
        # how those bytes are published: rclpy's publish, or rcl's with the GIL released
        self.send = rcl_publish.sender(serialized and without_gil)
        self.timing_log = timing_log
        self.has_overlay = any(pubs.get(name) is not None for name in OVERLAY_TOPICS)
        self.last_publish_ms = 0.0
        self.last_overlay_ms = 0.0
        # result publisher -> time.monotonic() of its last message since the last ack wait
        self.unacked: Dict[str, float] = {}

    @classmethod
    def create(cls, node: Any, state_type: Any, objects_type: Optional[Any], overlay: bool,
               totals: Totals, class_of: Callable[[int], str], serial: bool,
               timing_log: str = '', compressed_overlay: bool = False,
               prefix: str = '~', serialized: bool = False,
               overlay_device: Optional[str] = None,
               on_frame_out: Optional[Callable[[float], None]] = None,
               without_gil: bool = False) -> 'Publishers':
        """The lifecycle publishers of ``node``; ``objects_type`` None: no ``~/objects``;
        ``timing_log``: a file for the frames' times ('' = off); ``compressed_overlay``: the
        overlay as a JPEG too (the input is compressed); ``prefix``: the topics' namespace
        ('~/left' for camera left of a multi-camera node); ``serialized``: the raw images
        (mask, overlay) are published as serialized bytes (``image_cdr.image_to_cdr``), with
        ``without_gil`` through rcl with the GIL released (``rcl_publish``);
        ``overlay_device``: where the overlay is rendered (:func:`overlay_device_of`);
        ``on_frame_out``: called with time.monotonic() after each frame's state went out."""
        # the log first, and what was made destroyed on a failure: a configure that fails
        # (an unwritable log) must not leave publishers behind, one more set per retry
        log = TimingLog(timing_log) if timing_log else None
        made: List[Any] = []

        def make(*args: Any) -> Any:
            made.append(node.create_lifecycle_publisher(*args))
            return made[-1]
        try:
            pubs = _publishers(make, prefix, overlay, compressed_overlay, state_type,
                               objects_type)
        except BaseException:
            for pub in made:
                node.destroy_lifecycle_publisher(pub)
            if log is not None:
                log.close()
            raise
        return cls(node, pubs, totals, class_of, serial, log, serialized, overlay_device,
                   on_frame_out, without_gil)

    # ------------------------------------------------------------------ Outputs
    def alive(self) -> bool:
        return self.node.context.ok()

    def publish(self, p: Published) -> None:
        """Mask, state, objects. The state follows its mask (a state means its mask was
        already sent). Counters are the ones the worker saw when it handed the frame over."""
        self.publish_masks(p)
        self.publish_state(p)

    def publish_masks(self, p: Published) -> None:
        """The frame's masks (first half of ``publish``; a shared publisher sends every
        camera's masks before their states)."""
        if not self.alive():    # Ctrl-C shut the context down: nothing can go out
            return
        t0 = time.perf_counter()
        times = p.times or FrameTimes()      # a re-published frame's are not logged
        times.out0 = time.monotonic()
        masks = self.mask_messages(p)
        if masks:
            times.mask0 = time.monotonic()
            for pub, msg in masks:
                self.send(pub, msg)
            times.mask1 = time.monotonic()
        p.publish_s += time.perf_counter() - t0

    def publish_state(self, p: Published) -> None:
        """State and objects after the frame's masks (second half of ``publish``)."""
        if not self.alive():
            return
        t0 = time.perf_counter()
        times = p.times or FrameTimes()
        pubs, done = self.pubs, self.totals.done
        pubs['state'].publish(messages.tracking_state_msg(
            p.result, p.header, decode_ms=p.decode_ms, publish_ms=self.publish_ms(),
            dropped=done['dropped'] + p.dropped, processed=done['processed'] + p.processed,
            errors=messages.errors_text(p.errors)))
        times.state1 = time.monotonic()
        if pubs.get('objects') is not None:
            pubs['objects'].publish(messages.objects_msg(p.result, p.header, self.class_of))
        now = time.monotonic()
        self.unacked.update({name: now for name in RESULT_TOPICS})
        if self.timing_log is not None and p.times is not None:
            self.timing_log.write(inputs.stamp_ns(p.header.stamp), p.times)
        p.publish_s += time.perf_counter() - t0
        self.last_publish_ms = p.publish_s * 1e3
        if self.on_frame_out is not None:
            self.on_frame_out(now)

    def subscribed(self, name: str) -> bool:
        pub = self.pubs.get(name)
        return pub is not None and pub.get_subscription_count() > 0

    def mask_messages(self, p: Published) -> List[Tuple[Any, Any]]:
        """(publisher, message) for each mask topic with a reader, from one label mask; none
        built without a reader (the raw one is 0.9 MB at 720p)."""
        names = [name for name in MASK_TOPICS if self.subscribed(name)]
        if not names:
            return []
        label = p.result.label_mask()                              # [H, W] uint8
        build = {'mask': lambda: self.image(label, 'mono8', p.header),
                 'mask_compressed': lambda: mask_compressed.mask_msg(label, p.header)}
        return [(self.pubs[name], build[name]()) for name in names]

    def publish_ms(self) -> float:
        """TrackingState.publish_ms: the previous frame's publishing time. Serial, the overlay
        delays the next frame and is counted; pipelined, it runs beside the next frame."""
        if self.serial:
            return self.last_publish_ms + self.last_overlay_ms
        return self.last_publish_ms

    def wants_overlay(self) -> bool:
        return self.alive() and any(self.subscribed(name) for name in OVERLAY_TOPICS)

    def publish_overlay(self, p: Published) -> None:
        """The overlay: for eyes only and the costliest output (render + 2.7 MB at 720p), to
        the overlay topics with readers. A frame decoded on the GPU is copied to the host
        here, the only place that needs its pixels there."""
        if not self.alive():
            return
        t0 = time.perf_counter()
        img = self.render_overlay(p)                               # [H, W, 3] uint8 RGB
        if self.subscribed('overlay'):
            self.send(self.pubs['overlay'], self.image(img, 'rgb8', p.header))
        if self.subscribed('overlay_compressed'):
            self.pubs['overlay_compressed'].publish(images.jpeg_msg(img, p.header))
        self.last_overlay_ms = (time.perf_counter() - t0) * 1e3

    def render_overlay(self, p: Published) -> np.ndarray:
        """The frame's overlay on the host: rendered on the GPU (the same pixels) where
        ``overlay_on_gpu``; on the host from then on if that ever fails (logged once)."""
        if self.device_overlay is not None:
            try:
                return self.device_overlay.render(p.rgb, p.result)
            except Exception as exc:  # noqa: BLE001 - the host renders it instead
                self.device_overlay = None
                self.node.get_logger().warning(
                    f'overlay on the GPU failed ({exc!r}); rendering it on the host from now on')
        return render_overlay(self.host_frame(p.rgb), p.result)

    def host_frame(self, rgb: Any) -> np.ndarray:
        """The frame's pixels on the host. A frame decoded on the GPU is copied on a stream of
        its own through a pinned buffer (``DeviceOverlay.to_host``): on the default stream the
        copy would wait for the worker's frame in flight; ``to_host`` if that fails."""
        if getattr(rgb, 'is_cuda', False):
            try:
                if self.host_copier is None:
                    self.host_copier = DeviceOverlay(str(rgb.device))
                return self.host_copier.to_host(rgb)
            except Exception as exc:  # noqa: BLE001 - the plain copy still works
                self.node.get_logger().warning(f'copying the frame on a stream of its own '
                                               f'failed ({exc!r}); copying it plainly')
        return to_host(rgb)

    # ------------------------------------------------------------------ release
    def release(self) -> None:
        """Flush, then destroy every publisher; close the timing log."""
        self.flush()
        for pub in self.pubs.values():
            if pub is not None:
                self.node.destroy_lifecycle_publisher(pub)
        self.pubs = {}
        if self.timing_log is not None:
            self.timing_log.close()
            self.timing_log = None

    def flush(self) -> None:
        """Destroying a reliable writer discards samples its readers have not acknowledged yet:
        the frame in progress at deactivate was tracked (its frame index used) but its state
        could be lost. Wait (bounded) for the acknowledgements first, and only where it is
        needed: deactivate keeps the publishers (no wait at all), and at cleanup / shutdown
        only the publishers whose messages carry results (mask, state, objects; not the
        overlay, which is for eyes only and the largest) and that sent something within the
        last ACKED_AFTER_S (a writer's heartbeat period: older samples are acknowledged) are
        waited for; one with no subscriber returns at once. A small message is acknowledged
        at the writer's next heartbeat: the shipped Fast DDS profile sets it to 0.1 s (3 s by
        default, hence the bound). After Ctrl-C the context is already shut down: nothing can
        be delivered any more and the handles refuse use."""
        unacked, self.unacked = dict(self.unacked), {}
        if not self.alive():
            return
        now = time.monotonic()
        deadline = now + FLUSH_TIMEOUT_S
        logger = self.node.get_logger()
        for name, pub in self.pubs.items():
            if pub is None or name in OVERLAY_TOPICS or \
                    now - unacked.get(name, -1e9) > ACKED_AFTER_S:
                continue
            left = max(0.0, deadline - time.monotonic())
            try:
                acked = pub.wait_for_all_acked(Duration(nanoseconds=int(left * 1e9)))
            except Exception as exc:  # e.g. the context shut down meanwhile: destroy anyway
                logger.warning(f'{name}: cannot wait for acknowledgements: {exc!r}')
                continue
            if not acked:
                logger.warning(f'{name}: subscribers did not acknowledge the last messages '
                               f'within {FLUSH_TIMEOUT_S} s; they may miss them')


def _publishers(make: Callable[..., Any], p: str, overlay: bool, compressed_overlay: bool,
                state_type: Any, objects_type: Optional[Any]) -> Dict[str, Any]:
    """The topics of one camera's results under prefix ``p`` (None: not published)."""
    from sensor_msgs.msg import CompressedImage, Image

    return {'mask': make(Image, f'{p}/mask', OUTPUT_QOS),
            'mask_compressed': make(CompressedImage, f'{p}/mask/compressed', OUTPUT_QOS),
            'overlay': make(Image, f'{p}/overlay', OUTPUT_QOS) if overlay else None,
            'overlay_compressed': (make(CompressedImage, f'{p}/overlay/compressed', OUTPUT_QOS)
                                   if overlay and compressed_overlay else None),
            'state': make(state_type, f'{p}/state', OUTPUT_QOS),
            'objects': (make(objects_type, f'{p}/objects', OUTPUT_QOS)
                        if objects_type is not None else None)}
