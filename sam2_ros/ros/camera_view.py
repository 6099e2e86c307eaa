"""One camera of a :class:`~sam2_ros.engine.multistream.MultiStreamTracker` seen as the
one-camera tracker the node's worker drives (``StreamingTracker``'s calls: prompts, removal,
reset, ids, ``track`` of this camera alone, ``stats``, image mode). The multi-camera worker
tracks a group of frames in one ``MultiStreamTracker.track`` call; this view's ``track`` is
only the retry of one camera's frame after a queued prompt of it was refused. Imports no ROS.
"""

from __future__ import annotations

from typing import Any, Dict, List

from sam2_ros.engine.frame_in import Frame
from sam2_ros.engine.types import FrameResult, Prompt


class CameraTracker:
    """Camera ``camera`` of ``core`` (a MultiStreamTracker): the tracker of one camera's
    worker. ``stats`` and ``fallback_reasons`` are the shared core's."""

    def __init__(self, core: Any, camera: int) -> None:
        self.core = core
        self.camera = camera
        self.handle = core.stream(camera)

    @property
    def cfg(self) -> Any:
        return self.core.cfg

    @property
    def stats(self) -> Dict[str, object]:
        return self.core.stats

    @property
    def fallback_reasons(self) -> Dict[str, int]:
        return self.core.fallback_reasons

    @property
    def object_ids(self) -> List[int]:
        return self.handle.object_ids

    @property
    def queued_ids(self) -> List[int]:
        return sorted(self.handle.stream.queued)

    @property
    def frame_index(self) -> int:
        return self.handle.frame_index

    def track(self, frame: Frame) -> FrameResult:
        """This camera's frame alone (the other cameras do not step); raises its error."""
        frames: List[Any] = [None] * self.core.cameras
        frames[self.camera] = frame
        out = self.core.track(frames)
        if out.errors[self.camera] is not None:
            raise out.errors[self.camera]
        return out.results[self.camera]

    def add_prompt(self, prompt: Prompt) -> FrameResult:
        return self.handle.add_prompt(prompt)

    def queue_prompt(self, prompt: Prompt) -> None:
        self.handle.queue_prompt(prompt)

    def remove_object(self, obj_id: int) -> None:
        self.handle.remove_object(obj_id)

    def reset(self) -> None:
        self.handle.reset()

    def image_mode(self) -> Any:
        return self.core.image_mode()
