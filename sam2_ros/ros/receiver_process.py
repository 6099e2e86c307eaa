"""The receiving process of one image topic (node parameter ``image_receiver_process``).

Started by :class:`~sam2_ros.ros.receiver.ImageReceiver` as
``python -m sam2_ros.ros.receiver_process --fd N --topic /abs/topic ...``: a plain rclpy node
that takes the topic's messages serialized (``raw=True``, no conversion) and writes each into
the node's frame ring (:mod:`~sam2_ros.ros.frame_ring`). Its GIL is its own, so the tracker's
process spends microseconds per frame instead of a message's receipt. It exits when the node's
end of the socket closes (the node stopped or died) or on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, List, Optional

from sam2_ros.ros.frame_ring import READY, Record, RingWriter

if TYPE_CHECKING:
    from rclpy.qos import QoSProfile


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog='sam2_ros.ros.receiver_process')
    ap.add_argument('--fd', type=int, required=True, help='inherited socket to the node')
    ap.add_argument('--topic', required=True, help='absolute topic of sensor_msgs/Image')
    ap.add_argument('--name', default='sam2_image_receiver', help='this node\'s name')
    ap.add_argument('--namespace', default='/')
    ap.add_argument('--slots', type=int, default=16)
    ap.add_argument('--max-bytes', type=int, required=True,
                    help='largest message handed over (larger: reported, not handed over)')
    ap.add_argument('--reliability', choices=('reliable', 'best_effort'), default='reliable')
    ap.add_argument('--depth', type=int, default=0, help='history depth; 0: keep all')
    ap.add_argument('--tune-malloc', action='store_true')
    return ap.parse_args(argv)


def qos(args: argparse.Namespace) -> QoSProfile:
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

    rel = (ReliabilityPolicy.RELIABLE if args.reliability == 'reliable'
           else ReliabilityPolicy.BEST_EFFORT)
    if args.depth <= 0:
        return QoSProfile(history=HistoryPolicy.KEEP_ALL, reliability=rel)
    return QoSProfile(depth=args.depth, reliability=rel)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.tune_malloc:
        from sam2_ros.ros.malloc import keep_large_buffers

        keep_large_buffers()       # each message is a fresh multi-megabyte bytes object
    sock = socket.socket(fileno=args.fd)
    ring = RingWriter(sock, args.slots, args.max_bytes)
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from sensor_msgs.msg import Image

    rclpy.init(args=None, signal_handler_options=rclpy.signals.SignalHandlerOptions.NO)
    node = rclpy.create_node(args.name, namespace=args.namespace,
                             start_parameter_services=False)
    executor = SingleThreadedExecutor()
    executor.add_node(node)

    def on_message(raw: bytes) -> None:
        ring.write(raw, time.monotonic())

    node.create_subscription(Image, args.topic, on_message, qos(args), raw=True)
    releases = threading.Thread(target=ring.serve_releases, name='releases', daemon=True)
    releases.start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: (stop.set(), ring.close()))
    ring.send(Record(READY))
    try:
        while not stop.is_set() and not ring.closed and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
    except (ExternalShutdownException, OSError):
        pass
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
