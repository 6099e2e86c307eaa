"""The offline tool's outputs: ``--out`` checked and cleared of an earlier run's results, then
per frame a label mask (``masks/NNNNNN.png``), an overlay video frame and a states.jsonl line,
written whole (``interrupts_deferred``) with constant memory."""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, List, Tuple

import cv2
import numpy as np

from sam2_ros.cli import CliError

if TYPE_CHECKING:
    from sam2_ros.engine.types import FrameResult

MASK_NAME = re.compile(r'^\d{6,}\.png$')   # 000000.png ..., 7 digits past frame 999999
OUTPUT_FILES = ('overlay.mp4', 'states.jsonl', 'summary.json')


def check_out_dir(out: str, overwrite: bool) -> List[str]:
    """Create --out and its masks/ folder; refuse to mix with an earlier run's results unless
    --overwrite. Returns those results' paths, which ``clear_out_dir`` deletes once the run
    can start (a later error, e.g. a bad checkpoint, leaves them in place)."""
    masks = os.path.join(out, 'masks')
    if os.path.exists(out) and not os.path.isdir(out):
        raise CliError(f'--out {out!r} exists and is not a directory')
    old = [f for f in OUTPUT_FILES if os.path.exists(os.path.join(out, f))]
    old_masks = [n for n in os.listdir(masks) if MASK_NAME.match(n)] \
        if os.path.isdir(masks) else []
    if (old or old_masks) and not overwrite:
        raise CliError(f'--out {out!r} already holds results ({", ".join(old) or "masks/"}); '
                       f'pass --overwrite or choose another directory')
    try:
        os.makedirs(masks, exist_ok=True)
    except OSError as exc:
        raise CliError(f'cannot prepare --out {out!r}: {exc}') from exc
    if not (os.access(out, os.W_OK) and os.access(masks, os.W_OK)):
        raise CliError(f'cannot write into --out {out!r} (no permission)')
    return [os.path.join(out, f) for f in old] + [os.path.join(masks, n) for n in old_masks]


def clear_out_dir(out: str, old: List[str]) -> None:
    """Delete an earlier run's results (``check_out_dir``'s list): no stale mask of a longer
    earlier run survives."""
    try:
        for path in old:
            os.remove(path)
    except OSError as exc:
        raise CliError(f'cannot prepare --out {out!r}: {exc}') from exc


class Outputs:
    """Writes masks, the overlay video and states.jsonl frame by frame (constant memory)."""

    def __init__(self, out: str, size: Tuple[int, int], fps: float, video: bool):
        self.out = out
        self.video = None
        if video:                   # first: a writer that cannot open leaves nothing behind
            h, w = size
            path = os.path.join(out, 'overlay.mp4')
            self.video = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*'mp4v'), fps, (w, h))
            if not self.video.isOpened():
                self.video.release()
                if os.path.exists(path):
                    os.remove(path)
                raise CliError(f'cannot open {path!r} for writing (mp4v codec unavailable, or a '
                               f'{w}x{h} frame it cannot encode?); pass --no-video to skip the '
                               f'overlay video')
        self.states = open(os.path.join(out, 'states.jsonl'), 'w', encoding='utf-8')

    def write(self, k: int, rgb: np.ndarray, res: FrameResult, record: dict) -> None:
        """One frame's mask, overlay frame and states line, all or (on an I/O error) a
        CliError; a Ctrl-C in between is raised after them (``interrupts_deferred``)."""
        path = os.path.join(self.out, 'masks', f'{k:06d}.png')
        try:
            # imwrite can report success for a file it could not fill (disk full)
            if not cv2.imwrite(path, res.label_mask()) or os.path.getsize(path) == 0:
                raise OSError(f'{path!r} was not written')
            if self.video is not None:
                from sam2_ros.overlay import render_overlay
                self.video.write(cv2.cvtColor(render_overlay(rgb, res), cv2.COLOR_RGB2BGR))
            self.states.write(json.dumps(record, separators=(',', ':')) + '\n')
            self.states.flush()
        except OSError as exc:
            raise CliError(f'cannot write the outputs of frame {k} in {self.out!r} (disk full '
                           f'or no permission?): {exc}') from exc

    def close(self) -> None:
        self.states.close()
        if self.video is not None:
            self.video.release()
