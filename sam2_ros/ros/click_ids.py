"""The object id of a ``click_mode new`` click: the lowest id no object uses now.

Computed afresh from what exists at the moment of the click (tracked objects, prompts queued
in the tracker, prompts the worker holds for future frames: :func:`ids_in_use`, which a
detection starting an object uses too), never from a record of ids handed out before: removed
objects, a reset and a new tracker (cleanup, configure) free their ids, and a click refused
for capacity takes none. Nothing here imports ROS.
"""

from __future__ import annotations

from typing import Any, Iterable, Set

from sam2_ros.engine.errors import CapacityError

MAX_ID = 255   # object ids are label-mask values (uint8, 0 = background)


def ids_in_use(tracker: Any, held_ids: Iterable[int]) -> Set[int]:
    """Ids of the objects tracked or about to start: tracked by ``tracker``, queued for its
    next frame, deferred on its latest one, or held by the worker for later frames
    (``held_ids``)."""
    return (set(tracker.object_ids) | set(tracker.queued_ids) | set(tracker.deferred_ids)
            | set(held_ids))


def new_object_id(in_use: Iterable[int], max_objects: int) -> int:
    """The lowest id in 1..255 not in ``in_use`` (ids of objects tracked or about to start).

    Raises CapacityError, taking nothing, when ``max_objects`` objects already exist or start,
    or when all 255 ids are in use.
    """
    used = set(in_use)
    if len(used) >= max_objects:
        raise CapacityError(f'click_mode new: {len(used)} objects are tracked or starting, '
                            f'max_objects={max_objects}; remove one (or reset) first')
    free = next((i for i in range(1, MAX_ID + 1) if i not in used), 0)
    if not free:
        raise CapacityError(f'click_mode new: all object ids 1..{MAX_ID} are in use')
    return free
