"""Exceptions the tracker core raises for bad input. All are ValueError subclasses so a
caller (the ROS node) can report them and keep running; nothing else is corrupted."""

from __future__ import annotations

from typing import Any, Callable


class TrackerError(ValueError):
    """Base of every input error raised by the tracker core."""


class FrameError(TrackerError):
    """A frame that cannot be used (``track``): wrong dtype, shape or size, or a resolution
    change while objects are tracked. Nothing changed; the frame is not counted."""


class PromptError(TrackerError):
    """A prompt that cannot be used (``add_prompt``, ``defer_prompt``, ``queue_prompt``): an id
    outside 1..255, NaN/inf, out of frame, labels not one per point, more than
    ``prompts.MAX_POINTS`` (64) points, an empty box or mask, a mask of another size. Nothing
    changed. From ``track``: prompts queued before the frame size was known that do not fit
    the frame (dropped; the frame is not tracked)."""


class UnknownObjectError(TrackerError):
    """An object id that is not tracked: in the core, ``remove_object`` of an id that is not
    tracked, queued or deferred, or of a value that is no id (not an int in 1..255)."""


class CapacityError(TrackerError):
    """A prompt for a new id when ``max_objects`` objects (per camera) are tracked or waiting
    to start (queued or deferred). Nothing changed."""


class CheckpointError(TrackerError):
    """A checkpoint that is missing, unreadable or for another model size."""


class StepError(TrackerError):
    """A frame whose computation failed (e.g. CUDA out of memory). The frame is reported
    failed and writes no memory; the tracker stays consistent and takes the next frame."""


def failure_site(exc: BaseException) -> str:
    """Where in our engine ``exc`` was raised, for a fallback's log line: the innermost two
    traceback frames under sam2_ros/engine, 'file.py:line in function', innermost first (''
    if none). A Triton error (e.g. OutOfResources) names no kernel; this names the fused module
    that launched it (the generic launcher, kernels/launch.py, is skipped)."""
    import os
    import traceback

    ours = [f for f in traceback.extract_tb(exc.__traceback__)
            if f'sam2_ros{os.sep}engine{os.sep}' in f.filename
            and not f.filename.endswith(f'kernels{os.sep}launch.py')]
    return ' < '.join(f'{os.path.basename(f.filename)}:{f.lineno} in {f.name}'
                      for f in reversed(ours[-2:]))


# What a camera whose step failed is told (``MultiStreamTracker``): its frame number in the text
# (the argument is the camera's ``stream.Stream``, not named here: stream.py imports this module)
def step_failed(exc: BaseException) -> Callable[[Any], str]:
    """A failed track call: no memory was written for the frame."""
    return lambda stream: (f'frame {stream.frame} failed: {exc!r}; no memory was written for it '
                           f'(steps read memories by frame number, so the gap is skipped), '
                           f'tracking continues with the next frame')


def read_failed(exc: BaseException) -> Callable[[Any], str]:
    """A frame tracked (its memory written) whose results could not be read back."""
    return lambda stream: (f'frame {stream.frame} was tracked (its memory written) but its '
                           f'results could not be read back: {exc!r}; tracking continues with '
                           f'the next frame')
