"""DDS transport alone: camera-sized ``sensor_msgs/Image`` from one process to another.

    python -m tools.dds_probe --width 1280 --height 720 --rate 30 --frames 300 \\
        [--profile config/fastdds_large_frames.xml] [--tune-malloc] [--out out/dds_probe.json]

Last, a new writer sends one small image and times its acknowledgement (``small_ack_ms``:
what the node waits at cleanup for its last state; ``--frames 0`` measures only that).

Why: when the node's end-to-end latency is high, this separates the middleware from the node.
It publishes rgb8 frames (reliable, depth 10, as the node subscribes) at ``--rate`` from this
process to a subscriber subprocess, both on an exclusive ``ROS_DOMAIN_ID``, and reports the
latency per frame (receive wall clock - the publish() call; same host, same clock).
``--profile`` sets ``FASTDDS_DEFAULT_PROFILES_FILE`` for both processes, e.g. the shipped
``config/fastdds_large_frames.xml`` (shared-memory segments large enough for 720p frames).
Other transport variables (``FASTDDS_BUILTIN_TRANSPORTS``, ``ROS_AUTOMATIC_DISCOVERY_RANGE``)
are passed through from the environment.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from tools.domain import lease_domain
from sam2_ros.ros.executor import EXECUTORS, make_executor
from sam2_ros.ros.image_cdr import image_to_cdr


ACK_TOPIC = '/sam2_dds_probe_ack'


def _qos(depth: int = 10):
    """RELIABLE, KEEP_LAST ``depth``: the node's image QoS at the default depth. A reliable
    writer replaces its oldest unacknowledged sample once ``depth`` are in flight, so on a
    loaded machine (UDP frames acknowledged ~1 s late) a depth under the frames in flight
    drops frames by design; ``--depth`` raises it where every frame must arrive."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    return QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)


class GilWaits:
    """A thread that sleeps 0.5 ms over and over and records how late it wakes: after a
    sleep, a thread needs the GIL back, so a wake later than the OS's scheduling delay is
    time another thread of this process held the GIL (here: the executor taking and
    converting images). What a tracking worker waits after each CUDA synchronise."""

    def __init__(self) -> None:
        import threading
        self.late_ms: List[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(0.0005)
            self.late_ms.append((time.perf_counter() - t) * 1e3 - 0.5)

    def stop(self) -> Dict[str, float]:
        self._stop.set()
        self._thread.join()
        a = np.asarray(self.late_ms, np.float64)
        return {'wakes': int(a.size), 'late_p50_ms': round(float(np.percentile(a, 50)), 3),
                'late_p99_ms': round(float(np.percentile(a, 99)), 3),
                'late_max_ms': round(float(a.max()), 3),
                'late_over_1ms': int((a > 1.0).sum())} if a.size else {}


def subscriber(frames: int, timeout: float, report: Callable[[Dict[str, Any]], None],
               executor: str = 'single', gil_probe: bool = False, raw: bool = False,
               depth: int = 10) -> None:
    """Receive ``frames`` images and the publisher's final small one (or until ``timeout``);
    ``report`` gets the latency of each frame in ms before this process's DDS teardown, which
    once hung (see ``_bound_lifetime``)."""
    import rclpy
    from sensor_msgs.msg import Image

    _bound_lifetime(timeout + 30.0)
    rclpy.init()
    node = rclpy.create_node(f'sam2_dds_probe_sub_{os.getpid()}')
    lat: List[float] = []
    stamps: List[int] = []  # each frame's header stamp, in the order of lat
    small: List[int] = []   # the 4x4 images of small_ack_ms, not frames

    from sam2_ros.ros.image_cdr import image_from_cdr

    def on_image(m: Any) -> None:
        if raw:               # the serialized message: read what is needed from its CDR
            m = image_from_cdr(m)
        if m.width <= 4:
            small.append(1)
            return
        sent = m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec
        lat.append((time.time_ns() - sent) / 1e6)
        stamps.append(sent)

    node.create_subscription(Image, '/sam2_dds_probe', on_image, _qos(depth), raw=raw)
    node.create_subscription(Image, ACK_TOPIC, on_image, _qos(), raw=raw)
    ex = make_executor(executor)
    ex.add_node(node)
    print('ready', flush=True)
    waits = GilWaits() if gil_probe else None
    deadline = time.monotonic() + timeout
    # the second small image says the publisher is done: a reader that left earlier would
    # end its wait for acknowledgements at once
    while (len(lat) < frames or len(small) < 2) and time.monotonic() < deadline:
        ex.spin_once(timeout_sec=0.05)
    ex.shutdown()
    # segments listed before shutdown: the publisher's is still mapped
    report({'received': len(lat), 'latency_ms': [round(x, 3) for x in lat], 'stamps': stamps,
            'shm_segments': shm_segments(), 'gil': waits.stop() if waits else None})
    node.destroy_node()
    rclpy.try_shutdown()


def _bound_lifetime(limit_s: float) -> None:
    """End this subscriber process when its parent dies or after ``limit_s``, by the kernel
    (PR_SET_PDEATHSIG, SIGALRM), not by a Python thread: once, in a fully loaded test run,
    rclpy's node teardown spun in Fast DDS (DomainParticipant::set_listener, in
    rcl_node_fini) holding the GIL, so a watchdog thread never ran and the orphan kept a
    core busy for minutes."""
    signal.alarm(max(1, math.ceil(limit_s)))     # default action of SIGALRM: terminate
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):   # not Linux: the alarm still bounds it
        pass


def shm_segments() -> List[Dict[str, Any]]:
    """Fast DDS shared-memory segments mapped by this process (Linux): its own, and those of
    the writers whose samples it read through shared memory. Each is {name, bytes}; a
    subscriber that lists a segment of the profile's size besides its own received frames
    through SHM (with Fast DDS's default 512 KiB segments a 720p frame goes through UDP)."""
    sizes: Dict[str, int] = {}
    try:
        with open('/proc/self/maps') as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and '/dev/shm/fastdds_' in parts[5] \
                        and not parts[5].endswith('_el'):
                    lo, hi = (int(x, 16) for x in parts[0].split('-'))
                    sizes[parts[5]] = sizes.get(parts[5], 0) + hi - lo
    except OSError:
        return []
    return [{'name': os.path.basename(k), 'bytes': v} for k, v in sorted(sizes.items())]


def publish(node: Any, args: argparse.Namespace
            ) -> Tuple[int, Optional[float], Dict[int, float]]:
    """Publish ``args.frames`` frames at ``args.rate`` from ``node``, then time a small
    message's acknowledgement; returns (frames sent, small_ack_ms, {stamp: ms from the stamp
    to the publish() call}: a serialized frame carries its due time, and its publish() comes
    after the wait for it, late by up to the sleep's granularity)."""
    from sensor_msgs.msg import Image

    pub = node.create_publisher(Image, '/sam2_dds_probe', _qos(args.depth))
    deadline = time.monotonic() + 30.0
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)                       # let discovery settle on both sides
    pixels = np.random.default_rng(0).integers(
        0, 255, (args.height, args.width, 3), dtype=np.uint8)
    m = Image()
    m.height, m.width, m.encoding, m.step = args.height, args.width, 'rgb8', args.width * 3
    m.data = pixels.tobytes()
    t0, wall0 = time.monotonic(), time.time_ns()
    late: Dict[int, float] = {}
    for i in range(args.frames):
        due = t0 + i / args.rate
        if args.publish == 'serialized':      # built before it is due, stamped with its due time
            m.header.stamp.sec, m.header.stamp.nanosec = divmod(
                wall0 + int(i / args.rate * 1e9), 1_000_000_000)
            out: Any = image_to_cdr(pixels, 'rgb8', m.header)
        while time.monotonic() < due:
            time.sleep(0.0005)
        now = time.time_ns()
        if args.publish == 'message':
            m.header.stamp.sec, m.header.stamp.nanosec = divmod(now, 1_000_000_000)
            out = m
        stamp = m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec
        late[stamp] = (now - stamp) / 1e6
        pub.publish(out)
    time.sleep(1.0)                       # asynchronous writers: let the last frames go out
    return args.frames, small_ack_ms(node), late


def teardown(node: Any, limit_s: float = 30.0) -> None:
    """The publisher's DDS teardown, alone (the subscriber has exited, so no participant
    leaves concurrently), bounded: faulthandler's watchdog is a C thread, so a teardown that
    hangs holding the GIL still ends the process, with every thread's traceback on stderr."""
    import rclpy

    faulthandler.dump_traceback_later(limit_s, exit=True)
    try:
        node.destroy_node()
        rclpy.try_shutdown()
    finally:
        faulthandler.cancel_dump_traceback_later()


def small_ack_ms(node: Any) -> Optional[float]:
    """Milliseconds until the subscriber acknowledged one small (4x4) image sent by a new
    writer, None if not within 5 s. A reader acknowledges only when a heartbeat asks: a
    large image's last fragment carries one, a lone small message waits for the writer's
    periodic heartbeat (3 s by default, 0.1 s with the shipped profile). This is how long a
    node waits at cleanup for its last state to be acknowledged."""
    from rclpy.duration import Duration
    from sensor_msgs.msg import Image

    pub = node.create_publisher(Image, ACK_TOPIC, _qos())
    deadline = time.monotonic() + 10.0
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)                       # let discovery settle on both sides

    m = Image()
    m.height, m.width, m.encoding, m.step = 4, 4, 'rgb8', 12
    m.data = bytes(48)
    m.header.stamp.sec, m.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
    pub.publish(m)
    t0 = time.monotonic()
    ok = pub.wait_for_all_acked(Duration(seconds=5))
    took = round((time.monotonic() - t0) * 1e3, 1)
    pub.publish(m)                        # done: the subscriber may leave
    pub.wait_for_all_acked(Duration(seconds=5))
    return took if ok else None


def summarize(lat: List[float], sent: int) -> Dict[str, Any]:
    a = np.asarray(lat, np.float64)
    out: Dict[str, Any] = {'sent': sent, 'received': int(a.size)}
    if a.size:
        out.update({f'p{q}_ms': round(float(np.percentile(a, q)), 2) for q in (50, 90, 99)})
        out.update({'max_ms': round(float(a.max()), 2), 'over_100ms': int((a > 100).sum())})
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog='tools.dds_probe',
                                 description=__doc__.split('\n')[0])
    ap.add_argument('--width', type=int, default=1280)
    ap.add_argument('--height', type=int, default=720)
    ap.add_argument('--rate', type=float, default=30.0)
    ap.add_argument('--frames', type=int, default=300)
    ap.add_argument('--profile', default=None, help='Fast DDS XML profile for both processes')
    ap.add_argument('--out', default=None, help='JSON file for summary and per-frame latencies')
    ap.add_argument('--tune-malloc', action='store_true',
                    help="raise glibc's mmap/trim thresholds in both processes, as the node's "
                         'tune_malloc does (sam2_ros/ros/malloc.py)')
    ap.add_argument('--executor', default='single', choices=EXECUTORS,
                    help="the subscriber's rclpy executor (sam2_ros/ros/executor.py)")
    ap.add_argument('--gil-probe', action='store_true',
                    help='in the subscriber, a thread measures how late it gets the GIL back '
                         'after 0.5 ms sleeps while images arrive (GilWaits)')
    ap.add_argument('--raw', action='store_true',
                    help='the subscriber takes serialized messages (rclpy raw=True) and reads '
                         'the image from their CDR (sam2_ros/ros/image_cdr.py)')
    ap.add_argument('--depth', type=int, default=10,
                    help='history depth of the frames topic, both sides (see _qos)')
    ap.add_argument('--publish', default='message', choices=('message', 'serialized'),
                    help="message: an rclpy Image stamped as it is published (rclpy's conversion "
                         'in the publisher); serialized: its CDR bytes built before the frame is '
                         "due, stamped with the due time, as the node benchmark's camera does")
    ap.add_argument('--results', default=None,
                    help='benchmark JSON to merge this run\'s row into (kind dds_probe; e.g. '
                         'h200_node_latency.json), with date, commit, GPU, command and run id')
    ap.add_argument('--run-id', default=None, help='run id of the row (default: a new one)')
    ap.add_argument('--role', default='pub', choices=('pub', 'sub'), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tune_malloc:
        from sam2_ros.ros.malloc import keep_large_buffers
        keep_large_buffers()
    if args.role == 'sub':
        subscriber(args.frames, args.frames / args.rate + 40.0,
                   lambda r: print(json.dumps(r), flush=True), args.executor, args.gil_probe,
                   args.raw, args.depth)
        return 0
    if args.profile:
        os.environ['FASTDDS_DEFAULT_PROFILES_FILE'] = os.path.abspath(args.profile)
    domain, lock = lease_domain()
    os.environ['ROS_DOMAIN_ID'] = str(domain)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    sub = subprocess.Popen([sys.executable, '-m', 'tools.dds_probe', '--role', 'sub',
                            '--frames', str(args.frames), '--rate', str(args.rate),
                            '--executor', args.executor, '--depth', str(args.depth)]
                           + (['--tune-malloc'] if args.tune_malloc else [])
                           + (['--gil-probe'] if args.gil_probe else [])
                           + (['--raw'] if args.raw else []),
                           stdout=subprocess.PIPE, text=True)
    node = None
    try:
        assert sub.stdout is not None and sub.stdout.readline().strip() == 'ready'
        import rclpy

        rclpy.init()
        node = rclpy.create_node(f'sam2_dds_probe_pub_{os.getpid()}')
        sent, ack_ms, late = publish(node, args)
        result = json.loads(sub.stdout.readline() or '{}')
        try:   # it has reported; its own teardown is bounded (_bound_lifetime)
            sub.wait(15)
        except subprocess.TimeoutExpired:
            pass
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait(5)
        if node is not None:   # after the subscriber has left
            teardown(node)
        lock.close()
    # from the publish() call: less the time between a frame's stamp and its publish() call
    lat = [x - late.get(st, 0.0) for x, st in zip(result.get('latency_ms', []),
                                                   result.get('stamps', []))]
    summary = summarize(lat, sent)
    summary['small_ack_ms'] = ack_ms
    if result.get('gil'):
        summary['gil'] = result['gil']
    segs = result.get('shm_segments', [])
    # segments that can hold one frame: the subscriber's own and each SHM writer's
    summary['shm_segments_mapped'] = segs
    summary['shm_frame_segments'] = sum(1 for g in segs
                                        if g['bytes'] >= args.width * args.height * 3)
    summary.update({'width': args.width, 'height': args.height, 'rate': args.rate,
                    'depth': args.depth,
                    'executor': args.executor, 'raw': args.raw,
                    'tune_malloc': args.tune_malloc, 'publish': args.publish,
                    **{k: os.environ.get(k) for k in (
                        'FASTDDS_DEFAULT_PROFILES_FILE', 'FASTDDS_BUILTIN_TRANSPORTS',
                        'ROS_AUTOMATIC_DISCOVERY_RANGE', 'RMW_IMPLEMENTATION')}})
    print(json.dumps(summary))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w') as f:
            json.dump({**summary, 'latency_ms': [round(x, 3) for x in lat]}, f, indent=1)
    if args.results:
        save_row(args.results, summary, args.run_id, argv)
    return 0 if summary['received'] == sent else 1


def probe_name(summary: Dict[str, Any]) -> str:
    """What a row measured, in words: its transport, rate and each setting off the default,
    e.g. 'shm profile, 60 Hz, serialized in, tune_malloc, events executor, serialized out'."""
    profile = summary.get('FASTDDS_DEFAULT_PROFILES_FILE')
    parts = [os.path.splitext(os.path.basename(profile))[0] if profile else
             summary.get('FASTDDS_BUILTIN_TRANSPORTS') or 'default', f"{summary['rate']:g} Hz"]
    parts += ['serialized in'] if summary.get('raw') else []
    parts += ['tune_malloc'] if summary.get('tune_malloc') else []
    parts += [f"{summary['executor']} executor"] if summary.get('executor') != 'single' else []
    parts += ['serialized out'] if summary.get('publish') == 'serialized' else []
    return ', '.join(parts)


def save_row(path: str, summary: Dict[str, Any], run: Optional[str],
             argv: Optional[List[str]]) -> None:
    """Merge the run's summary into the benchmark JSON at ``path`` as a ``kind: dds_probe``
    row (a newer row of the same name replaces the older), with the provenance every
    benchmark row carries."""
    import torch

    from tools.bench.results import provenance, save_json, stamp

    name = probe_name(summary)
    row = {'kind': 'dds_probe', 'model': '-', 'res': None, 'objects': 0,
           'variant': 'dds_probe_' + name.replace(', ', '_').replace(' ', ''), 'name': name,
           **{k: v for k, v in summary.items() if k != 'shm_segments_mapped'}}
    # the GPU names the machine (the node rows beside it were measured on it)
    prov = provenance('cuda' if torch.cuda.is_available() else 'cpu', 'python -m tools.dds_probe',
                      sys.argv[1:] if argv is None else list(argv))
    if run:
        prov['run'] = run
    save_json(path, [stamp(row, prov)])



if __name__ == '__main__':
    sys.exit(main())
