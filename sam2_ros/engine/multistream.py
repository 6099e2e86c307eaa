"""One streaming SAM 2 tracker for N camera streams on one model, runner and memory bank.

A stereo rig (or any N cameras on one GPU) steps all its cameras at once: ``track(frames)``
takes one frame (or None) per camera, encodes the present ones as ONE image-encoder batch, runs
each camera's queued prompts, then ONE track call over every object of every camera, each object
reading its own camera's features (``streams.py``), and returns each camera's results. Per
camera it keeps ``StreamingTracker``'s semantics (``stream(c)``: prompts, corrections, removal,
reset, frame numbers), and its failures are its own: a bad frame, a prompt that does not fit,
or a size change on one camera is reported for that camera and the others are tracked; a
failure of the shared computation (the encoder batch, the track call) fails that step for the
cameras in it. ``TrackerConfig.batch_streams=False`` is the reference: one encode and one track
call per camera, which equals N independent ``StreamingTracker``s bitwise. ``StreamingTracker``
is the one-camera case of this class. Imports no ROS.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from sam2_ros.engine import frame_in, frame_result, step
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.errors import (FrameError, StepError, TrackerError, read_failed,
                                    step_failed)
from sam2_ros.engine.image import ImageSegmenter
from sam2_ros.engine.image import frame_result as image_frame_result
from sam2_ros.engine.model import autocast, build_model, precast
from sam2_ros.engine.prompt_steps import PromptSteps
from sam2_ros.engine.prompts import check_obj_id
from sam2_ros.engine.runners import frame_mode, make_runner
from sam2_ros.engine.stream import ObjectInfo, Stream
from sam2_ros.engine.stream_handle import StreamHandle
from sam2_ros.engine.types import FrameResult, Prompt, StreamsResult
from sam2_ros.engine.warm_up import warm_up

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

log = logging.getLogger(__name__)


class MultiStreamTracker:
    """Streaming multi-object SAM 2 tracker over N camera streams sharing one model.

    Memory is preallocated at construction for ``cfg.max_objects`` objects per camera (camera
    c owns bank slots [c * M, (c + 1) * M)). The guarantees of ``StreamingTracker`` hold per
    camera. Not thread safe: call it from one thread.
    """

    def __init__(self, cfg: TrackerConfig, cameras: int = 1, model: Optional[SAM2Base] = None):
        """Build (or take) the model, preallocate the bank for every camera, warm up.

        Args:
            cfg: the whole configuration; validated here (``ValueError`` if inconsistent).
            cameras: N, the number of streams (>= 1).
            model: an already built ``SAM2Base`` of ``cfg``'s size to share, or None (built
                from ``cfg.checkpoint``, or random weights when ``cfg.random_weights``).
        """
        self.cfg = cfg.validate()
        if isinstance(cameras, bool) or not isinstance(cameras, int) or cameras < 1:
            raise ValueError(f'cameras must be an int >= 1, got {cameras!r}')
        self.cameras = cameras
        self.device = torch.device(cfg.device)
        # weights as ordinary tensors even when the caller is in inference mode: precompiled
        # functions (precompile) take them as inputs, which inference tensors cannot be
        with torch.inference_mode(False):
            self.model = model if model is not None else build_model(cfg)
            if cfg.precision == 'bf16' and cfg.precast_weights:
                # a model of the caller's stays unchanged (it may serve fp32 or the official
                # predictor too); our own is cast in place
                self.model = precast(self.model, copy=model is not None)
        self.size = self.model.image_size
        self.stats: Dict[str, object] = collections.Counter()
        self.fallback_reasons: Dict[str, int] = collections.Counter()
        self.runner = make_runner(self.model, cfg, self.count_fallback, cameras)
        self.maskmem_pos, self.bank = warm_up(self.model, cfg, self.runner,
                                              cameras * cfg.max_objects)
        m = cfg.max_objects
        self.streams = [Stream(c, range(c * m, (c + 1) * m), self.bank, self.size)
                        for c in range(cameras)]
        self.handles = [StreamHandle(self, s) for s in self.streams]
        self.prompt_steps = PromptSteps(self)
        self.image: Optional[ImageSegmenter] = None     # image mode, built on first use

    def stream(self, camera: int) -> StreamHandle:
        """The per-camera API of camera ``camera`` (0..N-1)."""
        return self.handles[camera]

    @torch.inference_mode()
    def track(self, frames: Sequence[Optional[frame_in.Frame]]) -> StreamsResult:
        """Track every object of every camera on the frames of one step.

        Args:
            frames: N entries, camera c's [H, W, 3] uint8 RGB frame or None (no frame of that
                camera this step: its frame counter does not move). Cameras may differ in
                size; each camera's size may change only while it tracks no object.

        Returns:
            ``StreamsResult``: per camera its ``FrameResult`` (as ``StreamingTracker.track``
            returns it) or the error its frame failed with (what ``StreamingTracker.track``
            would raise, with the same effect on that camera). Nothing is raised for one
            camera's failure.

        Raises:
            FrameError: ``frames`` does not hold one entry per camera (nothing changed).
        """
        if len(frames) != self.cameras:
            raise FrameError(f'one frame (or None) per camera: {self.cameras} expected, '
                             f'got {len(frames)}')
        out = StreamsResult([None] * self.cameras, [None] * self.cameras)
        sizes: Dict[int, Tuple[int, int]] = {}
        for c, frame in enumerate(frames):
            if frame is None:
                continue
            try:
                hw = frame_in.frame_size(frame)
                self.streams[c].check_frame(hw)
            except TrackerError as exc:
                out.errors[c] = exc
                continue
            sizes[c] = hw
        live = sorted(sizes)
        for group in ([live] if self.cfg.batch_streams else [[c] for c in live]):
            if group:
                self._step(group, [frames[c] if c in group else None
                                   for c in range(self.cameras)], sizes, out)
        return out

    @torch.inference_mode()
    def add_prompt(self, stream: Stream, prompt: Prompt) -> FrameResult:
        """``StreamHandle.add_prompt``: apply a prompt to the stream's latest frame."""
        prompt = dataclasses.replace(prompt, obj_id=check_obj_id(prompt.obj_id))
        if stream.step_features is None:
            stream.queue(prompt)
            return FrameResult(-1, 0, 0)
        stream.validate(prompt)
        stream.check_features()
        t0 = time.perf_counter()
        try:
            with autocast(self.cfg):
                self.prompt_steps.run_deferred(stream)      # earlier calls on this frame first
                mode = self.prompt_steps.on_latest(stream, prompt)
        except TrackerError:
            raise
        except Exception as exc:  # noqa: BLE001 - a computation failure is a StepError
            raise StepError(f'the prompt for object {prompt.obj_id} on frame {stream.frame} '
                            f'failed: {exc!r}; it was not applied (prompts deferred before '
                            f'it that ran were), pass it again') from exc
        return self._result(stream, mode, t0)

    @torch.inference_mode()
    def defer_prompt(self, stream: Stream, prompt: Prompt) -> None:
        """``StreamHandle.defer_prompt``: validate a prompt for the stream's latest frame now,
        run it with the stream's next frame (before that frame's encode; no read-back)."""
        prompt = dataclasses.replace(prompt, obj_id=check_obj_id(prompt.obj_id))
        if stream.step_features is None:
            stream.queue(prompt)
            return
        stream.validate(prompt)         # a bad prompt gets its PromptError, as add_prompt
        stream.check_features()
        stream.defer(prompt)            # validated above

    def segment_image(self, frame: frame_in.Frame, prompts: List[Prompt],
                      multimask_output: bool = False) -> FrameResult:
        """Image mode (``StreamingTracker.segment_image``, sam2's image-predictor computation in
        ``image.py``): one still, no memory read or written, no stream changed."""
        return image_frame_result(self.image_mode().segment(frame, prompts, multimask_output),
                                  prompts)

    def image_mode(self) -> ImageSegmenter:
        """The image-mode segmenter on this model (built on first use, fallbacks counted in
        ``stats``); touches no tracking state."""
        if self.image is None:
            self.image = ImageSegmenter(self.cfg, model=self.model,
                                        on_fallback=self.count_fallback)
        return self.image

    # ---- one step --------------------------------------------------------------------
    def _step(self, group: List[int], frames: List[Optional[frame_in.Frame]],
              sizes: Dict[int, Tuple[int, int]], out: StreamsResult) -> None:
        """Run each camera's deferred prompts, encode the frames of the cameras in ``group`` as
        one batch, run each camera's queued prompts, track all their objects in one call, fill
        ``out`` for them."""
        t0 = time.perf_counter()
        # Deferred prompts read each camera's previous frame, whose features the encode
        # overwrites (the encoder graph's static outputs): they run before it, or after it on
        # a copy (``beside``). A camera whose deferred prompt fails is not stepped (its frame is
        # not counted: pass it again).
        beside = self._kept_for_deferred(group)
        group = [c for c in group if c in beside or self._deferred_ran(self.streams[c], out)]
        if not group:
            return
        frames = [f if c in group else None for c, f in enumerate(frames)]
        try:
            with autocast(self.cfg):
                features, positions = self.runner.encode_streams(frames)
        except Exception as exc:  # noqa: BLE001 - any failure: these frames fail, nothing changes
            self._deferred_beside(beside, out)      # as they would have run before the encode
            self._fail([c for c in group if out.errors[c] is None], out, exc, lambda s: (
                f'frame failed in the image encoder: {exc!r}; tracker unchanged, pass the '
                f'next frame'))
            for s in self.streams if self.runner.encodes_in_place() else []:
                s.lose_features()
            return
        ran = self._deferred_beside(beside, out)
        group = [c for c in group if c not in beside or c in ran]
        streams = [self.streams[c] for c in group]
        queued = [s.begin_frame(sizes[s.index], features, positions[s.index]) for s in streams]
        live, started = [], []
        for s, prompts in zip(streams, queued):     # a camera's prompts are its own computation
            if self._queued_ran(s, prompts, out):
                live.append(s)
                started.append(prompts)
        tracked = [(s, o) for s, prompts in zip(live, started)
                   for o in s.objects.values() if o.obj_id not in prompts]
        try:
            with autocast(self.cfg):
                modes = self._track_objects(tracked) if tracked else []
        except Exception as exc:  # noqa: BLE001 - the frames fail, memory stays consistent
            self._fail([s.index for s in live], out, exc, step_failed(exc))
            return
        # every camera's read-back queued, then one synchronize for all of them; a failure
        # (out of memory upsampling one camera's masks) fails only the cameras it touches
        reads = {}
        for s in live:
            try:
                reads[s.index] = self._read(s, sync=False)
            except Exception as exc:  # noqa: BLE001 - the other cameras' results still go out
                self._fail([s.index], out, exc, read_failed(exc))
        try:
            if self.device.type == 'cuda':
                torch.cuda.current_stream(self.device).synchronize()
        except Exception as exc:  # noqa: BLE001 - no read-back can be trusted
            self._fail(list(reads), out, exc, read_failed(exc))
            reads = {}
        for s in (s for s in live if s.index in reads):
            try:
                mode = frame_mode([m for (t, _), m in zip(tracked, modes) if t is s])
                out.results[s.index] = self._built(s, reads[s.index], mode, t0, True)
                self.stats['frames'] += 1
            except Exception as exc:  # noqa: BLE001 - this camera's result only
                self._fail([s.index], out, exc, read_failed(exc))

    def _fail(self, cameras: List[int], out: StreamsResult, exc: Exception,
              message: Callable[[Stream], str]) -> None:
        """Report a StepError (caused by exc) for each camera of the failed computation, once
        the device has finished what the failed call queued: no kernel of it may still run
        when the next frame's buffers are written (nvJPEG writes on a stream of its own)."""
        if self.device.type == 'cuda':
            try:
                torch.cuda.current_stream(self.device).synchronize()
            except Exception:  # noqa: BLE001 - a sticky CUDA error: the report still goes out
                pass
        for c in cameras:
            err = StepError(message(self.streams[c]))
            err.__cause__ = exc
            out.errors[c] = err
            self.stats['failed_frames'] += 1

    def _kept_for_deferred(self, group: List[int]) -> Dict[int, object]:
        """The cameras of ``group`` whose deferred prompts run after the encode, beside it
        (``GraphRunner.keeps_features``), each with its features: their frame's features are
        copied now, before the encode is queued, and their prompts read the copy."""
        cams = {c: self.streams[c].step_features for c in group if self.streams[c].deferred
                and not self.streams[c].features_lost
                and self.runner.keeps_features(self.streams[c].step_features)}
        if cams:
            kept = self.runner.keep_features()
            for c in cams:
                self.streams[c].step_features = kept
        return cams

    def _deferred_beside(self, cams: Dict[int, object], out: StreamsResult) -> List[int]:
        """Run the deferred prompts of ``cams`` (``_kept_for_deferred``) beside the encode
        queued since; returns the cameras whose prompts all ran. A camera whose prompt failed
        gets its frame's features back (the encode undone for it: pass the frame again)."""
        ran: List[int] = []
        if not cams:
            return ran
        with self.runner.beside_encoder() as hand_over:
            for c in cams:
                s = self.streams[c]
                if self._deferred_ran(s, out):
                    ran.append(c)
                for _, scores in s.prompted:        # read with the next result
                    hand_over(scores)
        for c, features in cams.items():
            self.streams[c].step_features = features
            if c not in ran:
                self.runner.restore_features(self.streams[c].position)
        return ran

    def _queued_ran(self, stream: Stream, prompts: Dict[int, Prompt],
                    out: StreamsResult) -> bool:
        """Run the prompts queued for the stream's new frame; False (a StepError in ``out``) if
        one failed: it is dropped, those before it applied, those after it queued again."""
        pending = list(prompts.values())
        for k, p in enumerate(pending):
            try:
                with autocast(self.cfg):
                    self.prompt_steps.step(stream, p, init=True)
            except Exception as exc:  # noqa: BLE001 - this camera's frame fails
                stream.queued = {q.obj_id: q for q in pending[k + 1:]}   # emptied by the frame
                self._fail([stream.index], out, exc, lambda s: (
                    f'the prompt queued for object {p.obj_id} failed on frame {s.frame}: {exc!r}; '
                    f'it is dropped ({k} queued before it applied, {len(stream.queued)} after it '
                    f'queued again), no object was tracked on this frame: pass the next'))
                return False
            stream.objects[p.obj_id].started_by_track = True
        return True

    def _deferred_ran(self, stream: Stream, out: StreamsResult) -> bool:
        """Run the stream's deferred prompts; False (a StepError in ``out``) if one failed."""
        try:
            with autocast(self.cfg):
                self.prompt_steps.run_deferred(stream)
        except Exception as exc:  # noqa: BLE001 - this camera's frame fails
            self._fail([stream.index], out, exc, lambda s: (
                f'a prompt deferred on frame {s.frame} failed: {exc!r}; it is dropped (those '
                f'before it were applied), this frame was not tracked: pass it again'))
            return False
        return True

    def _track_objects(self, tracked: List[Tuple[Stream, ObjectInfo]]) -> List[str]:
        """One tracking step for every object of the step's cameras, each on its camera's
        latest frame and features; returns 'graph' or 'eager' per object."""
        sels = [self.bank.select(o.slot, s.frame) for s, o in tracked]
        for sel, (s, _) in zip(sels, tracked):
            sel.stream = s.position
        features = tracked[0][0].step_features         # one encoder batch for the step
        outs, modes = self.runner.track(features, self.bank, sels, self.maskmem_pos)
        self.bank.write_tracked([o.slot for _, o in tracked], [s.frame for s, _ in tracked],
                                outs.mem_feats, outs.obj_ptr, outs.low_res_logits, outs.score)
        for m in modes:
            self.stats[f'{m}_steps'] += 1
        if self.runner.last_merge is not None:     # objects in several buckets
            self.stats[f'buckets_{self.runner.last_merge}_steps'] += 1
        return modes

    def _result(self, stream: Stream, mode: str, t0: float,
                tracked: bool = False) -> FrameResult:
        """Results of every object of the stream on its latest frame, read back in one
        device-to-host copy. engine_ms runs from t0 to the end of that copy (so it includes
        the GPU work). tracked=True (a new frame) advances each object's occluded/lost run."""
        return self._built(stream, self._read(stream), mode, t0, tracked)

    def _built(self, stream: Stream, read: tuple, mode: str, t0: float,
               tracked: bool) -> FrameResult:
        """The FrameResult of a read-back (``_read``) that has completed."""
        return frame_result.built(stream, read, mode, t0, tracked, self.cfg.lost_after_frames)

    def _read(self, stream: Stream, sync: bool = True) -> Tuple[list, torch.Tensor, tuple]:
        """The read-back of the stream's objects (their masks, stats and label mask in one
        copy to the host): (objects, their logits, (masks, stats, label)). sync=False: queued
        only, the caller synchronizes before ``_built`` reads the arrays."""
        h, w = stream.hw
        objs = stream.sorted_objects()
        slots = self.bank.stage([o.slot for o in objs])
        logits = self.bank.logits.index_select(0, slots)
        scores = self.bank.scores.index_select(0, slots)
        return objs, logits, self.runner.results(logits, scores, h, w,
                                                 [o.obj_id for o in objs], sync=sync)

    # ---- fallbacks -------------------------------------------------------------------
    def count_fallback(self, reason: str) -> None:
        """Count a graph fallback (the runner's ``on_fallback``) and log its reason."""
        self.stats['fallbacks'] += 1
        self.fallback_reasons[reason] += 1
        log.warning('CUDA graph fallback to eager: %s', reason)
