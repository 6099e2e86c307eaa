"""Frame sources of the offline tool: a video file or a folder of images, decoded to RGB.

The first frame is decoded on opening, so an unreadable input fails (``CliError``, one line
for the user) before the model is built, and its size is known for validating prompts.
"""

from __future__ import annotations

import math
import os
import re
from typing import Iterator, Optional, Tuple

import cv2
import numpy as np

from sam2_ros.cli import CliError

IMAGE_EXTS = ('.png', '.jpg', '.jpeg')


def _natural_key(name: str) -> list:
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r'(\d+)', name)]


class FrameSource:
    """RGB uint8 frames of one size, with a name each (for messages and states.jsonl).

    The first frame is decoded on opening, so an unreadable input fails before the model is
    built and its size is known for validating the prompt file.
    """

    kind = ''
    total: Optional[int] = None
    fps: Optional[float] = None
    size: Tuple[int, int] = (0, 0)   # (H, W)

    def __iter__(self) -> Iterator[Tuple[int, str, np.ndarray]]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _check_size(self, rgb: np.ndarray, name: str) -> np.ndarray:
        if rgb.shape[:2] != self.size:
            raise CliError(f'{name}: frame is {rgb.shape[1]}x{rgb.shape[0]} but the first frame '
                           f'is {self.size[1]}x{self.size[0]}; all frames must have one size')
        return rgb


class FolderSource(FrameSource):
    kind = 'folder'

    def __init__(self, path: str):
        names = sorted((n for n in os.listdir(path) if n.lower().endswith(IMAGE_EXTS)
                        and os.path.isfile(os.path.join(path, n))), key=_natural_key)
        if not names:
            raise CliError(f'no {"/".join("*" + e for e in IMAGE_EXTS)} images in folder '
                           f'{path!r}')
        self.paths = [os.path.join(path, n) for n in names]
        self.total = len(self.paths)
        self._first = self._read(self.paths[0])
        self.size = self._first.shape[:2]

    @staticmethod
    def _read(path: str) -> np.ndarray:
        # EXIF orientation ignored: the node's decoders (decode.decode_cpu, nvJPEG) ignore
        # it, so one file is one frame, of one size, offline and in ROS
        img = cv2.imread(path, cv2.IMREAD_UNCHANGED | cv2.IMREAD_IGNORE_ORIENTATION)
        if img is None:
            raise CliError(f'cannot read image {path!r} (corrupt or not an image)')
        # 16-bit samples (a depth or 12-bit medical image) were cut to 8 bits, nearly black:
        # refused, as the node refuses 16-bit encodings
        if img.dtype != np.uint8:
            raise CliError(f'image {path!r} has {img.dtype} samples: only 8-bit images are '
                           f'tracked (convert it to 8 bits first)')
        if img.ndim == 2:
            return cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
        if img.ndim == 3 and img.shape[2] in (3, 4):
            return cv2.cvtColor(img, cv2.COLOR_BGR2RGB if img.shape[2] == 3 else
                                cv2.COLOR_BGRA2RGB)
        raise CliError(f'image {path!r} has {img.shape[2]} channels: gray, BGR or BGRA expected')

    def __iter__(self) -> Iterator[Tuple[int, str, np.ndarray]]:
        for i, path in enumerate(self.paths):
            rgb = self._first if i == 0 else self._read(path)
            yield i, os.path.basename(path), self._check_size(rgb, path)


class VideoSource(FrameSource):
    kind = 'video'

    def __init__(self, path: str):
        self.path = path
        self.cap = cv2.VideoCapture(path)
        ok, bgr = self.cap.read() if self.cap.isOpened() else (False, None)
        if not ok or bgr is None or bgr.ndim != 3:
            self.cap.release()
            raise CliError(f'cannot decode {path!r} as a video (not a video file, no frames, '
                           f'or no codec for it); an image folder is also accepted')
        count = int(self.cap.get(cv2.CAP_PROP_FRAME_COUNT) or 0)
        self.total = count if count > 0 else None
        fps = float(self.cap.get(cv2.CAP_PROP_FPS) or 0.0)
        self.fps = fps if math.isfinite(fps) and 0 < fps <= 1000 else None
        self._first = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        self.size = self._first.shape[:2]

    def __iter__(self) -> Iterator[Tuple[int, str, np.ndarray]]:
        base, i, rgb = os.path.basename(self.path), 0, self._first
        while rgb is not None:
            yield i, f'{base}#{i}', self._check_size(rgb, f'{self.path} frame {i}')
            ok, bgr = self.cap.read()
            rgb, i = (cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB) if ok else None), i + 1

    def close(self) -> None:
        self.cap.release()


def open_source(path: str) -> FrameSource:
    if not os.path.exists(path):
        raise CliError(f'input not found: {path!r}')
    return FolderSource(path) if os.path.isdir(path) else VideoSource(path)
