"""The ``sam2_tracker`` lifecycle node: its lifecycle and the wiring of its parts.

configure  builds the tracker from the parameters (checkpoint load, warm-up, graph capture)
           and the result publishers (:mod:`~sam2_ros.ros.publishers`); any failure is a
           failed transition with the reason logged.
activate   creates the mailbox, the worker thread (:mod:`~sam2_ros.ros.worker`, given the
           node's :mod:`~sam2_ros.ros.node_host` and publishers) and the subscriptions;
           deactivate / cleanup release them; shutdown works from any state.

Callbacks only hand messages to the worker, the one thread that calls the tracker.
/diagnostics (:mod:`~sam2_ros.ros.diagnostics`) runs in every state; run-time parameters are
checked by :mod:`~sam2_ros.ros.runtime_params`; counters since start are
:mod:`~sam2_ros.ros.totals`'. Run it as a plain process (no ``ros2`` CLI needed):
    python -m sam2_ros.ros.node --ros-args --params-file config/tracker.yaml -p autostart:=true
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, List, Optional

# First, before rclpy and torch (seconds): in the node's process a Ctrl-C is then only noted
from sam2_ros.ros.interruption import SIGINT, Interrupted, pause_for_test  # noqa: I100
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import QoSProfile, ReliabilityPolicy

from sam2_ros.ros import detections as det
from sam2_ros.ros import diagnostics, gc_policy, inputs, messages, node_cli, params, process_tuning
from sam2_ros.ros import hold, runtime_params, segment_service, time_jump, transitions
from sam2_ros.ros.late_imports import LateImports
from sam2_ros.ros.log_filter import FilteredLog
from sam2_ros.ros.mailbox import LATEST, FrameItem, Mailbox, PromptItem, describe
from sam2_ros.ros.node_cli import check_device, input_topic
from sam2_ros.ros.node_host import NodeHost, frame_decoder
from sam2_ros.ros.options import NodeOptions
from sam2_ros.ros.publishers import Publishers, overlay_device_of
from sam2_ros.ros.quiet_tick import QuietTick
from sam2_ros.ros.receiver import close_input, image_input, image_qos
from sam2_ros.ros.rig import Rig
from sam2_ros.ros.stall_trace import StallTracer
from sam2_ros.ros.time_line import TimeLine
from sam2_ros.ros.totals import Totals
from sam2_ros.ros.worker import TrackingWorker

NODE_NAME = 'sam2_tracker'
PROMPT_QOS = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)


class TrackerNode(LifecycleNode):
    """Lifecycle node wrapping :class:`sam2_ros.engine.tracker.StreamingTracker`; the entry
    point is :mod:`~sam2_ros.ros.node_cli`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        params.declare(self)
        from cv_bridge import CvBridge

        self.bridge = CvBridge()
        self.tracker: Any = None
        self.cfg: Any = None
        self.opts: Optional[NodeOptions] = None
        self.gc_pauses = gc_policy.PauseMonitor()    # full collections, for diagnostics
        self.gc_frozen = False
        self.stall: Optional[StallTracer] = None     # stall_trace_ms > 0: from configure
        self.late_imports = LateImports()           # armed at activation
        self.tuning = process_tuning.ProcessTuning()    # tune_malloc, ..., the clock keeper
        self.finished = False
        self.mailbox: Optional[Mailbox] = None
        self.worker: Optional[TrackingWorker] = None
        self.outputs: Optional[Publishers] = None
        self.rig: Optional[Rig] = None             # parameter cameras: the cameras' parts
        self.decoder: Any = None     # the compressed input's FrameDecoder (None: raw input)
        self.input_subs: List[Any] = []
        self.totals = Totals()                       # counters over all activations
        self.log = FilteredLog(self.get_logger)      # identical lines within 2 s are counted
        # ~/detections in, ~/objects out: None while vision_msgs is importable, else why not
        self.vision_off: Optional[str] = None
        self.association = det.Association()   # kept over deactivate, like the tracker
        self.time_lines: List[TimeLine] = []    # per camera, as well: configure to cleanup
        self.fallbacks_seen = 0                # CUDA graph fallbacks already reported
        self.unknown = params.unknown(list(self._parameter_overrides), list(self._parameters))
        for name, close in self.unknown:
            self.get_logger().warning(
                f'unknown parameter {name!r} ignored' + (f' (did you mean {close!r}? '
                                                         f'configure will fail)' if close else ''))
        self.add_on_set_parameters_callback(self.on_set_parameters)
        # ~/segment_image in every state (inactive: answered so); run by the worker
        self.image_service = segment_service.create(self)
        # /diagnostics in every lifecycle state (a plain publisher, a steady-clock timer), so a
        # monitor sees an unconfigured or inactive tracker instead of silence; while frames
        # flow, each tick runs after a frame's output, not inside a frame (quiet_tick.py)
        from diagnostic_msgs.msg import DiagnosticArray

        self.diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        period = self.get_parameter('diagnostics_period_s').value
        period = float(period) if isinstance(period, (int, float)) and period > 0 else 1.0
        self.diag = QuietTick(self.on_diagnostics, lambda exc: self.get_logger().error(
            f'diagnostics failed: {exc!r}'))
        self.diag_timer = self.create_timer(period, lambda: self.diag.tick(time.monotonic()),
                                            clock=Clock(clock_type=ClockType.STEADY_TIME))
        # /clock jumping back (use_sim_time): noted in arrival order (time_line.py)
        self.clock_jumps = time_jump.watch_clock(self.get_clock(), self.on_clock_jump)

    # ------------------------------------------------------------------ lifecycle
    @transitions.loud('configure', undo='release')
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            typos = [f'{n!r} (did you mean {c!r}?)' for n, c in self.unknown if c]
            if typos:
                raise ValueError(f'unknown parameter {", ".join(typos)}')
            self.cfg, self.opts = params.read(self)
            self.tuning.apply(self.opts, self.get_logger().warning)
            check_device(self.cfg.device)
            messages.interfaces()  # fail now, not at the first frame, if messages are missing
            from sam2_ros.engine.multistream import MultiStreamTracker
            from sam2_ros.engine.tracker import StreamingTracker

            t0 = time.monotonic()
            # configure's own full collections (model build, graph capture) are not stalls
            with device_context(self.cfg.device), SIGINT.interruptible(self.context.ok), \
                    self.gc_pauses.ignoring():
                pause_for_test('tracker', self.get_logger().info)
                cams = list(self.opts.cameras)
                self.tracker = (MultiStreamTracker(self.cfg, cameras=len(cams)) if cams
                                else StreamingTracker(self.cfg))
                self.decoder = frame_decoder(self.cfg, self.opts)
            SIGINT.check(self.context.ok)
        except Interrupted as exc:   # Ctrl-C: one line, nothing kept; the node then exits
            self.tracker = None
            self.get_logger().info(f'configure interrupted ({exc}): stopped before the tracker '
                                   f'was ready; exiting')
            return TransitionCallbackReturn.FAILURE
        except Exception as exc:  # CheckpointError, ValueError, ImportError, CUDA errors...
            self.get_logger().error(f'configure failed: {type(exc).__name__}: {exc}')
            self.tracker = None
            return TransitionCallbackReturn.FAILURE
        c = self.cfg
        graphs = c.cuda_graphs_in_use
        if self.opts.stall_trace_ms > 0:
            self.stall = StallTracer(self.opts.stall_trace_ms)
        if self.opts.gc_freeze:
            with self.gc_pauses.ignoring():      # configure's collection, not a stall
                frozen = gc_policy.freeze()
            self.gc_frozen = True
            self.get_logger().info(f'gc_freeze: {frozen} objects exempt from garbage '
                                   f'collection until cleanup')
        self.get_logger().info(
            f'tracker ready in {time.monotonic() - t0:.1f} s: {c.model_size}@{c.image_size} '
            f'{c.device} {c.precision} graphs={graphs} '
            f'weights={c.checkpoint or "RANDOM (masks meaningless)"}')  # a checkpoint wins
        try:
            vision = messages.vision_interfaces()
            self.vision_off = None
        except ImportError as exc:   # the node works without it: those two topics are off
            vision, self.vision_off = None, str(exc)
            self.get_logger().warning(f'~/detections and ~/objects are off: {exc}')
        self.association = det.Association()
        if self.opts.cameras:
            self.rig = Rig(list(self.opts.cameras), self.opts.time_jump_reset_s)
            self.rig.create_outputs(self, vision)
            self.time_lines = self.rig.time_lines
        else:
            self.outputs = self._create_outputs(vision)
            self.time_lines = [TimeLine(self.opts.time_jump_reset_s)]
        if self.decoder is not None:
            self.get_logger().info(self.decoder.describe())
        return TransitionCallbackReturn.SUCCESS

    def _create_outputs(self, vision: Any) -> Publishers:
        o = self.opts
        return Publishers.create(
            self, messages.interfaces().TrackingState, vision and vision.Detection2DArray,
            o.publish_overlay, self.totals, self.association.class_of, serial=not o.pipeline,
            timing_log=o.timing_log, compressed_overlay=o.input_type == 'compressed',
            serialized=o.publish_serialized_images, without_gil=o.publish_without_gil,
            overlay_device=overlay_device_of(o, self.cfg.device), on_frame_out=self.diag.frame_out)

    @transitions.loud('activate', undo='stop_io')
    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        ret = super().on_activate(state)  # activates the lifecycle publishers
        if ret != TransitionCallbackReturn.SUCCESS:
            return ret
        o = self.opts
        self.fallbacks_seen = int(self.tracker.stats.get('fallbacks', 0))
        self.tuning.keep_clocks(str(self.cfg.device), self.get_logger().warning)
        if self.rig is not None:
            self.mailbox, self.worker = self.rig.activate(self)
            self.input_subs = self.rig.subscribe(self, PROMPT_QOS, image_qos(o))
            self.get_logger().info(self.rig.describe_active(self))
            self.late_imports.arm()
            return TransitionCallbackReturn.SUCCESS
        self.mailbox = Mailbox(o.process_every_frame, o.fifo_size, o.prompt_queue_size)
        host = NodeHost(self, self.tracker, self.cfg, o, self.bridge, self.log,
                        held_ids=lambda: self.worker.hold.object_ids(), decoder=self.decoder)
        self.worker = TrackingWorker(self.tracker, self.mailbox, host, self.outputs,
                                     association=self.association, pipeline=o.pipeline,
                                     corrections_on_next_frame=o.corrections_on_next_frame,
                                     deferred_wait_s=o.deferred_wait_ms / 1e3,
                                     stall=self.stall, masks_from_worker=o.masks_from_worker,
                                     time_line=self.time_lines[0])
        self.worker.start()
        self.input_subs = self._subscribe()
        self._log_active()
        self.late_imports.arm()
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.stop_io()
        return super().on_deactivate(state)   # deactivates (keeps) the publishers

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        return TransitionCallbackReturn.SUCCESS

    on_error = on_cleanup           # an error releases everything, as cleanup does

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        self.finished = True
        return TransitionCallbackReturn.SUCCESS

    def stop_io(self) -> None:
        """Subscriptions first (no new work), then the worker after the frame in progress (its
        outputs are published). Counters are added to the totals; prompts still held for a
        frame that never came are reported, not dropped silently."""
        self.tuning.release_clocks()
        for sub in self.input_subs:
            close_input(self, sub)
        self.input_subs = []
        w, mb = self.worker, self.mailbox
        if self.rig is not None:
            self.worker = None
            hold.warn_dropped(self.get_logger(), self.rig.stop())
        elif w is not None:
            w.stop()
            hold.warn_dropped(self.get_logger(), w.drop_pending())
            self.worker = None
            self.totals.add_activation(w, mb)

    def release_io(self) -> None:
        """As stop_io, then the publishers (after subscribers acknowledged what was sent)."""
        self.stop_io()
        if self.outputs is not None:
            self.outputs.release()
            self.outputs = None
        if self.rig is not None:
            self.rig.release()
            self.rig = None

    def release(self) -> None:
        """Everything configure and activate made: the I/O, then the tracker."""
        self.release_io()
        self.time_lines = []            # a new tracker starts a new time line
        dev = str(getattr(self.cfg, 'device', 'cpu'))
        if self.stall is not None:
            self.stall.close()
            self.stall = None
        if self.gc_frozen:              # the released tracker's cycles are collectable again
            gc_policy.unfreeze()
            self.gc_frozen = False
        self.tracker = self.decoder = None
        if dev.startswith('cuda'):
            import torch

            torch.cuda.empty_cache()

    def _subscribe(self) -> List[Any]:
        from geometry_msgs.msg import Point, PointStamped
        from sensor_msgs.msg import CompressedImage, Image

        o = self.opts
        image_type = Image if o.input_type == 'raw' else CompressedImage
        topic = input_topic(o.image_topic, o.input_type)
        subs = [
            image_input(self, topic, self.on_image, image_qos(o), o) if image_type is Image else
            self.create_subscription(image_type, topic, self.on_image, image_qos(o)),
            self.create_subscription(messages.interfaces().Prompt, '~/prompt',
                                     lambda m: self._queue(m, 'prompt', m), PROMPT_QOS),
            self.create_subscription(PointStamped, '~/click',
                                     lambda m: self._queue(m, 'click', m.point), PROMPT_QOS),
        ] + [self.create_subscription(Point, t, self.on_point, PROMPT_QOS)
             for t in self.point_click_topics()]
        if self.vision_off is None:
            subs.append(self.create_subscription(
                messages.vision_interfaces().Detection2DArray, '~/detections',
                lambda m: self._queue(m, 'detections', m), PROMPT_QOS))
        return subs

    def _log_active(self) -> None:
        o = self.opts
        topic = input_topic(o.image_topic, o.input_type)
        mode = (f'FIFO of {o.fifo_size}, never drops' if o.process_every_frame
                else 'newest frame only')
        self.get_logger().info(
            f'active: {o.input_type} images on {self.resolve_topic_name(topic)} '
            f'({o.qos_reliability}, {mode}); clicks: PointStamped on '
            f'{self.resolve_topic_name("~/click")}, Point (rqt_image_view) on '
            f'{", ".join(self.point_click_topics())}; '
            + (f'detections: Detection2DArray on {self.resolve_topic_name("~/detections")}, '
               f'objects on {self.resolve_topic_name("~/objects")}'
               if self.vision_off is None else 'detections/objects: off (no vision_msgs)'))

    def point_click_topics(self) -> List[str]:
        """Where rqt_image_view publishes clicks (`<shown image topic>_mouse_left`) for the
        images a user would click on: our overlay, our mask and the camera image."""
        base = self.resolve_topic_name(self.opts.image_topic)
        return [self.resolve_topic_name('~/overlay') + '_mouse_left',
                self.resolve_topic_name('~/mask') + '_mouse_left', base + '_mouse_left']

    def on_image(self, msg: Any, recv_t: Optional[float] = None) -> None:
        self.mailbox.put_frame(FrameItem(msg, inputs.stamp_ns(msg.header.stamp), msg.header,
                                         time.monotonic() if recv_t is None else recv_t))

    def on_point(self, msg: Any) -> None:
        """A geometry_msgs/Point from rqt_image_view: no stamp, and the user clicked what is
        on screen, i.e. the latest processed frame (the next one before any frame)."""
        self._enqueue(PromptItem(msg, 'click', LATEST))

    def on_clock_jump(self, now_ns: int, back_ns: int) -> None:
        """/clock jumped back by back_ns to now_ns: noted for every camera, never refused; the
        worker applies it after the frames received before it, or the next activation's."""
        for line in self.time_lines:
            line.note_jump(now_ns, back_ns)

    def _queue(self, msg: Any, kind: str, payload: Any) -> None:
        self._enqueue(PromptItem(payload, kind, inputs.stamp_ns(msg.header.stamp)))

    def _enqueue(self, item: PromptItem) -> None:
        if not self.mailbox.put_prompt(item):
            self.worker.refuse(describe(item.kind, item.stamp_ns), f'the prompt queue is full '
                               f'({self.mailbox.prompt_queue_size}, prompt_queue_size)')

    def on_set_parameters(self, changes: List[Any]) -> Any:
        """click_mode, click_object_id and detection_* take effect at once, autostart and
        executor when the node starts again, the others at the next configure (logged); bad
        values are refused with the reason (`ros2 param set` prints it)."""
        from rcl_interfaces.msg import SetParametersResult

        new = {p.name: p.value for p in changes}
        reason = runtime_params.refusal(new, lambda name: self.get_parameter(name).value)
        for line in [] if reason else runtime_params.applies_later(new):
            self.get_logger().info(line)
        return SetParametersResult(successful=not reason, reason=reason)

    def on_diagnostics(self) -> None:
        stalls = self.stall.take() if self.stall is not None else []
        late = self.late_imports.take()
        for line in (self.gc_pauses.warnings() + [st.describe() for st in stalls]
                     + ([LateImports.describe(late)] if late else [])):
            self.get_logger().warning(line)
        w, mb, tr = self.worker, self.mailbox, self.tracker
        if self.rig is not None and w is not None and tr is not None:
            statuses = self.rig.statuses(self, time.monotonic(), self.fallbacks_seen)
            self.fallbacks_seen = int(tr.stats.get('fallbacks', 0))
            self.diag_pub.publish(messages.diagnostics_array(self.get_clock().now().to_msg(),
                                                             statuses))
            return
        if w is None or mb is None or tr is None:
            report = diagnostics.inactive_report(
                tr, dict(self.totals.done),
                diagnostics.model_name(self.cfg) if self.cfg is not None else None)
        else:
            snap = diagnostics.snapshot(time.monotonic(), w, mb, tr, self.cfg, self.opts,
                                        self.totals, self.fallbacks_seen, self.gc_pauses,
                                        vision_on=self.vision_off is None, inputs=self.input_subs,
                                        decoder=self.decoder, late_imports=self.late_imports.count,
                                        node=self)     # the image topic's publishers
            self.fallbacks_seen = max(self.fallbacks_seen, snap.fallbacks)
            report = diagnostics.report(snap)
        self.diag_pub.publish(messages.diagnostics_msg(
            self.get_clock().now().to_msg(),
            diagnostics.status_name(self.get_fully_qualified_name()), report.level,
            report.message, report.values))


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
