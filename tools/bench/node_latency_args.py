"""The command line of the node latency benchmark (``python -m tools.bench.node_latency``): every
option, its checks and the defaults that depend on the device. Kept apart from
``node_latency.py`` (the measurement loop and the result) so each file holds one concern.
"""

from __future__ import annotations

import argparse
from typing import List, Optional

from tools.bench.node_harness import INPUTS, NODE_FLAGS, ROOT, TRANSPORTS
from sam2_ros.engine.config import default_precision

DESCRIPTION = ('End-to-end latency of the ROS node: image published -> mask (and state) '
               "received, at a camera's rate, with corrections during the run, for one camera "
               'or several.')


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog='tools.bench.node_latency',
                                 description=DESCRIPTION)
    ap.add_argument('--width', type=int, default=1280)
    ap.add_argument('--height', type=int, default=720)
    ap.add_argument('--frames', type=int, default=40, help='measured frames (warm-up included)')
    ap.add_argument('--warmup', type=int, default=20,
                    help='first frames, sent paced (each after the previous state) and left '
                         'out of the percentiles (still in the JSON)')
    ap.add_argument('--rate', type=float, default=1.0, help='frames per second per camera')
    ap.add_argument('--model', default='tiny', help='tiny | small | base_plus | large')
    ap.add_argument('--image-size', type=int, default=512)
    ap.add_argument('--objects', type=int, default=1,
                    help='objects prompted (box prompts): one moving disc each')
    ap.add_argument('--graph-mode', default=None, help='swap | batched (default: the YAML)')
    for flag, param, kind, why in NODE_FLAGS:    # a node parameter each, passed as given
        ap.add_argument(flag, default=None, help=f"the node's {param} parameter (default: the "
                                                 f"YAML's){why}",
                        **({'action': argparse.BooleanOptionalAction} if kind is bool
                           else {'type': kind}))
    ap.add_argument('--precompile', default=None,
                    help="the node's precompile parameter, comma-separated ('encoder,heads'; "
                         'default: the YAML\'s); a start without its files compiles them first '
                         '(raise --start-timeout)')
    ap.add_argument('--corrections-every', type=float, default=0.0,
                    help='seconds between clicks on a tracked object (0: none)')
    ap.add_argument('--camera-spin-ms', type=float, default=1.0,
                    help='the camera process sleeps to this long before each frame is due '
                         'and busy-waits the rest (0: sleep only)')
    ap.add_argument('--cameras', type=int, default=1,
                    help='synthetic cameras, one tracker node each (namespaces cam0, cam1...)')
    ap.add_argument('--one-node', action='store_true',
                    help='with --cameras >= 2: ONE tracker node serving every camera (its '
                         'cameras parameter [cam0, cam1...], frames of one step stamped alike '
                         'so they pair exactly), instead of one node per camera')
    ap.add_argument('--device', default='cpu', help='cpu | cuda | cuda:N (every camera)')
    ap.add_argument('--devices', default=None,
                    help='comma list, one device per camera, e.g. cuda:0,cuda:1 (sets --cameras)')
    ap.add_argument('--transport', default='default', choices=sorted(TRANSPORTS),
                    help='Fast DDS transport of every process: default (builtin), udp, shm '
                         '(config/fastdds_large_frames.xml)')
    ap.add_argument('--input', default='raw', choices=INPUTS,
                    help="the camera's frames: raw (sensor_msgs/Image rgb8) or jpeg "
                         "(sensor_msgs/CompressedImage on <image topic>/compressed, encoded "
                         "ahead of time so the camera is never the bottleneck; the node's "
                         "input_type compressed)")
    ap.add_argument('--camera-publish', default='serialized', choices=('serialized', 'message'),
                    help="how the camera publishes a frame: its serialized bytes, built before "
                         "it is due (as a C++ driver's one copy), or an rclpy message that "
                         'publish() converts and serializes (two more copies of the pixels, '
                         "timed in the rows' DDS in)")
    ap.add_argument('--camera-prepare-ms', type=float, default=3.0,
                    help='the camera draws and serializes each frame this long before it is '
                         "due, in the idle time before it (0: right after the previous frame's "
                         "publish, beside that frame's delivery: rows before this option)")
    ap.add_argument('--client-executor', default='events', choices=('single', 'events'),
                    help="the executor of this process's subscriptions (every camera's mask, "
                         "state, overlay): rclpy's EventsExecutor, or its SingleThreadedExecutor "
                         "(rows before 2026-12-06), whose Python wait set delays the second "
                         "camera's mask behind the first's callback")
    ap.add_argument('--jpeg-quality', type=int, default=90, help='JPEG quality of --input jpeg')
    ap.add_argument('--precision', default=None, help='fp32 | bf16 (default: fp32 on cpu, '
                    'bf16 on cuda)')
    ap.add_argument('--cuda-graphs', action=argparse.BooleanOptionalAction, default=None,
                    help='use_cuda_graphs (default: on for cuda, off for cpu)')
    ap.add_argument('--overlay', action=argparse.BooleanOptionalAction, default=True,
                    help='publish_overlay and subscribe to it as RViz would (the node renders '
                         'it only for subscribers)')
    ap.add_argument('--checkpoint', default='', help='official .pt; empty = random weights')
    ap.add_argument('--params-file', default=str(ROOT / 'config' / 'tracker.yaml'),
                    help='base node parameters; the options above override them')
    ap.add_argument('--domain-id', type=int, default=None,
                    help='ROS_DOMAIN_ID (default: a free one, locked like the tests do)')
    ap.add_argument('--start-timeout', type=float, default=300.0,
                    help='seconds for the nodes to become active')
    ap.add_argument('--timeout', type=float, default=120.0,
                    help='seconds to wait for the outputs after the last frame')
    ap.add_argument('--out', default='out/node_latency.json', help='full result, every frame')
    ap.add_argument('--results', default=None,
                    help='curated rows file to merge one row per camera into, e.g. '
                         'benchmarks/results/h200_node_latency.json')
    ap.add_argument('--run-id', default=None, help='run id of the rows (default: random)')
    args = ap.parse_args(argv)
    if args.frames < 1 or args.rate <= 0 or args.warmup < 0 or args.objects < 1 \
            or args.cameras < 1 or args.corrections_every < 0 or args.camera_spin_ms < 0 \
            or not 0 <= args.camera_prepare_ms < 1e3 / args.rate:
        ap.error('--frames >= 1, --rate > 0, --warmup >= 0, --objects >= 1, --cameras >= 1, '
                 '--corrections-every >= 0, --camera-spin-ms >= 0 and 0 <= '
                 '--camera-prepare-ms < the frame period are required')
    args.devices = ([d.strip() for d in args.devices.split(',') if d.strip()] if args.devices
                    else [args.device] * args.cameras)
    args.cameras, args.device = len(args.devices), args.devices[0]
    if args.one_node and (args.cameras < 2 or len(set(args.devices)) != 1):
        ap.error('--one-node needs --cameras >= 2 on one device (one node, one device)')
    args.node_per_camera = not args.one_node
    if args.warmup >= args.frames:
        args.warmup = 0
    if args.precision is None:
        args.precision = default_precision(args.device)
    if args.cuda_graphs is None:
        args.cuda_graphs = args.device.startswith('cuda')
    return args
