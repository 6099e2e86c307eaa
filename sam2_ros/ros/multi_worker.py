"""The worker of a multi-camera node: ONE thread that owns the
:class:`~sam2_ros.engine.multistream.MultiStreamTracker` of N cameras and tracks each group of
paired frames (:mod:`~sam2_ros.ros.paired_mailbox`) in one ``track`` call.

Each camera keeps the one-camera worker's policy (:class:`~sam2_ros.ros.worker.TrackingWorker`
over a :class:`~sam2_ros.engine.camera.CameraTracker`, driven by this thread: prompts and
what they wait for, decode, time jumps, detections, errors, counters, its own output stage),
so prompts, stamps and failures of one camera are its own: a frame one camera cannot decode or
track (bad encoding, another size) fails for that camera only, the others of its group are
tracked. ``on_group`` (the 3D positions) gets each group's per-camera results. Nothing here
imports ROS.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any, Callable, List, Optional, Sequence

from sam2_ros.engine.types import FrameResult
from sam2_ros.ros import detections as det
from sam2_ros.engine.camera import CameraTracker
from sam2_ros.ros.mailbox import arrival_seq
from sam2_ros.ros.paired_mailbox import PairedMailbox
from sam2_ros.ros.pairing import Group
from sam2_ros.ros.pipeline import Outputs
from sam2_ros.ros.shared_publisher import SharedPublisher
from sam2_ros.ros.stall_trace import StallTracer, traced
from sam2_ros.ros.worker import StartedFrame, TrackingWorker
from sam2_ros.ros.worker_types import WorkerHost

GroupHook = Callable[[Group, List[Optional[FrameResult]]], None]


class MultiCameraWorker:
    """The thread of N cameras: ``hosts[c]`` / ``outputs[c]`` / ``associations[c]`` are camera
    c's (as a one-camera worker's); ``lanes[c]`` is its worker."""

    def __init__(self, core: Any, mailbox: PairedMailbox, hosts: Sequence[WorkerHost],
                 outputs: Sequence[Outputs], associations: Sequence[det.Association], *,
                 pipeline: bool = False, on_group: Optional[GroupHook] = None,
                 corrections_on_next_frame: bool = False, deferred_wait_s: float = 0.0,
                 stall: Optional[StallTracer] = None,
                 shared_publisher: bool = True, masks_from_worker: bool = False) -> None:
        self.core = core
        self.stall = stall             # samples the threads' stacks of a stalled track call
        self.mailbox = mailbox
        self.host = hosts[0]           # thread_init: the cameras share the tracker's device
        self.on_group = on_group
        # pipelined: one publisher thread for every camera, masks first (shared_publisher.py)
        self.publisher = SharedPublisher(thread_init=self.host.thread_init) \
            if pipeline and shared_publisher else None
        self.lanes = [TrackingWorker(CameraTracker(core, c), mailbox.camera(c), hosts[c],
                                     outputs[c], association=associations[c],
                                     pipeline=pipeline, driver_alive=self.thread_alive,
                                     corrections_on_next_frame=corrections_on_next_frame,
                                     deferred_wait_s=deferred_wait_s,
                                     shared=self.publisher,
                                     masks_from_worker=masks_from_worker)
                      for c in range(core.cameras)]
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.groups = 0                # groups tracked

    def start(self) -> None:
        self._stop.clear()
        if self.publisher is not None:
            self.publisher.start()
        for lane in self.lanes:
            lane.output.start()
        self._thread = threading.Thread(target=self._run, name='sam2_tracker_worker',
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """As TrackingWorker.stop, for every camera."""
        self._stop.set()
        self.mailbox.close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self.publisher is not None:     # before the lanes' overlay threads it feeds
            self.publisher.stop(timeout)
        for lane in self.lanes:
            lane.output.stop(timeout)

    def thread_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def alive(self) -> bool:
        return all(lane.alive for lane in self.lanes)

    def drop_pending(self) -> List[str]:
        return [f'camera {c}: {what}' for c, lane in enumerate(self.lanes)
                for what in lane.drop_pending()]

    # ------------------------------------------------------------------ main loop
    def _run(self) -> None:
        self.host.thread_init()
        while not self._stop.is_set():
            self.run_once(0.1)

    def run_once(self, timeout: float) -> None:
        """One round of the thread: wait up to ``timeout`` s, then the prompts, the jobs and
        the group that waited; a camera without a frame in the round idles (``idle``: its
        /clock jumps noted before the round, its corrections deferred on a stopped camera),
        also while the other cameras stream."""
        mark = arrival_seq()
        group, prompts = self.mailbox.take(timeout)
        if self._stop.is_set():
            return
        for lane, items in zip(self.lanes, prompts):
            for item in items:
                guarded(lane, lambda: lane.handle_prompt(item))
        for job in self.mailbox.take_jobs():   # ~/segment_image requests
            job.run()
        if group is not None:
            try:
                self.handle_group(group)
            except Exception as exc:  # never let the worker die silently
                for c, lane in enumerate(self.lanes):   # the cameras whose frame it was
                    if group.frames[c] is not None:
                        lane.counters.consecutive_failures += 1
                        lane.counters.frame_errors += 1
                        lane.errors.report(f'internal error: {exc!r}\n'
                                           f'{traceback.format_exc()}')
        for c, lane in enumerate(self.lanes):
            if group is None or group.frames[c] is None:
                guarded(lane, lambda: lane.idle(mark))
        if self.publisher is not None:    # this round's results and re-publishes: a batch
            self.publisher.commit()

    def handle_group(self, group: Group) -> None:
        """Begin every camera's frame, track the begun ones in one call, finish each in camera
        order, the failed ones last (each guarded: one camera's failure never stops, nor
        delays, the others' results).

        Every camera's engine span is that one ``track`` call: its start is stamped after the
        last camera's decode and its end before the first camera is finished, so a camera's
        span holds neither another camera's decode nor another camera's hand-off (those are
        waits of the pair, in the timing log's prompts and output hand-off)."""
        started: List[Optional[StartedFrame]] = [None] * len(self.lanes)
        for c, arrival in enumerate(group.frames):
            if arrival is not None:
                started[c] = guarded(self.lanes[c],
                                     lambda: self.lanes[c].begin_frame(arrival.item))
        if all(s is None for s in started):
            return
        begun = time.monotonic()
        for s in started:
            if s is not None:
                s.times.engine0 = begun
        with traced(self.stall):
            out = self.core.track([None if s is None else s.rgb for s in started])
        ended = time.monotonic()
        self.groups += 1
        results: List[Optional[FrameResult]] = [None] * len(self.lanes)
        # the cameras tracked first, in camera order; then those whose frame failed, whose
        # handling may track that frame again alone: no camera's result waits for that
        order = sorted(range(len(self.lanes)), key=lambda c: out.errors[c] is not None)
        for c in order:
            lane, s = self.lanes[c], started[c]
            if s is not None:
                results[c] = guarded(lane, lambda: self._finish(lane, s, out.results[c],
                                                                out.errors[c], ended))
        if self.publisher is not None:        # the masks out before the group's positions
            self.publisher.commit()
        if self.on_group is not None:
            try:        # the 3D positions: a failure is reported on camera 0 (their frame),
                self.on_group(group, results)       # not as every camera's failed frame
            except Exception as exc:  # noqa: BLE001 - the frames' results are out already
                self.lanes[0].errors.report(f'3D positions failed: {exc!r}')

    @staticmethod
    def _finish(lane: TrackingWorker, s: StartedFrame, res: Optional[FrameResult],
                err: Optional[Exception], ended: float) -> Optional[FrameResult]:
        """Camera ``lane``'s frame after the group's track call: published (or its failure
        handled, which may track it again alone: then its span ends after that)."""
        if err is not None:
            res = lane.track_failed(s.rgb, err)
            lane.finish_frame(s, res)
            return res
        lane.finish_frame(s, res, ended=ended)
        return res


def guarded(lane: TrackingWorker, work: Callable[[], Any]) -> Any:
    """``work()`` of one camera; an unexpected exception is that camera's error (reported,
    None returned), never the others'."""
    try:
        return work()
    except Exception as exc:  # noqa: BLE001 - one camera's bug must not stop the others
        lane.counters.consecutive_failures += 1
        lane.errors.report(f'internal error: {exc!r}\n{traceback.format_exc()}')
        return None
