"""The multi-camera side of the tracker node (parameter ``cameras``: a stereo rig's
``['left', 'right']``): one :class:`~sam2_ros.engine.multistream.MultiStreamTracker`, and per
camera namespace ``<ns>`` what a one-camera node has once:

* in: images on ``<ns>/<camera_image>`` (``.../compressed`` for compressed input), clicks
  (``PointStamped``) on ``~/<ns>/click`` and rqt_image_view's ``Point`` on the camera image's,
  our mask's and overlay's ``_mouse_left``, ``Prompt`` on ``~/<ns>/prompt``, detections on
  ``~/<ns>/detections``; ``<ns>/camera_info`` (or its entry of ``camera_info_topics``) for the
  3D positions (:mod:`~sam2_ros.ros.positions`; best effort, so a driver's sensor-data QoS
  connects);
* out: ``~/<ns>/mask``, ``~/<ns>/mask/compressed``, ``~/<ns>/overlay``, ``~/<ns>/state``,
  ``~/<ns>/objects``, and one /diagnostics status per camera (``<node>/<ns>: tracker``).

Camera namespaces are relative, so a node started in the rig's namespace (``stereo``) reads
``/stereo/left/image_raw`` as a stereo camera driver publishes it. Frames are paired by
:mod:`~sam2_ros.ros.paired_mailbox`; the worker is :mod:`~sam2_ros.ros.multi_worker`.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

from sam2_ros.ros import detections as det
from sam2_ros.ros import diagnostics, inputs, messages, time_jump
from sam2_ros.ros.receiver import image_input
from sam2_ros.ros.mailbox import FrameItem, PromptItem, describe
from sam2_ros.ros.multi_worker import MultiCameraWorker
from sam2_ros.ros.node_cli import input_topic
from sam2_ros.ros.node_host import NodeHost
from sam2_ros.ros.paired_mailbox import PairedMailbox
from sam2_ros.ros.positions import Positions, camera_info_qos
from sam2_ros.ros.publishers import Publishers, overlay_device_of
from sam2_ros.ros.time_line import TimeLine
from sam2_ros.ros.totals import Totals


class Rig:
    """The cameras of one node: built at configure (``create_outputs``), wired at activate
    (``activate``, ``subscribe``), read by diagnostics, released at deactivate / cleanup.
    ``reset_after_s``: time_jump_reset_s of the cameras' time lines (kept over activations)."""

    def __init__(self, names: List[str], reset_after_s: float = time_jump.RESET_AFTER_S) -> None:
        self.names = list(names)
        self.totals = [Totals() for _ in names]
        self.associations = [det.Association() for _ in names]
        self.time_lines = [TimeLine(reset_after_s) for _ in names]
        self.outputs: List[Publishers] = []
        self.mailbox: Optional[PairedMailbox] = None
        self.worker: Optional[MultiCameraWorker] = None
        self.positions: Optional[Positions] = None

    def prefix(self, c: int) -> str:
        return f'~/{self.names[c]}'

    def image_topic(self, c: int, opts: Any) -> str:
        return input_topic(f'{self.names[c]}/{opts.camera_image}', opts.input_type)

    # ------------------------------------------------------------------ configure
    def create_outputs(self, node: Any, vision: Any) -> None:
        o = node.opts
        self.associations = [det.Association() for _ in self.names]
        self.outputs = []
        try:        # a camera's failure releases the cameras made before it: no leak per retry
            for c, name in enumerate(self.names):
                self.outputs.append(Publishers.create(
                    node, messages.interfaces().TrackingState,
                    vision and vision.Detection2DArray, o.publish_overlay, self.totals[c],
                    self.associations[c].class_of, serial=not o.pipeline,
                    timing_log=f'{o.timing_log}.{name}' if o.timing_log else '',
                    compressed_overlay=o.input_type == 'compressed', prefix=self.prefix(c),
                    serialized=o.publish_serialized_images, without_gil=o.publish_without_gil,
                    overlay_device=overlay_device_of(o, node.cfg.device),
                    on_frame_out=node.diag.frame_out))
        except BaseException:
            for out in self.outputs:
                out.release()
            self.outputs = []
            raise
        self.positions = Positions.create(node, self.names)

    # ------------------------------------------------------------------ activate
    def activate(self, node: Any) -> Tuple[PairedMailbox, MultiCameraWorker]:
        o = node.opts
        self.mailbox = PairedMailbox(
            len(self.names), o.process_every_frame, o.fifo_size, o.prompt_queue_size,
            period_ns=int(o.camera_period_ms * 1e6), tolerance_ns=int(o.pair_tolerance_ms * 1e6))
        hosts = []
        for c in range(len(self.names)):
            hosts.append(NodeHost(node, None, node.cfg, o, node.bridge, node.log,
                                  held_ids=self._held_ids(c), decoder=node.decoder))
        self.worker = MultiCameraWorker(
            node.tracker, self.mailbox, hosts, self.outputs, self.associations,
            pipeline=o.pipeline, on_group=self.positions.on_group,
            corrections_on_next_frame=o.corrections_on_next_frame, stall=node.stall,
            deferred_wait_s=o.deferred_wait_ms / 1e3,
            shared_publisher=o.shared_publisher, masks_from_worker=o.masks_from_worker)
        for host, lane, line in zip(hosts, self.worker.lanes, self.time_lines):
            host.tracker = lane.tracker        # click_mode 'new' reads the camera's ids
            lane.time.line = line              # the camera's stamps and /clock jumps
        self.worker.start()
        return self.mailbox, self.worker

    def _held_ids(self, c: int) -> Any:
        return lambda: self.worker.lanes[c].hold.object_ids()

    def subscribe(self, node: Any, prompt_qos: Any, image_qos: Any) -> List[Any]:
        from geometry_msgs.msg import Point, PointStamped
        from sensor_msgs.msg import CameraInfo, CompressedImage, Image

        o = node.opts
        PROMPT_QOS = prompt_qos
        image_type = Image if o.input_type == 'raw' else CompressedImage
        subs = []
        for c in range(len(self.names)):
            box, p = self.mailbox.camera(c), self.prefix(c)
            topic = self.image_topic(c, o)
            subs += [
                image_input(node, topic, self._on_image(box), image_qos, o, c)
                if image_type is Image else
                node.create_subscription(image_type, topic, self._on_image(box), image_qos),
                node.create_subscription(messages.interfaces().Prompt, f'{p}/prompt',
                                         self._on_stamped(node, c, 'prompt', False), PROMPT_QOS),
                node.create_subscription(PointStamped, f'{p}/click',
                                         self._on_stamped(node, c, 'click', True), PROMPT_QOS),
                node.create_subscription(CameraInfo, o.camera_info_topic(c),
                                         self.positions.on_camera_info(c), camera_info_qos())]
            subs += [node.create_subscription(Point, t, self._on_point(node, c), PROMPT_QOS)
                     for t in self.point_click_topics(node, c)]
            if node.vision_off is None:
                subs.append(node.create_subscription(
                    messages.vision_interfaces().Detection2DArray, f'{p}/detections',
                    self._on_stamped(node, c, 'detections', False), PROMPT_QOS))
        return subs

    def point_click_topics(self, node: Any, c: int) -> List[str]:
        base = node.resolve_topic_name(f'{self.names[c]}/{node.opts.camera_image}')
        return [node.resolve_topic_name(f'{self.prefix(c)}/overlay') + '_mouse_left',
                node.resolve_topic_name(f'{self.prefix(c)}/mask') + '_mouse_left',
                base + '_mouse_left']

    def describe_active(self, node: Any) -> str:
        o = node.opts
        cams = ', '.join(f'{n}: {node.resolve_topic_name(self.image_topic(c, o))}'
                         for c, n in enumerate(self.names))
        return (f'active: {len(self.names)} cameras ({cams}), {o.input_type} images paired by '
                f'stamp (tolerance {o.pair_tolerance_ms} ms, a lone frame waits at most '
                f'{o.camera_period_ms:.1f} ms); prompts and outputs under '
                f'{node.resolve_topic_name("~")}/<camera>/')

    # ------------------------------------------------------------------ callbacks
    @staticmethod
    def _on_image(box: Any) -> Any:
        return lambda m, t=None: box.put_frame(FrameItem(
            m, inputs.stamp_ns(m.header.stamp), m.header, time.monotonic() if t is None else t))

    def _on_stamped(self, node: Any, c: int, kind: str, point: bool) -> Any:
        return lambda m: self.enqueue(c, PromptItem(m.point if point else m, kind,
                                                    inputs.stamp_ns(m.header.stamp)))

    def _on_point(self, node: Any, c: int) -> Any:
        from sam2_ros.ros.mailbox import LATEST

        return lambda m: self.enqueue(c, PromptItem(m, 'click', LATEST))

    def enqueue(self, c: int, item: PromptItem) -> None:
        if not self.mailbox.put_prompt(c, item):
            self.worker.lanes[c].refuse(
                describe(item.kind, item.stamp_ns), f'the prompt queue of camera '
                f'{self.names[c]} is full ({self.mailbox.prompt_queue_size}, prompt_queue_size)')

    # ------------------------------------------------------------------ diagnostics, stop
    def statuses(self, node: Any, now: float, fallbacks_seen: int) -> List[Tuple]:
        """One (name, level, message, values) per camera of the active node."""
        out = []
        base = diagnostics.status_name(node.get_fully_qualified_name()).rsplit(':', 1)[0]
        for c, (name, lane) in enumerate(zip(self.names, self.worker.lanes)):
            snap = diagnostics.snapshot(now, lane, self.mailbox.camera(c), lane.tracker,
                                        node.cfg, node.opts, self.totals[c], fallbacks_seen,
                                        node.gc_pauses, vision_on=node.vision_off is None,
                                        decoder=node.decoder, inputs=node.input_subs, camera=c,
                                        late_imports=node.late_imports.count, node=node)
            report = diagnostics.report(snap)
            report.values.update(self.positions.values(c))
            level, message = report.level, report.message
            if c == 0:          # the pairing of all cameras, on the first one's status
                pairing = self.mailbox.pairing()
                report.values.update(pairing)
                level, message = pairing_health(pairing, level, message)
            out.append((f'{base}/{name}: tracker', level, message, report.values))
        return out

    def stop(self) -> List[str]:
        """The worker stopped after its group in progress; what was held, for the log."""
        w = self.worker
        if w is None:
            return []
        w.stop()
        held = w.drop_pending()
        for c, lane in enumerate(w.lanes):
            self.totals[c].add_activation(lane, self.mailbox.camera(c))
        self.worker = None
        return held

    def release(self) -> None:
        for out in self.outputs:
            out.release()
        self.outputs = []
        if self.positions is not None:
            self.positions.release()
            self.positions = None


# groups seen before the pairing is judged: a start (one camera up first) is not a failure
PAIRING_JUDGED_AFTER = 60


def pairing_health(pairing: Dict[str, int], level: str, message: str) -> Tuple[str, str]:
    """WARN when most groups were released without some camera's frame: frames tracked alone
    (a step each, no 3D positions) because stamps do not pair (free-running cameras with
    ``pair_tolerance_ms: 0``, one camera restarted on another clock, a delay over a period)."""
    complete, partial = pairing['pairs_complete'], pairing['pairs_partial']
    if complete + partial < PAIRING_JUDGED_AFTER or partial <= complete:
        return level, message
    warn = (f'{partial} of {complete + partial} frame groups unpaired: check the cameras\' '
            f'stamps, pair_tolerance_ms and camera_period_ms')
    return ('WARN' if level == 'OK' else level,
            warn if message == 'tracking' else f'{message}; {warn}')
