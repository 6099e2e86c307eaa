"""The streaming SAM 2 tracker: frames one at a time, objects added, corrected, removed.

This is the supported streaming path that ``SAM2VideoPredictor`` lacks (it wants the video up
front). It keeps sam2's semantics, driven frame by frame:
  * ``track(frame)`` runs the image encoder once, then one track step per object;
  * ``add_prompt(p)`` applies to the latest tracked frame, like ``add_new_points_or_box`` on a
    frame already seen: a new id starts an object there (an initial conditioning frame), a
    tracked id is a correction (points plus the previous logits, with memory);
  * ``queue_prompt(p)`` applies to the next frame, before it is tracked (as prompting a frame
    the predictor has not reached yet: an initial conditioning frame);
  * object ids, frame numbers and eviction stay in ``stream.py`` and ``memory.py``; the
    per-frame computation is ``encoder.py`` and ``step.py``, run eagerly (``eager.py``) or as
    CUDA graphs (``cuda/runner.py``) by the runner ``runners.make_runner`` picks.
It is the one-camera case of ``MultiStreamTracker`` (``multistream.py``), which steps the
frames of several cameras in one batch. Imports no ROS.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from sam2_ros.engine import frame_in
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.image import ImageSegmenter
from sam2_ros.engine.memory import MemoryBank
from sam2_ros.engine.multistream import MultiStreamTracker
from sam2_ros.engine.stream import ObjectInfo
from sam2_ros.engine.types import FrameResult, Prompt

__all__ = ['StreamingTracker', 'ObjectInfo']


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
        self.core = MultiStreamTracker(cfg, cameras=1, model=model)
        self.camera = self.core.stream(0)

    # ---- the shared parts, as attributes of the one-camera tracker ----------------------
    @property
    def cfg(self) -> TrackerConfig:
        return self.core.cfg

    @property
    def device(self) -> torch.device:
        return self.core.device

    @property
    def model(self):
        return self.core.model

    @property
    def size(self) -> int:
        return self.core.size

    @property
    def stats(self) -> Dict[str, object]:
        return self.core.stats

    @property
    def fallback_reasons(self) -> Dict[str, int]:
        return self.core.fallback_reasons

    @property
    def runner(self):
        return self.core.runner

    @runner.setter
    def runner(self, runner) -> None:
        self.core.runner = runner

    @property
    def bank(self) -> MemoryBank:
        return self.core.bank

    @property
    def maskmem_pos(self) -> torch.Tensor:
        return self.core.maskmem_pos

    # ---- public API ------------------------------------------------------------------
    @property
    def object_ids(self) -> List[int]:
        """Ids of the tracked objects, ascending (queued ones not yet started excluded)."""
        return self.camera.object_ids

    @property
    def queued_ids(self) -> List[int]:
        """Ids with a prompt queued for the next frame (new or tracked objects), ascending."""
        return sorted(self._queued)

    @property
    def frame_index(self) -> int:
        """Index of the latest tracked frame (-1 before the first)."""
        return self.camera.frame_index

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
        if frame is None:
            frame_in.frame_size(frame)          # a FrameError: a stream of one has no gaps
        out = self.core.track([frame])
        if out.errors[0] is not None:
            raise out.errors[0]
        return out.results[0]

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
        return self.camera.add_prompt(prompt)

    def queue_prompt(self, prompt: Prompt) -> None:
        """Apply a prompt to the next frame passed to track() (the newest per id wins).
        Before the first frame (or after reset()) a prompt can only be checked against the
        frame size when that frame arrives; see ``track``."""
        self.camera.queue_prompt(prompt)

    def remove_object(self, obj_id: int) -> None:
        """Stop tracking ``obj_id`` (or drop its queued prompt); its memory slot is freed
        for a new object. Raises ``UnknownObjectError`` if neither exists."""
        self.camera.remove_object(obj_id)

    def reset(self) -> None:
        """Forget all objects and queued prompts. Prompts may follow on the latest frame; the
        next frame may have a new size (sizes are only pinned while objects exist)."""
        self.camera.reset()

    def segment_image(self, frame: frame_in.Frame, prompts: List[Prompt],
                      multimask_output: bool = False) -> FrameResult:
        """Image mode: one still segmented as sam2's ``SAM2ImagePredictor`` does (``image.py``),
        no memory read or written. ``frame`` [H, W, 3] uint8 RGB of any size; ``prompts`` one
        per object (ids need not be tracked; a mask prompt is a mask input);
        ``multimask_output`` as the predictor's (each prompt's mask of highest IoU).

        Returns a ``FrameResult`` of frame_index 0, one ``ObjectResult`` per prompt in order
        (score: the object score logit). Objects, memory, features and frame counter are
        unchanged."""
        return self.core.segment_image(frame, prompts, multimask_output)

    def image_mode(self) -> ImageSegmenter:
        """The image-mode segmenter on this model (built on first use, fallbacks counted in
        ``stats``); its ``ImageResult`` has each mask's IoU. Touches no tracking state."""
        return self.core.image_mode()

    # ---- the one stream's state (tests and benchmarks look at it) -----------------------
    @property
    def _objects(self) -> Dict[int, ObjectInfo]:
        return self.camera.stream.objects

    @property
    def _queued(self) -> Dict[int, Prompt]:
        return self.camera.stream.queued

    @property
    def _hw(self) -> Optional[Tuple[int, int]]:
        return self.camera.stream.hw

    def _count_fallback(self, reason: str) -> None:
        self.core.count_fallback(reason)
