"""The streaming SAM 2 tracker: frames one at a time, objects added, corrected, removed.

This is the supported streaming path that ``SAM2VideoPredictor`` lacks (it wants the video up
front). It keeps sam2's semantics, driven frame by frame:
  * ``track(frame)`` runs the image encoder once, then one track step per object;
  * ``add_prompt(p)`` applies to the latest tracked frame, like ``add_new_points_or_box`` on a
    frame already seen: a new id starts an object there (an initial conditioning frame), a
    tracked id is a correction (points plus the previous logits, with memory);
  * ``queue_prompt(p)`` applies to the next frame, before it is tracked (as prompting a frame
    the predictor has not reached yet: an initial conditioning frame);
  * object ids, frame numbers and eviction stay here and in ``memory.py``; the per-frame
    computation is ``encoder.py`` and ``step.py``, run eagerly (``eager.py``) or as CUDA
    graphs (``cuda/runner.py``) by the runner ``make_runner`` picks.
Imports no ROS.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import torch

from sam2_ros.engine import encoder, frame_in, masks_out, step
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.eager import EagerRunner
from sam2_ros.engine.image import ImageSegmenter
from sam2_ros.engine.image import frame_result as image_frame_result
from sam2_ros.engine.errors import (CapacityError, FrameError, PromptError, StepError,
                                    UnknownObjectError)
from sam2_ros.engine.memory import MemoryBank
from sam2_ros.engine.model import autocast, build_model, precast
from sam2_ros.engine.prompts import check_obj_id, prompt_mask, prompt_points
from sam2_ros.engine.types import LOST, OCCLUDED, TRACKING, FrameResult, ObjectResult, Prompt

log = logging.getLogger(__name__)


@dataclass
class ObjectInfo:
    """Host-side facts of one tracked object (its tensors live in the bank's slot)."""

    obj_id: int
    slot: int
    created_frame: int        # the object's first (initial conditioning) frame
    last_prompt_frame: int
    score: float = 0.0
    hidden_run: int = 0       # consecutive frames with score <= 0


class StreamingTracker:
    """Streaming multi-object SAM 2 tracker: one frame at a time, bounded memory.

    Guarantees (docs/streaming.md states the tolerances and the tests):
      * the same masks, scores and memories as ``SAM2VideoPredictor`` given the same frames
        and prompts, within the tolerances docs/streaming.md states per path and precision;
      * memory is preallocated for ``cfg.max_objects`` objects at construction; nothing grows
        with the stream's length;
      * a call that raises a ``TrackerError`` (bad frame, bad prompt, unknown id, capacity)
        leaves the tracker exactly as it was; a ``StepError`` (the computation failed) leaves
        it consistent and the next frame can be passed.

    Not thread safe: call it from one thread (the ROS node has one worker thread for it).
    """

    def __init__(self, cfg: TrackerConfig, model=None):
        """Build (or take) the model, preallocate the memory bank and warm every code path.

        ``cfg`` is the whole configuration, validated here (``ValueError`` if inconsistent).
        ``model`` is an already built ``SAM2Base`` of ``cfg``'s size to share (it holds no
        tracking state, so several trackers may use one); None builds one from
        ``cfg.checkpoint`` (or random weights when ``cfg.random_weights``): CheckpointError
        when that is missing, unreadable or mismatched.
        """
        self.cfg = cfg.validate()
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
        self.runner = make_runner(self.model, cfg, self._count_fallback)
        self._objects: Dict[int, ObjectInfo] = {}
        self._queued: Dict[int, Prompt] = {}
        self._frame = -1
        self._hw: Optional[tuple] = None
        # True after reset(): the next frame may have another size, so prompts queued for it
        # are checked against that frame (in track), not against the last one's size.
        self._size_open = False
        self._features: Optional[encoder.Features] = None
        self._image: Optional[ImageSegmenter] = None     # image mode, built on first use
        self._warm_up()

    # ---- public API ------------------------------------------------------------------
    @property
    def object_ids(self) -> List[int]:
        """Ids of the tracked objects, ascending (queued ones not yet started excluded)."""
        return sorted(self._objects)

    @property
    def queued_ids(self) -> List[int]:
        """Ids with a prompt queued for the next frame (new or tracked objects), ascending."""
        return sorted(self._queued)

    @property
    def frame_index(self) -> int:
        """Index of the latest tracked frame (-1 before the first)."""
        return self._frame

    @torch.inference_mode()
    def track(self, frame: frame_in.Frame) -> FrameResult:
        """Track every object on a new frame; returns its results.

        Args:
            frame: [H, W, 3] uint8 RGB, a numpy array or a torch tensor (any device). The
                size may differ from the previous frame's only when no object is tracked
                (after ``reset()`` or before the first prompt).

        Returns:
            ``FrameResult`` with ``frame_index`` = previous + 1 and one ``ObjectResult`` per
            tracked object (ascending ids; masks [H, W] bool at the frame's size, on the
            host). Prompts queued with ``queue_prompt`` are applied to this frame first.

        Raises:
            FrameError: wrong dtype/shape, or a size change while objects are tracked
                (nothing changed).
            PromptError: a queued prompt does not fit this frame (it is dropped, nothing
                else changed; pass the frame again).
            StepError: the computation failed; the frame counts as seen, writes no memory.
        """
        hw = frame_in.frame_size(frame)
        if self._hw is not None and hw != self._hw and self._objects:
            raise FrameError(f'resolution changed from {self._hw[1]}x{self._hw[0]} to '
                             f'{hw[1]}x{hw[0]} while tracking {len(self._objects)} objects; '
                             f'reset() to track at the new resolution')
        self._check_queued(hw)
        t0 = time.perf_counter()
        try:
            with autocast(self.cfg):
                features = self.runner.encode_frame(frame)
        except Exception as exc:  # noqa: BLE001 - any failure: this frame fails, nothing changes
            self.stats['failed_frames'] += 1
            raise StepError(f'frame failed in the image encoder: {exc!r}; tracker unchanged, '
                            f'pass the next frame') from exc
        self._frame += 1
        self._hw, self._features, self._size_open = hw, features, False
        f = self._frame
        queued, self._queued = self._queued, {}
        try:
            with autocast(self.cfg):
                for p in queued.values():
                    self._prompt_step(p, f, init=True)
                tracked = [o for o in self._objects.values() if o.obj_id not in queued]
                mode = self._track_objects(tracked, f) if tracked else 'eager'
        except Exception as exc:  # noqa: BLE001 - the frame fails, memory stays consistent
            self.stats['failed_frames'] += 1
            raise StepError(f'frame {f} failed: {exc!r}; no memory was written for it (steps '
                            f'read memories by frame number, so the gap is skipped), tracking '
                            f'continues with the next frame') from exc
        self.stats['frames'] += 1
        return self._result(f, mode, t0, tracked=True)

    @torch.inference_mode()
    def add_prompt(self, prompt: Prompt) -> FrameResult:
        """Apply a prompt to the latest tracked frame; returns that frame's updated results.

        A new ``prompt.obj_id`` starts an object on that frame (an initial conditioning
        frame); a tracked id is a correction (points are added to the object's previous
        logits, and the frame becomes a conditioning frame of its memory). Coordinates are
        source-image pixels of the latest frame. Before the first frame the prompt is queued
        for it instead and an empty ``FrameResult`` (frame_index -1) is returned.

        Raises:
            PromptError: NaN/inf, outside the frame, labels not matching points, empty box or
                mask, mask of another size (nothing changed).
            CapacityError: a new object beyond ``cfg.max_objects`` (nothing changed).
        """
        prompt = dataclasses.replace(prompt, obj_id=check_obj_id(prompt.obj_id))
        if self._features is None:
            self.queue_prompt(prompt)
            return FrameResult(-1, 0, 0)
        self._validate(prompt)
        f = self._frame
        obj = self._objects.get(prompt.obj_id)
        # An object prompted only on this very frame has not been tracked yet: sam2 treats
        # another prompt there as initial too (is_init_cond_frame).
        init = obj is None or obj.created_frame == f
        t0 = time.perf_counter()
        with autocast(self.cfg):
            mode = self._prompt_step(prompt, f, init=init)
        return self._result(f, mode, t0)

    def queue_prompt(self, prompt: Prompt) -> None:
        """Apply a prompt to the next frame passed to track() (the newest per id wins).
        Before the first frame (or after reset()) a prompt can only be checked against the
        frame size when that frame arrives; see ``track``."""
        prompt = dataclasses.replace(prompt, obj_id=check_obj_id(prompt.obj_id))
        if self._hw is not None and not self._size_open:
            self._validate(prompt)
        elif prompt.obj_id not in self._objects and prompt.obj_id not in self._queued:
            self._check_capacity()
        self._queued[prompt.obj_id] = prompt

    def remove_object(self, obj_id: int) -> None:
        """Stop tracking ``obj_id`` (or drop its queued prompt); its memory slot is freed
        for a new object. Raises ``UnknownObjectError`` if neither exists."""
        obj = self._objects.pop(obj_id, None)
        queued = self._queued.pop(obj_id, None)
        if obj is None and queued is None:
            raise UnknownObjectError(f'cannot remove object {obj_id}: not tracked '
                                     f'(tracked: {self.object_ids})')
        if obj is not None:
            self.bank.clear(obj.slot)

    def reset(self) -> None:
        """Forget all objects and queued prompts. Prompts may follow on the latest frame; the
        next frame may have a new size (sizes are only pinned while objects exist)."""
        for obj in self._objects.values():
            self.bank.clear(obj.slot)
        self._objects.clear()
        self._queued.clear()
        self._size_open = True

    def segment_image(self, frame: frame_in.Frame, prompts: List[Prompt],
                      multimask_output: bool = False) -> FrameResult:
        """Image mode: one still segmented as sam2's ``SAM2ImagePredictor`` does (``image.py``),
        no memory read or written. ``frame`` [H, W, 3] uint8 RGB of any size; ``prompts`` one
        per object (ids need not be tracked; a mask prompt is a mask input);
        ``multimask_output`` as the predictor's (each prompt's mask of highest IoU).

        Returns a ``FrameResult`` of frame_index 0, one ``ObjectResult`` per prompt in order
        (score: the object score logit). Objects, memory, features and frame counter are
        unchanged."""
        return image_frame_result(self.image_mode().segment(frame, prompts, multimask_output),
                                  prompts)

    def image_mode(self) -> ImageSegmenter:
        """The image-mode segmenter on this model (built on first use, fallbacks counted in
        ``stats``); its ``ImageResult`` has each mask's IoU. Touches no tracking state."""
        if self._image is None:
            self._image = ImageSegmenter(self.cfg, model=self.model,
                                         on_fallback=self._count_fallback)
        return self._image

    # ---- internals -------------------------------------------------------------------
    def _warm_up(self) -> None:
        """Run one frame through every code path, to size the bank (shapes and dtypes come
        from the model) and to let sam2 compute lazily built tables (RoPE at non-default
        sizes) before any graph capture."""
        with torch.inference_mode(), autocast(self.cfg):
            img = torch.zeros(1, 3, self.size, self.size, device=self.device)
            feats = encoder.encode_image(self.model, img)
            points = {'point_coords': torch.tensor([[[self.size / 2, self.size / 2]]],
                                                   device=self.device),
                      'point_labels': torch.ones(1, 1, dtype=torch.int32, device=self.device)}
            first = step.track_step(self.model, feats, None, None, points=points)
            pos_dtype = torch.bfloat16 if self.cfg.precision == 'bf16' else torch.float32
            self.maskmem_pos = step.maskmem_pos_enc(self.model, feats).to(pos_dtype)
            self.bank = MemoryBank.allocate(
                self.cfg.max_objects, self.cfg.max_cond_frames, self.model.num_maskmem,
                self.model.max_obj_ptrs_in_encoder, first.mem_feats[0], first.obj_ptr[0],
                first.low_res_logits[0])
            self.runner.prepare(self.bank, self.maskmem_pos, feats)

    def _check_capacity(self) -> None:
        """Room for one more object, counting objects queued to start on the next frame."""
        queued_new = sum(1 for i in self._queued if i not in self._objects)
        if len(self._objects) + queued_new + 1 > self.cfg.max_objects:
            raise CapacityError(f'cannot add object: {len(self._objects)} tracked and '
                                f'{queued_new} queued, max_objects={self.cfg.max_objects}')

    def _check_queued(self, hw) -> None:
        """Validate prompts queued before the frame size was known against this frame. Bad
        ones are dropped and reported by raising PromptError before anything else changes,
        so the caller can report it and pass the same frame again."""
        if not self._queued or (hw == self._hw and not self._size_open):
            return
        saved, bad = self._hw, []
        self._hw = hw
        try:
            for obj_id, p in list(self._queued.items()):
                try:
                    self._validate_shape(p)
                except PromptError as exc:
                    bad.append(f'object {obj_id}: {exc}')
                    del self._queued[obj_id]
        finally:
            self._hw = saved
        if bad:
            raise PromptError('dropped queued prompts that do not fit the frame: '
                              + '; '.join(bad))

    def _validate(self, prompt: Prompt) -> None:
        self._validate_shape(prompt)
        if prompt.obj_id not in self._objects and prompt.obj_id not in self._queued:
            self._check_capacity()

    def _validate_shape(self, prompt: Prompt) -> None:
        """Raise PromptError unless the prompt fits the current frame size."""
        h, w = self._hw
        if prompt.mask is not None:
            prompt_mask(prompt, h, w, self.size, torch.device('cpu'))
        else:
            prompt_points(prompt, h, w, self.size, torch.device('cpu'))

    def _free_slot(self) -> int:
        used = {o.slot for o in self._objects.values()}
        return next(s for s in range(self.cfg.max_objects) if s not in used)

    def _prompt_step(self, prompt: Prompt, f: int, init: bool) -> str:
        """Run a prompted step for one object on frame f and store it as memory.

        As sam2, a click on a frame where the object already has an output feeds that
        output's logits to the decoder with the points; a queued prompt (a frame not yet
        tracked) has none. init=False reads memory (a correction); init=True does not."""
        h, w = self._hw
        obj = self._objects.get(prompt.obj_id)
        queued = obj is None or init and obj.created_frame != f
        prev = None if queued else self.bank.logits[obj.slot:obj.slot + 1]
        if obj is None:
            obj = ObjectInfo(prompt.obj_id, self._free_slot(), f, f)
            self.bank.clear(obj.slot)
        sel = None if init else self.bank.select(obj.slot, f)
        out, mode = self._run_prompt(prompt, self._features, h, w, sel, prev)
        self.bank.write(obj.slot, f, out.mem_feats[0], out.obj_ptr[0],
                        out.low_res_logits[0], out.score,
                        as_cond=init or self.cfg.corrections_as_cond)
        obj.last_prompt_frame = f
        self._objects[prompt.obj_id] = obj
        self.stats['prompt_steps'] += 1
        self.stats[f'prompt_{mode}_steps'] += 1
        return mode

    def _run_prompt(self, prompt, feats, h, w, sel, prev) -> Tuple[step.StepOut, str]:
        """The prompted step through the runner (a graph where one fits): (outputs, mode)."""
        if prompt.mask is not None:
            mask = prompt_mask(prompt, h, w, self.size, self.device)
            return self.runner.mask_prompt(feats, mask)
        points = prompt_points(prompt, h, w, self.size, self.device)
        return self.runner.prompt(feats, self.bank, sel, points, prev, self.maskmem_pos)

    def _track_objects(self, objs: List[ObjectInfo], f: int) -> str:
        """One tracking step for every object on frame f (graph or eager per the runner)."""
        sels = [self.bank.select(o.slot, f) for o in objs]
        outs, modes = self.runner.track(self._features, self.bank, sels, self.maskmem_pos)
        self.bank.write_tracked([o.slot for o in objs], f, outs.mem_feats, outs.obj_ptr,
                                outs.low_res_logits, outs.score)
        for m in modes:
            self.stats[f'{m}_steps'] += 1
        return 'graph' if all(m == 'graph' for m in modes) else \
            ('eager' if all(m == 'eager' for m in modes) else 'mixed')

    def _count_fallback(self, reason: str) -> None:
        self.stats['fallbacks'] += 1
        self.fallback_reasons[reason] += 1
        log.warning('CUDA graph fallback to eager: %s', reason)

    def _result(self, f: int, mode: str, t0: float, tracked: bool = False) -> FrameResult:
        """Results of every object on frame f, read back in one device-to-host copy.
        engine_ms runs from t0 to the end of that copy (so it includes the GPU work).
        tracked=True (a new frame) advances each object's occluded/lost run."""
        h, w = self._hw
        objs = sorted(self._objects.values(), key=lambda o: o.obj_id)
        slots = self.bank.stage([o.slot for o in objs])
        logits = self.bank.logits.index_select(0, slots)
        scores = self.bank.scores.index_select(0, slots)
        ids = [o.obj_id for o in objs]
        masks, stats, label = self.runner.results(logits, scores, h, w, ids)
        res = FrameResult(f, h, w, mode=mode, engine_ms=(time.perf_counter() - t0) * 1e3)
        res.set_label(label, ids)
        for o, m, s, lg in zip(objs, masks, stats, logits):
            o.score = float(s[7])
            if tracked or o.score > 0:
                o.hidden_run = 0 if o.score > 0 else o.hidden_run + 1
            area, box, cen = masks_out.unpack(s)
            state = TRACKING if o.score > 0 else (
                LOST if o.hidden_run >= self.cfg.lost_after_frames else OCCLUDED)
            res.objects.append(ObjectResult(o.obj_id, m, o.score, state, box, area, cen,
                                            f - o.last_prompt_frame, lg[0]))
        return res


def make_runner(model, cfg: TrackerConfig, on_fallback: Callable[[str], None]):
    """The graph runner when enabled and on CUDA (imported only then), else the eager one."""
    if cfg.use_cuda_graphs and torch.device(cfg.device).type == 'cuda':
        from sam2_ros.engine.cuda.runner import GraphRunner
        return GraphRunner(model, cfg, on_fallback)
    return EagerRunner(model, cfg)
