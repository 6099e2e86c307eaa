#!/usr/bin/env python3
"""Bag replay: play a recorded rosbag2 bag (sqlite3 or MCAP) into the tracker node and save what
it reports for every frame as CSV.

Start the node (one terminal), then play the bag through it (another). The node must run with
``process_every_frame: true`` (no frame dropped) and ``corrections_on_next_frame: false`` (a
prompt played just after its frame applied to it), as ``replay.launch.py`` runs it;
``tracker.launch.py`` takes both from its params file (defaults false and true) and has no
launch argument for them, so give it a params file with both changed:

    sed -e 's/process_every_frame: false/process_every_frame: true/' \\
        -e 's/corrections_on_next_frame: true/corrections_on_next_frame: false/' \\
        config/tracker.yaml > replay.yaml
    ros2 launch sam2_ros tracker.launch.py checkpoint:=/path/sam2.1_hiera_tiny.pt \\
        params_file:=$PWD/replay.yaml rviz:=false
    python examples/bag_replay.py my_bag --out states.csv

The bag's images (``sensor_msgs/Image`` on the node's image topic) and any prompts recorded
with them (``sam2_ros/msg/Prompt`` on ``/sam2_tracker/prompt``, applied to the frame their
stamp names) are played with their recorded timing by ``sam2_ros.ros.bag_player.BagPlayer`` (no
rosbag2 needed; ``ros2 launch sam2_ros replay.launch.py bag:=my_bag`` does the same without
the CSV). Each frame's last ``~/state`` becomes CSV rows: stamp, frame, object id, state,
area, box. A prompt that arrives just after its frame is applied to it and the frame's state
is published again with the object; only that last state per stamp is written, so the CSV of a
replay is the same however the prompt and the frame interleave. Unlike ``replay.launch.py``,
this player runs without ``--in-order`` (a prompt the middleware delivers late is applied to a
later frame). It runs with flow control: at most ``--max-ahead`` frames (default 32) go out
that the node's ``~/state`` has not answered, so a node slower than the bag never holds the rest
of it in memory; the player waits there, and stops (exit 3) if no state answers within
``--progress-timeout`` s. ``--max-ahead 0`` plays at the recorded pace whatever the node does.
Playing the bag again into the same node works too: the node sees the stamps jump
back and resets (docs/ros.md).

No bag, no checkpoint? ``--random-weights`` starts the node itself (CPU, random weights, every
frame processed) and, without a bag, records one first: the synthetic camera
(``sam2_ros.synthetic``) with a box prompt on disc 1 at frame 0:

    python examples/bag_replay.py --random-weights --frames 10 --out states.csv

``--save-bag PATH`` keeps that synthetic bag at PATH (a new directory) instead of deleting it
after the run; without ``--random-weights`` it only records the bag and exits, so that the
launch file can replay it:

    python examples/bag_replay.py --save-bag synthetic_bag --frames 30
    ros2 launch sam2_ros replay.launch.py bag:=$PWD/synthetic_bag device:=cpu \
        random_weights:=true image_size:=512
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

STATES = ('tracking', 'occluded', 'lost')
IMAGE_TOPIC, PROMPT_TOPIC = '/camera/image_raw', '/sam2_tracker/prompt'


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('bag', nargs='?', help='rosbag2 directory; none: record a synthetic one')
    ap.add_argument('--out', default='states.csv', help='CSV to write')
    ap.add_argument('--rate', type=float, default=1.0, help='playback speed factor')
    ap.add_argument('--node', default='/sam2_tracker', help='the tracker node')
    ap.add_argument('--timeout', type=float, default=120.0, help='seconds to wait for the node')
    ap.add_argument('--random-weights', action='store_true',
                    help='start the node here (CPU, random weights)')
    ap.add_argument('--image-size', type=int, default=256, help='model size of that node')
    ap.add_argument('--frames', type=int, default=10, help='frames of the synthetic bag')
    ap.add_argument('--save-bag', metavar='PATH', default=None,
                    help='keep the synthetic bag at PATH (a new directory); without '
                         '--random-weights only record it')
    ap.add_argument('--max-ahead', type=int, default=32, metavar='N',
                    help='frames out that no ~/state answered yet; 0: no flow control')
    ap.add_argument('--progress-timeout', type=float, default=60.0,
                    help='seconds without an answer before the replay stops (exit 3)')
    a = ap.parse_args(argv)
    if a.bag is None and not (a.random_weights or a.save_bag):
        ap.error('give a bag, or --random-weights to record and play a synthetic one, or '
                 '--save-bag PATH to record one')
    if a.save_bag and a.bag is not None:
        ap.error('--save-bag keeps the synthetic bag: give no bag with it')
    if a.save_bag and os.path.lexists(a.save_bag):
        ap.error(f'--save-bag {a.save_bag}: it exists (a bag is written to a new directory)')
    if a.max_ahead < 0 or a.progress_timeout <= 0:
        ap.error('--max-ahead must be >= 0 and --progress-timeout > 0')
    return a


def record_synthetic_bag(path: Path, frames: int) -> Path:
    """An MCAP bag of the synthetic camera at 10 Hz, with a box prompt on disc 1 recorded
    30 ms before frame 0 and stamped with it."""
    from rclpy.serialization import serialize_message
    from rosbags.rosbag2 import StoragePlugin, Writer
    from std_msgs.msg import Header

    from sam2_ros.msg import Prompt
    from sam2_ros.ros.images import image_msg
    from sam2_ros.ros.bag_player import project_typestore
    from sam2_ros.synthetic import SyntheticCamera

    ts, cam = project_typestore(), SyntheticCamera(320, 240, objects=2)
    t0 = 1_000_000_000_000                                    # stamps: 1000 s + 100 ms * i
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as w:
        img = w.add_connection(IMAGE_TOPIC, 'sensor_msgs/msg/Image', typestore=ts)
        pr = w.add_connection(PROMPT_TOPIC, 'sam2_ros/msg/Prompt', typestore=ts)
        box = Prompt(object_id=1, action=Prompt.ACTION_ADD, has_box=True,
                     box=[float(v) for v in cam.boxes(0)[0]])
        box.header = Header(frame_id='camera')
        box.header.stamp.sec = t0 // 10**9
        w.write(pr, t0 - 30_000_000, serialize_message(box))
        for i in range(frames):
            t = t0 + i * 100_000_000
            h = Header(frame_id='camera')
            h.stamp.sec, h.stamp.nanosec = divmod(t, 10**9)
            w.write(img, t, serialize_message(image_msg(cam.frame(i), 'rgb8', h)))
    return path


def start_node(a: argparse.Namespace) -> subprocess.Popen:
    """The tracker node on the CPU with random weights, active by itself, every frame tracked
    (a replay wants every frame, not the latest one), a prompt played just after its frame
    applied to that frame and the frame re-published (as replay.launch.py runs it)."""
    params = {'device': 'cpu', 'precision': 'fp32', 'random_weights': 'true',
              'use_cuda_graphs': 'false', 'image_size': str(a.image_size), 'autostart': 'true',
              'process_every_frame': 'true', 'corrections_on_next_frame': 'false',
              'image_topic': IMAGE_TOPIC}
    args = [sys.executable, '-m', 'sam2_ros.ros.node', '--ros-args']
    for k, v in params.items():
        args += ['-p', f'{k}:={v}']
    return subprocess.Popen(args, start_new_session=True)


def last_image_stamp(bag: str) -> int:
    """Header stamp (ns) of the bag's last image: the replay is done when its state is in."""
    from rclpy.serialization import deserialize_message
    from rosbags.rosbag2 import Reader
    from sensor_msgs.msg import Image

    last = None
    with Reader(bag) as r:
        conns = [c for c in r.connections if c.msgtype == 'sensor_msgs/msg/Image']
        for _, _, raw in r.messages(connections=conns):
            last = raw
    if last is None:
        raise SystemExit(f'{bag}: no sensor_msgs/Image to replay')
    st = deserialize_message(bytes(last), Image).header.stamp
    return st.sec * 10**9 + st.nanosec


def last_per_stamp(states: List[Any]) -> List[Any]:
    """The last TrackingState of each stamp, in the order the stamps first came (a frame's
    state is published again when a prompt for it arrives after it)."""
    last: Dict[int, Any] = {}
    for s in list(states):
        last[s.header.stamp.sec * 10**9 + s.header.stamp.nanosec] = s
    return list(last.values())


def rows(st: Any) -> List[list]:
    stamp = st.header.stamp.sec * 10**9 + st.header.stamp.nanosec
    return [[stamp, st.frame_index, o.object_id, STATES[o.state], o.area, o.box.x_offset,
             o.box.y_offset, o.box.width, o.box.height] for o in st.objects] or \
        [[stamp, st.frame_index, '', '', '', '', '', '', '']]


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from sam2_ros.msg import TrackingState
    from sam2_ros.ros.bag_player import BagPlayer, ReplayStalled, ReplayStopped

    if a.save_bag:
        bag = str(record_synthetic_bag(Path(a.save_bag), a.frames))
        print(f'recorded {a.frames} synthetic frames and a box prompt in {bag}', flush=True)
        if not a.random_weights:
            return 0
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    tmp = tempfile.TemporaryDirectory(prefix='sam2_bag_example_')
    bag = a.bag or a.save_bag or str(record_synthetic_bag(Path(tmp.name) / 'bag', a.frames))
    last = last_image_stamp(bag)
    proc = start_node(a) if a.random_weights else None
    rclpy.init()
    node = rclpy.create_node('bag_replay_example')
    states: List[Any] = []
    node.create_subscription(TrackingState, f'{a.node}/state', states.append,
                             QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    # the player has a node of its own: flow control spins it while the player waits, and
    # `node` is already spun by the thread above (a node belongs to one executor)
    player_node = rclpy.create_node('bag_replay_example_player')
    player = BagPlayer(player_node, bag, rate=a.rate, clock=False)
    try:
        why = player.wait_for_node(a.node, a.timeout)     # active on its topics of the bag
        if why:
            raise SystemExit(f'the node did not subscribe within {a.timeout:.0f} s: {why}')
        if a.max_ahead:
            player.follow(player.state_topics(a.node) or [f'{a.node}/state'], a.max_ahead,
                          a.progress_timeout)
        try:
            seconds = player.play()
        except ReplayStalled as exc:
            print(f'replay stopped: {exc}', file=sys.stderr, flush=True)
            return 3
        except ReplayStopped as exc:           # SIGTERM: rclpy shut the context down
            print(f'replay stopped: {exc}', file=sys.stderr, flush=True)
            return 0
        end = time.monotonic() + a.timeout
        while not any(s.header.stamp.sec * 10**9 + s.header.stamp.nanosec == last
                      for s in list(states)):
            if time.monotonic() > end or (proc is not None and proc.poll() is not None):
                raise SystemExit('no state for the last frame of the bag')
            time.sleep(0.05)
        with open(a.out, 'w', newline='') as fh:
            out = csv.writer(fh)
            out.writerow(['stamp_ns', 'frame', 'object_id', 'state', 'area', 'x', 'y', 'w', 'h'])
            for s in last_per_stamp(states):
                out.writerows(rows(s))
        flow = (f'; flow control: at most {a.max_ahead} frames ahead, {player.held} waited '
                f'for the node ({player.paused_s:.1f} s)') if a.max_ahead else ''
        print(f'played {sum(player.counts.values())} messages in {seconds:.1f} s; '
              f'{len(states)} states -> {a.out}{flow}', flush=True)
        return 0
    finally:
        player.close()
        executor.shutdown()
        player_node.destroy_node()
        node.destroy_node()
        rclpy.shutdown()
        tmp.cleanup()
        if proc is not None:
            proc.send_signal(2)                  # SIGINT: the node shuts down cleanly
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == '__main__':
    sys.exit(main())
