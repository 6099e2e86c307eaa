"""The state of one camera stream of the tracker: its objects, queued prompts, frame counter and
frame size, and the checks that decide whether a frame or prompt fits it.

A ``MultiStreamTracker`` (``multistream.py``) holds one ``Stream`` per camera over one shared
model, runner and memory bank; ``StreamingTracker`` is its one-camera case. Camera c owns the
bank's object slots ``[c * M, (c + 1) * M)`` (M = ``TrackerConfig.max_objects``), so capacity,
ids and frame numbers are per camera: two cameras may track the same object id, and their
frame counters diverge when one camera's frame is missing from a step. Everything here is
host-side bookkeeping; the computation is the tracker's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch

from sam2_ros.engine import encoder
from sam2_ros.engine.errors import (CapacityError, FrameError, PromptError, StepError,
                                    UnknownObjectError)
from sam2_ros.engine.memory import MemoryBank
from sam2_ros.engine.prompts import check_obj_id, prompt_mask, prompt_points
from sam2_ros.engine.types import Prompt


@dataclass
class ObjectInfo:
    """Host-side facts of one tracked object (its tensors live in the bank's slot)."""

    obj_id: int
    slot: int
    created_frame: int        # the object's first (initial conditioning) frame
    last_prompt_frame: int
    # its initial prompt ran inside the track() that returned created_frame's results (a
    # queued prompt): sam2 has propagated over that frame, so another prompt there corrects
    started_by_track: bool = False
    score: float = 0.0
    hidden_run: int = 0       # consecutive frames with score <= 0


class Stream:
    """One camera's objects, queued prompts, frame counter and size."""

    def __init__(self, index: int, slots: range, bank: MemoryBank, model_size: int):
        """index: the camera's number; slots: the bank slots it owns; model_size: S."""
        self.index = index
        self.slots = slots
        self.bank = bank
        self.model_size = model_size
        self.objects: Dict[int, ObjectInfo] = {}
        self.queued: Dict[int, Prompt] = {}
        # Prompts for the latest frame run by the next track() before it encodes its frame
        # (``defer_prompt``), in the order of their newest call; and the objects those runs
        # prompted with their [k] scores on that frame, read with the next result (a read-back
        # after the prompt would have ended their occluded run: ``occluded_runs``).
        self.deferred: Dict[int, Prompt] = {}
        self.prompted: List[Tuple[List[ObjectInfo], torch.Tensor]] = []
        self.frame = -1
        self.hw: Optional[Tuple[int, int]] = None
        # True after reset(): the next frame may have another size, so prompts queued for it
        # are checked against that frame (in track), not against the last one's size.
        self.size_open = False
        # Features of the step that encoded this camera's latest frame ([HW_l, n, C_l]) and
        # this camera's position in them (its prompts read that frame: ``streams.frame``).
        self.step_features: Optional[encoder.Features] = None
        self.position = 0
        # True when a failed encode may have overwritten step_features in place (the encoder
        # graph's static outputs): prompts on the latest frame are refused until the next one.
        self.features_lost = False

    @property
    def capacity(self) -> int:
        return len(self.slots)

    # ---- frames ------------------------------------------------------------------------
    def check_frame(self, hw: Tuple[int, int]) -> None:
        """FrameError for a size change while objects are tracked; PromptError (the misfits
        dropped) for prompts queued while the size was open that do not fit this frame."""
        # a prompt deferred on the latest frame pins its size as the object it makes would
        if self.hw is not None and hw != self.hw and (self.objects or self.deferred):
            n = len(set(self.objects) | set(self.deferred))
            raise FrameError(f'resolution changed from {self.hw[1]}x{self.hw[0]} to '
                             f'{hw[1]}x{hw[0]} (width x height) while tracking {n} objects; '
                             f'reset() to track at the new resolution')
        self.check_queued(hw)

    def check_queued(self, hw: Tuple[int, int]) -> None:
        """Validate prompts queued before the frame size was known against this frame. Bad
        ones are dropped and reported by raising PromptError before anything else changes: the
        frame is not counted or tracked (the caller reports it; the same frame may be passed
        again), the other queued prompts stay queued."""
        if not self.queued or (hw == self.hw and not self.size_open):
            return
        bad = []
        for obj_id, p in list(self.queued.items()):
            try:
                self.validate_shape(p, hw)
            except PromptError as exc:
                bad.append(f'object {obj_id}: {exc}')
                del self.queued[obj_id]
        if bad:
            raise PromptError(f'frame not tracked: the queued prompts that do not fit it were '
                              f'dropped ({"; ".join(bad)}); pass the frame again (the other '
                              f'queued prompts stay queued)')

    def begin_frame(self, hw: Tuple[int, int], features: encoder.Features,
                    position: int) -> Dict[int, Prompt]:
        """Count a new frame of size hw whose features are ``features`` at ``position``;
        returns the prompts queued for it (the queue is emptied)."""
        self.frame += 1
        self.hw, self.size_open = hw, False
        self.step_features, self.position = features, position
        self.features_lost = False
        queued, self.queued = self.queued, {}
        return queued

    def lose_features(self) -> None:
        """A failed encode may have overwritten the latest frame's features in place (the
        encoder graph's static outputs, shared by every camera): no prompt may read them."""
        if self.step_features is not None:
            self.features_lost = True

    def check_features(self) -> None:
        """StepError if the latest frame's features were lost (``lose_features``): a prompt
        there would read another frame's. The prompts deferred there are dropped with it."""
        if not self.features_lost:
            return
        dropped, self.deferred = sorted(self.deferred), {}
        raise StepError(f'the image features of frame {self.frame} were lost when a later frame '
                        f'failed in the image encoder, so no prompt can run on frame '
                        f'{self.frame}' + (f' (prompts deferred there dropped: objects '
                                           f'{dropped})' if dropped else '')
                        + '; pass the prompt again after the next frame')

    # ---- prompts and objects -------------------------------------------------------------
    def validate(self, prompt: Prompt) -> None:
        """PromptError unless the prompt fits the latest frame; CapacityError for a new id
        with no slot left."""
        self.validate_shape(prompt, self.hw)
        if self.is_new(prompt.obj_id):
            self.check_capacity(prompt.obj_id)

    def is_new(self, obj_id: int) -> bool:
        """Neither tracked nor waiting (queued or deferred) to start."""
        return obj_id not in self.objects and obj_id not in self.queued \
            and obj_id not in self.deferred

    def validate_shape(self, prompt: Prompt, hw: Tuple[int, int]) -> None:
        """Raise PromptError unless the prompt fits a frame of size hw."""
        h, w = hw
        if prompt.mask is not None:
            prompt_mask(prompt, h, w, self.model_size, torch.device('cpu'))
        else:
            prompt_points(prompt, h, w, self.model_size, torch.device('cpu'))

    def check_capacity(self, obj_id: int) -> None:
        """CapacityError unless there is room for new object ``obj_id``, counting objects
        deferred to start on the latest frame and those queued to start on the next one."""
        deferred = set(self.deferred) - set(self.objects)
        queued = set(self.queued) - set(self.objects) - deferred
        if len(self.objects) + len(deferred) + len(queued) + 1 > self.capacity:
            raise CapacityError(f'cannot add object {obj_id}: max_objects={self.capacity} '
                                f'reached ({len(self.objects)} tracked, {len(queued)} queued '
                                f'and {len(deferred)} deferred to start); remove_object() one '
                                f'of them, or configure a larger max_objects')

    def queue(self, prompt: Prompt) -> None:
        """Queue a prompt (its id already checked) for the next frame."""
        if self.hw is not None and not self.size_open:
            self.validate(prompt)
        elif self.is_new(prompt.obj_id):
            self.check_capacity(prompt.obj_id)
        self.queued[prompt.obj_id] = prompt

    def defer(self, prompt: Prompt) -> None:
        """Defer a prompt already validated on the latest frame (``validate``); it replaces
        one deferred for the same id and moves to the end of the order."""
        self.deferred.pop(prompt.obj_id, None)
        self.deferred[prompt.obj_id] = prompt

    def free_slot(self) -> int:
        used = {o.slot for o in self.objects.values()}
        return next(s for s in self.slots if s not in used)

    def remove(self, obj_id: int) -> None:
        """Drop an object (tracked, queued or deferred); UnknownObjectError for an id that is
        none of these or not an id at all (check_obj_id's message)."""
        try:
            obj_id = check_obj_id(obj_id)
        except PromptError as exc:
            raise UnknownObjectError(f'cannot remove object {obj_id!r}: {exc}') from None
        obj = self.objects.pop(obj_id, None)
        queued = self.queued.pop(obj_id, None)
        deferred = self.deferred.pop(obj_id, None)
        if obj is None and queued is None and deferred is None:
            raise UnknownObjectError(f'cannot remove object {obj_id}: not tracked, queued or '
                                     f'deferred (tracked: {sorted(self.objects)})')
        if obj is not None:
            self.bank.clear(obj.slot)

    def reset(self) -> None:
        for obj in self.objects.values():
            self.bank.clear(obj.slot)
        self.objects.clear()
        self.queued.clear()
        self.deferred.clear()
        self.prompted = []
        self.size_open = True

    def occluded_runs(self) -> None:
        """What the read-back of each deferred prompt's frame would have done: a prompted
        object seen there (score > 0) ends its occluded run. Called by a result, before its
        own update (the device is idle by then: one small read-back)."""
        for objs, scores in self.prompted:
            for o, s in zip(objs, scores.tolist()):
                if s > 0:
                    o.hidden_run = 0
        self.prompted = []

    def sorted_objects(self) -> List[ObjectInfo]:
        return sorted(self.objects.values(), key=lambda o: o.obj_id)
