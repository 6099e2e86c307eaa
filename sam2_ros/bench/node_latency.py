"""End-to-end latency of the ROS node: image published -> mask (and state) received.

    python -m sam2_ros.bench.node_latency --width 1280 --height 720 --frames 40 --rate 1 \\
        --model tiny --image-size 512 --device cpu --out out/node_latency.json

Starts the real ``sam2_tracker`` node as a subprocess (``python -m sam2_ros.ros.node`` with
``config/tracker.yaml`` plus overrides: random weights unless ``--checkpoint``,
``process_every_frame: true`` so no frame is dropped, ``autostart: true``), waits until it is
active, publishes one box prompt and then rgb8 ``sensor_msgs/Image`` frames (synthetic moving
shapes) at ``--rate`` Hz, each stamped with the wall clock at publish time, and subscribes to
``~/mask`` and ``~/state``. Per frame (matched by header stamp) it records, on this process's
monotonic clock:

* ``e2e_mask_ms``   publish() called -> mask received (the headline figure)
* ``e2e_state_ms``  publish() called -> TrackingState received (sent after the mask, before
  the overlay)
* ``decode_ms`` / ``engine_ms`` from the frame's TrackingState, ``publish_ms`` from the NEXT
  frame's TrackingState (a state reports the previous frame's publishing time; one extra
  frame is sent at the end for the last one)
* ``node_ms`` = decode + engine + publish: the node's work per frame (its throughput bound)
* ``transport_ms`` = e2e_mask - decode - engine: DDS transport of the image and of the mask,
  the mask message's conversion, the hand-off inside the node (executor -> mailbox -> worker)
  and this process's callback latency.

Frames published before the previous frame's state came back are counted as ``queued`` (their
latency includes waiting behind the previous frame): pick a rate below the node's throughput.
The first ``--warmup`` frames (prompt frame, the eager steps while memory fills up, I/O graphs
captured for the new resolution) are sent paced, each after the previous frame's state came
back, so their one-off costs leave no backlog; they are in the JSON but not in the percentiles
(``summary.first_frame_engine_ms`` keeps the first frame's start-up cost). The node
subprocess is always stopped (SIGINT, then SIGKILL of its process group). The two processes
themselves (node under test, client) are in ``node_harness.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from sam2_ros.bench.node_harness import (ROOT, Client, Frames, NodeProcess, image_msg,
                                         set_stamp)
from sam2_ros.ros.domain import lease_domain

PARTS = ('e2e_mask_ms', 'e2e_state_ms', 'decode_ms', 'engine_ms', 'publish_ms', 'node_ms',
         'transport_ms')
LABELS = {
    'e2e_mask_ms': 'end-to-end: image published -> mask received',
    'e2e_state_ms': 'end-to-end: image published -> state received',
    'decode_ms': 'node: decode (Image -> rgb array)',
    'engine_ms': 'node: engine (SAM 2 step, mask on host)',
    'publish_ms': 'node: publish (mask, state, overlay)',
    'node_ms': 'node: decode + engine + publish',
    'transport_ms': 'rest: DDS in + mask out, hand-off (e2e_mask - decode - engine)',
}


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog='sam2_ros.bench.node_latency',
                                 description=__doc__.split('\n')[0])
    ap.add_argument('--width', type=int, default=1280)
    ap.add_argument('--height', type=int, default=720)
    ap.add_argument('--frames', type=int, default=40, help='measured frames (warm-up included)')
    ap.add_argument('--warmup', type=int, default=20,
                    help='first frames, sent paced (each after the previous state) and left '
                         'out of the percentiles (still in the JSON)')
    ap.add_argument('--rate', type=float, default=1.0, help='frames per second published')
    ap.add_argument('--model', default='tiny', help='tiny | small | base_plus | large')
    ap.add_argument('--image-size', type=int, default=512)
    ap.add_argument('--objects', type=int, default=1,
                    help='objects prompted (box prompts): the moving box, then fixed boxes')
    ap.add_argument('--graph-mode', default=None, help='swap | batched (default: the YAML)')
    ap.add_argument('--device', default='cpu', help='cpu | cuda | cuda:N')
    ap.add_argument('--precision', default=None, help='fp32 | bf16 (default: fp32 on cpu, '
                    'bf16 on cuda)')
    ap.add_argument('--cuda-graphs', action=argparse.BooleanOptionalAction, default=None,
                    help='use_cuda_graphs (default: on for cuda, off for cpu)')
    ap.add_argument('--overlay', action=argparse.BooleanOptionalAction, default=True,
                    help='publish_overlay and subscribe to it as RViz would (the node renders '
                         'it only for subscribers; its rendering is part of publish_ms)')
    ap.add_argument('--checkpoint', default='', help='official .pt; empty = random weights')
    ap.add_argument('--params-file', default=str(ROOT / 'config' / 'tracker.yaml'),
                    help='base node parameters; the options above override them')
    ap.add_argument('--domain-id', type=int, default=None,
                    help='ROS_DOMAIN_ID (default: a free one, locked like the tests do)')
    ap.add_argument('--start-timeout', type=float, default=300.0,
                    help='seconds for the node to become active')
    ap.add_argument('--timeout', type=float, default=120.0,
                    help='seconds to wait for the outputs after the last frame')
    ap.add_argument('--out', default='out/node_latency.json')
    args = ap.parse_args(argv)
    if args.frames < 1 or args.rate <= 0 or args.warmup < 0 or args.objects < 1:
        ap.error('--frames >= 1, --rate > 0, --warmup >= 0 and --objects >= 1 are required')
    if args.warmup >= args.frames:
        args.warmup = 0
    if args.precision is None:
        args.precision = 'fp32' if args.device == 'cpu' else 'bf16'
    if args.cuda_graphs is None:
        args.cuda_graphs = args.device.startswith('cuda')
    return args


# ----------------------------------------------------------------------------- helpers

def percentiles(values: List[float]) -> Dict[str, Optional[float]]:
    v = np.asarray([x for x in values if x is not None], np.float64)
    if v.size == 0:
        return {'n': 0, 'p50': None, 'p99': None, 'mean': None, 'min': None, 'max': None}
    return {'n': int(v.size), 'p50': round(float(np.percentile(v, 50)), 3),
            'p99': round(float(np.percentile(v, 99)), 3), 'mean': round(float(v.mean()), 3),
            'min': round(float(v.min()), 3), 'max': round(float(v.max()), 3)}


def host_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {'python': platform.python_version(), 'platform': platform.platform(),
                            'cpu_count': os.cpu_count()}
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                info['cpu'] = line.split(':', 1)[1].strip()
                break
    except OSError:
        pass
    try:
        info['loadavg_start'] = list(os.getloadavg())
    except OSError:
        pass
    try:
        import torch

        info['torch'] = torch.__version__
        info['gpu'] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # torch is only needed by the node
        info['gpu'] = None
    for k in ('RMW_IMPLEMENTATION', 'FASTDDS_BUILTIN_TRANSPORTS', 'FASTDDS_DEFAULT_PROFILES_FILE',
              'ROS_AUTOMATIC_DISCOVERY_RANGE',
              'OMP_NUM_THREADS'):
        info[k] = os.environ.get(k)
    try:
        info['git_commit'] = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=ROOT, text=True,
                                            capture_output=True, timeout=10).stdout.strip()
    except Exception:
        pass
    return info


# ----------------------------------------------------------------------------- measurement

def measure(args: argparse.Namespace, client: Client, node: NodeProcess) -> Dict[str, Any]:

    cam = Frames(args.width, args.height)
    # Box prompts on objects 1..N, stamped now: the node applies them before the first frame
    # whose stamp is >= theirs, i.e. frame 0, however the topics interleave.
    prompt_ns = time.time_ns()
    for k in range(args.objects):
        p = client.m.Prompt()
        set_stamp(p.header, prompt_ns)
        p.header.frame_id = 'camera'
        p.object_id, p.action, p.has_box = k + 1, 0, True
        p.box = [float(v) for v in (cam.box(0) if k == 0 else cam.fixed_box(k))]
        client.pub_prompt.publish(p)
    time.sleep(0.3)

    total = args.frames + 1  # the extra last frame only carries publish_ms of the one before
    period = 1.0 / args.rate
    sent: List[Dict[str, Any]] = []
    t_start = time.monotonic()
    for i in range(total):
        msg = image_msg(cam.frame(i))
        if i <= args.warmup and sent:
            # Warm-up is paced: each frame waits for the previous one's state, so the
            # first frame's one-off costs (I/O graphs captured for a new resolution, the
            # eager steps after the prompt) do not leave a backlog in the measured frames.
            _wait_state(client, node, sent[-1]['stamp_ns'], args.timeout)
            t_start = time.monotonic() - i * period
        due = t_start + i * period
        while True:
            now = time.monotonic()
            if now >= due or node.p.poll() is not None:
                break
            time.sleep(min(0.005, due - now))
        if node.p.poll() is not None:
            raise RuntimeError(f'node exited ({node.p.returncode}) during the run:\n'
                               f'{node.log_tail()}')
        ns = max(time.time_ns(), prompt_ns)
        set_stamp(msg.header, ns)
        t_pub = time.monotonic()
        client.pub_image.publish(msg)
        t_ret = time.monotonic()
        with client.lock:
            prev_done = (not sent) or sent[-1]['stamp_ns'] in client.state_t
        sent.append({'index': i, 'stamp_ns': ns, 't_pub': t_pub,
                     'publish_call_ms': (t_ret - t_pub) * 1e3, 'queued': not prev_done})

    deadline = time.monotonic() + args.timeout
    want = [s['stamp_ns'] for s in sent]
    while time.monotonic() < deadline and node.p.poll() is None:
        with client.lock:
            if all(s in client.state_t and s in client.mask_t for s in want):
                break
        time.sleep(0.05)

    frames: List[Dict[str, Any]] = []
    with client.lock:
        for k, s in enumerate(sent[:args.frames]):
            ns = s['stamp_ns']
            st, st_next = client.states.get(ns), client.states.get(sent[k + 1]['stamp_ns'])
            tm, ts = client.mask_t.get(ns), client.state_t.get(ns)
            row: Dict[str, Any] = {
                'index': s['index'], 'stamp_ns': ns, 'warmup': s['index'] < args.warmup,
                'queued': s['queued'], 'publish_call_ms': round(s['publish_call_ms'], 3),
                'e2e_mask_ms': None if tm is None else round((tm - s['t_pub']) * 1e3, 3),
                'e2e_state_ms': None if ts is None else round((ts - s['t_pub']) * 1e3, 3),
                'decode_ms': None if st is None else round(float(st.decode_ms), 3),
                'engine_ms': None if st is None else round(float(st.engine_ms), 3),
                'publish_ms': None if st_next is None else round(float(st_next.publish_ms), 3),
                'objects': None if st is None else len(st.objects),
                'engine_mode': None if st is None else st.engine_mode,
                'errors': [] if st is None else list(st.errors),
            }
            parts = [row['decode_ms'], row['engine_ms'], row['publish_ms']]
            row['node_ms'] = None if None in parts else round(sum(parts), 3)
            row['transport_ms'] = (None if None in parts[:2] or row['e2e_mask_ms'] is None
                                   else round(row['e2e_mask_ms'] - sum(parts[:2]), 3))
            frames.append(row)
    return {'frames': frames, 'elapsed_s': round(time.monotonic() - t_start, 3)}


def _wait_state(client: Client, node: NodeProcess, stamp_ns: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and node.p.poll() is None:
        with client.lock:
            if stamp_ns in client.state_t:
                return
        time.sleep(0.002)


def summarize(frames: List[Dict[str, Any]]) -> Dict[str, Any]:
    steady = [f for f in frames if not f['warmup']]
    stats = {k: percentiles([f[k] for f in steady]) for k in PARTS}
    e2e, tr = stats['e2e_mask_ms']['mean'], stats['transport_ms']['mean']
    stats['transport_share_of_e2e_mask'] = (None if not e2e or tr is None
                                            else round(tr / e2e, 4))
    stats['measured_frames'] = len(steady)
    stats['first_frame_engine_ms'] = frames[0]['engine_ms'] if frames else None
    stats['queued_frames'] = sum(1 for f in steady if f['queued'])
    stats['missing_frames'] = sum(1 for f in frames if f['e2e_mask_ms'] is None
                                  or f['e2e_state_ms'] is None)
    return stats


def markdown(result: Dict[str, Any]) -> str:
    a, s = result['config'], result['summary']
    lines = [
        f"{a['width']}x{a['height']} rgb8, {a['model']}@{a['image_size']} {a['device']} "
        f"{a['precision']}, {a.get('objects', 1)} object(s) graph_mode "
        f"{a.get('graph_mode') or 'yaml'}, {a['rate']} Hz, {s['measured_frames']} frames measured "
        f"(+{a['warmup']} warm-up), queued {s['queued_frames']}, missing {s['missing_frames']}",
        '',
        '| part | p50 ms | p99 ms | mean ms |',
        '|---|---|---|---|',
    ]
    fmt = lambda v: '-' if v is None else f'{v:.1f}'  # noqa: E731
    for k in PARTS:
        st = s[k]
        lines.append(f"| {LABELS[k]} | {fmt(st['p50'])} | {fmt(st['p99'])} | {fmt(st['mean'])} |")
    share = s['transport_share_of_e2e_mask']
    lines.append('')
    lines.append('transport share of e2e mask (means): '
                 + ('-' if share is None else f'{100 * share:.1f}%'))
    return '\n'.join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    domain, lock = (args.domain_id, None) if args.domain_id is not None else lease_domain()
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED='1', TQDM_DISABLE='1')
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(ROOT), env.get('PYTHONPATH')]))
    host = host_info()
    command = ' '.join(shlex.quote(a) for a in
                       [Path(sys.executable).name, '-m', 'sam2_ros.bench.node_latency',
                        *(sys.argv[1:] if argv is None else argv)])

    # SIGTERM/SIGHUP -> SystemExit, so the finally below stops the node.
    def _exit(signum, _frame):
        raise SystemExit(128 + signum)
    old = {sig: signal.signal(sig, _exit) for sig in (signal.SIGTERM, signal.SIGHUP)}

    workdir = Path(tempfile.mkdtemp(prefix='sam2_node_latency_'))
    log_path = out.with_suffix('.node.log')
    node: Optional[NodeProcess] = None
    client: Optional[Client] = None
    rc = 0
    try:
        node = NodeProcess(args, env, workdir, log_path)
        client = Client(domain, overlay=args.overlay)
        t0 = time.monotonic()
        while not client.connected():
            if node.p.poll() is not None:
                raise RuntimeError(f'node exited ({node.p.returncode}) before becoming active:'
                                   f'\n{node.log_tail()}')
            if time.monotonic() - t0 > args.start_timeout:
                raise RuntimeError(f'node not active after {args.start_timeout} s:\n'
                                   f'{node.log_tail()}')
            time.sleep(0.1)
        startup_s = time.monotonic() - t0
        run = measure(args, client, node)
        try:
            host['loadavg_end'] = list(os.getloadavg())
        except OSError:
            pass
        result = {
            'command': command, 'node_command': ' '.join(shlex.quote(a) for a in node.argv),
            'node_params': node.params, 'domain_id': domain, 'host': host,
            'config': {k: getattr(args, k) for k in (
                'width', 'height', 'frames', 'warmup', 'rate', 'model', 'image_size', 'objects',
                'graph_mode', 'device', 'precision', 'cuda_graphs', 'overlay')},
            'random_weights': not args.checkpoint, 'startup_s': round(startup_s, 2),
            'overlays_received': client.overlays,
            'elapsed_s': run['elapsed_s'], 'summary': summarize(run['frames']),
            'frames': run['frames'],
            'definitions': {
                **LABELS,
                'publish_ms': 'the NEXT TrackingState.publish_ms (mask + state + overlay)',
                'transport_ms': 'e2e_mask_ms - (decode + engine): DDS image in, mask '
                                'message built and sent, node hand-off (executor -> worker), '
                                'client callback latency',
                'queued': "published before the previous frame's state was received",
            },
        }
        out.write_text(json.dumps(result, indent=1))
        print(markdown(result))
        print(f'\nwrote {out} (node log {log_path})')
        if result['summary']['missing_frames']:
            print(f"ERROR: {result['summary']['missing_frames']} frames without mask/state",
                  file=sys.stderr)
            rc = 1
    except RuntimeError as exc:
        print(f'ERROR: {exc}', file=sys.stderr)
        rc = 1
    except KeyboardInterrupt:
        print('interrupted; stopping the node', file=sys.stderr)
        rc = 130
    finally:
        if client is not None:
            client.close()
        if node is not None:
            code = node.stop()
            if code not in (0, None) and rc == 0:
                print(f'warning: node exited with status {code}', file=sys.stderr)
        for sig, h in old.items():
            signal.signal(sig, h)
        if lock is not None:
            lock.close()
        for f in workdir.iterdir():
            f.unlink()
        workdir.rmdir()
    return rc


if __name__ == '__main__':
    sys.exit(main())
