"""The ``sam2_tracker`` lifecycle node: ROS messages in, StreamingTracker, ROS messages out.

configure  builds the tracker from the parameters (checkpoint load, warm-up, graph capture);
           any failure is a failed transition with the reason logged.
activate   creates the lifecycle publishers, subscriptions, the worker thread and the
           diagnostics timer; deactivate / cleanup release them; shutdown works from any state.

The node only converts messages (``conversions``) and hands them to the worker (``worker``),
the one thread that calls the tracker. Run it as a plain process (no ``ros2`` CLI needed):

    python -m sam2_ros.ros.node --ros-args --params-file config/tracker.yaml -p autostart:=true
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Dict, List, Optional

from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from sam2_ros.ros import images, inputs, messages
from sam2_ros.ros import detections as det
from sam2_ros.ros import gc_policy, malloc, node_cli, params
from sam2_ros.ros.log_filter import RepeatFilter
from sam2_ros.ros.node_cli import check_device, input_topic  # noqa: F401 (public names)
from sam2_ros.ros.node_diagnostics import DiagnosticsMixin
from sam2_ros.ros.node_outputs import FLUSH_TIMEOUT_S, OutputsMixin  # noqa: F401
from sam2_ros.ros.node_runtime_params import RuntimeParamsMixin
from sam2_ros.ros.worker import LATEST, FrameItem, Mailbox, PromptItem, TrackingWorker

NODE_NAME = 'sam2_tracker'
OUTPUT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
PROMPT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
# Counters that TrackingState / diagnostics report "since start": kept over re-activations.
TOTALS = ('received', 'dropped', 'processed', 'frame_errors', 'prompt_errors')


class TrackerNode(OutputsMixin, DiagnosticsMixin, RuntimeParamsMixin, LifecycleNode):
    """Lifecycle node wrapping :class:`sam2_ros.engine.tracker.StreamingTracker`.

    Its other concerns live in mixins: what it publishes (:mod:`~sam2_ros.ros.node_outputs`),
    /diagnostics (:mod:`~sam2_ros.ros.node_diagnostics`), run-time parameters
    (:mod:`~sam2_ros.ros.node_runtime_params`); the entry point is
    :mod:`~sam2_ros.ros.node_cli`.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        params.declare(self)
        from cv_bridge import CvBridge

        self._bridge = CvBridge()
        self.tracker: Any = None
        self.cfg = None
        self.gc_pauses = gc_policy.PauseMonitor()    # full collections, for diagnostics
        self._gc_frozen = False
        self.opts: Optional[params.NodeOptions] = None
        self.finished = False
        self._mailbox: Optional[Mailbox] = None
        self._worker: Optional[TrackingWorker] = None
        self._pubs: dict = {}
        self._subs: List[Any] = []
        self._last_publish_ms = 0.0
        self._last_overlay_ms = 0.0
        # result publisher -> time.monotonic() of its last message since the last ack wait
        self._unacked: Dict[str, float] = {}
        self._fallbacks_seen = 0
        self._log_filter = RepeatFilter(2.0)   # identical lines within 2 s are counted
        self._totals: Dict[str, int] = dict.fromkeys(TOTALS, 0)
        self._new_ids: set = set()   # ids started by click_mode 'new' (not handed out twice)
        # ~/detections in, ~/objects out: None while vision_msgs is importable, else why not
        self._vision_off: Optional[str] = None
        self._association = det.Association()   # kept over deactivate, like the tracker
        self._detection_totals: Dict[str, int] = {}
        self._unknown = params.unknown(list(self._parameter_overrides),
                                       list(self._parameters))
        for name, close in self._unknown:
            self.get_logger().warning(
                f'unknown parameter {name!r} ignored' + (f' (did you mean {close!r}? '
                                                         f'configure will fail)' if close else ''))
        self.add_on_set_parameters_callback(self._on_set_parameters)
        # /diagnostics in every lifecycle state (a plain publisher, a steady-clock timer), so a
        # monitor sees an unconfigured or inactive tracker instead of silence.
        from diagnostic_msgs.msg import DiagnosticArray

        self._diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        period = self.get_parameter('diagnostics_period_s').value
        period = float(period) if isinstance(period, (int, float)) and period > 0 else 1.0
        self._diag_timer = self.create_timer(period, self._on_diagnostics,
                                             clock=Clock(clock_type=ClockType.STEADY_TIME))

    # ------------------------------------------------------------------ lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            typos = [f'{n!r} (did you mean {c!r}?)' for n, c in self._unknown if c]
            if typos:
                raise ValueError(f'unknown parameter {", ".join(typos)}')
            self.cfg, self.opts = params.read(self)
            self._tune_malloc()
            check_device(self.cfg.device)
            messages.interfaces()  # fail now, not at the first frame, if messages are missing
            from sam2_ros.engine.tracker import StreamingTracker

            t0 = time.monotonic()
            with device_context(self.cfg.device):
                self.tracker = StreamingTracker(self.cfg)
        except Exception as exc:  # CheckpointError, ValueError, ImportError, CUDA errors...
            self.get_logger().error(f'configure failed: {type(exc).__name__}: {exc}')
            self.tracker = None
            return TransitionCallbackReturn.FAILURE
        c = self.cfg
        graphs = c.use_cuda_graphs and str(c.device).startswith('cuda')  # CUDA only
        if self.opts.gc_freeze:
            frozen = gc_policy.freeze()
            self._gc_frozen = True
            self.get_logger().info(f'gc_freeze: {frozen} objects exempt from garbage '
                                   f'collection until cleanup')
        self.get_logger().info(
            f'tracker ready in {time.monotonic() - t0:.1f} s: {c.model_size}@{c.image_size} '
            f'{c.device} {c.precision} graphs={graphs} '
            f'weights={"RANDOM (masks meaningless)" if c.random_weights else c.checkpoint}')
        # Publishers live from configure to cleanup (deactivate only deactivates them): a
        # reliable writer destroyed at deactivate would need to wait for acknowledgements,
        # which for small messages come with Fast DDS's periodic heartbeat (up to 3 s).
        from sensor_msgs.msg import Image

        m, o = messages.interfaces(), self.opts
        try:
            vision = messages.vision_interfaces()
            self._vision_off = None
        except ImportError as exc:   # the node works without it: those two topics are off
            vision, self._vision_off = None, str(exc)
            self.get_logger().warning(f'~/detections and ~/objects are off: {exc}')
        self._association = det.Association()
        self._pubs = {
            'mask': self.create_lifecycle_publisher(Image, '~/mask', OUTPUT_QOS),
            'overlay': (self.create_lifecycle_publisher(Image, '~/overlay', OUTPUT_QOS)
                        if o.publish_overlay else None),
            'state': self.create_lifecycle_publisher(m.TrackingState, '~/state', OUTPUT_QOS),
            'objects': (self.create_lifecycle_publisher(vision.Detection2DArray, '~/objects',
                                                        OUTPUT_QOS) if vision else None),
        }
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        from geometry_msgs.msg import Point, PointStamped
        from sensor_msgs.msg import CompressedImage, Image

        o = self.opts
        m = messages.interfaces()
        ret = super().on_activate(state)  # activates the lifecycle publishers
        if ret != TransitionCallbackReturn.SUCCESS:
            return ret
        self._mailbox = Mailbox(o.process_every_frame, o.fifo_size, o.prompt_queue_size)
        self._worker = TrackingWorker(self.tracker, self._mailbox, decode=self._decode,
                                      convert=self._convert, publish=self._publish, log=self._log,
                                      publish_overlay=self._publish_overlay,
                                      wants_overlay=self._wants_overlay, pipeline=o.pipeline,
                                      outputs_alive=self.context.ok,
                                      thread_init=self._worker_thread_init,
                                      convert_detections=inputs.detections_from_msg,
                                      detection_rules=self._detection_rules,
                                      association=self._association)
        self._worker.start()
        topic = input_topic(o.image_topic, o.input_type)
        self._subs = [
            self.create_subscription(Image if o.input_type == 'raw' else CompressedImage,
                                     topic, self._on_image, self._image_qos()),
            self.create_subscription(m.Prompt, '~/prompt', self._on_prompt, PROMPT_QOS),
            self.create_subscription(PointStamped, '~/click', self._on_click, PROMPT_QOS),
        ] + [self.create_subscription(Point, t, self._on_point, PROMPT_QOS)
             for t in self.point_click_topics()]
        if self._vision_off is None:
            self._subs.append(self.create_subscription(
                messages.vision_interfaces().Detection2DArray, '~/detections', self._on_detections,
                PROMPT_QOS))
        self._fallbacks_seen = int(self.tracker.stats.get('fallbacks', 0))
        mode = (f'FIFO of {o.fifo_size}, never drops' if o.process_every_frame
                else 'newest frame only')
        self.get_logger().info(
            f'active: {o.input_type} images on {self.resolve_topic_name(topic)} '
            f'({o.qos_reliability}, {mode}); clicks: PointStamped on '
            f'{self.resolve_topic_name("~/click")}, Point (rqt_image_view) on '
            f'{", ".join(self.point_click_topics())}; '
            + (f'detections: Detection2DArray on {self.resolve_topic_name("~/detections")}, '
               f'objects on {self.resolve_topic_name("~/objects")}'
               if self._vision_off is None else 'detections/objects: off (no vision_msgs)'))
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_io()
        return super().on_deactivate(state)   # deactivates (keeps) the publishers

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_io()
        self._release_tracker()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_io()
        self._release_tracker()
        self.finished = True
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_io()
        self._release_tracker()
        return TransitionCallbackReturn.SUCCESS

    def _stop_io(self) -> None:
        """Subscriptions first (no new work), then the worker after the frame in progress (its
        outputs are published). Counters are added to the totals; prompts still held for a
        frame that never came are reported, not dropped silently."""
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []
        w, mb = self._worker, self._mailbox
        if w is not None:
            w.stop()
            held = w.drop_pending()
            if held:
                self.get_logger().warning(
                    f'{len(held)} prompt(s) held for frames that did not arrive were dropped: '
                    f'{"; ".join(held)[:500]}')
            self._worker = None
            for name, value in w.detection_counts.items():
                self._detection_totals[name] = self._detection_totals.get(name, 0) + value
            for name, value in self._live_counts(w, mb).items():
                self._totals[name] += value

    @staticmethod
    def _live_counts(w: Any, mb: Any) -> Dict[str, int]:
        """The counters of the current activation (zeros when inactive)."""
        if w is None or mb is None:
            return dict.fromkeys(TOTALS, 0)
        c = w.counters
        return {'received': mb.received, 'dropped': mb.dropped, 'processed': c.processed,
                'frame_errors': c.frame_errors, 'prompt_errors': c.prompt_errors}

    def _count(self, name: str) -> int:
        """A counter since the process started (over all activations)."""
        return self._totals[name] + self._live_counts(self._worker, self._mailbox)[name]

    def _release_io(self) -> None:
        """As _stop_io, then the publishers (after subscribers acknowledged what was sent)."""
        self._stop_io()
        self._flush_publishers()
        for pub in self._pubs.values():
            if pub is not None:
                self.destroy_lifecycle_publisher(pub)
        self._pubs = {}

    def _release_tracker(self) -> None:
        dev = str(getattr(self.cfg, 'device', 'cpu'))
        if self._gc_frozen:              # the released tracker's cycles are collectable again
            gc_policy.unfreeze()
            self._gc_frozen = False
        self.tracker = None
        if dev.startswith('cuda'):
            import torch

            torch.cuda.empty_cache()

    def _tune_malloc(self) -> None:
        """Large message buffers reused (``sam2_ros/ros/malloc.py``), once, before the image
        subscription exists; a warning where the C library cannot do it."""
        if self.opts.tune_malloc and not getattr(self, '_malloc_tuned', False):
            self._malloc_tuned = malloc.keep_large_buffers()
            if not self._malloc_tuned:
                self.get_logger().warning('tune_malloc: not glibc or mallopt refused; large '
                                          'images take longer to receive')

    def _image_qos(self) -> QoSProfile:
        o = self.opts
        rel = (ReliabilityPolicy.RELIABLE if o.qos_reliability == 'reliable'
               else ReliabilityPolicy.BEST_EFFORT)
        if o.process_every_frame:  # the FIFO blocks; DDS must keep the backlog, not overwrite
            return QoSProfile(history=HistoryPolicy.KEEP_ALL, reliability=rel)
        return QoSProfile(depth=o.qos_depth, reliability=rel)

    # ------------------------------------------------------------------ callbacks (executor)
    def _on_image(self, msg: Any) -> None:
        self._mailbox.put_frame(FrameItem(msg, inputs.stamp_ns(msg.header.stamp), msg.header,
                                          time.monotonic()))

    def _on_prompt(self, msg: Any) -> None:
        self._queue_prompt(PromptItem(msg, 'prompt', inputs.stamp_ns(msg.header.stamp)))

    def _on_click(self, msg: Any) -> None:
        self._queue_prompt(PromptItem(msg.point, 'click', inputs.stamp_ns(msg.header.stamp)))

    def _on_detections(self, msg: Any) -> None:
        self._queue_prompt(PromptItem(msg, 'detections', inputs.stamp_ns(msg.header.stamp)))

    def _on_point(self, msg: Any) -> None:
        """A geometry_msgs/Point from rqt_image_view: no stamp, and the user clicked what is
        on screen, i.e. the latest processed frame (the next one before any frame)."""
        self._queue_prompt(PromptItem(msg, 'click', LATEST))

    def point_click_topics(self) -> List[str]:
        """Where rqt_image_view publishes clicks (`<shown image topic>_mouse_left`) for the
        images a user would click on: our overlay, our mask and the camera image."""
        base = self.resolve_topic_name(self.opts.image_topic)
        return [self.resolve_topic_name('~/overlay') + '_mouse_left',
                self.resolve_topic_name('~/mask') + '_mouse_left', base + '_mouse_left']

    def _queue_prompt(self, item: PromptItem) -> None:
        if not self._mailbox.put_prompt(item):
            self._worker.report_error(
                f'prompt queue full ({self._mailbox.prompt_queue_size}): rejected the newest '
                f'{item.kind}')

    # ------------------------------------------------------------------ worker hooks
    def _worker_thread_init(self) -> None:
        """The current CUDA device is per thread: make the worker's the tracker's device."""
        if str(self.cfg.device).startswith('cuda:'):  # plain 'cuda' is device 0 anyway
            import torch

            torch.cuda.set_device(torch.device(self.cfg.device))

    def _decode(self, msg: Any):
        if self.opts.input_type == 'raw':
            return images.image_to_rgb(msg, self._bridge)
        return images.compressed_to_rgb(msg, self._bridge, self.opts.max_image_pixels)

    def _convert(self, item: PromptItem):
        """Runs in the worker thread (the only one touching the tracker). A click follows the
        run-time parameters click_mode and click_object_id."""
        if item.kind != 'click':
            return inputs.prompt_from_msg(item.msg, self._bridge)
        mode = self.get_parameter('click_mode').value
        obj_id = int(self.get_parameter('click_object_id').value)
        if mode == 'new':
            used = set(self.tracker.object_ids) | self._new_ids
            obj_id = next((i for i in range(1, 256) if i not in used), 0)
            if not obj_id:
                from sam2_ros.engine.errors import CapacityError

                raise CapacityError('click_mode new: all object ids 1..255 are in use')
            self._new_ids.add(obj_id)
            from rclpy.parameter import Parameter

            self.set_parameters([Parameter('click_object_id', value=obj_id)])
            self._log('info', f'click starts object {obj_id} (click_mode new); it is now '
                              f'click_object_id, so click_mode positive/negative corrects it')
        return inputs.ACTION_ADD, inputs.click_to_prompt(item.msg, obj_id,
                                                     positive=mode != 'negative')

    def _log(self, level: str, text: str) -> None:
        """Log through the node logger; an identical line within 2 s is counted, not repeated."""
        logger = self.get_logger()
        for lvl, line in self._log_filter.filter(level, text):
            # one call site per severity: rclpy keys its logging cache on the caller's line
            # and raises 'Logger severity cannot be changed between calls' otherwise
            if lvl == 'info':
                logger.info(line)
            elif lvl == 'warn':
                logger.warning(line)
            else:
                logger.error(line)


def device_context(device: str) -> Any:
    """The tracker's CUDA device as the current one while it is built (configure runs in the
    executor thread, whose current device is cuda:0): CUDA graphs are captured on the current
    device's streams, so a tracker on cuda:1 (the second camera of a rig) must be built
    there. A no-op for the CPU and plain 'cuda'."""
    if not str(device).startswith('cuda:'):
        return contextlib.nullcontext()
    import torch

    return torch.cuda.device(torch.device(device))


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point (``sam2-ros-node``): see :func:`sam2_ros.ros.node_cli.main`."""
    return node_cli.main(argv, TrackerNode)


if __name__ == '__main__':
    sys.exit(main())
