"""``--image-mode`` of the offline tool: every image of the input segmented alone.

    python -m sam2_ros.cli.track_offline FOLDER --image-mode --prompts prompts.yaml --out DIR

Each image runs sam2's image-predictor computation (``ImageSegmenter``, engine/image.py: no
memory, no bank): the ``add`` events of frame k are the prompts of image k, one mask per
event; an image without events gets none. Outputs are those of tracking (masks/, overlay.mp4,
states.jsonl, summary.json). ``remove`` / ``reset`` mean nothing here and an object prompted
twice on one image would get two masks under one id: both are rejected before the first image.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Dict, List, Optional

from sam2_ros.cli import CliError, interrupts_deferred
from sam2_ros.cli import prompts_file as pf

if TYPE_CHECKING:
    from sam2_ros.cli.outputs import Outputs
    from sam2_ros.cli.sources import FrameSource
    from sam2_ros.engine.image import ImageSegmenter


def check_events(events: List[pf.PromptEvent], prompts: str) -> None:
    """Only 'add' events, one per object and frame; CliError naming the first other one."""
    seen = set()
    for ev in events:
        if ev.action != 'add':
            raise CliError(f'{prompts}: event[{ev.index}]: {ev.action!r} has no meaning with '
                           f'--image-mode (each image is segmented alone from its add events)')
        if (ev.frame, ev.object_id) in seen:
            raise CliError(f'{prompts}: event[{ev.index}]: object {ev.object_id} prompted '
                           f'twice on frame {ev.frame} (--image-mode: one prompt per object '
                           f'and image)')
        seen.add((ev.frame, ev.object_id))


def process(segmenter: ImageSegmenter, source: FrameSource,
            by_frame: Dict[int, List[pf.PromptEvent]], outputs: Outputs, stats: dict,
            max_frames: Optional[int], progress: bool) -> None:
    """Segment every image with its events and write its outputs; fills ``stats`` as
    ``track_offline.process`` does."""
    from tqdm import tqdm

    from sam2_ros.cli.records import count_frame, object_record
    from sam2_ros.engine.errors import TrackerError
    from sam2_ros.engine.image import frame_result

    total = source.total if max_frames is None else min(source.total or max_frames, max_frames)
    bar = tqdm(total=total, unit='image', desc='segmenting', disable=not progress,
               file=sys.stderr)
    try:
        for k, name, rgb in source:
            if max_frames is not None and k >= max_frames:
                break
            events = by_frame.get(k, [])
            prompts = [ev.to_prompt() for ev in events]
            try:
                res = frame_result(segmenter.segment(rgb, prompts), prompts)
            except TrackerError as exc:
                raise CliError(f'{name}: {exc}') from exc
            res.frame_index = k
            res.objects.sort(key=lambda o: o.obj_id)    # one per id here: ascending, as tracking
            objs = [object_record(o) for o in res.objects]
            applied = [ev.index for ev in events]
            with interrupts_deferred():     # the image's outputs and its count, whole
                outputs.write(k, rgb, res, {
                    'frame': k, 'source': name, 'mode': res.mode,
                    'engine_ms': round(res.engine_ms, 3), 'prompt_ms': 0.0, 'events': applied,
                    'objects': objs})
                count_frame(stats, res.engine_ms, res.mode, applied, objs)
            bar.update(1)
    finally:
        bar.close()
