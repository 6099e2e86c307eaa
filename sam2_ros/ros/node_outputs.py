"""What the tracker node sends for a frame, and how its publishers are let go.

Mask, state (and objects) first, each built with one copy of the image data
(:func:`sam2_ros.ros.conversions.image_msg`); the overlay only while someone subscribes to it
(RViz, a recorder). Whether these run in the worker thread or on their own threads is the
output stage's business (:mod:`sam2_ros.ros.pipeline`, parameter ``pipeline``). A mixin of
:class:`sam2_ros.ros.node.TrackerNode`, kept apart so each file holds one concern.
"""

from __future__ import annotations

import time

from rclpy.duration import Duration

from sam2_ros.overlay import render_overlay
from sam2_ros.ros import images, messages
from sam2_ros.ros.mailbox import Published

# On cleanup / shutdown, wait up to this long in all for subscribers to acknowledge what was
# already published (the last frame's mask and state), then destroy the publishers.
FLUSH_TIMEOUT_S = 1.0
# The publishers whose messages a subscriber must not lose when the node lets them go.
RESULT_TOPICS = ('mask', 'state', 'objects')
# A reader acknowledges when a writer's heartbeat asks (Fast DDS: every 3 s by default, 0.1 s
# with config/fastdds_large_frames.xml); a sample published longer ago than this has been
# acknowledged (or re-sent and then acknowledged) by every reader still alive.
ACKED_AFTER_S = 3.5


class OutputsMixin:
    """The output stage's callables and the publishers' release."""

    def _publish(self, p: Published) -> None:
        """Mask, state, objects. The state follows its mask (a state means its mask was
        already sent). Counters are the ones the worker saw when it handed the frame over."""
        if not self.context.ok():    # Ctrl-C shut the context down: nothing can go out
            return
        t0 = time.perf_counter()
        pubs = self._pubs
        pubs['mask'].publish(images.image_msg(p.result.label_mask(), 'mono8', p.header))
        pubs['state'].publish(messages.tracking_state_msg(
            p.result, p.header, decode_ms=p.decode_ms, publish_ms=self._publish_ms(),
            dropped=self._totals['dropped'] + p.dropped,
            processed=self._totals['processed'] + p.processed,
            errors=messages.errors_text(p.errors)))
        if pubs.get('objects') is not None:
            pubs['objects'].publish(messages.objects_msg(p.result, p.header,
                                                     self._association.class_of))
        now = time.monotonic()
        self._unacked.update({name: now for name in RESULT_TOPICS})
        self._last_publish_ms = (time.perf_counter() - t0) * 1e3

    def _publish_ms(self) -> float:
        """TrackingState.publish_ms: the previous frame's publishing time. Serial, the overlay
        delays the next frame and is counted; pipelined, it runs beside the next frame."""
        if self.opts.pipeline:
            return self._last_publish_ms
        return self._last_publish_ms + self._last_overlay_ms

    def _wants_overlay(self) -> bool:
        overlay = self._pubs.get('overlay')
        return overlay is not None and self.context.ok() and overlay.get_subscription_count() > 0

    def _publish_overlay(self, p: Published) -> None:
        """The overlay: for eyes only and the costliest output (render + 2.7 MB at 720p)."""
        if not self.context.ok():
            return
        t0 = time.perf_counter()
        self._pubs['overlay'].publish(images.image_msg(render_overlay(p.rgb, p.result), 'rgb8',
                                                     p.header))
        self._last_overlay_ms = (time.perf_counter() - t0) * 1e3

    def _flush_publishers(self) -> None:
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
        unacked, self._unacked = dict(self._unacked), {}
        if not self.context.ok():
            return
        now = time.monotonic()
        deadline = now + FLUSH_TIMEOUT_S
        for name, pub in self._pubs.items():
            if pub is None or name == 'overlay' or now - unacked.get(name, -1e9) > ACKED_AFTER_S:
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
