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

import sys
import time
from typing import Any, List, Optional

import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

from sam2_ros.overlay import render_overlay
from sam2_ros.ros import conversions as conv
from sam2_ros.ros import params
from sam2_ros.ros.worker import FrameItem, Mailbox, PromptItem, Published, TrackingWorker

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
        self._timer = None
        self._last_publish_ms = 0.0
        self._fallbacks_seen = 0
        self._last_log = ('', 0.0, 0)  # (text, time, suppressed) for de-duplicating floods

    # ------------------------------------------------------------------ lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.cfg, self.opts = params.read(self)
            conv.interfaces()  # fail now, not at the first frame, if messages are missing
            from sam2_ros.engine.tracker import StreamingTracker

            t0 = time.monotonic()
            self.tracker = StreamingTracker(self.cfg)
        except Exception as exc:  # CheckpointError, ValueError, ImportError, CUDA errors...
            self.get_logger().error(f'configure failed: {type(exc).__name__}: {exc}')
            self.tracker = None
            return TransitionCallbackReturn.FAILURE
        c = self.cfg
        self.get_logger().info(
            f'tracker ready in {time.monotonic() - t0:.1f} s: {c.model_size}@{c.image_size} '
            f'{c.device} {c.precision} graphs={c.use_cuda_graphs} '
            f'weights={"RANDOM (masks meaningless)" if c.random_weights else c.checkpoint}')
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import PointStamped
        from sensor_msgs.msg import CompressedImage, Image

        o = self.opts
        m = conv.interfaces()
        self._pubs = {
            'mask': self.create_lifecycle_publisher(Image, '~/mask', OUTPUT_QOS),
            'overlay': (self.create_lifecycle_publisher(Image, '~/overlay', OUTPUT_QOS)
                        if o.publish_overlay else None),
            'state': self.create_lifecycle_publisher(m.TrackingState, '~/state', OUTPUT_QOS),
            'diag': self.create_lifecycle_publisher(DiagnosticArray, '/diagnostics', 10),
        }
        ret = super().on_activate(state)  # activates the lifecycle publishers
        if ret != TransitionCallbackReturn.SUCCESS:
            return ret
        self._mailbox = Mailbox(o.process_every_frame, o.fifo_size, o.prompt_queue_size)
        self._worker = TrackingWorker(self.tracker, self._mailbox, decode=self._decode,
                                      convert=self._convert, publish=self._publish, log=self._log,
                                      thread_init=self._worker_thread_init)
        self._worker.start()
        self._subs = [
            self.create_subscription(Image if o.input_type == 'raw' else CompressedImage,
                                     o.image_topic, self._on_image, self._image_qos()),
            self.create_subscription(m.Prompt, '~/prompt', self._on_prompt, PROMPT_QOS),
            self.create_subscription(PointStamped, '~/click', self._on_click, PROMPT_QOS),
        ]
        self._fallbacks_seen = int(self.tracker.stats.get('fallbacks', 0))
        self._timer = self.create_timer(o.diagnostics_period_s, self._on_diagnostics,
                                        clock=Clock(clock_type=ClockType.STEADY_TIME))
        mode = (f'FIFO of {o.fifo_size}, never drops' if o.process_every_frame
                else 'newest frame only')
        self.get_logger().info(
            f'active: {o.input_type} images on {self.resolve_topic_name(o.image_topic)} '
            f'({o.qos_reliability}, {mode})')
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_io()
        return TransitionCallbackReturn.SUCCESS

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

    def _release_io(self) -> None:
        """Subscriptions first (no new work), then the worker, then timer and publishers."""
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        if self._timer is not None:
            self.destroy_timer(self._timer)
            self._timer = None
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
        self._queue_prompt(PromptItem(msg, 'click', conv.stamp_ns(msg.header.stamp)))

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
        return conv.compressed_to_rgb(msg, self._bridge)

    def _convert(self, item: PromptItem):
        if item.kind == 'click':
            return conv.ACTION_ADD, conv.click_to_prompt(item.msg, self.opts.click_object_id)
        return conv.prompt_from_msg(item.msg, self._bridge)

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
            dropped=self._mailbox.dropped, processed=self._worker.counters.processed,
            errors=conv.errors_text(p.errors)))
        overlay = pubs.get('overlay')
        if overlay is not None and overlay.get_subscription_count() > 0:
            overlay.publish(conv.image_msg(render_overlay(p.rgb, p.result), 'rgb8', p.header))
        self._last_publish_ms = (time.perf_counter() - t0) * 1e3

    def _log(self, level: str, text: str) -> None:
        """Log through the node logger; an identical line within 2 s is counted, not repeated."""
        now = time.monotonic()
        last, t, suppressed = self._last_log
        if text == last and now - t < 2.0:
            self._last_log = (last, t, suppressed + 1)
            return
        if suppressed:
            text = f'{text} (previous message repeated {suppressed} more times)'
        self._last_log = (text, now, 0)
        logger = self.get_logger()
        {'info': logger.info, 'warn': logger.warning}.get(level, logger.error)(text)

    def _on_diagnostics(self) -> None:
        w, mb, tr, o = self._worker, self._mailbox, self.tracker, self.opts
        if w is None or mb is None or tr is None:
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
            'objects': c.objects, 'received_frames': mb.received,
            'processed_frames': c.processed,
            'dropped_frames': mb.dropped, 'waiting_frames': mb.pending_frames(),
            'waiting_prompts': mb.pending_prompts() + w.waiting_prompts,
            'frame_errors': c.frame_errors, 'prompt_errors': c.prompt_errors,
            'graph_steps': int(tr.stats.get('graph_steps', 0)),
            'eager_steps': int(tr.stats.get('eager_steps', 0)),
            'fallbacks': fallbacks,
            'model': f'{self.cfg.model_size}@{self.cfg.image_size} {self.cfg.device} '
                     f'{self.cfg.precision}',
            'random_weights': self.cfg.random_weights,
        })
        msg = '; '.join(problems) if problems else 'tracking'
        pub = self._pubs.get('diag')
        if pub is None:  # released by a transition running in another executor thread
            return
        pub.publish(conv.diagnostics_msg(
            self.get_clock().now().to_msg(), f'{NODE_NAME}: tracker', level, msg, values))


def main(argv: Optional[List[str]] = None) -> int:
    """Console entry point. With ``autostart: true`` the node configures and activates itself
    and exits with status 1 if that fails; otherwise it waits for lifecycle service calls."""
    rclpy.init(args=argv if argv is not None else sys.argv)
    node = TrackerNode()
    # One executor thread: callbacks only hand messages to the worker, which does the work in
    # its own thread. rclpy's MultiThreadedExecutor (3 threads, tried first) delayed the
    # hand-off of 720p frames by up to seconds through GIL contention with the worker
    # (CPU, node_latency at 5 Hz: DDS + hand-off p50 / p99 34 / 1374 ms, single-threaded
    # 17 / 38 ms; docs/benchmarks.md). In FIFO mode a full FIFO now also holds back prompts
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
        while rc == 0 and rclpy.ok() and not node.finished:
            executor.spin_once(timeout_sec=0.2)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node._release_io()
        node._release_tracker()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return rc


if __name__ == '__main__':
    sys.exit(main())
