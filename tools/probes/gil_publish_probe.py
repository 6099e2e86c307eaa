"""Probe: a 720p mask published serialized through rclpy against through rcl with the GIL
released (``sam2_ros/ros/rcl_publish.py``), on this machine, no GPU.

    python -m tools.probes.gil_publish_probe [--out $OUT/gil_publish_probe.json]

Why: the node publishes each mask (0.9 MB) and overlay (2.7 MB) serialized; rclpy's publish
holds Python's GIL for the whole call. Per path it measures, in one process, with a
subscriber taking the messages serialized:

* ``uncontended_ms``: one publish with nothing else running;
* ``two_threads_ms``: two threads publishing on two topics at once, wall time per pair (one
  node serving two cameras);
* ``beside_busy_ms`` / ``busy_share``: one publish while another thread runs Python without
  pause, and that thread's count against its count alone (1.0: the publish never held the
  GIL from it). A thread that releases the GIL must take it back after its call: beside a
  thread that never blocks, that waits for Python's switch interval
  (``gil_switch_interval_ms``), which the ``switch_ms`` rows vary.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Callable, Dict, List, Optional

import numpy as np

from tools.bench.results import save_probe


def busy_count(seconds: float, out: List[int]) -> None:
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n += 1
    out.append(n)


def per_call_ms(fn: Callable[[], None], calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e3


def measure(send: Callable, pubs: list, raw: bytes, solo: int) -> Dict[str, float]:
    out: Dict[str, float] = {'uncontended_ms': per_call_ms(lambda: send(pubs[0], raw), 300)}
    threads = [threading.Thread(target=lambda p=p: [send(p, raw) for _ in range(200)])
               for p in pubs]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out['two_threads_ms'] = (time.perf_counter() - t0) / 200 * 1e3
    counted: List[int] = []
    busy = threading.Thread(target=busy_count, args=(1.0, counted))
    busy.start()
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < 1.0:
        send(pubs[0], raw)
        k += 1
    busy.join()
    out['beside_busy_ms'] = (time.perf_counter() - t0) / k * 1e3
    out['busy_share'] = counted[0] / solo
    return {k: round(v, 3) for k, v in out.items()}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--switch-ms', default='5,0.5', help="Python's switch intervals to try")
    p.add_argument('--out', default=os.path.join(os.environ.get('OUT', '/tmp/out'),
                                                 'gil_publish_probe.json'))
    a = p.parse_args(argv)
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image

    from sam2_ros.ros.rcl_publish import GilFreePublish

    rclpy.init()
    node = rclpy.create_node('gil_publish_probe')
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    pubs = [node.create_publisher(Image, f'/gil_publish_probe/cam{k}', qos) for k in range(2)]
    subs = [node.create_subscription(Image, f'/gil_publish_probe/cam{k}', lambda m: None, qos,
                                     raw=True) for k in range(2)]
    msg = Image(height=720, width=1280, encoding='mono8', step=1280)
    msg.data = np.random.default_rng(0).integers(0, 255, 720 * 1280, np.uint8).tobytes()
    raw = serialize_message(msg)
    gil_free = GilFreePublish()
    time.sleep(1.0)                                  # discovery
    rows, before = [], sys.getswitchinterval()
    try:
        for switch in [float(x) for x in a.switch_ms.split(',')]:
            sys.setswitchinterval(switch / 1e3)
            solo: List[int] = []
            busy_count(1.0, solo)
            for path, send in (('rclpy', lambda pub, r: pub.publish(r)),
                               ('rcl_without_gil', gil_free.send)):
                row = {'path': path, 'switch_ms': switch, 'bytes': len(raw),
                       **measure(send, pubs, raw, solo[0])}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        sys.setswitchinterval(before)
        for s in subs:
            node.destroy_subscription(s)
        node.destroy_node()
        rclpy.shutdown()
    save_probe(a.out, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
