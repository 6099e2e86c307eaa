"""End-to-end demo: the real tracker node, a synthetic camera and scripted prompts, one command.

    sam2-ros-demo [--checkpoint sam2.1_hiera_tiny.pt] [--frames 60]

This process starts the node (``python -m sam2_ros.ros.node``, a subprocess with
config/demo.yaml), publishes a synthetic 640x480 camera (moving colored shapes on a textured
background) and a prompt script over ROS 2: a box on object 1 at the start, object 2 added by
points mid-stream, a correction click on object 1, a removal. It collects the node's overlay
images and TrackingState messages and writes ``out/demo/overlay.mp4`` and
``out/demo/summary.json``. Without ``--checkpoint`` the model has random weights and the masks
are meaningless; the demo then says so loudly, here and in summary.json.

The camera is paced by the tracker (frame i+1 is sent once frame i's state arrived, and not
faster than ``--fps``), so latencies are per-frame, not queueing behind a faster camera.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import yaml

from sam2_ros.engine.config import MODEL_SIZES, TrackerConfig, default_precision
from sam2_ros.ros.images import image_msg
from sam2_ros.ros.inputs import stamp_ns
from sam2_ros.ros.node_client import (NodeClient, NodeProcess, WaitFailed, header_msg, node_prefix,
                                  prompt_msg)
from sam2_ros.synthetic import SyntheticCamera, center

RANDOM_WARNING = """
##############################################################################
#  WARNING: NO CHECKPOINT GIVEN - THE MODEL HAS RANDOM WEIGHTS.              #
#  The masks, scores and object states below are MEANINGLESS. This run only  #
#  shows that the pipeline works end to end and how long each step takes.    #
#  For real tracking pass an official SAM 2.1 checkpoint you downloaded:     #
#      sam2-ros-demo --checkpoint sam2.1_hiera_tiny.pt                       #
##############################################################################
"""
FRAME_ID = 'demo_camera'


def parse_args(argv: List[str]) -> argparse.Namespace:
    # the console script's name, as the README runs it (not python -m's module path)
    ap = argparse.ArgumentParser(prog='sam2-ros-demo', description=__doc__.split('\n')[0])
    ap.add_argument('--checkpoint', default=None, help='official SAM 2.1 .pt (else random)')
    ap.add_argument('--model', default=TrackerConfig.model_size, choices=MODEL_SIZES,
                    help='the SAM 2.1 model size')
    # 512, not the node's default 1024: the demo runs on a CPU in minutes
    ap.add_argument('--image-size', type=int, default=512, help='model input side')
    ap.add_argument('--device', default='auto', help='auto (cuda if available) | cuda | cpu')
    ap.add_argument('--frames', type=int, default=60,
                    help='camera frames to send (>= 8, the prompt script needs room; on a CPU '
                         'each is a full model step: 8 for a short run)')
    ap.add_argument('--width', type=int, default=640, help='camera image width in px')
    ap.add_argument('--height', type=int, default=480, help='camera image height in px')
    ap.add_argument('--fps', type=float, default=15.0, help='camera rate (upper bound)')
    ap.add_argument('--out', default='out/demo', help='output directory')
    ap.add_argument('--params-file', default=None, help='node parameters (config/demo.yaml)')
    ap.add_argument('--timeout', type=float, default=300.0,
                    help='seconds to wait for the node to start, and for any one frame')
    args = ap.parse_args(argv)
    if args.frames < 8:
        ap.error('--frames must be >= 8 (the prompt script needs room)')
    return args


# ----------------------------------------------------------------------------- ROS side

class DemoClient(NodeClient):
    """Publishes camera frames, prompts and clicks; keeps every state and overlay the node
    sends (the harness's defaults), on rclpy's default context: its SIGINT/SIGTERM handlers
    installed, as in any ROS program."""

    def __init__(self, image_topic: str) -> None:
        import rclpy

        super().__init__('sam2_demo', [(node_prefix(), image_topic)],
                         context=rclpy.get_default_context(), subscribe=('state', 'overlay'),
                         expect=('state',))

    def count_states(self, stamp: int) -> int:
        with self.link.lock:
            return sum(1 for s in self.link.states if stamp_ns(s.header.stamp) == stamp)


def prompt(client: DemoClient, t_ns: int, obj_id: int, **kwargs: Any) -> None:
    client.link.pub_prompt.publish(prompt_msg(obj_id, t_ns, frame_id=FRAME_ID, **kwargs))


# ----------------------------------------------------------------------------- run

def node_params(args: argparse.Namespace, device: str) -> Dict[str, Any]:
    path = Path(args.params_file) if args.params_file else Path(__file__).resolve().parents[2] \
        / 'config' / 'demo.yaml'
    values = yaml.safe_load(path.read_text())['/**']['ros__parameters']
    cuda = device.startswith('cuda')
    values.update(model_size=args.model, image_size=args.image_size, device=device,
                  precision=default_precision(device), use_cuda_graphs=cuda,
                  checkpoint=args.checkpoint or '', random_weights=args.checkpoint is None,
                  autostart=True, process_every_frame=True)
    return values


def pick_device(choice: str) -> str:
    if choice != 'auto':
        return choice
    import torch

    return 'cuda' if torch.cuda.is_available() else 'cpu'


def run(args: argparse.Namespace) -> Dict[str, Any]:
    import cv2

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = pick_device(args.device)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    proc = NodeProcess(node_params(args, device), out / 'node_params.yaml', out / 'node.log',
                       env=dict(os.environ))
    values = proc.params
    client = None
    t_run = time.monotonic()
    try:
        client = DemoClient(values['image_topic'])
        client.wait_connected(args.timeout, proc)
        print(f'[demo] node active after {time.monotonic() - t_run:.1f} s '
              f'({values["model_size"]}@{values["image_size"]} on {device})', flush=True)
        results = stream(client, proc, args)
    finally:
        if client is not None:
            client.close()
        proc.stop(15)
    summary = summarize(results, args, values, device, time.monotonic() - t_run)
    write_video(out / 'overlay.mp4', results['overlays'], args.fps, cv2)
    (out / 'summary.json').write_text(json.dumps(summary, indent=2))
    return summary


def stream(client: DemoClient, proc: NodeProcess, args: argparse.Namespace) -> Dict:
    from geometry_msgs.msg import PointStamped
    from sensor_msgs.msg import Image

    n = args.frames
    cam = SyntheticCamera(args.width, args.height, objects=2, noise=4.0)
    t0 = time.time_ns()
    stamps = [t0 + int(i * 1e9 / args.fps) for i in range(n)]
    add2, click, remove1 = n // 3, n // 2, (5 * n) // 6
    truth, sent, latency = {}, {}, {}
    start = time.monotonic()

    def wait_state(i: int, count: int = 1) -> None:
        end = time.monotonic() + args.timeout
        while client.count_states(stamps[i]) < count:
            if not proc.alive():
                raise RuntimeError(f'the node exited ({proc.p.returncode}) at frame {i}')
            if time.monotonic() > end:
                raise RuntimeError(f'no result for frame {i} within {args.timeout:.0f} s')
            time.sleep(0.002)

    for i in range(n):
        rgb, masks = cam.frame(i), cam.masks(i)
        truth[stamps[i]] = masks
        if i == 0:  # a box around object 1
            ys, xs = np.nonzero(masks[1])
            prompt(client, stamps[i], 1, box=(xs.min(), ys.min(), xs.max(), ys.max()))
        if i == add2:  # object 2 by two positive points and one negative point
            x, y = center(masks[2])
            # the negative point off the disc, 3 radii below it or above it, inside the frame
            below = y + 3 * cam.r
            neg = (x, below if below < args.height else max(0.0, y - 3 * cam.r))
            prompt(client, stamps[i], 2, points=[(x, y), (x + 6, y + 3), neg],
                   labels=[1, 1, 0])
        if i == remove1:
            prompt(client, stamps[i], 1, action=1)
        time.sleep(max(0.0, start + i / args.fps - time.monotonic()))
        msg: Image = image_msg(rgb, 'rgb8', header_msg(stamps[i], FRAME_ID))
        sent[stamps[i]] = time.monotonic()
        client.link.pub_image.publish(msg)
        wait_state(i)
        latency[stamps[i]] = (time.monotonic() - sent[stamps[i]]) * 1e3
        if i == click:  # a correction click on object 1, on the frame just tracked
            c = PointStamped(header=header_msg(stamps[i], FRAME_ID))
            c.point.x, c.point.y = center(truth[stamps[i]][1])
            client.link.pub_click.publish(c)
            if not proc.params.get('corrections_on_next_frame', True):
                wait_state(i, count=2)      # re-published at once; else the next frame shows it
        if (i + 1) % 10 == 0 or i == n - 1:
            print(f'[demo] frame {i + 1}/{n}', flush=True)
    time.sleep(0.3)  # the last overlay
    with client.link.lock:
        states = list(client.link.states)
        # stamp -> the latest overlay (a corrected frame has two)
        overlays = {stamp_ns(o.header.stamp): o for o in client.link.overlays}
    return {'stamps': stamps, 'states': states, 'overlays': [overlays.get(s) for s in stamps],
            'latency': latency,
            'script': {'box_object_1': 0, 'points_object_2': add2, 'click_object_1': click,
                       'remove_object_1': remove1}}


def summarize(r: Dict, args: argparse.Namespace, values: Dict, device: str,
              seconds: float) -> Dict[str, Any]:
    from sam2_ros.ros.messages import interfaces

    lost = interfaces().ObjectState.STATE_LOST
    last: Dict[int, Any] = {}
    for s in r['states']:
        last[stamp_ns(s.header.stamp)] = s  # the corrected state replaces the first one
    areas: Dict[str, List[Optional[int]]] = {'1': [], '2': []}
    for st in r['stamps']:
        objs = {o.object_id: o for o in last[st].objects} if st in last else {}
        for k in areas:
            areas[k].append(int(objs[int(k)].area) if int(k) in objs else None)
    lat = np.array(list(r['latency'].values()))
    eng = np.array([s.engine_ms for s in last.values()])
    random = values['random_weights']
    return {
        'random_weights': random,
        'warning': RANDOM_WARNING.strip() if random else None,
        'model': {k: values[k] for k in ('model_size', 'image_size', 'checkpoint', 'device',
                                         'precision', 'use_cuda_graphs')},
        'frames': len(r['stamps']),
        'frame_size': [args.width, args.height],
        'results_received': len(last),
        'script_frames': r['script'],
        'per_object_area': areas,
        'lost_states': sum(o.state == lost for s in last.values() for o in s.objects),
        'latency_ms': {'p50': float(np.percentile(lat, 50)), 'p99': float(np.percentile(lat, 99)),
                       'what': 'frame published -> its TrackingState received (demo process)'},
        'engine_ms': {'p50': float(np.percentile(eng, 50)), 'p99': float(np.percentile(eng, 99))},
        'engine_modes': dict(Counter(s.engine_mode for s in last.values())),
        'dropped_frames': int(max((s.dropped_frames for s in last.values()), default=0)),
        'errors': [e for s in r['states'] for e in s.errors],
        'wall_s': seconds,
    }


def final_areas(per_object_area: Dict[str, List[Optional[int]]]) -> Dict[str, int]:
    """Area per object at the last frame, for the objects still tracked there (a removed
    object has None from its removal on and is left out)."""
    return {k: v[-1] for k, v in per_object_area.items() if v and v[-1] is not None}


def write_video(path: Path, overlays: List[Any], fps: float, cv2: Any) -> int:
    frames = [np.frombuffer(bytes(m.data), np.uint8).reshape(m.height, m.width, 3)
              for m in overlays if m is not None]
    if not frames:
        return 0
    h, w = frames[0].shape[:2]
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'mp4v'), fps, (w, h))
    for f in frames:
        vw.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    vw.release()
    return len(frames)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.checkpoint is None:
        print(RANDOM_WARNING, flush=True)
    try:
        s = run(args)
    except (RuntimeError, WaitFailed, OSError, ImportError) as exc:
        print(f'[demo] FAILED: {exc}', file=sys.stderr)
        return 1
    print(f'[demo] {s["frames"]} frames ({s["frame_size"][0]}x{s["frame_size"][1]}), '
          f'{s["model"]["model_size"]}@{s["model"]["image_size"]} on {s["model"]["device"]}, '
          f'{s["wall_s"]:.0f} s')
    print(f'[demo] latency p50 {s["latency_ms"]["p50"]:.0f} ms, p99 '
          f'{s["latency_ms"]["p99"]:.0f} ms; engine p50 {s["engine_ms"]["p50"]:.0f} ms; '
          f'modes {s["engine_modes"]}; errors {len(s["errors"])}')
    print(f'[demo] final areas (px): {final_areas(s["per_object_area"])}; wrote '
          f'{args.out}/overlay.mp4, summary.json')
    if args.checkpoint is None:
        print(RANDOM_WARNING, flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
