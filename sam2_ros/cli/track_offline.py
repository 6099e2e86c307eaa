"""Offline tracking: run the streaming tracker over a video file or an image folder.

    python -m sam2_ros.cli.track_offline INPUT --prompts prompts.yaml --out DIR \\
        [--model tiny] [--image-size 1024] (--checkpoint PATH | --random-weights)

Writes into DIR: ``masks/NNNNNN.png`` (mono8 label masks, pixel = object id), ``overlay.mp4``,
``states.jsonl`` (one JSON object per frame) and ``summary.json``. Events of frame k in the
prompt file are applied AFTER frame k is tracked, through ``add_prompt``: they refine frame k
(its outputs show the refined result) and condition every later frame. See docs/offline.md.

Everything that can go wrong because of the user's input (arguments, prompt file, input files,
checkpoint, output directory) is checked as early as possible and reported as one line on
stderr with exit status 2; the prompt file is validated in full before the first frame.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import numpy as np

from sam2_ros.cli import CliError, interrupts_deferred, terminate_as_interrupt
from sam2_ros.cli import image_mode
from sam2_ros.cli import prompts_file as pf
from sam2_ros.cli.records import count_frame, object_record
from sam2_ros.cli.outputs import Outputs, check_out_dir, clear_out_dir
from sam2_ros.cli.sources import FrameSource, open_source
from sam2_ros.engine.config import MODEL_SIZES, PRECISIONS, TrackerConfig, default_precision

if TYPE_CHECKING:   # imported where used: torch loads only once the arguments are good
    from sam2_ros.engine.tracker import StreamingTracker

PROG = 'sam2-ros-track'
DEFAULT_FPS = 30.0


# ---- arguments -> TrackerConfig -----------------------------------------------------------

def _positive_int(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f'must be >= 1, got {v}')
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description='Track prompted objects through a video file or an image folder '
        'with SAM 2 (no ROS). Prompt events of frame k are applied after frame k is tracked.')
    p.add_argument('input', help='video file (anything OpenCV reads) or a folder of '
                   '*.png/*.jpg/*.jpeg images (natural sort order)')
    p.add_argument('--prompts', required=True, help='YAML or JSON prompt file (docs/offline.md)')
    p.add_argument('--out', required=True, help='output directory (created if missing)')
    p.add_argument('--model', choices=MODEL_SIZES, default=TrackerConfig.model_size)
    p.add_argument('--image-size', type=int, default=TrackerConfig.image_size,
                   help='square model input side, multiple of 32 (default %(default)s)')
    weights = p.add_mutually_exclusive_group()
    weights.add_argument('--checkpoint', help='official SAM 2.1 .pt file of --model')
    weights.add_argument('--random-weights', action='store_true',
                         help='random model: for tests and smoke runs only')
    p.add_argument('--device', default='auto', help="'auto' (cuda if available), cuda, cpu, ...")
    p.add_argument('--precision', choices=PRECISIONS, default=None,
                   help='default: bf16 on CUDA, fp32 on CPU (bf16 autocast is slow on CPU)')
    p.add_argument('--no-cuda-graphs', action='store_true', help='run every step eagerly')
    p.add_argument('--image-mode', action='store_true',
                   help="segment every image alone, as sam2's image predictor (no memory): the "
                   'add events of frame k are the prompts of image k (sam2_ros/cli/image_mode.py)')
    p.add_argument('--precompile', default='',
                   help="comma-separated parts run as fused kernels compiled once and loaded by "
                        "later runs: 'encoder', 'heads' (CUDA graphs only; the first run "
                        'compiles them, tens of seconds)')
    p.add_argument('--max-objects', type=_positive_int, default=TrackerConfig.max_objects,
                   help='objects alive at once (default %(default)s)')
    p.add_argument('--fill-hole-area', type=int, default=TrackerConfig.fill_hole_area,
                   help="sam2's hole filling: background specks of at most this many "
                   'low-resolution pixels become mask; 0: off (default %(default)s)')
    p.add_argument('--max-frames', type=_positive_int, default=None,
                   help='stop after this many frames')
    p.add_argument('--no-video', action='store_true', help='do not write overlay.mp4')
    p.add_argument('--fps', type=float, default=None,
                   help=f'overlay video frame rate (default: the input video\'s, else '
                   f'{DEFAULT_FPS:g})')
    p.add_argument('--overwrite', action='store_true',
                   help='replace results already in --out (otherwise that is an error)')
    p.add_argument('--no-progress', action='store_true', help='no progress bar')
    return p


def config_from_args(args: argparse.Namespace) -> TrackerConfig:
    """The one mapping of command-line options onto TrackerConfig (defaults stay there)."""
    import torch

    if not args.checkpoint and not args.random_weights:
        raise CliError('no checkpoint: pass --checkpoint PATH (an official SAM 2.1 .pt file '
                       'of --model) or --random-weights for a smoke test')
    if args.checkpoint and not os.path.isfile(args.checkpoint):
        raise CliError(f'checkpoint not found: {args.checkpoint!r}')
    device = args.device
    if device == 'auto':
        device = 'cuda' if torch.cuda.is_available() else 'cpu'
    try:
        kind = torch.device(device).type
    except RuntimeError as exc:
        raise CliError(f'bad --device {device!r}: {exc}') from exc
    if kind == 'cuda' and not torch.cuda.is_available():
        raise CliError(f'--device {device} requested but CUDA is not available (use --device cpu)')
    cfg = TrackerConfig(
        model_size=args.model, image_size=args.image_size, checkpoint=args.checkpoint or None,
        random_weights=bool(args.random_weights), device=device,
        precision=args.precision or default_precision(device),
        use_cuda_graphs=not args.no_cuda_graphs, max_objects=args.max_objects,
        fill_hole_area=args.fill_hole_area,
        precompile=tuple(p for p in args.precompile.split(',') if p))
    try:
        return cfg.validate()
    except ValueError as exc:
        raise CliError(str(exc)) from exc


# ---- outputs -----------------------------------------------------------------------------

def check_frame_size(size: Tuple[int, int], path: str) -> None:
    """The tracker's frame size limits (``frame_in.check_size``), before the model is built."""
    from sam2_ros.engine.errors import FrameError
    from sam2_ros.engine.frame_in import check_size
    try:
        check_size(*size)
    except FrameError as exc:
        raise CliError(f'{path}: {exc}') from exc


# ---- the run -----------------------------------------------------------------------------

def process(tracker: StreamingTracker, source: FrameSource,
            by_frame: Dict[int, List[pf.PromptEvent]], outputs: Outputs, stats: dict,
            max_frames: Optional[int], prompts: str, progress: bool) -> None:
    """Track every frame, apply its events after it, write its outputs; fills ``stats``."""
    from tqdm import tqdm

    from sam2_ros.engine.errors import TrackerError
    from sam2_ros.engine.types import FrameResult

    total = source.total if max_frames is None else min(source.total or max_frames, max_frames)
    bar = tqdm(total=total, unit='frame', desc='tracking', disable=not progress, file=sys.stderr)
    try:
        for k, name, rgb in source:
            if max_frames is not None and k >= max_frames:
                break
            try:
                res = tracker.track(rgb)
            except TrackerError as exc:
                raise CliError(f'{name}: {exc}') from exc
            track_ms, mode, prompt_ms, applied = res.engine_ms, res.mode, 0.0, []
            needs_frame = False   # after a reset the tracker needs this frame again to prompt
            for ev in by_frame.get(k, []):
                try:
                    if ev.action == 'reset':
                        tracker.reset()
                        res, needs_frame = FrameResult(k, *source.size, mode=mode), True
                    elif ev.action == 'remove':
                        tracker.remove_object(ev.object_id)
                        res.objects = [o for o in res.objects if o.obj_id != ev.object_id]
                    else:
                        if needs_frame:
                            prompt_ms += tracker.track(rgb).engine_ms
                            needs_frame = False
                        res = tracker.add_prompt(ev.to_prompt())
                        prompt_ms += res.engine_ms
                except TrackerError as exc:
                    raise CliError(f'{prompts}: event[{ev.index}] (frame {k}): {exc}') from exc
                applied.append(ev.index)
            objs = [object_record(o) for o in res.objects]
            with interrupts_deferred():     # the frame's outputs and its count, whole
                outputs.write(k, rgb, res, {
                    'frame': k, 'source': name, 'mode': mode, 'engine_ms': round(track_ms, 3),
                    'prompt_ms': round(prompt_ms, 3), 'events': applied, 'objects': objs})
                count_frame(stats, track_ms, mode, applied, objs)
            bar.set_postfix(objects=len(objs), ms=f'{track_ms:.0f}', refresh=False)
            bar.update(1)
    finally:
        bar.close()


def run(args: argparse.Namespace) -> dict:
    """Validate everything, track, write the outputs; return the summary (also written)."""
    cfg = config_from_args(args)
    events = pf.load_prompts(args.prompts)
    if args.image_mode:
        image_mode.check_events(events, args.prompts)
    source = open_source(args.input)
    try:
        check_frame_size(source.size, args.input)
        # image mode holds no objects between images: any number of ids (1..255) may appear
        pf.check_against_input(events, *source.size, 255 if args.image_mode else
                               cfg.max_objects, args.prompts)
        warn_events_past_input(events, source, args.prompts)
        fps = args.fps if args.fps is not None else (source.fps or DEFAULT_FPS)
        if not (math.isfinite(fps) and fps > 0):
            raise CliError(f'--fps must be > 0, got {args.fps}')
        old = check_out_dir(args.out, args.overwrite)
        return _track(args, cfg, events, source, fps, old)
    finally:
        source.close()


def warn_events_past_input(events: List[pf.PromptEvent], source: FrameSource,
                           where: str) -> None:
    """An image folder's frames are counted before anything runs: events past its last frame
    are said now, not only after the whole run (a video's count is the container's word: its
    events are checked at the end)."""
    late = [ev.index for ev in events if source.kind == 'folder' and ev.frame >= source.total]
    if late:
        print(f'{PROG}: warning: {where}: events {late} are for frames past the last image '
              f'({source.total - 1}) of the folder: they will not be applied', file=sys.stderr)


def _track(args, cfg: TrackerConfig, events: List[pf.PromptEvent], source: FrameSource,
           fps: float, old: List[str]) -> dict:
    from sam2_ros.engine.errors import TrackerError
    from sam2_ros.engine.image import ImageSegmenter
    from sam2_ros.engine.tracker import StreamingTracker

    t0 = time.perf_counter()
    try:
        tracker = ImageSegmenter(cfg) if args.image_mode else StreamingTracker(cfg)
    except TrackerError as exc:
        raise CliError(str(exc)) from exc
    except (MemoryError, RuntimeError) as exc:     # out of memory (host or GPU) at this size
        raise CliError(f'cannot build the {cfg.model_size}@{cfg.image_size} model on '
                       f'{cfg.device}: {" ".join(str(exc).split())[:300]}') from exc
    build_s = time.perf_counter() - t0
    stats = {'frames': 0, 'engine_ms': [], 'modes': {}, 'applied': [], 'ids': set()}
    clear_out_dir(args.out, old)
    outputs = Outputs(args.out, source.size, fps, video=not args.no_video)
    status, error, t1 = 'ok', None, time.perf_counter()
    try:
        if args.image_mode:
            image_mode.process(tracker, source, pf.events_by_frame(events), outputs, stats,
                               args.max_frames, progress=not args.no_progress)
        else:
            process(tracker, source, pf.events_by_frame(events), outputs, stats,
                    args.max_frames, args.prompts, progress=not args.no_progress)
    except CliError as exc:
        status, error = 'error', str(exc)
        raise
    except KeyboardInterrupt:
        status, error = 'interrupted', 'interrupted by the user'
        raise
    except BaseException as exc:   # a bug: the summary says so, the traceback follows
        status, error = 'error', f'internal error: {exc!r}'
        raise
    finally:
        summary = _summary(args, cfg, events, source, fps, stats, build_s,
                           time.perf_counter() - t1, tracker, status, error)
        _write_summary(args.out, outputs, summary)
    return summary


def _write_summary(out: str, outputs: Outputs, summary: dict) -> None:
    """Close the outputs and write summary.json; an I/O error is a CliError only when the run
    itself succeeded (else the run's own error is the one reported)."""
    try:
        outputs.close()
        with open(os.path.join(out, 'summary.json'), 'w', encoding='utf-8') as fh:
            json.dump(summary, fh, indent=2)
            fh.write('\n')
    except OSError as exc:
        if summary['status'] == 'ok':
            raise CliError(f'cannot write the outputs in {out!r} (disk full or no '
                           f'permission?): {exc}') from exc


def _summary(args, cfg, events, source, fps, stats, build_s, track_s, tracker, status,
             error) -> dict:
    ms = np.array(stats['engine_ms'], np.float64)
    applied = set(stats['applied'])
    missed = [ev.index for ev in events if ev.index not in applied]
    return {
        'status': status, 'error': error,
        'input': os.path.abspath(args.input), 'input_kind': source.kind,
        'image_mode': bool(args.image_mode),
        'width': int(source.size[1]), 'height': int(source.size[0]),
        'frames': stats['frames'], 'object_ids': sorted(stats['ids']),
        'frames_declared': source.total if source.kind == 'video' else None,
        'prompts': os.path.abspath(args.prompts), 'events': len(events),
        'events_applied': len(applied), 'events_not_applied': missed,
        'config': {'model_size': cfg.model_size, 'image_size': cfg.image_size,
                   'checkpoint': cfg.checkpoint, 'random_weights': cfg.random_weights,
                   'device': cfg.device, 'precision': cfg.precision,
                   'use_cuda_graphs': cfg.cuda_graphs_in_use,   # effective: False on the CPU
                   'max_objects': cfg.max_objects},
        'model_build_s': round(build_s, 3), 'track_wall_s': round(track_s, 3),
        'wall_fps': round(stats['frames'] / track_s, 3) if track_s > 0 else None,
        'engine_ms_mean': round(float(ms.mean()), 3) if ms.size else None,
        'engine_ms_p95': round(float(np.percentile(ms, 95)), 3) if ms.size else None,
        'modes': stats['modes'],
        'tracker_stats': {k: int(v) for k, v in dict(tracker.stats).items()},
        'outputs': {'masks': 'masks/', 'states': 'states.jsonl',
                    'overlay': None if args.no_video else 'overlay.mp4', 'fps': fps},
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point; returns the exit status (0 ok, 2 user error, 130 interrupted)."""
    args = build_parser().parse_args(argv)   # bad usage: argparse exits with status 2
    logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')
    try:
        with terminate_as_interrupt():  # timeout, docker stop: outputs finished as for Ctrl-C
            summary = run(args)
    except CliError as exc:
        print(f'{PROG}: error: {exc}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f'{PROG}: interrupted', file=sys.stderr)
        return 130
    if summary['frames_declared'] and summary['frames'] < summary['frames_declared'] and \
            summary['frames'] < (args.max_frames or summary['frames_declared']):
        print(f'{PROG}: warning: the video declares {summary["frames_declared"]} frames but '
              f'only {summary["frames"]} could be decoded (truncated or corrupt at the end?)',
              file=sys.stderr)
    if summary['events_not_applied']:
        print(f'{PROG}: warning: events {summary["events_not_applied"]} were never applied '
              f'(their frame is past the last processed frame {summary["frames"] - 1})',
              file=sys.stderr)
    print(f'{summary["frames"]} frames, objects {summary["object_ids"]} -> {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
