"""Start-up benchmark: how long a fresh process takes from launch to its first tracked frame.

    python -m tools.bench.startup --model tiny --res 512 --starts 2 \
        --out benchmarks/results/h200_extra.json

Why: a node's ``configure`` loads the checkpoint and captures every CUDA graph before the
first frame; a surgeon restarting the node waits for all of it. Each start is a new Python
process (nothing cached in memory; whatever torch or the driver caches on disk is kept, so the
second start shows what a restart costs). The checkpoint is a real file in sam2's format
(``{'model': state_dict}``) of a random model, loaded through the same reader a user's
checkpoint goes through (``--checkpoint`` takes one of yours).

Phases per start: ``import_s`` (torch, sam2, sam2_ros), ``configure_s`` (``StreamingTracker``:
build, load, precast, warm up, capture; what the node's configure does), ``first_frame_s``
(the first 1280x720 frame with one box prompt, I/O graphs captured on first use unless
``io_resolution`` is set), ``total_s`` (process start to first masks on the host).
Rows go into the ``startup`` section of the results file (one row per configuration and start
number; a newer run replaces the older row).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

from tools.bench.results import csv

PROG = 'python -m tools.bench.startup'
DEFAULT_OUT = 'benchmarks/results/h200_extra.json'


def parse(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split('\n')[0])
    p.add_argument('--model', default='tiny')
    p.add_argument('--res', type=int, default=512)
    p.add_argument('--device', default='cuda')
    p.add_argument('--graph-mode', default=None, help='TrackerConfig.graph_mode (default: its)')
    p.add_argument('--starts', type=int, default=2, help='fresh processes, one after another')
    p.add_argument('--checkpoint', default=None,
                   help='a SAM 2.1 checkpoint; default: a random model saved in that format')
    p.add_argument('--warmup-iters', type=int, default=None,
                   help='eager runs before each graph capture (default: capture.WARMUP_ITERS)')
    p.add_argument('--replay-at-capture', type=int, default=None,
                   help='1/0: replay each graph once after its capture (its upload to the '
                        'device) or not (default: capture.REPLAY_AT_CAPTURE)')
    p.add_argument('--precompile', default='',
                   help='TrackerConfig.precompile, comma-separated (e.g. encoder,heads); the '
                        'first start compiles into --precompile-dir, later ones load')
    p.add_argument('--precompile-dir', default=None,
                   help='folder of the precompiled files (default: a fresh temporary one, so '
                        'start 1 compiles)')
    p.add_argument('--out', default=None, help='results JSON (section "startup")')
    p.add_argument('--child', default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def child(spec: Dict[str, object]) -> Dict[str, float]:
    """One start, in this (fresh) process: the phases' seconds since the process began."""
    t0 = float(spec['t0'])
    import torch  # noqa: F401 - timed as part of the import phase
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.engine.types import Prompt
    from sam2_ros.synthetic import SyntheticCamera
    t_import = time.time()
    kw = dict(model_size=spec['model'], image_size=spec['res'], device=spec['device'],
              checkpoint=spec['checkpoint'])
    if spec.get('graph_mode'):
        kw['graph_mode'] = spec['graph_mode']
    if spec.get('precompile'):
        kw['precompile'] = tuple(csv(spec['precompile']))
        kw['precompile_dir'] = spec['precompile_dir']
    if spec.get('warmup_iters') is not None:
        from sam2_ros.engine.cuda import capture
        capture.WARMUP_ITERS = int(spec['warmup_iters'])
    if spec.get('replay_at_capture') is not None:
        from sam2_ros.engine.cuda import capture
        capture.REPLAY_AT_CAPTURE = bool(spec['replay_at_capture'])
    tracker = StreamingTracker(TrackerConfig(**kw))
    if torch.device(spec['device']).type == 'cuda':
        torch.cuda.synchronize()
    t_conf = time.time()
    cam = SyntheticCamera(1280, 720, objects=2, seed=0)
    tracker.track(cam.frame(0))
    res = tracker.add_prompt(Prompt(1, box=cam.boxes(0, 1)[0]))
    assert res.objects and res.objects[0].mask.shape == (720, 1280)
    t_first = time.time()
    runner = tracker.runner
    return {'import_s': t_import - t0, 'configure_s': t_conf - t_import,
            'capture_s': float(getattr(runner, 'capture_s', 0.0)),
            'first_frame_s': t_first - t_conf, 'total_s': t_first - t0,
            'graphs': int(runner.n_graphs()) if hasattr(runner, 'n_graphs') else 0,
            'capture_phases_s': {k: round(v, 2)
                                 for k, v in getattr(runner, 'capture_phases', {}).items()}}


def save_random_checkpoint(model: str, res: int, path: str) -> None:
    """A random model of this size in the official checkpoint format."""
    import torch
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.model import build_model
    m = build_model(TrackerConfig(model_size=model, image_size=res, device='cpu',
                                  random_weights=True))
    torch.save({'model': m.state_dict()}, path)


def one_start(args: argparse.Namespace, ckpt: str) -> Dict[str, float]:
    spec = {'model': args.model, 'res': args.res, 'device': args.device, 'checkpoint': ckpt,
            'graph_mode': args.graph_mode, 'warmup_iters': args.warmup_iters,
            'replay_at_capture': args.replay_at_capture, 'precompile': args.precompile,
            'precompile_dir': args.precompile_dir, 't0': time.time()}
    out = subprocess.run([sys.executable, '-m', 'tools.bench.startup', '--child',
                          json.dumps(spec)], capture_output=True, text=True, timeout=900)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith('{')]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f'start failed (rc {out.returncode}): {out.stderr[-2000:]}')
    return json.loads(lines[-1])


def save_section(path: str, rows: List[dict]) -> None:
    """Merge rows into the file's ``startup`` list (same model, res, config, graph_mode, start
    and precompile: replaced)."""
    data = json.load(open(path)) if os.path.exists(path) else {}
    key = ('model', 'res', 'config', 'graph_mode', 'start', 'precompile')
    new = {tuple(r.get(k, '-') for k in key) for r in rows}
    old = [r for r in data.get('startup', [])
           if tuple(r.get(k, '-') for k in key) not in new]
    data['startup'] = old + rows
    with open(path, 'w') as f:
        json.dump(data, f, indent=1)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    from tools.bench.results import provenance
    prov = provenance(args.device, PROG, sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = args.checkpoint
        if ckpt is None:
            ckpt = os.path.join(tmp, f'random_{args.model}.pt')
            save_random_checkpoint(args.model, args.res, ckpt)
        if args.precompile and not args.precompile_dir:
            args.precompile_dir = os.path.join(tmp, 'precompiled')
        rows = []
        changed = [f'{k}={v}' for k, v in (('graph_mode', args.graph_mode),
                                           ('warmup_iters', args.warmup_iters),
                                           ('replay_at_capture', args.replay_at_capture),
                                           ('precompile', args.precompile))
                   if v not in (None, '')]
        config = ' '.join(changed) or 'default'     # 'default': TrackerConfig's defaults
        for start in range(1, args.starts + 1):
            r = one_start(args, ckpt)
            rows.append({'model': args.model, 'res': args.res, 'config': config,
                         'graph_mode': args.graph_mode or 'default', 'start': start,
                         'warmup_iters': args.warmup_iters or 'default',
                         'precompile': args.precompile or '-',
                         **{k: round(v, 2) if isinstance(v, float) else v
                            for k, v in r.items()}, **prov})
            print(f"start {start}: import {r['import_s']:.2f} s, configure "
                  f"{r['configure_s']:.2f} s (capture {r['capture_s']:.2f} s: "
                  f"{r['capture_phases_s']}), first frame {r['first_frame_s']:.2f} s, total "
                  f"{r['total_s']:.2f} s ({r['graphs']} graphs)", flush=True)
    if args.out:
        save_section(args.out, rows)
    return 0


if __name__ == '__main__':
    sys.exit(main())
