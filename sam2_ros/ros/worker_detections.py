"""The worker's handling of detections (vision_msgs Detection2DArray as PromptItems of kind
'detections'): held until their frame, associated with the tracked objects of the frame they
were computed on, turned into box prompts on the latest frame. A mixin of
:class:`sam2_ros.ros.worker.TrackingWorker`, kept apart so each file holds one concern; it uses
the worker's tracker, counters, error reporting and output hand-off.
"""

from __future__ import annotations

from sam2_ros.engine.errors import TrackerError
from sam2_ros.engine.types import FrameResult, Prompt
from sam2_ros.ros import detections as det
from sam2_ros.ros.mailbox import PromptItem


class DetectionsMixin:
    """Detections in the worker thread (see the module docstring)."""

    def _remember(self, stamp_ns: int, res: FrameResult) -> None:
        """A processed frame's objects, for detections stamped like it (kept 256 frames; the
        age limit is the run-time rule max_age_frames)."""
        tracked = [det.Tracked(o.obj_id, det.mask_box(o.box), o.state) for o in res.objects]
        self._seen[stamp_ns] = (self.counters.processed, res.width, res.height, tracked)
        self._seen.move_to_end(stamp_ns)
        while len(self._seen) > 256:
            self._seen.popitem(last=False)
        self.association.observe(tracked)

    def _reject_detections(self, item: PromptItem, why: str) -> None:
        self.counters.prompt_errors += 1
        self.detection_counts['rejected'] += 1
        self.report_error(f'rejected detections (stamp {item.stamp_ns} ns): {why}')

    def _on_detections(self, item: PromptItem) -> None:
        """A Detection2DArray: associated now when its frame was processed, held until its
        frame when it is newer than the latest one (the detector was faster than us). Counted
        in 'messages' once handled (held, associated or rejected)."""
        try:
            self._handle_detections(item)
        finally:
            self.detection_counts['messages'] += 1

    def _handle_detections(self, item: PromptItem) -> None:
        if item.stamp_ns <= 0:
            self._reject_detections(item, 'no stamp: stamp detections like the image they '
                                          'were computed on')
            return
        last = self.last_stamp_ns
        if last is None or item.stamp_ns > last:
            if len(self._held_detections) >= self.mailbox.prompt_queue_size:
                self._reject_detections(item, f'{len(self._held_detections)} detection '
                                              f'messages already wait for their frames')
                return
            self._held_detections.append(item)
            return
        self._associate(item)

    def _detections_due(self, stamp_ns: int) -> None:
        """After the frame ``stamp_ns``: associate the detections held for it; those held for
        an earlier stamp will never see their frame (dropped, failed or never sent)."""
        due = [d for d in self._held_detections if d.stamp_ns <= stamp_ns]
        self._held_detections = [d for d in self._held_detections if d.stamp_ns > stamp_ns]
        for d in due:
            if d.stamp_ns == stamp_ns:
                self._associate(d)
            else:
                self._reject_detections(d, f'no frame with this stamp was processed (the next '
                                           f'one was {stamp_ns} ns): dropped, failed or never '
                                           f'received')

    def _associate(self, item: PromptItem) -> None:
        """Detections of an already processed frame -> box prompts on the latest frame."""
        seen = self._seen.get(item.stamp_ns)
        rules = self._detection_rules()
        if seen is None:
            self._reject_detections(item, 'no processed frame has this stamp (never received, '
                                          'dropped, failed, or long ago)')
            return
        index, width, height, tracked = seen
        age = self.counters.processed - index
        if age > rules.max_age_frames:
            self._reject_detections(item, f'its frame is {age} frames old (more than '
                                          f'detection_max_age_frames {rules.max_age_frames})')
            return
        try:
            raws = self._convert_detections(item.msg)
        except Exception as exc:  # a malformed message: say so, keep tracking
            self._reject_detections(item, f'cannot read the message: {exc!r}')
            return
        dets, errors = det.validate_all(raws, width, height)
        for e in errors:
            self.counters.prompt_errors += 1
            self.detection_counts['rejected'] += 1
            self.report_error(f'rejected {e} (stamp {item.stamp_ns} ns)')
        late = f', applied {age} frames later' if age else ''
        res = None
        for d in self.association.plan(dets, tracked, rules, self.tracker.object_ids):
            self.detection_counts[d.kind] += 1
            box = ', '.join(f'{v:.0f}' for v in d.detection.box)
            label = f'detection {d.detection.index} ({d.detection.class_id or "no class"} ' \
                    f'{d.detection.score:.2f}, box {box})'
            if d.kind in (det.NEW, det.CORRECT):
                try:
                    res = self.tracker.add_prompt(Prompt(obj_id=d.obj_id, box=d.detection.box))
                except TrackerError as exc:
                    self.counters.prompt_errors += 1
                    self.report_error(f'{label}: {type(exc).__name__}: {exc}')
                    continue
                self.association.prompted(d)
                self._log('info', f'{label} ' + (f'starts object {d.obj_id}' if d.kind == det.NEW
                                                 else f're-prompts object {d.obj_id}: {d.reason}')
                          + late)
            elif d.kind == det.IGNORE:
                self.association.matched(d)
            elif d.kind == det.SKIPPED:
                self.report_error(f'{label} not started: {d.reason}', level='warn')
        if res is not None and self._last is not None:
            rgb, header = self._last
            self._remember(self.last_stamp_ns, res)
            self._emit(res, rgb, header, 0.0, None)
