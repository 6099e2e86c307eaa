#!/usr/bin/env python3
"""Live camera with the ROS node: click an object, then read what the node reports.

Start the node on your camera (one terminal), then this client (another):

    ros2 launch sam2_ros tracker.launch.py checkpoint:=/path/sam2.1_hiera_tiny.pt \\
        image_topic:=/my_camera/image_raw rviz:=false
    python examples/live_camera.py --click 320,240 --states 30

The client waits for the node's first ``~/state`` (so it knows a frame was tracked), sends a
click (``geometry_msgs/PointStamped`` on ``~/click``: a positive point for object
``click_object_id``, 1 by default), and prints each following state (frame, engine mode, and
every object's id, state, area and box) until ``--states`` of them followed the click's
effect. ``rqt_image_view /sam2_tracker/overlay`` shows the same masks.

The click's stamp is zero: it applies to the next frame the node tracks, as a click on a live
image should. A stamp names the frame a click was made on; by the time it arrives the node has
usually tracked newer frames, so it would be applied to the latest one with a warning ("older
than the latest frame").

No camera, no checkpoint? ``--random-weights`` starts the node itself (CPU, random weights:
the pipeline runs, the masks are meaningless) and publishes the synthetic camera
(``sam2_ros.synthetic``) on its image topic, so the whole loop runs offline:

    python examples/live_camera.py --random-weights --states 10
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from typing import Any, List, Optional

STATES = ('tracking', 'occluded', 'lost')


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--node', default='/sam2_tracker', help='the tracker node')
    ap.add_argument('--click', help='x,y in source pixels (default: centre of disc 1 of the '
                                    'synthetic camera, or of the frame)')
    ap.add_argument('--states', type=int, default=30,
                    help='states to print once the clicked object is tracked')
    ap.add_argument('--object-id', type=int, default=1,
                    help="the node's click_object_id (the id a click starts)")
    ap.add_argument('--timeout', type=float, default=120.0, help='seconds to wait for a state')
    ap.add_argument('--random-weights', action='store_true',
                    help='start the node (CPU, random weights) and a synthetic camera here')
    ap.add_argument('--image-size', type=int, default=256, help='model size of that node')
    ap.add_argument('--image-topic', default='/camera/image_raw')
    ap.add_argument('--fps', type=float, default=10.0, help='synthetic camera rate')
    return ap.parse_args(argv)


def start_node(a: argparse.Namespace) -> subprocess.Popen:
    """The tracker node on the CPU with random weights, configured and active by itself (what
    `ros2 launch sam2_ros tracker.launch.py device:=cpu random_weights:=true` starts)."""
    params = {'device': 'cpu', 'precision': 'fp32', 'random_weights': 'true',
              'use_cuda_graphs': 'false', 'image_size': str(a.image_size), 'autostart': 'true',
              'image_topic': a.image_topic}
    args = [sys.executable, '-m', 'sam2_ros.ros.node', '--ros-args']
    for k, v in params.items():
        args += ['-p', f'{k}:={v}']
    return subprocess.Popen(args, start_new_session=True)


class Camera(threading.Thread):
    """Publishes the synthetic camera's frames at ``fps`` until stopped."""

    def __init__(self, node: Any, topic: str, fps: float) -> None:
        super().__init__(daemon=True)
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image

        from sam2_ros.synthetic import SyntheticCamera

        self.cam = SyntheticCamera(320, 240, objects=2)
        self.pub = node.create_publisher(
            Image, topic, QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE))
        self.node, self.period, self.running = node, 1.0 / fps, True
        self.frames = {}                           # stamp (ns) -> camera frame number

    def run(self) -> None:
        from std_msgs.msg import Header

        from sam2_ros.ros.images import image_msg

        i = 0
        while self.running:
            header = Header(stamp=self.node.get_clock().now().to_msg(), frame_id='camera')
            self.frames[header.stamp.sec * 10**9 + header.stamp.nanosec] = i
            self.pub.publish(image_msg(self.cam.frame(i), 'rgb8', header))
            i += 1
            time.sleep(self.period)


def click_msg(x: float, y: float, frame_id: str) -> Any:
    """A click at (x, y) source pixels as a user clicking on the live image makes it: stamp
    zero, for the next frame the node tracks (the docstring above says why not a frame's)."""
    from geometry_msgs.msg import PointStamped

    msg = PointStamped()
    msg.header.frame_id = frame_id
    msg.point.x, msg.point.y = float(x), float(y)
    return msg


def describe(st: Any) -> str:
    objs = ', '.join(f'object {o.object_id} {STATES[o.state]} area={o.area} box=({o.box.x_offset},'
                     f'{o.box.y_offset},{o.box.width}x{o.box.height})' for o in st.objects)
    return f'frame {st.frame_index} [{st.engine_mode}]: {objs or "no objects"}' + \
        ''.join(f'\n  error: {e}' for e in st.errors)


def main(argv: Optional[List[str]] = None) -> int:
    a = parse_args(argv)
    import rclpy
    from geometry_msgs.msg import PointStamped
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from sam2_ros.msg import TrackingState

    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    proc = start_node(a) if a.random_weights else None
    rclpy.init()
    node = rclpy.create_node('live_camera_example')
    qos = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
    states: List[Any] = []
    node.create_subscription(TrackingState, f'{a.node}/state', states.append, qos)
    click = node.create_publisher(PointStamped, f'{a.node}/click', qos)
    camera = Camera(node, a.image_topic, a.fps) if a.random_weights else None
    if camera is not None:
        camera.start()           # frames sent before the node is active are simply not seen
    try:
        st = wait(node, states, 1, a.timeout, proc)[0]
        if a.click:
            x, y = (float(v) for v in a.click.split(','))
        elif camera is not None:                 # disc 1 on the frame the state is for
            from sam2_ros.synthetic import center

            stamp = st.header.stamp.sec * 10**9 + st.header.stamp.nanosec
            x, y = center(camera.cam.masks(camera.frames[stamp])[1])
        else:
            x, y = 320.0, 240.0
        wait_matched(node, click, a.timeout)
        click.publish(click_msg(x, y, st.header.frame_id))
        print(f'click ({x:.0f}, {y:.0f}) on frame {st.frame_index}', flush=True)
        # states of frames the node tracked before the click reached it come first (a loaded
        # machine may track several); --states counts those that show the clicked object
        n, end = len(states), time.monotonic() + a.timeout
        first = None                             # index of the first state with the object
        while first is None or n - first < a.states:
            s = wait(node, states, n + 1, end - time.monotonic(), proc)[n]
            print(describe(s), flush=True)
            if first is None and any(o.object_id == a.object_id for o in s.objects):
                first = n
            n += 1
        return 0
    finally:
        if camera is not None:
            camera.running = False
            camera.join(5)       # not publishing when its publisher is destroyed below
        node.destroy_node()
        rclpy.shutdown()
        if proc is not None:
            proc.send_signal(2)                  # SIGINT: the node shuts down cleanly
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait(node: Any, states: List[Any], n: int, timeout: float,
         proc: Optional[subprocess.Popen]) -> List[Any]:
    """Spin until ``n`` states arrived; fail after ``timeout`` s or if our node exited."""
    import rclpy

    end = time.monotonic() + timeout
    while len(states) < n:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f'the tracker node exited with {proc.returncode}')
        if time.monotonic() > end:
            raise SystemExit(f'no state from the node within {timeout:.0f} s (is it running '
                             f'and active? `ros2 lifecycle get /sam2_tracker`)')
        rclpy.spin_once(node, timeout_sec=0.05)
    return states


def wait_matched(node: Any, pub: Any, timeout: float) -> None:
    """A message sent before the node's subscription matched ours would be lost."""
    import rclpy

    end = time.monotonic() + timeout
    while pub.get_subscription_count() == 0 and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)


if __name__ == '__main__':
    sys.exit(main())
