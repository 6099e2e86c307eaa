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

import signal
import sys
import time
from typing import Any, Dict, List, Optional

import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from sam2_ros.overlay import render_overlay
from sam2_ros.ros import conversions as conv
from sam2_ros.ros import detections as det
from sam2_ros.ros import params
from sam2_ros.ros.log_filter import RepeatFilter
from sam2_ros.ros.worker import (LATEST, FrameItem, Mailbox, PromptItem, Published,
                                 TrackingWorker)

NODE_NAME = 'sam2_tracker'
OUTPUT_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
PROMPT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
# Percentiles and rate in /diagnostics cover this many seconds of frames.
DIAG_WINDOW_S = 10.0
# A run of this many failed frames turns diagnostics ERROR (a few bad frames are only WARN).
ERROR_AFTER_FAILURES = 5
# On deactivate / cleanup / shutdown, wait up to this long in all for subscribers to acknowledge
# what was already published (the last frame's mask and state), then destroy the publishers.
FLUSH_TIMEOUT_S = 1.0
# Counters that TrackingState / diagnostics report "since start": kept over re-activations.
TOTALS = ('received', 'dropped', 'processed', 'frame_errors', 'prompt_errors')
USAGE = '''usage: sam2-ros-node [--ros-args -p NAME:=VALUE ... --params-file FILE ...]

The sam2_tracker lifecycle node. With autostart:=true it configures and activates itself;
otherwise it waits for `ros2 lifecycle set /sam2_tracker configure` (then activate).
Example (CPU, random weights: the pipeline runs, masks are meaningless):
  sam2-ros-node --ros-args --params-file config/tracker.yaml -p autostart:=true \\
      -p device:=cpu -p precision:=fp32 -p random_weights:=true -p image_size:=512
Parameters (docs/ros.md has the full table):
'''


class TrackerNode(LifecycleNode):
    """Lifecycle node wrapping :class:`sam2_ros.engine.tracker.StreamingTracker`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        params.declare(self)
        from cv_bridge import CvBridge

        self._bridge = CvBridge()
        self.tracker: Any = None
        self.cfg = None
        self.opts: Optional[params.NodeOptions] = None
        self.finished = False
        self._mailbox: Optional[Mailbox] = None
        self._worker: Optional[TrackingWorker] = None
        self._pubs: dict = {}
        self._subs: List[Any] = []
        self._last_publish_ms = 0.0
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
            check_device(self.cfg.device)
            conv.interfaces()  # fail now, not at the first frame, if messages are missing
            from sam2_ros.engine.tracker import StreamingTracker

            t0 = time.monotonic()
            self.tracker = StreamingTracker(self.cfg)
        except Exception as exc:  # CheckpointError, ValueError, ImportError, CUDA errors...
            self.get_logger().error(f'configure failed: {type(exc).__name__}: {exc}')
            self.tracker = None
            return TransitionCallbackReturn.FAILURE
        c = self.cfg
        graphs = c.use_cuda_graphs and str(c.device).startswith('cuda')  # CUDA only
        self.get_logger().info(
            f'tracker ready in {time.monotonic() - t0:.1f} s: {c.model_size}@{c.image_size} '
            f'{c.device} {c.precision} graphs={graphs} '
            f'weights={"RANDOM (masks meaningless)" if c.random_weights else c.checkpoint}')
        # Publishers live from configure to cleanup (deactivate only deactivates them): a
        # reliable writer destroyed at deactivate would need to wait for acknowledgements,
        # which for small messages come with Fast DDS's periodic heartbeat (up to 3 s).
        from sensor_msgs.msg import Image

        m, o = conv.interfaces(), self.opts
        try:
            vision = conv.vision_interfaces()
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
        m = conv.interfaces()
        ret = super().on_activate(state)  # activates the lifecycle publishers
        if ret != TransitionCallbackReturn.SUCCESS:
            return ret
        self._mailbox = Mailbox(o.process_every_frame, o.fifo_size, o.prompt_queue_size)
        self._worker = TrackingWorker(self.tracker, self._mailbox, decode=self._decode,
                                      convert=self._convert, publish=self._publish, log=self._log,
                                      thread_init=self._worker_thread_init,
                                      convert_detections=conv.detections_from_msg,
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
                conv.vision_interfaces().Detection2DArray, '~/detections', self._on_detections,
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

    def _flush_publishers(self) -> None:
        """Destroying a reliable writer discards samples its readers have not acknowledged yet:
        the frame in progress at deactivate was tracked (its frame index used) but its state
        could be lost. Wait (bounded) for the acknowledgements first. After Ctrl-C the context
        is already shut down: nothing can be delivered any more and the handles refuse use."""
        if not self.context.ok():
            return
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        for name, pub in self._pubs.items():
            if pub is None:
                continue
            left = max(0.0, deadline - time.monotonic())
            try:
                acked = pub.wait_for_all_acked(Duration(nanoseconds=int(left * 1e9)))
            except Exception as exc:  # e.g. the context shut down meanwhile: destroy anyway
                self.get_logger().warning(f'{name}: cannot wait for acknowledgements: {exc!r}')
                continue
            if not acked:
                self.get_logger().warning(
                    f'{name}: subscribers did not acknowledge the last messages within '
                    f'{FLUSH_TIMEOUT_S} s; they may miss them')

    def _release_tracker(self) -> None:
        dev = str(getattr(self.cfg, 'device', 'cpu'))
        self.tracker = None
        if dev.startswith('cuda'):
            import torch

            torch.cuda.empty_cache()

    def _image_qos(self) -> QoSProfile:
        o = self.opts
        rel = (ReliabilityPolicy.RELIABLE if o.qos_reliability == 'reliable'
               else ReliabilityPolicy.BEST_EFFORT)
        if o.process_every_frame:  # the FIFO blocks; DDS must keep the backlog, not overwrite
            return QoSProfile(history=HistoryPolicy.KEEP_ALL, reliability=rel)
        return QoSProfile(depth=o.qos_depth, reliability=rel)

    # ------------------------------------------------------------------ callbacks (executor)
    def _on_image(self, msg: Any) -> None:
        self._mailbox.put_frame(FrameItem(msg, conv.stamp_ns(msg.header.stamp), msg.header,
                                          time.monotonic()))

    def _on_prompt(self, msg: Any) -> None:
        self._queue_prompt(PromptItem(msg, 'prompt', conv.stamp_ns(msg.header.stamp)))

    def _on_click(self, msg: Any) -> None:
        self._queue_prompt(PromptItem(msg.point, 'click', conv.stamp_ns(msg.header.stamp)))

    def _on_detections(self, msg: Any) -> None:
        self._queue_prompt(PromptItem(msg, 'detections', conv.stamp_ns(msg.header.stamp)))

    def _detection_rules(self) -> det.Rules:
        """The association rules from the run-time parameters (read per message)."""
        get = lambda name: self.get_parameter(name).value  # noqa: E731
        return det.Rules(min_score=float(get('detection_min_score')),
                         class_ids=tuple(get('detection_class_ids') or ()),
                         match_iou=float(get('detection_match_iou')),
                         drift_iou=float(get('detection_drift_iou')),
                         max_objects=int(self.cfg.max_objects),
                         max_age_frames=int(get('detection_max_age_frames')))

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

    def _on_set_parameters(self, changes: List[Any]) -> Any:
        """click_mode and click_object_id take effect at once; refuse bad values with the
        reason (`ros2 param set` prints it). Others are only checked at configure."""
        from rcl_interfaces.msg import SetParametersResult

        for p in changes:
            if p.name == 'click_mode' and p.value not in params.CLICK_MODES:
                return SetParametersResult(successful=False, reason=(
                    f'click_mode must be one of {params.CLICK_MODES}, got {p.value!r}'))
            if p.name == 'click_object_id' and not (
                    isinstance(p.value, int) and not isinstance(p.value, bool)
                    and 1 <= p.value <= 255):
                return SetParametersResult(successful=False, reason=(
                    f'click_object_id must be an integer in 1..255, got {p.value!r}'))
        reason = self._check_detection_params(changes)
        if reason:
            return SetParametersResult(successful=False, reason=reason)
        return SetParametersResult(successful=True)

    def _check_detection_params(self, changes: List[Any]) -> str:
        """Why the detection_* values (these changes over the current ones) are bad, or ''."""
        names = ('detection_min_score', 'detection_match_iou', 'detection_drift_iou')
        new = {p.name: p.value for p in changes}
        if not any(n.startswith('detection_') for n in new):
            return ''
        vals = {n: new.get(n, self.get_parameter(n).value) for n in names}
        for n, v in vals.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return f'{n} must be a number in [0, 1], got {v!r}'
        try:
            det.check_rules(*(float(vals[n]) for n in names))
        except ValueError as exc:
            return str(exc)
        age = new.get('detection_max_age_frames', 0)
        if isinstance(age, bool) or not isinstance(age, int) or age < 0:
            return f'detection_max_age_frames must be an integer >= 0, got {age!r}'
        classes = new.get('detection_class_ids', [])
        if classes is not None and not (isinstance(classes, (list, tuple)) and
                                        all(isinstance(c, str) for c in classes)):
            return f'detection_class_ids must be a list of strings, got {classes!r}'
        return ''

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
            return conv.image_to_rgb(msg, self._bridge)
        return conv.compressed_to_rgb(msg, self._bridge, self.opts.max_image_pixels)

    def _convert(self, item: PromptItem):
        """Runs in the worker thread (the only one touching the tracker). A click follows the
        run-time parameters click_mode and click_object_id."""
        if item.kind != 'click':
            return conv.prompt_from_msg(item.msg, self._bridge)
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
        return conv.ACTION_ADD, conv.click_to_prompt(item.msg, obj_id,
                                                     positive=mode != 'negative')

    def _publish(self, p: Published) -> None:
        """Mask, state, then overlay. The state follows its mask (a state means its mask was
        already sent); the overlay comes last because it is for eyes only and the costliest
        part (render + 2.7 MB at 720p: it delayed the state by 11 ms on the H200 host). It is
        only rendered while someone subscribes to it (RViz, a recorder)."""
        t0 = time.perf_counter()
        pubs = self._pubs
        pubs['mask'].publish(conv.image_msg(p.result.label_mask(), 'mono8', p.header))
        pubs['state'].publish(conv.tracking_state_msg(
            p.result, p.header, decode_ms=p.decode_ms, publish_ms=self._last_publish_ms,
            dropped=self._count('dropped'), processed=self._count('processed'),
            errors=conv.errors_text(p.errors)))
        if pubs.get('objects') is not None:
            pubs['objects'].publish(conv.objects_msg(p.result, p.header,
                                                     self._association.class_of))
        overlay = pubs.get('overlay')
        if overlay is not None and overlay.get_subscription_count() > 0:
            overlay.publish(conv.image_msg(render_overlay(p.rgb, p.result), 'rgb8', p.header))
        self._last_publish_ms = (time.perf_counter() - t0) * 1e3

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

    def _diag_name(self) -> str:
        """'sam2_tracker: tracker', or 'cam0/sam2_tracker: tracker' in a namespace, so the
        trackers of several cameras stay apart on /diagnostics."""
        return f'{self.get_fully_qualified_name().lstrip("/")}: tracker'

    def _on_diagnostics(self) -> None:
        w, mb, tr, o = self._worker, self._mailbox, self.tracker, self.opts
        if w is None or mb is None or tr is None:
            self._inactive_diagnostics()
            return
        now = time.monotonic()
        level, problems = 'OK', []
        if mb.last_recv_t is None or now - mb.last_recv_t > o.stale_timeout_s:
            level = 'WARN'
            since = 'since activation' if mb.last_recv_t is None else \
                f'for {now - mb.last_recv_t:.1f} s'
            problems.append(f'no frames {since}')
        fallbacks = int(tr.stats.get('fallbacks', 0))
        if fallbacks > self._fallbacks_seen:
            level = 'WARN'
            reasons = getattr(tr, 'fallback_reasons', {}) or {}
            top = max(reasons, key=reasons.get) if reasons else 'unknown'
            problems.append(f'{fallbacks - self._fallbacks_seen} CUDA graph fallbacks to eager '
                            f'(most frequent reason: {top})')
            self._fallbacks_seen = fallbacks
        c = w.counters
        n_err, last_err = w.take_error_count()
        if n_err:
            level = 'WARN'
            problems.append(f'{n_err} errors, last: {last_err[:200]}')
        if c.consecutive_failures >= ERROR_AFTER_FAILURES or not w.alive:
            level = 'ERROR'
            problems.insert(0, 'worker stopped' if not w.alive else
                            f'last {c.consecutive_failures} frames failed')
        values = dict(w.latency.summary(now, DIAG_WINDOW_S))
        values.update({
            'objects': c.objects, 'received_frames': self._count('received'),
            'processed_frames': self._count('processed'),
            'dropped_frames': self._count('dropped'), 'waiting_frames': mb.pending_frames(),
            'waiting_prompts': mb.pending_prompts() + w.waiting_prompts,
            'frame_errors': self._count('frame_errors'),
            'prompt_errors': self._count('prompt_errors'),
            'graph_steps': int(tr.stats.get('graph_steps', 0)),
            'eager_steps': int(tr.stats.get('eager_steps', 0)),
            'fallbacks': fallbacks,
            'model': f'{self.cfg.model_size}@{self.cfg.image_size} {self.cfg.device} '
                     f'{self.cfg.precision}',
            'random_weights': self.cfg.random_weights,
        })
        if self._vision_off is None:
            counts = dict(self._detection_totals)
            for k, v in dict(w.detection_counts).items():
                counts[k] = counts.get(k, 0) + v
            for k in ('messages', det.NEW, det.CORRECT, det.IGNORE, det.FILTERED, det.SKIPPED,
                      'rejected'):
                values[f'detections_{k}'] = counts.get(k, 0)
        else:
            values['detections'] = 'off (no vision_msgs)'
        values['lifecycle_state'] = 'active'
        msg = '; '.join(problems) if problems else 'tracking'
        self._diag_pub.publish(conv.diagnostics_msg(
            self.get_clock().now().to_msg(), self._diag_name(), level, msg, values))

    def _inactive_diagnostics(self) -> None:
        """WARN 'not tracking' while unconfigured or inactive (a monitor must not mistake a
        stopped tracker for a silent one), with the totals so far."""
        state = 'inactive' if self.tracker is not None else 'unconfigured'
        values: Dict[str, Any] = {'lifecycle_state': state, 'objects': 0}
        values.update({f'{k}_frames' if k in ('received', 'dropped', 'processed') else k: v
                       for k, v in self._totals.items()})
        if self.cfg is not None:
            values['model'] = (f'{self.cfg.model_size}@{self.cfg.image_size} {self.cfg.device} '
                               f'{self.cfg.precision}')
        self._diag_pub.publish(conv.diagnostics_msg(
            self.get_clock().now().to_msg(), self._diag_name(), 'WARN',
            f'{state}: not tracking', values))


def check_device(device: str) -> None:
    """A CUDA device on a machine without one fails later with torch's 'Torch not compiled
    with CUDA enabled'; say what to set instead."""
    if not str(device).startswith('cuda'):
        return
    import torch

    if not torch.cuda.is_available():
        why = ('this PyTorch build has no CUDA' if torch.version.cuda is None
               else 'no CUDA GPU is visible')
        raise ValueError(f'device {device!r} but {why}: run on the CPU with -p device:=cpu '
                         f'-p precision:=fp32 (launch files: device:=cpu)')


def input_topic(image_topic: str, input_type: str) -> str:
    """The topic actually subscribed: image_transport's convention puts the compressed
    stream of `<topic>` on `<topic>/compressed`; a topic already ending so is kept."""
    if input_type == 'compressed' and not image_topic.rstrip('/').endswith('/compressed'):
        return image_topic.rstrip('/') + '/compressed'
    return image_topic


def print_usage() -> None:
    print(USAGE + '\n'.join(f'  {s.name:<24} {s.description}' for s in params.PARAMS))


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point. With ``autostart: true`` the node configures and activates itself
    and exits with status 1 if that fails; otherwise it waits for lifecycle service calls."""
    args = list(argv if argv is not None else sys.argv)
    user = args[1:args.index('--ros-args')] if '--ros-args' in args else args[1:]
    if any(a in ('-h', '--help') for a in user):
        print_usage()
        return 0
    try:
        return _run(args)
    except KeyboardInterrupt:   # a late Ctrl-C (see _run): the node is already released
        return 0


def _run(args: List[str]) -> int:
    rclpy.init(args=args)
    node = TrackerNode()
    # One executor thread: callbacks only hand messages to the worker, which does the work in
    # its own thread. rclpy's MultiThreadedExecutor (3 threads, tried first) delayed the
    # hand-off of 720p frames by up to seconds through GIL contention with the worker
    # (CPU, node_latency at 5 Hz: DDS + hand-off p50 / p99 34 / 1374 ms, single-threaded
    # 17 / 38 ms; docs/performance.md). In FIFO mode a full FIFO now also holds back prompts
    # and diagnostics for up to one frame time.
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    rc = 0
    try:
        if node.get_parameter('autostart').value is True:
            ok = node.trigger_configure() == TransitionCallbackReturn.SUCCESS
            ok = ok and node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            if not ok:
                node.get_logger().fatal('autostart failed (see the error above); exiting')
                rc = 1
        else:
            node.get_logger().info(
                f'waiting unconfigured (autostart is false): `ros2 lifecycle set '
                f'{node.get_fully_qualified_name()} configure`, then `activate`; or start with '
                f'-p autostart:=true')
        while rc == 0 and rclpy.ok() and not node.finished:
            executor.spin_once(timeout_sec=0.2)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        # rclpy's SIGINT handler shuts the context down and chains to Python's, whose
        # KeyboardInterrupt may surface later, e.g. inside the release below (seen under
        # `ros2 launch`: exit -2 with a traceback). Ctrl-C has been heard: ignore repeats.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        node._release_io()
        node._release_tracker()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return rc


if __name__ == '__main__':
    sys.exit(main())
