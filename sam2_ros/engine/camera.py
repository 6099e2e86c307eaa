"""One camera of a ``MultiStreamTracker`` as a tracker of its own: prompts, removal, reset,
ids and ``track`` of that camera alone, the shared core's stats and image mode.

``StreamingTracker`` (``tracker.py``) is this over a core of one camera; the multi-camera node
gives each camera's worker one of these over the shared core (whose ``track`` of a whole group
of frames it calls itself; this ``track`` steps one camera alone). Imports no ROS.
"""

from __future__ import annotations

from typing import Dict, List, Optional

from sam2_ros.engine import frame_in
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.image import ImageSegmenter
from sam2_ros.engine.multistream import MultiStreamTracker
from sam2_ros.engine.types import FrameResult, Prompt


class CameraTracker:
    """Camera ``camera`` of ``core``; ``stats`` and ``fallback_reasons`` are the core's."""

    def __init__(self, core: MultiStreamTracker, camera: int) -> None:
        self.core = core
        self.camera = camera
        self.handle = core.stream(camera)

    @property
    def cfg(self) -> TrackerConfig:
        return self.core.cfg

    @property
    def stats(self) -> Dict[str, object]:
        return self.core.stats

    @property
    def fallback_reasons(self) -> Dict[str, int]:
        return self.core.fallback_reasons

    # ---- public API ------------------------------------------------------------------
    @property
    def object_ids(self) -> List[int]:
        """Ids of the tracked objects, ascending (queued ones not yet started excluded)."""
        return self.handle.object_ids

    @property
    def queued_ids(self) -> List[int]:
        """Ids with a prompt queued for the next frame (new or tracked objects), ascending."""
        return self.handle.queued_ids

    @property
    def deferred_ids(self) -> List[int]:
        """Ids with a prompt deferred on the latest frame (``defer_prompt``), ascending."""
        return self.handle.deferred_ids

    @property
    def starting_prompts(self) -> List[Prompt]:
        """The deferred, then the queued prompts of ids no object has yet (objects about to
        start), each by id."""
        s, tracked = self.handle.stream, set(self.handle.object_ids)
        return [p for prompts in (s.deferred, s.queued) for i, p in sorted(prompts.items())
                if i not in tracked]

    @property
    def frame_index(self) -> int:
        """Index of the latest tracked frame (-1 before the first)."""
        return self.handle.frame_index

    def track(self, frame: frame_in.Frame) -> FrameResult:
        """Track every object of this camera on a new frame; returns its results.

        Args:
            frame: [H, W, 3] uint8 RGB, a numpy array or a torch tensor (any device). The
                size may differ from the previous frame's only when no object is tracked
                (after ``reset()`` or before the first prompt).

        Returns:
            ``FrameResult`` with ``frame_index`` = previous + 1 and one ``ObjectResult`` per
            tracked object (ascending ids; masks [H, W] bool at the frame's size, on the
            host). Prompts deferred with ``defer_prompt`` are applied to the previous frame
            first (before this one is encoded), then prompts queued with ``queue_prompt`` to
            this frame.

        Raises:
            FrameError: wrong dtype/shape, or a size change while objects are tracked
                (nothing changed).
            PromptError: a queued prompt does not fit this frame (it is dropped, nothing
                else changed; pass the frame again).
            StepError: the computation failed; the frame counts as seen, writes no memory
                (but for queued prompts: one whose step fails is dropped, those queued
                before it started there, those after it stay queued for the next frame).
                A deferred prompt that fails is dropped instead and the frame is not counted
                (prompts deferred before it were applied, those after it stay deferred);
                pass it again.
        """
        if frame is None:
            frame_in.frame_size(frame)          # a FrameError: None is the core's "no frame"
        frames: List[Optional[frame_in.Frame]] = [None] * self.core.cameras
        frames[self.camera] = frame             # the other cameras do not step
        out = self.core.track(frames)
        if out.errors[self.camera] is not None:
            raise out.errors[self.camera]
        return out.results[self.camera]

    def add_prompt(self, prompt: Prompt) -> FrameResult:
        """Apply a prompt to the latest tracked frame; returns that frame's updated results.

        A new ``prompt.obj_id`` starts an object on that frame (an initial conditioning
        frame); a tracked id is a correction (points are added to the object's previous
        logits, and the frame becomes a conditioning frame of its memory). Coordinates are
        source-image pixels of the latest frame. Before the first frame the prompt is queued
        for it instead and an empty ``FrameResult`` (frame_index -1) is returned.

        Raises:
            PromptError: an id outside 1..255, NaN/inf, outside the frame, labels not matching
                points (or without points), more than 64 points, an empty box (x0 < x1 and
                y0 < y1 required) or mask, a mask of another size (nothing changed).
            CapacityError: a new object beyond ``cfg.max_objects`` (nothing changed).
            StepError: the prompt's computation failed (e.g. CUDA out of memory): it was not
                applied, the tracker is consistent; prompts deferred before it that ran were.
                Also when the latest frame's features were lost (a later encode failed in
                place): the prompts deferred there are dropped.
        """
        return self.handle.add_prompt(prompt)

    def defer_prompt(self, prompt: Prompt) -> None:
        """Apply a prompt to the latest tracked frame, computed with the next ``track`` call.

        ``add_prompt`` without its cost on the latest frame: the prompt is validated now (the
        same errors, nothing changed on one), and the next ``track(frame)`` runs its prompted
        step on the latest frame first, exactly as ``add_prompt`` would have (its features,
        previous logits and memories; the frame becomes a conditioning frame), then tracks
        ``frame``; that frame's result is the first to show it. The latest frame's results
        are not read again. ``defer_prompt`` then ``track`` equals ``add_prompt`` then
        ``track``. The newest deferred prompt per id wins (it replaces an older one and runs
        after the others): unlike two ``add_prompt`` calls, where the second click refines the
        mask of the first, the older prompt is dropped. ``add_prompt`` runs the deferred ones
        before its own; ``remove_object`` and ``reset`` drop them. Before the first frame it is
        ``queue_prompt``.

        Raises:
            PromptError, CapacityError: as ``add_prompt`` (nothing changed).
            StepError: the latest frame's features were lost (a later encode failed in
                place); the prompts deferred there are dropped. Checked after the prompt
                itself, as ``add_prompt`` does.
        """
        self.handle.defer_prompt(prompt)

    def apply_deferred(self) -> Optional[FrameResult]:
        """Run the prompts deferred on the latest frame now, in their order, exactly as
        ``add_prompt`` would have run them, and return that frame's updated results; None when
        none waits. For a camera that stopped: the next ``track`` would have run them, but no
        frame comes to show them (the ROS node calls this after ``deferred_wait_ms``).

        Raises:
            StepError: as ``add_prompt``; the newest deferred prompt is dropped (the ones
                before it that ran were applied).
        """
        return self.handle.apply_deferred()

    def queue_prompt(self, prompt: Prompt) -> None:
        """Apply a prompt to the next frame passed to track(). The newest per id wins: where
        sam2, given two prompts for one id on a frame it has not tracked, feeds the first's
        logits into the second, only the newest runs here. Before the first frame (or after
        reset()) a prompt can only be checked against the frame size when that frame arrives;
        see ``track``.

        Raises:
            PromptError, CapacityError: as ``add_prompt`` (nothing changed).
        """
        self.handle.queue_prompt(prompt)

    def remove_object(self, obj_id: int) -> None:
        """Stop tracking ``obj_id`` (and drop its queued or deferred prompt); its slot is freed
        for a new object. Raises ``UnknownObjectError`` if none exists, also for a value that
        is no object id (not an int in 1..255: ``'1'``, ``1.0``, ``True``)."""
        self.handle.remove_object(obj_id)

    def reset(self) -> None:
        """Forget all objects, queued and deferred prompts. Prompts may follow on the latest
        frame; the next frame may have a new size (sizes are only pinned while objects exist).
        The frame index goes on counting (the next frame is ``frame_index + 1``)."""
        self.handle.reset()

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
