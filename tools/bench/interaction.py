"""Interaction benchmark: the frame time of a stream the user corrects while it is tracked.

    python -m tools.bench.interaction --objects 1,3,10 --variants swap,batched \
        --corrections immediate,deferred --random-weights \
        --out benchmarks/results/h200_interaction.json

Why a benchmark of its own: the rows of ``tools.bench.cli`` time steady tracking after a
warm-up, so they never see what a user does while tracking runs: click to correct an object,
add a new one. Those frames, and the frames after them while the object's memory refills, are
where a real-time deadline is missed; this benchmark times every one of them.

Stream: the synthetic camera of ``sam2_ros.synthetic`` (``--w`` x ``--h``, default
1280x720, one moving disc per object plus one for the object added later). Frame 0 is set-up,
not timed: it is tracked, then every object gets a box prompt on it (``add_prompt``). Timed
frames 1..``--frames``:

- every ``--correct-every`` frames (60) a correction click, one positive point at the centre
  of the next object's disc in turn, on the frame just tracked, as ``--corrections`` says:
  ``immediate``: ``add_prompt`` after frame t's ``track``, in frame t's time (the correction
  and its masks delivered again); ``deferred`` (the default): ``defer_prompt`` on frame t - 1
  between frames (as the queued box below), computed by frame t's ``track``, in its time;
- a new object on frame ``--new-at`` (150): its box is queued with ``queue_prompt`` after
  frame ``new_at - 1``, so ``track`` starts it on frame ``new_at``.

A frame's time is the wall time of everything the frame needs (``track``, plus ``add_prompt``
on it when immediate; a deferred correction is inside ``track``), ending with the frame's masks
on the host (``FrameResult`` copies them there) and a device synchronise. Rows (one per model,
res, objects, variant, corrections; ``variant`` is the tracker's ``graph_mode``,
``corrections`` the mode) hold p50/p99/max ms, the tracker's step counters over the timed
frames (every ``*_steps`` key of ``tracker.stats``, ``deferred_prompts`` and ``fallbacks``) and
the 5 slowest frames; no per-frame list, to keep the results file small.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

import numpy as np

from sam2_ros.ros import gc_policy      # no ROS import: the node's heap freeze, as it runs it
from tools.bench import gc_watch, host_frames, results
from tools.bench.steady import STEP_KEYS, FrameTimes, step_counts, steady_frames
from tools.bench.results import csv as _csv, fmt as _fmt, provenance, save_json, stamp

if TYPE_CHECKING:      # imported where used: parsing the arguments needs no model
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.synthetic import SyntheticCamera

PROG = 'python -m tools.bench.interaction'
DEFAULT_OUT = 'benchmarks/results/h200_interaction.json'
VARIANTS = ('swap', 'batched')          # TrackerConfig.graph_mode
CORRECTIONS = ('immediate', 'deferred')  # add_prompt on the frame, or defer_prompt to the next
SLOWEST = 5                             # slowest frames kept per row


def parse(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split('\n')[0])
    p.add_argument('--model', default='tiny')
    p.add_argument('--res', type=int, default=512, help='model image size')
    p.add_argument('--objects', default='1,3,10', help='objects prompted on frame 0')
    p.add_argument('--variants', default=','.join(VARIANTS), help='graph modes')
    p.add_argument('--frames', type=int, default=300, help='timed frames (after frame 0)')
    p.add_argument('--h', type=int, default=720, help='source frame height')
    p.add_argument('--w', type=int, default=1280, help='source frame width')
    p.add_argument('--correct-every', type=int, default=60,
                   help='a correction click every N frames (0: none)')
    p.add_argument('--new-at', type=int, default=150,
                   help='frame on which a new object starts (0: none)')
    p.add_argument('--corrections', default='deferred',
                   help="comma list of 'immediate' (add_prompt after the frame's track, in its "
                        "time) and 'deferred' (defer_prompt on the frame before, computed by "
                        "the frame's track); one row each")
    p.add_argument('--reuse-attention', default='on',
                   help="comma list of 'on' and 'off': TrackerConfig.corrections_reuse_attention "
                        "(a correction starting from its frame's kept memory attention, or "
                        "re-running it); 'off' rows are named '<graph_mode>+rerun_attention'")
    p.add_argument('--merge-buckets', default='on',
                   help="comma list of 'on', 'off' and 'always': TrackerConfig.merge_step_buckets "
                        "(objects of different buckets in one padded replay where configure's "
                        "replay timings say it is faster, or one replay per bucket); 'always' "
                        "(a benchmark variant) forgets the timings, so every such frame merges; "
                        "'off' rows are named '<graph_mode>+separate_buckets', 'always' ones "
                        "'<graph_mode>+merge_always'")
    p.add_argument('--deferred-beside', default='on',
                   help="comma list of 'on' and 'off': TrackerConfig.deferred_beside_encoder (a "
                        "deferred correction run beside the next frame's image encoder, or "
                        "before it); 'off' rows are named '<graph_mode>+deferred_before'")
    p.add_argument('--replay-at-capture', type=int, default=1, choices=(0, 1),
                   help="capture.REPLAY_AT_CAPTURE for every row (1: each graph uploaded at "
                        "configure; 0: on its first replay, rows named "
                        "'<graph_mode>+upload_on_first_use')")
    p.add_argument('--tune-malloc', action='store_true',
                   help="raise glibc's mmap and trim thresholds first, as the node does (its "
                        "tune_malloc parameter); rows named '<graph_mode>+tune_malloc'")
    p.add_argument('--gc-freeze', action='store_true',
                   help="gc.freeze() after the set-up frame, as the node does after configure "
                        "(its gc_freeze parameter): collections skip the model's heap; rows "
                        "named '<graph_mode>+gc_freeze'")
    p.add_argument('--steady-frames', type=int, default=0,
                   help='after the stream, N more frames without prompts (timed once every '
                        'object has settled in its steady bucket): identical work each frame, '
                        "so their p99/p50 (the row's 'steady') is the machine's own jitter, "
                        'the floor under the p99/p50 of the interactive frames')
    p.add_argument('--device', default='cuda')
    p.add_argument('--precision', default='bf16', choices=('bf16', 'fp32'))
    weights = p.add_mutually_exclusive_group(required=True)
    weights.add_argument('--checkpoint', help='official SAM 2.1 .pt file of --model')
    weights.add_argument('--random-weights', action='store_true',
                         help='random weights: timings only, the masks mean nothing')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--precompile', default='',
                   help="TrackerConfig.precompile, comma-separated ('encoder,heads'); rows are "
                        "named '<graph_mode>+precompile'")
    p.add_argument('--out', nargs='?', const=DEFAULT_OUT, default=None,
                   help=f'JSON list of rows, rows of the same (model, res, objects, variant) '
                        f'replaced; --out alone writes {DEFAULT_OUT}')
    a = p.parse_args(argv)
    a.objects = _csv(a.objects, int)
    a.variants = _csv(a.variants)
    a.corrections = _csv(a.corrections)
    a.reuse_attention = _csv(a.reuse_attention)
    a.merge_buckets = _csv(a.merge_buckets)
    a.deferred_beside = _csv(a.deferred_beside)
    for name, allowed in (('reuse_attention', {'on', 'off'}), ('deferred_beside', {'on', 'off'}),
                          ('merge_buckets', {'on', 'off', 'always'})):
        got = getattr(a, name)
        if not got or set(got) - allowed:
            p.error(f"--{name.replace('_', '-')} takes {sorted(allowed)}, got {got}")
    bad = [v for v in a.variants if v not in VARIANTS]
    if bad:
        p.error(f'unknown variants {bad}; known: {list(VARIANTS)}')
    bad = [c for c in a.corrections if c not in CORRECTIONS]
    if bad or not a.corrections:
        p.error(f'unknown corrections {bad}; known: {list(CORRECTIONS)}')
    if any(o < 1 for o in a.objects) or a.frames < 1:
        p.error('--objects and --frames must be >= 1')
    if a.steady_frames < 0:
        p.error('--steady-frames must be >= 0')
    return a


def prompts_on(t: int, correct_every: int, new_at: int) -> List[str]:
    """The interactions of timed frame t: 'correction' (add_prompt after its track, or
    defer_prompt before it) and/or 'new_object' (a box queued before it, started by its
    track)."""
    kinds = []
    if t == new_at:
        kinds.append('new_object')
    if correct_every > 0 and t % correct_every == 0:
        kinds.append('correction')
    return kinds


def slowest(ms: List[float], kinds: Dict[int, List[str]], modes: List[str],
            notes: Optional[List[Dict[str, object]]] = None,
            n: int = SLOWEST) -> List[Dict[str, object]]:
    """The n slowest timed frames: index, ms, its interaction (None without one), frames
    since the latest interaction (0 on the frame itself; the set-up prompts are on frame 0)
    the mode track() reported and, with ``notes``, the frame's own (its garbage collections'
    ms, what the host took: ``host_frames``). A slow frame right after a prompt is the eager
    warm-up the engine is meant to remove; one far from any is something else."""
    out = []
    for i in sorted(range(len(ms)), key=lambda i: -ms[i])[:n]:
        t = i + 1
        last = max([f for f in kinds if f <= t], default=0)
        out.append({'frame': t, 'ms': round(ms[i], 3),
                    'prompt': '+'.join(kinds[t]) if t in kinds else None,
                    'since_prompt': t - last, 'mode': modes[i], **(notes[i] if notes else {})})
    return out


def row_key(row: dict) -> tuple:
    """The results file's key: the engine rows' and the corrections mode (rows from before
    the mode existed were immediate)."""
    return (*results.row_key(row), row.get('corrections', 'immediate'))


def run_row(a: argparse.Namespace, objects: int, variant: str,
            corrections: str = 'deferred',
            around: Optional[Callable[[int, Callable[[], object]], object]] = None,
            reuse: bool = True, merge: str = 'on', beside: bool = True) -> Dict[str, object]:
    """Build a tracker for one row and time the interactive stream on it; the row comes back
    without the provenance fields (``stamp`` adds those). ``around(t, work)``, when given, runs
    timed frame t's work (a probe's profiler or per-frame record) and returns what it
    returns. reuse: ``corrections_reuse_attention``; merge: ``merge_step_buckets`` 'on' /
    'off', or 'always' (on, with configure's replay timings forgotten); beside:
    ``deferred_beside_encoder``."""
    import torch

    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.engine.types import Prompt
    from sam2_ros.synthetic import SyntheticCamera

    cfg = TrackerConfig(model_size=a.model, image_size=a.res, checkpoint=a.checkpoint,
                        random_weights=a.random_weights, seed=a.seed, device=a.device,
                        precision=a.precision, max_objects=objects + 1,
                        use_cuda_graphs=True, graph_mode=variant,
                        precompile=tuple(_csv(a.precompile)),
                        corrections_reuse_attention=reuse, merge_step_buckets=merge != 'off',
                        deferred_beside_encoder=beside)
    tr = StreamingTracker(cfg)
    if merge == 'always' and getattr(tr.runner, 'graphs', None) is not None:
        tr.runner.graphs.steps.replay_times.clear()     # StepGraphs.merge_pays: untimed
    kinds = {t: k for t in range(1, a.frames + 1)
             if (k := prompts_on(t, a.correct_every, a.new_at))}
    new_id = objects + 1                           # its disc is the stream's last one
    stream = SyntheticCamera(a.w, a.h, objects=max(2, new_id), seed=a.seed)
    tr.track(stream.frame(0))
    for i, box in enumerate(stream.boxes(0, objects)):
        tr.add_prompt(Prompt(i + 1, box=box))
    before, reasons0 = dict(tr.stats), dict(tr.fallback_reasons)
    if a.gc_freeze:
        gc_policy.freeze()
    times = FrameTimes(a.device)
    modes: List[str] = []
    turn = 0
    deferred = corrections == 'deferred'

    def click(on: int) -> Prompt:
        """The correction of the next object in turn, at its disc's centre on frame ``on``."""
        nonlocal turn
        ids = tr.object_ids
        obj_id = ids[turn % len(ids)]
        turn += 1
        cx, cy = stream.centers(on)[obj_id - 1]
        return Prompt(obj_id, points=np.array([[cx, cy]], np.float32),
                      labels=np.array([1], np.int32))
    with times.watch:
        for t in range(1, a.frames + 1):
            frame = stream.frame(t)                    # drawn before the clock starts
            if 'new_object' in kinds.get(t, ()):       # queued between frames, as a user would
                tr.queue_prompt(Prompt(new_id, box=stream.boxes(t)[new_id - 1]))
            correct = 'correction' in kinds.get(t, ())
            if correct and deferred:    # on the frame just tracked, computed by this track
                tr.defer_prompt(click(t - 1))

            def work(t=t, frame=frame, correct=correct):
                res = tr.track(frame)
                modes.append(res.mode)
                return tr.add_prompt(click(t)) if correct and not deferred else res
            res = times.time(lambda t=t, work=work: around(t, work) if around is not None
                             else work())
            want = objects + (1 if 1 <= a.new_at <= t else 0)
            assert len(res.objects) == want and res.objects[0].mask.shape == (a.h, a.w), \
                (t, len(res.objects), want, res.objects[0].mask.shape)
    ms, gcs, hosts = times.ms, times.gcs, times.hosts
    counts = step_counts(dict(tr.stats), before)
    reasons = {k: v - reasons0.get(k, 0) for k, v in tr.fallback_reasons.items()
               if v - reasons0.get(k, 0)}
    steady = steady_frames(tr, stream, a) if a.steady_frames else None
    del tr
    if a.gc_freeze:
        gc_policy.unfreeze()
    gc.collect()
    if torch.device(a.device).type == 'cuda':
        torch.cuda.empty_cache()
    row: Dict[str, object] = dict(
        model=a.model, res=a.res, objects=objects,
        variant=variant + ('+precompile' if a.precompile else '')
        + ('' if reuse else '+rerun_attention')
        + {'on': '', 'off': '+separate_buckets', 'always': '+merge_always'}[merge]
        + ('' if beside else '+deferred_before')
        + ('' if getattr(a, 'replay_at_capture', 1) else '+upload_on_first_use')
        + ('+tune_malloc' if a.tune_malloc else '')
        + ('+gc_freeze' if a.gc_freeze else ''),
        corrections=corrections,
        frames=a.frames,
        ms_p50=round(float(np.percentile(ms, 50)), 3),
        ms_p99=round(float(np.percentile(ms, 99)), 3), ms_max=round(max(ms), 3))
    row.update(counts)
    if reasons:
        row['fallback_reasons'] = reasons
    row['slowest'] = slowest(ms, kinds, modes, [
        {'gc_ms': gc_watch.frame_ms(g), **h} for g, h in zip(gcs, hosts)])
    row['gc'] = gc_watch.summary(gcs)
    row['host'] = host_frames.summary(ms, hosts)
    if steady is not None:
        row['steady'] = steady
    row['src'] = f'{a.w}x{a.h}'
    row['weights'] = 'random' if a.random_weights else a.checkpoint
    return row


def table(rows: List[dict]) -> str:
    """Markdown, one line per row; p99/p50 is the interaction target (<= 1.25,
    docs/performance.md), read on all frames; the undisturbed one leaves out the frames the
    host took time from (``host_frames``)."""
    steps = sorted({k for r in rows for k in r if k.endswith('_steps')} - set(STEP_KEYS))
    cols = ['model', 'res', 'objects', 'variant', 'corrections', 'frames', 'ms_p50', 'ms_p99',
            'p99/p50', 'steady p99/p50', 'undisturbed p99/p50 (disturbed)', 'ms_max',
            *STEP_KEYS, *steps, 'fallbacks',
            'slowest (frame:ms:prompt)', 'run']
    out = ['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
    order = {'tiny': 0, 'small': 1, 'base_plus': 2, 'large': 3}
    for r in sorted(rows, key=lambda r: (order.get(r['model'], 9), r['res'], r['objects'],
                                         r['variant'], r.get('corrections', 'immediate'))):
        ratio = r['ms_p99'] / r['ms_p50'] if r['ms_p50'] else None
        slow = ' '.join(f"{s['frame']}:{s['ms']:.1f}:{s['prompt'] or '-'}"
                        for s in r.get('slowest', [])[:3])
        vals = [r['model'], r['res'], r['objects'], r['variant'],
                r.get('corrections', 'immediate'), r['frames'],
                _fmt(r['ms_p50']), _fmt(r['ms_p99']), _fmt(ratio),
                _fmt((r.get('steady') or {}).get('p99_over_p50')), host_frames.cell(r),
                _fmt(r['ms_max']),
                *(r.get(k, '-') for k in (*STEP_KEYS, *steps)), r.get('fallbacks', '-'),
                slow, r.get('run', '-')]
        out.append('| ' + ' | '.join(str(v) for v in vals) + ' |')
    return '\n'.join(out) + '\n'


def main(argv: Optional[List[str]] = None) -> int:
    """Run every (objects, variant) row; returns 1 if any row failed (the others are kept)."""
    a = parse(argv)
    import torch

    if a.tune_malloc:       # process-wide, before any large buffer is allocated
        from sam2_ros.ros.malloc import keep_large_buffers
        print(f'# tune_malloc: {keep_large_buffers()}', flush=True)
    prov = provenance(a.device, PROG, sys.argv[1:] if argv is None else argv)
    print('#', json.dumps(prov), flush=True)
    if a.random_weights:
        print('# RANDOM WEIGHTS (--random-weights): timings only, the masks mean nothing',
              flush=True)
    from sam2_ros.engine.cuda import capture
    capture.REPLAY_AT_CAPTURE = bool(a.replay_at_capture)
    rows, failed = [], []
    for o, v, c, r, m, b in ((o, v, c, r, m, b) for o in a.objects for v in a.variants
                             for c in a.corrections for r in a.reuse_attention
                             for m in a.merge_buckets for b in a.deferred_beside):
        t = time.perf_counter()
        try:
            with torch.inference_mode():
                row = stamp(run_row(a, o, v, c, reuse=r == 'on', merge=m, beside=b == 'on'),
                            prov)
        except Exception as exc:  # noqa: BLE001 - one failing row must not lose the others
            traceback.print_exc()
            failed.append((o, v, c, r, m, b))
            print(f'FAILED {a.model}@{a.res} x{o} {v} {c} reuse {r} merge {m} beside {b}: '
                  f'{exc!r}', flush=True)
            continue
        rows.append(row)
        print(json.dumps(row), f'# {time.perf_counter() - t:.1f}s', flush=True)
        if a.out:                        # after every row: a timeout keeps what was done
            save_json(a.out, [row], key=row_key)
    print(table(rows))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
