"""Camera c of a ``MultiStreamTracker`` (``tracker.stream(c)``): the per-camera prompt and
object calls, delegated to the tracker for that camera's stream. Imports no ROS."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, List, Mapping, Optional, Tuple

from sam2_ros.engine.prompts import check_obj_id
from sam2_ros.engine.stream import ObjectInfo, Stream
from sam2_ros.engine.types import FrameResult, Prompt


class StreamHandle:
    """Camera c of a ``MultiStreamTracker`` (``tracker.stream(c)``): the prompt and object calls
    of ``StreamingTracker``, with the same semantics and errors, on this camera alone."""

    def __init__(self, tracker: Any, stream: Stream):
        """tracker: the ``MultiStreamTracker`` (not imported here: it imports this module);
        stream: its camera's ``Stream``."""
        self.tracker = tracker
        self.stream = stream

    @property
    def object_ids(self) -> List[int]:
        """Ids of this camera's tracked objects, ascending (queued ones excluded)."""
        return sorted(self.stream.objects)

    @property
    def queued_ids(self) -> List[int]:
        """Ids with a prompt queued for this camera's next frame (new or tracked), ascending."""
        return sorted(self.stream.queued)

    @property
    def deferred_ids(self) -> List[int]:
        """Ids with a prompt deferred on this camera's latest frame, ascending."""
        return sorted(self.stream.deferred)

    @property
    def objects(self) -> Mapping[int, ObjectInfo]:
        """This camera's tracked objects by id (bank slot, frames, score): a read-only view."""
        return MappingProxyType(self.stream.objects)

    @property
    def frame_hw(self) -> Optional[Tuple[int, int]]:
        """(H, W) of this camera's latest frame; None before the first."""
        return self.stream.hw

    @property
    def frame_index(self) -> int:
        """Index of this camera's latest tracked frame (-1 before the first)."""
        return self.stream.frame

    def add_prompt(self, prompt: Prompt) -> FrameResult:
        """As ``StreamingTracker.add_prompt``, on this camera's latest frame."""
        return self.tracker.add_prompt(self.stream, prompt)

    def defer_prompt(self, prompt: Prompt) -> None:
        """As ``StreamingTracker.defer_prompt``: on this camera's latest frame, computed with
        this camera's next frame."""
        self.tracker.defer_prompt(self.stream, prompt)

    def apply_deferred(self) -> Optional[FrameResult]:
        """As ``StreamingTracker.apply_deferred``, on this camera's latest frame."""
        if not self.stream.deferred:
            return None
        newest = self.stream.deferred.popitem()[1]     # add_prompt runs the others first
        return self.tracker.add_prompt(self.stream, newest)

    def queue_prompt(self, prompt: Prompt) -> None:
        """As ``StreamingTracker.queue_prompt``: for this camera's next frame."""
        self.stream.queue(dataclasses.replace(prompt, obj_id=check_obj_id(prompt.obj_id)))

    def remove_object(self, obj_id: int) -> None:
        """As ``StreamingTracker.remove_object``."""
        self.stream.remove(obj_id)

    def reset(self) -> None:
        """As ``StreamingTracker.reset``: this camera's objects only; its next frame may have
        another size."""
        self.stream.reset()
