#!/usr/bin/env python3
"""Offline video, core API, no ROS: click an object on the first frame, track it through a
video file, write an overlay video and one line per frame.

    python examples/offline_video.py video.mp4 --click 320,240 --checkpoint sam2.1_hiera_tiny.pt
    python examples/offline_video.py video.mp4 --box 100,80,220,200 --checkpoint ... --device cuda
    # no video, no checkpoint: the synthetic camera and random weights (masks are meaningless)
    python examples/offline_video.py --random-weights --frames 30

What it shows: ``StreamingTracker`` takes one [H, W, 3] uint8 RGB frame at a time
(``track``), a prompt applies to the frame just tracked (``add_prompt``), and every result
holds each object's mask, box, area, score and state at the source resolution. The same core
runs inside the ROS node; ``sam2-ros-track`` (docs/offline.md) is the full command-line tool.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Iterator, List, Optional

import numpy as np

if TYPE_CHECKING:
    from sam2_ros.engine import Prompt


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('video', nargs='?', help='video file (OpenCV reads it); none: synthetic')
    ap.add_argument('--click', help='x,y of a positive click on frame 0 (source pixels)')
    ap.add_argument('--box', help='x0,y0,x1,y1 box on frame 0 (source pixels)')
    ap.add_argument('--checkpoint', help='SAM 2.1 checkpoint (.pt) you downloaded')
    ap.add_argument('--random-weights', action='store_true',
                    help='no checkpoint: random weights (the pipeline runs, masks are noise)')
    ap.add_argument('--model', default='tiny', help='tiny, small, base_plus, large')
    ap.add_argument('--image-size', type=int, default=512, help='model input size')
    ap.add_argument('--device', default='cpu', help='cpu or cuda')
    ap.add_argument('--frames', type=int, default=0, help='stop after this many (0: all)')
    ap.add_argument('--out', help='overlay video to write (.mp4)')
    a = ap.parse_args(argv)
    if not a.checkpoint and not a.random_weights:
        ap.error('give --checkpoint, or --random-weights to run without one')
    if a.video and not (a.click or a.box):
        ap.error('with a video, give --click or --box for the object on frame 0')
    return a


def video_frames(path: str) -> Iterator[np.ndarray]:
    """RGB frames of a video file ([H, W, 3] uint8; OpenCV decodes BGR)."""
    import cv2

    cap = cv2.VideoCapture(path)
    if not cap.isOpened():
        raise SystemExit(f'cannot open video {path!r}')
    try:
        while True:
            ok, bgr = cap.read()
            if not ok:
                return
            yield cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    finally:
        cap.release()


def first_prompt(a: argparse.Namespace, camera) -> 'Prompt':
    """Object 1 on frame 0: the --box, the --click, or a click on the synthetic disc 1."""
    from sam2_ros.engine import Prompt
    from sam2_ros.synthetic import center

    if a.box:
        return Prompt(1, box=tuple(float(v) for v in a.box.split(',')))
    if a.click:
        x, y = (float(v) for v in a.click.split(','))
    else:                                   # synthetic camera: click disc 1's centre
        x, y = center(camera.masks(0)[1])
    return Prompt(1, points=np.array([[x, y]], np.float32), labels=np.array([1], np.int32))


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    from sam2_ros.engine import StreamingTracker, TrackerConfig
    from sam2_ros.engine.config import default_precision
    from sam2_ros.overlay import render_overlay
    from sam2_ros.synthetic import SyntheticCamera

    camera = None
    if a.video:
        frames = video_frames(a.video)
    else:
        camera = SyntheticCamera(320, 240, objects=2)
        frames = (camera.frame(i) for i in range(a.frames or 30))
    cfg = TrackerConfig(model_size=a.model, image_size=a.image_size, device=a.device,
                        checkpoint=a.checkpoint, random_weights=a.random_weights,
                        precision=default_precision(a.device),
                        use_cuda_graphs=a.device.startswith('cuda'))
    tracker = StreamingTracker(cfg)
    writer = None
    for i, rgb in enumerate(frames):
        if a.frames and i >= a.frames:
            break
        res = tracker.track(rgb)
        if i == 0:
            res = tracker.add_prompt(first_prompt(a, camera))   # on the frame just tracked
        for o in res.objects:
            print(f'frame {res.frame_index}: object {o.obj_id} {o.state} area={o.area} '
                  f'box={o.box} score={o.score:.2f}', flush=True)
        if a.out:
            import cv2

            if writer is None:
                writer = cv2.VideoWriter(a.out, cv2.VideoWriter_fourcc(*'mp4v'), 15.0,
                                         (res.width, res.height))
            writer.write(cv2.cvtColor(render_overlay(rgb, res), cv2.COLOR_RGB2BGR))
    if writer is not None:
        writer.release()
        print(f'wrote {a.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
