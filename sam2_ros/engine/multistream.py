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
from sam2_ros.engine.prompts import check_obj_id, prompt_mask, prompt_points
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
                self._run_deferred(stream)          # earlier calls on this frame come first
                mode = self._prompt_latest(stream, prompt)
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
        # Deferred prompts first: they read each camera's previous frame, whose features the
        # encode overwrites (the encoder graph's static outputs). A camera whose deferred prompt
        # fails is not stepped (its frame is not counted: pass it again).
        group = [c for c in group if self._deferred_ran(self.streams[c], out)]
        if not group:
            return
        frames = [f if c in group else None for c, f in enumerate(frames)]
        try:
            with autocast(self.cfg):
                features, positions = self.runner.encode_streams(frames)
        except Exception as exc:  # noqa: BLE001 - any failure: these frames fail, nothing changes
            self._fail(group, out, exc, lambda s: (
                f'frame failed in the image encoder: {exc!r}; tracker unchanged, pass the '
                f'next frame'))
            for s in self.streams if self.runner.encodes_in_place() else []:
                s.lose_features()
            return
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

    def _queued_ran(self, stream: Stream, prompts: Dict[int, Prompt],
                    out: StreamsResult) -> bool:
        """Run the prompts queued for the stream's new frame; False (a StepError in ``out``) if
        one failed: it is dropped, those before it applied, those after it queued again."""
        pending = list(prompts.values())
        for k, p in enumerate(pending):
            try:
                with autocast(self.cfg):
                    self._prompt_step(stream, p, init=True)
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
                self._run_deferred(stream)
        except Exception as exc:  # noqa: BLE001 - this camera's frame fails
            self._fail([stream.index], out, exc, lambda s: (
                f'a prompt deferred on frame {s.frame} failed: {exc!r}; it is dropped (those '
                f'before it were applied), this frame was not tracked: pass it again'))
            return False
        return True

    def _run_deferred(self, stream: Stream) -> None:
        """The prompted steps of the stream's deferred prompts on its latest frame, exactly as
        ``add_prompt`` would have run them in that order; their objects' scores there are kept
        for the next result (``Stream.occluded_runs``), read without a sync now."""
        if stream.deferred:
            stream.check_features()
        pending, stream.deferred = list(stream.deferred.values()), {}
        done: List[ObjectInfo] = []
        try:
            for k, p in enumerate(pending):
                try:
                    self._prompt_latest(stream, p)
                except Exception:
                    # this one is dropped; those deferred after it wait for the next call
                    stream.deferred = {q.obj_id: q for q in pending[k + 1:]}
                    raise
                done.append(stream.objects[p.obj_id])
                self.stats['deferred_prompts'] += 1
        finally:
            if done:
                slots = self.bank.stage([o.slot for o in done])
                stream.prompted.append((done, self.bank.scores.index_select(0, slots)))

    def _prompt_latest(self, stream: Stream, prompt: Prompt) -> str:
        """A validated prompt's step on the stream's latest frame (``add_prompt``)."""
        obj = stream.objects.get(prompt.obj_id)
        # An object prompted only on this very frame has not been tracked yet: sam2 treats
        # another prompt there as initial too (is_init_cond_frame). One a queued prompt
        # started inside track() has been (propagated over that frame): a correction.
        init = obj is None or obj.created_frame == stream.frame and not obj.started_by_track
        return self._prompt_step(stream, prompt, init=init)

    def _prompt_step(self, stream: Stream, prompt: Prompt, init: bool) -> str:
        """Run a prompted step for one object on the stream's latest frame and store it.

        As sam2, a click on a frame where the object already has an output feeds that
        output's logits to the decoder with the points; a queued prompt (a frame not yet
        tracked) has none. init=False reads memory (a correction); init=True does not."""
        f, (h, w) = stream.frame, stream.hw
        obj = stream.objects.get(prompt.obj_id)
        queued = obj is None or init and obj.created_frame != f
        prev = None if queued else self.bank.logits[obj.slot:obj.slot + 1]
        if obj is None:
            obj = ObjectInfo(prompt.obj_id, stream.free_slot(), f, f)
            self.bank.clear(obj.slot)
        sel = None if init else self.bank.select(obj.slot, f)
        out, mode = self._run_prompt(prompt, stream, h, w, sel, prev)
        self.bank.write(obj.slot, f, out.mem_feats[0], out.obj_ptr[0], out.low_res_logits[0],
                        out.score, init or self.cfg.corrections_as_cond, correction=not init)
        obj.last_prompt_frame = f
        stream.objects[prompt.obj_id] = obj
        self.stats['prompt_steps'] += 1
        self.stats[f'prompt_{mode}_steps'] += 1
        return mode

    def _run_prompt(self, prompt, stream: Stream, h, w, sel, prev) -> Tuple[step.StepOut, str]:
        """The prompted step through the runner (a graph where one fits) on the stream's
        frame of its latest step's features: (outputs, mode)."""
        feats, pos = stream.step_features, stream.position
        if prompt.mask is not None:
            mask = prompt_mask(prompt, h, w, self.size, self.device)
            return self.runner.mask_prompt(feats, mask, pos)
        points = prompt_points(prompt, h, w, self.size, self.device)
        return self.runner.prompt(feats, self.bank, sel, points, prev, self.maskmem_pos, pos)

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
