"""The streaming SAM 2 tracker core: no ROS inside (no rclpy, no generated messages).

Files follow a frame through the engine::

    frame_in -> encoder -> memory -> step -> masks_out
    (prompts.py turns prompts into model space; staging.py copies indices to the device)

* ``frame_in.py``   validate a [H, W, 3] uint8 frame, copy it to the device, resize, normalize
  (the resize is PIL's, bit for bit, in integer arithmetic: ``pil_resize.py``)
* ``encoder.py``    image encoder (Hiera + FPN) -> ``Features``
* ``memory.py``     ``MemoryBank``: per-object memories, preallocated rings
* ``step.py``       memory attention, SAM heads, memory encoder for B objects
* ``masks_out.py``  logits -> masks, box/area/centroid, label mask on the host
* runners: ``eager.py`` (reference path) and ``cuda/runner.py`` (CUDA graphs; the graph
  machinery in ``cuda/``, ``cuda/__init__.py`` lists it), side by side with the same interface
* ``runners.py``    which runner a configuration gets (``make_runner``)
* ``stream.py``     one camera's objects, queued prompts, frame counter and size
* ``multistream.py`` ``MultiStreamTracker``: N cameras on one model, one batch per step
* ``camera.py``     ``CameraTracker``: one camera of it as a tracker of its own
* ``tracker.py``    ``StreamingTracker``: the one-camera tracker (a ``CameraTracker``)
* ``image.py``      ``ImageSegmenter``: single images as sam2's image predictor computes them
  (no memory modules, no bank; prompts batched by ``image_prompts.py``, CUDA graphs in
  ``cuda/image_graphs.py``); the trackers' ``segment_image`` runs it

The public API is re-exported here, imported on first use, so that ``import sam2_ros.engine``
(or ``sam2_ros.engine.config``) stays light (no torch)::

    from sam2_ros.engine import Prompt, StreamingTracker, TrackerConfig
    from sam2_ros.engine import MultiStreamTracker     # several cameras
"""

import importlib

_EXPORTS = {
    'StreamingTracker': 'tracker',
    'MultiStreamTracker': 'multistream',
    'StreamsResult': 'types',
    'ImageSegmenter': 'image',
    'TrackerConfig': 'config',
    'Prompt': 'types',
    'FrameResult': 'types',
    'ObjectResult': 'types',
    'TrackerError': 'errors',
    'FrameError': 'errors',
    'PromptError': 'errors',
    'UnknownObjectError': 'errors',
    'CapacityError': 'errors',
    'CheckpointError': 'errors',
    'StepError': 'errors',
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    return getattr(importlib.import_module(f'{__name__}.{_EXPORTS[name]}'), name)


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
