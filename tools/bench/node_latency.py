"""End-to-end latency of the ROS node: image published -> mask (and state) received, at a
camera's rate, with corrections during the run, for one camera or several.

    python -m tools.bench.node_latency --width 1280 --height 720 --frames 620 --rate 60 \\
        --model tiny --image-size 512 --device cuda --objects 3 --corrections-every 2 \\
        --transport shm --results benchmarks/results/h200_node_latency.json

Starts one real ``sam2_tracker`` node per camera (or with ``--one-node`` one for every camera,
its ``cameras`` parameter ``[cam0, cam1...]``, outputs under ``~/cam0/...``) as a subprocess
(``python -m sam2_ros.ros.node`` with ``config/tracker.yaml`` plus overrides: random weights unless
``--checkpoint``, ``process_every_frame: true`` so no frame is dropped, ``autostart: true``;
with ``--cameras 2`` in namespaces ``cam0``/``cam1`` on the devices of ``--devices``), waits
until they are active, and subscribes to ``~/mask``, ``~/state`` (and ``~/overlay`` as RViz
would). The cameras are processes of their own (``camera_process.py``, one per camera, same
domain, transport and malloc setting): each publishes box prompts and then frames
(``sam2_ros.synthetic``: one moving disc per object; rgb8 Images, or with ``--input jpeg``
CompressedImages encoded before the run, on the node's compressed topic) at ``--rate`` Hz
on a drift-free schedule, each stamped with the wall clock at publish time, and sends the
publish times back. In this process the subscribers' callbacks would move the
frames (and so the deadlines); apart, the misses are the node's alone. ``--corrections-every
S`` sends a click (a one-point prompt for the next frame) on one tracked object every S
seconds, cycling through the objects, as a surgeon correcting the tracker would.
``--transport`` sets the Fast DDS transport of every process: ``default`` (builtin), ``udp``
(UDPv4 only) or ``shm`` (the shipped config/fastdds_large_frames.xml). Per frame and camera
(matched by header stamp) it records, on this process's monotonic clock:

* ``e2e_mask_ms``   publish() called -> mask received (the headline figure)
* ``e2e_state_ms``  publish() called -> TrackingState received (sent right after the mask)
* ``deadline_miss`` the mask arrived after the camera's next image was published
* ``next_image_ms`` / ``camera_late_ms`` the camera's gap to its next image / how late it
  called publish() after the frame was due (the summary's ``camera_gap_ms`` p1/p50/p99 go
  into the rows)
* ``decode_ms`` / ``engine_ms`` from the frame's TrackingState, ``publish_ms`` from the NEXT
  frame's TrackingState (a state reports the previous frame's publishing time; one extra
  frame is sent at the end for the last one)
* ``node_ms`` = decode + engine + publish: the serial node's work per frame
* ``transport_ms`` = e2e_mask - decode - engine: DDS transport of the image and of the mask,
  the mask message's conversion, the hand-offs inside the node and this process's callback
  latency; split into DDS in, hand-offs, decode, engine, mask publishing and DDS out by the
  node's ``timing_log`` (``node_latency_frames.py`` defines each part).

Frames published before the previous frame's state came back are counted as ``queued``.
The first ``--warmup`` frames are sent paced (each after the previous frame's state came back)
and left out of the percentiles (the cameras ask this process for each previous state). Both
processes time on CLOCK_MONOTONIC, one clock for the host. ``--results FILE`` merges one row
per camera into the curated file (``tools.bench.cli.save_json``; docs/performance.md
renders it). The node subprocesses are always stopped (SIGINT, then SIGKILL of the process
group), the camera processes too (a stop message, then SIGKILL). Nodes and client:
``node_harness.py``; cameras: ``camera_process.py``; rows: ``node_latency_(frames|rows).py``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import signal
import sys
import tempfile
import time
from multiprocessing.connection import wait as mp_wait
from pathlib import Path
from typing import Any, Dict, List, Optional

from tools.bench import node_latency_rows as report
from tools.bench.camera_process import CameraConfig, CameraProcess, node_name
from tools.bench import host_watch
from tools.bench.node_harness import (ROOT, CameraLink, Client, camera_ns, camera_topic,
                                      output_prefix, start_node, transport_env)
from tools.bench.node_latency_args import parse_args
from tools.bench.node_latency_frames import frame_rows
from sam2_ros.ros import timing_log
from tools.domain import lease_domain
from sam2_ros.ros.node_client import NodeProcess


# ----------------------------------------------------------------------------- measurement

def start_cameras(args: argparse.Namespace, domain: int, namespaces: List[str],
                  tune_malloc: bool) -> List[CameraProcess]:
    """One camera process per namespace (``camera_process.py``): the frames, prompts and
    clicks leave from there, so this process's subscribers cannot move a frame's publish
    time, i.e. the deadline of the frame before it. One node for every camera: one stamp per
    frame pair, so the node pairs them exactly."""
    base = time.time_ns() if args.one_node else 0
    return [CameraProcess(CameraConfig(
        index=k, domain_id=domain, image_topic=camera_topic(ns, args.input),
        prompt_topic=f'{output_prefix(ns, args.one_node)}/prompt', stamp_base_ns=base,
        width=args.width, height=args.height,
        objects=args.objects, frames=args.frames, warmup=args.warmup, rate=args.rate,
        corrections_every=args.corrections_every, tune_malloc=tune_malloc,
        spin_ms=args.camera_spin_ms, input=args.input, jpeg_quality=args.jpeg_quality,
        publish=args.camera_publish, prepare_ms=args.camera_prepare_ms))
        for k, ns in enumerate(namespaces)]


def image_publishers(client: Client, link: CameraLink) -> List[str]:
    """Names of the nodes publishing this camera's images, as this process's graph sees
    them: the camera process's node alone when the frames come from there."""
    return sorted(i.node_name for i in client.node.get_publishers_info_by_topic(
        link.image_topic))


def _check_nodes(nodes: List[NodeProcess], when: str = 'during the run') -> None:
    for n in nodes:
        if not n.alive():
            raise RuntimeError(f'node exited ({n.p.returncode}) {when}:\n{n.log_tail()}')


def measure(args: argparse.Namespace, client: Client, nodes: List[NodeProcess],
            cameras: List[CameraProcess], timing_logs: List[str]) -> Dict[str, Any]:
    """Starts the ready camera processes and serves their paced warm-up (each warm-up frame
    waits for the previous frame's state, which only this process sees) until they send
    their publish times back; then waits for the outputs of every frame. With one node for
    every camera the warm-up is in lock step: each frame of every camera waits for the
    previous states of all, then all are due at one time (a synchronized rig)."""
    for c in cameras:
        c.send('start')
    pending = set(range(len(cameras)))
    waiting: Dict[int, int] = {}      # lock step: camera -> the stamp it waits for
    while pending:
        _check_nodes(nodes)
        ready = mp_wait([cameras[k].conn for k in pending], timeout=0.05)
        for k in sorted(pending):
            c = cameras[k]
            if c.conn not in ready:
                if not c.alive():
                    raise RuntimeError(f'camera process {k} exited ({c.proc.exitcode})')
                continue
            try:
                msg = c.conn.recv()
            except EOFError:
                raise RuntimeError(f'camera process {k} exited ({c.proc.exitcode})') from None
            if msg[0] == 'wait_state' and args.one_node:
                waiting[k] = msg[1]
            elif msg[0] == 'wait_state':
                _wait_state(client.links[k], nodes, msg[1], args.timeout)
                c.send('go')
            elif msg[0] == 'done':
                c.result = msg[1]
                pending.discard(k)
        if waiting and set(waiting) == pending:
            for k, stamp in waiting.items():
                _wait_state(client.links[k], nodes, stamp, args.timeout)
            due = time.monotonic() + 0.002     # a moment for every 'go' to arrive
            for k in waiting:
                cameras[k].send('go', due)
            waiting.clear()
    sent = [c.result['sent'] for c in cameras]
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline and all(n.alive() for n in nodes):
        if all(_complete(link, s) for link, s in zip(client.links, sent)):
            break
        time.sleep(0.05)
    t_start = min(c.result['t_start'] for c in cameras)   # CLOCK_MONOTONIC: host-wide
    frames = []
    for link, s, log in zip(client.links, sent, timing_logs):
        with link.lock:   # publish times from the camera, receipts here, the node's own log
            frames.append(frame_rows(s, args.frames, args.warmup, link.mask_t, link.state_t,
                                     link.states_by_stamp, timing_log.read(log)))
    return {'frames': frames, 'sent': sent,
            'elapsed_s': round(time.monotonic() - t_start, 3),
            'clicks': cameras[0].result['clicks']}


def _complete(link: CameraLink, sent: List[Dict[str, Any]]) -> bool:
    with link.lock:
        return all(s['stamp_ns'] in link.state_t and s['stamp_ns'] in link.mask_t for s in sent)


def _wait_state(link: CameraLink, nodes: List[NodeProcess], stamp_ns: int,
                timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and all(n.alive() for n in nodes):
        with link.lock:
            if stamp_ns in link.state_t:
                return
        time.sleep(0.002)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    domain, lock = (args.domain_id, None) if args.domain_id is not None else lease_domain()
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    # the client (this process, before rclpy starts) and the nodes: the same transport
    tr = transport_env(dict(os.environ), args.transport)
    for k in [k for k in os.environ if k not in tr]:
        del os.environ[k]
    os.environ.update(tr)
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED='1', TQDM_DISABLE='1')
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(ROOT), env.get('PYTHONPATH')]))
    host = report.host_info(ROOT)
    for k in ('FASTDDS_DEFAULT_PROFILES_FILE', 'FASTDDS_BUILTIN_TRANSPORTS'):
        host[k] = os.environ.get(k)
    command = ' '.join(shlex.quote(a) for a in
                       [Path(sys.executable).name, '-m', 'tools.bench.node_latency',
                        *(sys.argv[1:] if argv is None else argv)])

    # SIGTERM/SIGHUP -> SystemExit, so the finally below stops the nodes.
    def _exit(signum, _frame):
        raise SystemExit(128 + signum)
    old = {sig: signal.signal(sig, _exit) for sig in (signal.SIGTERM, signal.SIGHUP)}

    workdir = Path(tempfile.mkdtemp(prefix='sam2_node_latency_'))
    namespaces = [camera_ns(k, args.cameras) for k in range(args.cameras)]
    nodes: List[NodeProcess] = []
    cameras: List[CameraProcess] = []
    client: Optional[Client] = None
    rc = 0
    try:
        if args.one_node:     # one node, every camera: its timing log per camera
            nodes.append(start_node(args, env, workdir, out.with_suffix('.node.log'),
                                    device=args.device, cameras=namespaces))
        for ns, dev in zip(namespaces, args.devices) if not args.one_node else ():
            log = out.with_suffix(f'.node{"_" + ns if ns else ""}.log')
            nodes.append(start_node(args, env, workdir, log, ns=ns, device=dev))
        node_of = nodes * args.cameras if args.one_node else nodes   # each camera's node
        logs = ([f"{nodes[0].params['timing_log']}.{ns}" for ns in namespaces] if args.one_node
                else [n.params['timing_log'] for n in nodes])
        tune = all(n.params.get('tune_malloc', True) for n in nodes)   # as the nodes do
        if tune:
            from sam2_ros.ros.malloc import keep_large_buffers
            keep_large_buffers()
        # the publishers: this environment (transport), the same malloc setting
        cameras = start_cameras(args, domain, namespaces, tune)
        client = Client(domain, overlay=args.overlay, namespaces=namespaces,
                        image_topics=[camera_topic(ns, args.input) for ns in namespaces],
                        prefixes=[output_prefix(ns, args.one_node) for ns in namespaces],
                        executor=args.client_executor)
        t0 = time.monotonic()
        while not (all(c.pid is not None for c in cameras)
                   and client.connected()
                   and all(image_publishers(client, link) == [node_name(c.pid)]
                           for c, link in zip(cameras, client.links))):
            _check_nodes(nodes, 'before becoming active')
            for c in cameras:
                try:
                    if c.pid is None and c.conn.poll():
                        c.pid = c.conn.recv()[1]      # ('ready', pid): the node subscribes
                except EOFError:
                    pass
                if not c.alive():
                    raise RuntimeError(f'camera process {c.cfg.index} exited '
                                       f'({c.proc.exitcode}) before the run')
            if time.monotonic() - t0 > args.start_timeout:
                raise RuntimeError(f'nodes not active after {args.start_timeout} s:\n'
                                   + '\n'.join(n.log_tail() for n in nodes))
            time.sleep(0.1)
        startup_s = time.monotonic() - t0
        if all(n.params.get('gc_freeze', True) for n in nodes):   # as the nodes do
            from sam2_ros.ros.gc_policy import freeze
            freeze()       # this receiving process's receipt times free of full collections
        publishers = [image_publishers(client, link) for link in client.links]
        watch = host_watch.HostWatch(out.with_suffix('.host.jsonl'))
        watch.start()      # which process waited for a CPU, and when (host_watch.py)
        try:
            run = measure(args, client, nodes, cameras, logs)
        finally:
            watch.stop()
        samples = watch.samples()
        for frames, sent in zip(run['frames'], run['sent']):
            host_watch.attach(frames, [s['t_pub'] for s in sent], samples,
                              watch.period_ms / 1e3)
        host['cpu_wait_ms'], host['steal_ms'] = host_watch.totals(samples)
        host['transparent_hugepages'] = host_watch.thp_mode()
        # Fast DDS shared-memory segments this client mapped: its own, and each node's whose
        # masks/states it read through shared memory (none: they came through UDP)
        from tools.dds_probe import shm_segments

        segs = shm_segments()
        try:
            host['loadavg_end'] = list(os.getloadavg())
        except OSError:
            pass
        res: List[Dict[str, Any]] = []
        for k, (ns, dev, n, link, cam, frames) in enumerate(zip(
                namespaces, args.devices, node_of, client.links, cameras, run['frames'])):
            res.append({
                'index': k, 'ns': ns, 'device': dev, 'node_params': n.params,
                'node_command': ' '.join(shlex.quote(a) for a in n.argv),
                # the camera's own process and what the image topic's publishers were
                'camera_pid': cam.result['pid'], 'camera_node': cam.result['node'],
                'image_publishers': publishers[k], 'clicks': cam.result['clicks'],
                'overlays_received': link.overlays_received, 'summary': report.summarize(frames),
                'frames': frames})
        result = {
            'command': command, 'domain_id': domain, 'host': host, 'date': report.today(),
            'bench_pid': os.getpid(),
            'config': {**{k: getattr(args, k) for k in (
                'width', 'height', 'frames', 'warmup', 'rate', 'model', 'image_size', 'objects',
                'graph_mode', 'pipeline', 'tune_malloc', 'precompile', 'devices', 'precision',
                'cuda_graphs', 'input', 'jpeg_quality', 'node_per_camera',
                'overlay', 'transport', 'corrections_every', 'camera_spin_ms', 'camera_publish',
                'camera_prepare_ms', 'client_executor')},
                # masks and overlays taken as serialized bytes by this client
                # (node_harness.CameraLink); rows before 2026-12-06 converted them to messages
                'client_masks': 'serialized'},
            'random_weights': not args.checkpoint, 'startup_s': round(startup_s, 2),
            'elapsed_s': run['elapsed_s'], 'clicks': run['clicks'], 'cameras': res,
            'shm_segments_mapped': segs,
            'shm_large_segments': sum(1 for g in segs if g['bytes'] >= 8 << 20),
            # camera 0 at the top level too (one-camera readers)
            'node_params': res[0]['node_params'],
            'node_command': res[0]['node_command'],
            'overlays_received': res[0]['overlays_received'],
            'summary': res[0]['summary'], 'frames': res[0]['frames'],
            'definitions': {
                **report.LABELS,
                'publish_ms': 'the NEXT TrackingState.publish_ms (mask + state; + overlay '
                              'when the node is serial)',
                'queued': "published before the previous frame's state was received",
                'deadline_miss': "the mask arrived after the camera's next image was "
                                 "published (or never)",
                'correction': 'object id clicked just before this frame was published',
                'image_bytes': "the camera's message data (raw rgb8 or JPEG)",
            },
        }
        out.write_text(json.dumps(result, indent=1))
        print(report.markdown(result))
        if args.results:
            from tools.bench.cli import save_json

            rows = report.rows(result, args.run_id or secrets.token_hex(3),
                               report.commit_id(ROOT))
            save_json(args.results, rows)
            print(f'merged {len(rows)} row(s) into {args.results}')
        print(f'wrote {out} (node logs next to it)')
        missing = sum(c['summary']['missing_frames'] for c in res)
        if missing:
            print(f'ERROR: {missing} frames without mask/state', file=sys.stderr)
            rc = 1
    except RuntimeError as exc:
        print(f'ERROR: {exc}', file=sys.stderr)
        rc = 1
    except KeyboardInterrupt:
        print('interrupted; stopping the nodes', file=sys.stderr)
        rc = 130
    finally:
        for c in cameras:
            c.stop()
        if client is not None:
            client.close()
        for n in nodes:
            code = n.stop(15)
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
