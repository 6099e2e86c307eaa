"""/diagnostics of the tracker node, in every lifecycle state: rate, latency percentiles,
counters since start and what is wrong (no frames, CUDA graph fallbacks, errors, a stopped
worker). A mixin of :class:`sam2_ros.ros.node.TrackerNode`, kept apart so each file holds one
concern; it reads the node's worker, mailbox, tracker and totals.
"""

from __future__ import annotations

import time
from typing import Any, Dict

from sam2_ros.ros import messages
from sam2_ros.ros import detections as det

# Percentiles and rate in /diagnostics cover this many seconds of frames.
DIAG_WINDOW_S = 10.0
# A run of this many failed frames turns diagnostics ERROR (a few bad frames are only WARN).
ERROR_AFTER_FAILURES = 5


class DiagnosticsMixin:
    """The diagnostics timer's callback and its helpers."""

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
            # the output stage (pipeline): results waiting for the publisher thread, overlays
            # sent and replaced by a newer frame's before they could be sent
            'pipeline': bool(o.pipeline), 'publish_waiting': w.output.pending(),
            'overlays_published': w.output.overlays,
            'overlays_dropped': w.output.overlays_dropped,
            'model': f'{self.cfg.model_size}@{self.cfg.image_size} {self.cfg.device} '
                     f'{self.cfg.precision}',
            'random_weights': self.cfg.random_weights,
            # Python's full garbage collections in this process (gc_freeze keeps them short)
            'gc_full_collections': self.gc_pauses.full_collections,
            'gc_max_pause_ms': round(self.gc_pauses.max_pause_ms, 2),
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
        self._diag_pub.publish(messages.diagnostics_msg(
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
        self._diag_pub.publish(messages.diagnostics_msg(
            self.get_clock().now().to_msg(), self._diag_name(), 'WARN',
            f'{state}: not tracking', values))
