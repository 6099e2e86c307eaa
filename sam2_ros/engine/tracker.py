"""The streaming SAM 2 tracker: frames one at a time, objects added, corrected, removed.

This is the supported streaming path that ``SAM2VideoPredictor`` lacks (it wants the video up
front). It keeps sam2's semantics, driven frame by frame:
  * ``track(frame)`` runs the image encoder once, then one track step per object;
  * ``add_prompt(p)`` applies to the latest tracked frame, like ``add_new_points_or_box`` on a
    frame already seen: a new id starts an object there (an initial conditioning frame), a
    tracked id is a correction (points plus the previous logits, with memory);
  * ``defer_prompt(p)`` is ``add_prompt`` computed with the next ``track`` (before it
    encodes its frame), so a correction costs no read-back of the latest frame;
  * ``queue_prompt(p)`` applies to the next frame, before it is tracked (as prompting a frame
    the predictor has not reached yet: an initial conditioning frame);
  * object ids, frame numbers and eviction stay in ``stream.py`` and ``memory.py``; the
    per-frame computation is ``encoder.py`` and ``step.py``, run eagerly (``eager.py``) or as
    CUDA graphs (``cuda/runner.py``) by the runner ``runners.make_runner`` picks.
It is the one-camera case of ``MultiStreamTracker`` (``multistream.py``), which steps the
frames of several cameras in one batch. Imports no ROS.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping, Optional, Tuple

import torch

from sam2_ros.engine.camera import CameraTracker
from sam2_ros.engine.config import TrackerConfig
from sam2_ros.engine.memory import MemoryBank
from sam2_ros.engine.multistream import MultiStreamTracker
from sam2_ros.engine.stream import ObjectInfo

if TYPE_CHECKING:
    from sam2.modeling.sam2_base import SAM2Base

    from sam2_ros.engine.runners import Runner

__all__ = ['StreamingTracker', 'ObjectInfo']


class StreamingTracker(CameraTracker):
    """Streaming multi-object SAM 2 tracker: one frame at a time, bounded memory; the public
    API (track, prompts, removal, reset, image mode) is ``CameraTracker``'s, over a core of one
    camera.

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

    def __init__(self, cfg: TrackerConfig, model: Optional[SAM2Base] = None):
        """Build (or take) the model, preallocate the memory bank and warm every code path.

        ``cfg`` is the whole configuration, validated here (``ValueError`` if inconsistent).
        ``model`` is an already built ``SAM2Base`` of ``cfg``'s size to share (it holds no
        tracking state, so several trackers may use one); None builds one from
        ``cfg.checkpoint`` (or random weights when ``cfg.random_weights``): CheckpointError
        when that is missing, unreadable or mismatched.
        """
        super().__init__(MultiStreamTracker(cfg, cameras=1, model=model), 0)

    # ---- the shared parts, as attributes of the one-camera tracker ----------------------
    @property
    def device(self) -> torch.device:
        return self.core.device

    @property
    def model(self) -> SAM2Base:
        return self.core.model

    @property
    def size(self) -> int:
        return self.core.size

    @property
    def runner(self) -> Runner:
        return self.core.runner

    @runner.setter
    def runner(self, runner: Runner) -> None:
        self.core.runner = runner

    @property
    def bank(self) -> MemoryBank:
        return self.core.bank

    @property
    def maskmem_pos(self) -> torch.Tensor:
        return self.core.maskmem_pos

    # ---- the one stream's state, read-only (tests and benchmarks look at it) -------------
    @property
    def objects(self) -> Mapping[int, ObjectInfo]:
        """The tracked objects by id (bank slot, frames, score): a read-only view."""
        return MappingProxyType(self.handle.stream.objects)

    @property
    def frame_hw(self) -> Optional[Tuple[int, int]]:
        """(H, W) of the stream's frames; None before the first."""
        return self.handle.stream.hw
