"""What the node latency benchmark reports: per-frame parts summarized per camera, the
markdown printed at the end, and the curated rows of ``benchmarks/results/h200_node_latency.json``
(one per camera and configuration, merged by ``tools.bench.cli.save_json``).

Kept apart from ``node_latency.py`` (the command line and the measurement loop) so each file
holds one concern; nothing here talks to ROS.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from sam2_ros.ros.options import NodeOptions
from tools.bench.node_latency_frames import EXTRA, SPLIT

DEFAULT_EXECUTOR = NodeOptions().executor     # what a node without the parameter given ran

PARTS = ('e2e_mask_ms', 'e2e_state_ms', 'decode_ms', 'engine_ms', 'publish_ms', 'node_ms',
         'transport_ms') + SPLIT + EXTRA
# the transport split each row carries (p50 and p99): image -> mask in the node's order
ROW_PARTS = {'dds_in': 'dds_in_ms', 'handoff': 'handoff_ms', 'decode': 'node_decode_ms',
             'engine_span': 'node_engine_ms', 'publish_mask': 'publish_mask_ms',
             'dds_out': 'dds_out_ms'}
LABELS = {
    'e2e_mask_ms': 'end-to-end: image published -> mask received',
    'e2e_state_ms': 'end-to-end: image published -> state received',
    'decode_ms': 'node: decode (Image -> rgb array)',
    'engine_ms': 'node: engine (SAM 2 step, mask on host)',
    'publish_ms': 'node: publish (mask, state; + overlay when serial)',
    'node_ms': 'node: decode + engine + publish',
    'transport_ms': 'rest: DDS in + mask out, hand-off (e2e_mask - decode - engine)',
    'dds_in_ms': 'split: DDS in (camera publish() -> node image callback)',
    'queue_ms': 'split: image callback -> worker (mailbox)',
    'node_decode_ms': 'split: decode (worker)',
    'prompts_ms': 'split: due prompts handed to the tracker',
    'node_engine_ms': 'split: tracker.track() (worker)',
    'handoff_out_ms': 'split: track() returned -> publisher starts (output stage)',
    'publish_mask_ms': 'split: mask built and publish() returned',
    'dds_out_ms': 'split: DDS out (mask publish() returned -> received here)',
    'handoff_ms': 'hand-offs in the node (queue + prompts + output stage)',
    'mask_publish_call_ms': 'of publish_mask: the publish() call',
    'finish_ms': 'of the output stage: track() returned -> handed over (worker)',
    'wake_ms': 'of the output stage: handed over -> publisher starts (wake, GIL)',
}
# The node's latency targets at 720p60 on the H200 (docs/performance.md, "Targets and current
# numbers"): p99 image -> mask by object count, and no frame whose mask arrives after the next
# image was published.
TARGET_P99_MS = {1: 8.0, 8: 12.0}


def percentiles(values: List[Optional[float]]) -> Dict[str, Optional[float]]:
    v = np.asarray([x for x in values if x is not None], np.float64)
    if v.size == 0:
        return {'n': 0, 'p50': None, 'p99': None, 'mean': None, 'min': None, 'max': None}
    return {'n': int(v.size), 'p50': round(float(np.percentile(v, 50)), 3),
            'p99': round(float(np.percentile(v, 99)), 3), 'mean': round(float(v.mean()), 3),
            'min': round(float(v.min()), 3), 'max': round(float(v.max()), 3)}


def gap_percentiles(gaps: List[float]) -> Dict[str, Optional[float]]:
    """p1/p50/p99/min/max (ms) of the camera's next-image gaps. The low tail matters: an
    early next image shortens the deadline a mask is measured against."""
    v = np.asarray(gaps, np.float64)
    if v.size == 0:
        return {'n': 0, 'p1': None, 'p50': None, 'p99': None, 'min': None, 'max': None}
    return {'n': int(v.size), **{f'p{q}': round(float(np.percentile(v, q)), 3)
                                 for q in (1, 50, 99)},
            'min': round(float(v.min()), 3), 'max': round(float(v.max()), 3)}


def summarize(frames: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Percentiles of the steady (not warm-up) frames of one camera, and the counts."""
    steady = [f for f in frames if not f['warmup']]
    stats: Dict[str, Any] = {k: percentiles([f[k] for f in steady]) for k in PARTS}
    e2e, tr = stats['e2e_mask_ms']['mean'], stats['transport_ms']['mean']
    stats['transport_share_of_e2e_mask'] = (None if not e2e or tr is None
                                            else round(tr / e2e, 4))
    stats['measured_frames'] = len(steady)
    stats['first_frame_engine_ms'] = frames[0]['engine_ms'] if frames else None
    stats['queued_frames'] = sum(1 for f in steady if f['queued'])
    stats['deadline_misses'] = sum(1 for f in steady if f['deadline_miss'])
    stats['corrections'] = sum(1 for f in steady if f['correction'])
    stats['e2e_mask_ms_correction_frames'] = percentiles(
        [f['e2e_mask_ms'] for f in steady if f['correction']])
    # publish -> next publish, as the camera process timed it (the deadline of each frame)
    stats['camera_gap_ms'] = gap_percentiles([f['next_image_ms'] for f in steady])
    stats['camera_late_ms'] = percentiles([f.get('camera_late_ms') for f in steady])
    stats['missing_frames'] = sum(1 for f in frames if f['e2e_mask_ms'] is None
                                  or f['e2e_state_ms'] is None)
    stats['image_bytes'] = percentiles([f.get('image_bytes') for f in steady])
    # threads waiting for a CPU during each frame (tools/bench/host_watch.py; the slowest
    # frames' own values: tools.bench.slow_frames)
    stats['host_wait_ms'] = percentiles([f.get('host_wait_ms') for f in steady])
    return stats


def markdown(result: Dict[str, Any]) -> str:
    a = result['config']
    lines: List[str] = []
    for cam in result['cameras']:
        s = cam['summary']
        lines += [
            f"camera {cam['index']} ({cam['ns'] or 'default topics'}, {cam['device']}): "
            f"{a['width']}x{a['height']} {_input(a)}, {a['model']}@{a['image_size']} "
            f"{a['precision']}, "
            f"{a['objects']} object(s), graph_mode {a.get('graph_mode') or 'yaml'}, "
            f"{a['rate']} Hz, {_nodes(a)}, transport {a['transport']}, pipeline "
            f"{cam['node_params'].get('pipeline', 'yaml')}, corrections every "
            f"{a['corrections_every'] or '-'} s; {s['measured_frames']} frames measured "
            f"(+{a['warmup']} warm-up), queued {s['queued_frames']}, deadline misses "
            f"{s['deadline_misses']}, corrections {s['corrections']}, missing "
            f"{s['missing_frames']}; camera gaps p1/p50/p99 "
            f"{_ms(s['camera_gap_ms']['p1'])}/{_ms(s['camera_gap_ms']['p50'])}/"
            f"{_ms(s['camera_gap_ms']['p99'])} ms", '',
            '| part | p50 ms | p99 ms | mean ms |', '|---|---|---|---|']
        for k in PARTS:
            st = s[k]
            lines.append(f"| {LABELS[k]} | {_ms(st['p50'])} | {_ms(st['p99'])} | "
                         f"{_ms(st['mean'])} |")
        lines.append('')
    return '\n'.join(lines)


def _nodes(a: Dict[str, Any]) -> str:
    if len(a['devices']) == 1:
        return 'one node'
    return 'a node per camera' if a.get('node_per_camera', True) else 'one node for all'


def _input(a: Dict[str, Any]) -> str:
    kind = a.get('input', 'raw')
    return 'rgb8' if kind == 'raw' else f"{kind} q{a.get('jpeg_quality')}"


def _ms(v: Optional[float]) -> str:
    return '-' if v is None else f'{v:.1f}'


def variant(a: Dict[str, Any], cam: Dict[str, Any]) -> str:
    """The row key's 'variant': every setting that tells two rows of one model, resolution and
    object count apart (a newer row of the same variant replaces the older). All cameras'
    devices are in it: camera 0 on cuda:0 of a two-GPU run is not that of a one-GPU run."""
    pipe = cam['node_params'].get('pipeline')
    return '_'.join([
        f"{a['rate']:g}hz", f"{a['width']}x{a['height']}", f"cams{len(a['devices'])}",
        f"cam{cam['index']}", 'dev' + '+'.join(a['devices']), a['transport'],
        'overlay' if a['overlay'] else 'nooverlay',
        f"corr{a['corrections_every']:g}" if a['corrections_every'] else 'nocorr',
        str(cam['node_params'].get('graph_mode')),
        'yaml' if pipe is None else ('pipeline' if pipe else 'serial')]
        + ([a['input']] if a.get('input', 'raw') != 'raw' else [])
        + (['nomalloctune'] if cam['node_params'].get('tune_malloc') is False else [])
        + (['precompile'] if cam['node_params'].get('precompile') else [])
        + (['rxproc'] if cam['node_params'].get('image_receiver_process') else [])
        + (['stalltrace'] if cam['node_params'].get('stall_trace_ms') else [])
        + (['separatebuckets'] if cam['node_params'].get('merge_step_buckets') is False
           else [])
        + (['hostoverlay'] if cam['node_params'].get('overlay_on_gpu') is False else [])
        + ([f"cv{cam['node_params']['opencv_threads']}"]
           if cam['node_params'].get('opencv_threads') else [])
        + (['events'] if cam['node_params'].get('executor') == 'events' else [])
        + (['nogil'] if cam['node_params'].get('publish_without_gil') else [])
        + ([f"keep{cam['node_params']['gpu_clock_keeper_us']:g}"]
           if cam['node_params'].get('gpu_clock_keeper_us') else [])
        + ([f"gil{cam['node_params']['gil_switch_interval_ms']:g}"]
           if cam['node_params'].get('gil_switch_interval_ms') else [])
        + (['pubpercam'] if cam['node_params'].get('shared_publisher') is False else [])
        + (['workermasks'] if cam['node_params'].get('masks_from_worker') else [])

        + (['onenode'] if a.get('node_per_camera') is False else [])
        # frames published as serialized bytes (rows before it have no camera_publish)
        + (['camser'] if a.get('camera_publish') == 'serialized' else [])
        # each frame prepared that long before it is due (rows before it: right after the
        # previous publish)
        + ([f"prep{a['camera_prepare_ms']:g}"] if a.get('camera_prepare_ms') else [])
        # the client took masks serialized (rows before it converted them to messages)
        + (['rawclient'] if a.get('client_masks') == 'serialized' else [])
        # the client's subscriptions on rclpy's EventsExecutor (rows before it: single)
        + (['evclient'] if a.get('client_executor') == 'events' else []))


def rows(result: Dict[str, Any], run_id: str, commit: Optional[str]) -> List[Dict[str, Any]]:
    """One curated row per camera (the fields the node's targets need, plus the row key and
    context)."""
    a, out = result['config'], []
    for cam in result['cameras']:
        s, p = cam['summary'], cam['node_params']
        out.append({
            'model': a['model'], 'res': a['image_size'], 'objects': a['objects'],
            # CUDA_MODULE_LOADING=EAGER: every kernel module loaded at start (a diagnosis row)
            'variant': variant(a, cam) + ('_cudaeager' if result['host'].get(
                'CUDA_MODULE_LOADING') == 'EAGER' else ''),
            'camera_hz': a['rate'], 'width': a['width'], 'height': a['height'],
            'cameras': len(a['devices']), 'camera': cam['index'], 'device': cam['device'],
            # False: one node served every camera (its cameras parameter); True: a node each
            'node_per_camera': a.get('node_per_camera', True), 'devices': list(a['devices']),
            'graph_mode': p.get('graph_mode'), 'pipeline': p.get('pipeline'),
            'tune_malloc': p.get('tune_malloc', True),
            'image_receiver_process': bool(p.get('image_receiver_process', False)),
            'executor': p.get('executor', DEFAULT_EXECUTOR),
            'precompile': ','.join(p.get('precompile') or []) or None,
            'transport': a['transport'], 'overlay': a['overlay'],
            'input': a.get('input', 'raw'),
            'camera_publish': a.get('camera_publish', 'message'),
            'camera_prepare_ms': a.get('camera_prepare_ms', 0.0),
            'client_masks': a.get('client_masks', 'message'),
            'client_executor': a.get('client_executor', 'single'),
            # CPU time the hypervisor took from the machine during the row (host_watch.py):
            # a row with seconds of it measured the machine, not the node
            'host_steal_ms': result['host'].get('steal_ms'),
            'image_bytes_p50': s['image_bytes']['p50'],
            # >= 2 with the shm profile: this client's segment and the nodes' (SHM was used)
            'shm_large_segments': result.get('shm_large_segments'),
            'overlays_received': cam['overlays_received'],
            'corrections': s['corrections'], 'corrections_every_s': a['corrections_every'],
            'frames': s['measured_frames'],
            'e2e_mask_p50': s['e2e_mask_ms']['p50'], 'e2e_mask_p99': s['e2e_mask_ms']['p99'],
            'e2e_state_p99': s['e2e_state_ms']['p99'],
            'engine_p50': s['engine_ms']['p50'], 'publish_p50': s['publish_ms']['p50'],
            # the split of image -> mask (node_latency_frames.py), p50 and p99 of each
            **{f'{name}_{q}': s[k][q] for name, k in ROW_PARTS.items() for q in ('p50', 'p99')},
            'deadline_misses': s['deadline_misses'], 'queued': s['queued_frames'],
            'missing': s['missing_frames'],
            # how regular the camera process kept its period (the deadlines' spread)
            'camera_gap_ms_p1': s['camera_gap_ms']['p1'],
            'camera_gap_ms_p50': s['camera_gap_ms']['p50'],
            'camera_gap_ms_p99': s['camera_gap_ms']['p99'],
            'date': result['date'], 'commit': commit, 'run': run_id,
            'gpu': result['host'].get('gpu'), 'command': result['command']})
    return out


def commit_id(root: Path) -> Optional[str]:
    """$SAM2_ROS_COMMIT (the GPU machine's .git is stale), else the short HEAD here."""
    if os.environ.get('SAM2_ROS_COMMIT'):
        return os.environ['SAM2_ROS_COMMIT']
    try:
        out = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=root, text=True,
                             capture_output=True, timeout=10).stdout.strip()
        return out or None
    except Exception:
        return None


def today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d')


def host_info(root: Path) -> Dict[str, Any]:
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
    # the NUMA nodes' CPUs: camera, node and receivers on different sockets copy every frame
    # across the interconnect (Fast DDS's shared memory)
    nodes = sorted(Path('/sys/devices/system/node').glob('node[0-9]*/cpulist'))
    info['numa_cpus'] = [p.read_text().strip() for p in nodes] or None
    try:
        import torch

        info['torch'] = torch.__version__
        info['gpu'] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        info['gpus'] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # torch is only needed by the node
        info['gpu'] = None
    try:   # a small /dev/shm (containers) leaves Fast DDS without its shared-memory segments
        st = os.statvfs('/dev/shm')
        info['dev_shm_mib'] = round(st.f_blocks * st.f_frsize / 2**20)
    except OSError:
        info['dev_shm_mib'] = None
    for k in ('RMW_IMPLEMENTATION', 'ROS_AUTOMATIC_DISCOVERY_RANGE', 'OMP_NUM_THREADS',
              'CUDA_MODULE_LOADING'):
        info[k] = os.environ.get(k)
    info['git_commit'] = commit_id(root)
    return info
