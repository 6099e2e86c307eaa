"""Probe: what rendering the overlays beside the tracking costs the tracker's step, without ROS.

    python -m tools.probes.overlay_probe [--cameras 2] [--objects 1,3] [--overlay none,gpu,host]
        [--steps 300] [--rate 60] [--out $OUT/overlay_probe.json]

Why: a node serving two 60 Hz cameras renders each frame's overlay in its publisher thread,
beside the tracking step of the next pair, on the GPU (``overlay_on_gpu``: ``DeviceOverlay``,
a stream of its own) or on the host; whatever the rendering blocks (the driver, the GIL)
shows in the step's time. This reproduces the node's threads around the engine without ROS:
the main thread tracks the cameras' frames at the camera rate (frames read-only, as the
node's received frames are), a thread renders every camera's overlay of each step as the
node's does (``none``: no overlay; ``gpu``: ``DeviceOverlay``; ``host``:
``overlay.render_overlay``). Per row: ``track()`` ms p50 / p99, overlays rendered, and how
far the overlay thread fell behind (frames still queued at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
from typing import Dict, List

import numpy as np

from tools.bench.results import provenance, save_probe, stamp
from tools.probes.multistream_probe import tracker

SETTLE = 21   # past the 15 frames after the prompts


def render_thread(mode: str, device: str, todo: queue.Queue, done: List[int]):
    """The node's publisher: each queued (frames, StreamsResult) step's overlays, in order."""
    from sam2_ros.overlay import render_overlay
    from sam2_ros.overlay_device import DeviceOverlay
    dev = DeviceOverlay(device) if mode == 'gpu' else None

    def run() -> None:
        while (item := todo.get()) is not None:
            frames, out = item
            for rgb, res in zip(frames, out.results):
                if res is None:
                    continue
                if dev is not None:
                    dev.render(rgb, res)
                else:
                    render_overlay(rgb, res)
                done[0] += 1
    return threading.Thread(target=run, name='overlay', daemon=True)


def run_case(tr, frames: List, mode: str, steps: int, period_s: float,
             device: str) -> Dict[str, object]:
    """Track ``steps`` steps at one per ``period_s`` with the ``mode`` overlays beside."""
    todo: queue.Queue = queue.Queue()
    done = [0]
    th = render_thread(mode, device, todo, done) if mode != 'none' else None
    if th is not None:
        th.start()
    times, t_next = [], time.perf_counter()
    for i in range(steps):
        f = frames[SETTLE + i % (len(frames) - SETTLE)]
        t = time.perf_counter()
        out = tr.track(f)
        times.append((time.perf_counter() - t) * 1e3)
        assert not any(out.errors), out.errors
        if th is not None:
            todo.put((f, out))
        t_next += period_s
        time.sleep(max(0.0, t_next - time.perf_counter()))
    behind = todo.qsize()
    if th is not None:
        todo.put(None)
        th.join()
    return {'overlay': mode, 'steps': steps, 'track_ms_p50': round(float(np.median(times)), 3),
            'track_ms_p99': round(float(np.percentile(times, 99)), 3),
            'overlays_rendered': done[0], 'overlay_steps_behind_at_end': behind}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--cameras', type=int, default=2)
    p.add_argument('--objects', default='1,3')
    p.add_argument('--overlay', default='none,gpu,host')
    p.add_argument('--steps', type=int, default=300)
    p.add_argument('--rate', type=float, default=60.0, help='camera Hz; 0: as fast as it goes')
    p.add_argument('--device', default='cuda')
    p.add_argument('--res', type=int, default=512)
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'overlay_probe.json'))
    a = p.parse_args(argv)
    prov = provenance(a.device, 'python -m tools.probes.overlay_probe', sys.argv[1:]
                      if argv is None else argv)
    rows = []
    for n in [int(x) for x in a.objects.split(',')]:
        tr, frames = tracker(a.cameras, n, True, a.device, a.res)
        for step in frames:                      # read-only, as the node's received frames
            for f in step:
                f.setflags(write=False)
        for mode in a.overlay.split(','):
            row = stamp({'cameras': a.cameras, 'objects_per_camera': n, 'rate_hz': a.rate,
                         **run_case(tr, frames, mode, a.steps,
                                    1.0 / a.rate if a.rate > 0 else 0.0, a.device)}, prov)
            rows.append(row)
            print(json.dumps(row), flush=True)
        del tr
    save_probe(a.out, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
