"""The interaction rows' step counters and their steady frames (``tools.bench.interaction``).

Why apart: the steady frames (``--steady-frames``) are the machine's own jitter on identical
work, the yardstick beside a row's p99; they and the step counters both rows share live here,
so the interaction benchmark stays one concern (the stream with its prompts).
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

import numpy as np

from tools.bench import gc_watch, host_frames
from tools.bench.profiling import sync as _sync

if TYPE_CHECKING:      # imported where used: parsing the arguments needs no model
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.synthetic import SyntheticCamera

SETTLE = 20                             # untimed frames before --steady-frames' timed ones
# Step counters every row carries, 0 when the tracker never counted one; any other
# ``*_steps`` counter the tracker has (e.g. prompt_graph_steps) is added when present.
# always in a row, 0 included: a row says that no step ran apart, not that none was counted
STEP_KEYS = ('eager_steps', 'graph_steps', 'prompt_steps', 'buckets_merged_steps',
             'buckets_apart_steps')


def step_counts(after: Dict[str, int], before: Dict[str, int]) -> Dict[str, int]:
    """The tracker's ``*_steps`` counters, ``deferred_prompts`` and ``fallbacks`` over the timed
    frames (the set-up frame's prompts excluded). Reads whatever ``*_steps`` keys exist, so
    counters the engine adds later (prompt_graph_steps, prompt_eager_steps) are reported
    without a change here."""
    keys = set(STEP_KEYS) | {k for k in after if k.endswith('_steps')} | {'fallbacks',
                                                                         'deferred_prompts'}
    return {k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in sorted(keys)}


class FrameTimes:
    """The timed frames of a row: ``time(work)`` runs one frame's work between device syncs
    and keeps its wall ms, its garbage collections (``gc_watch``: within ``with
    times.watch``) and what the host took from it (``host_frames``)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.ms: List[float] = []
        self.gcs: List[List[tuple]] = []                     # each frame's collections
        self.hosts: List[Dict[str, Optional[float]]] = []    # what the host took from each
        self.watch, self.host = gc_watch.GcWatch(), host_frames.HostFrames()

    def time(self, work: Callable[[], object]) -> object:
        """``work()``'s result, the frame timed."""
        _sync(self.device)
        self.watch.take()                      # those between frames are not the frame's
        self.host.start()
        t0 = time.perf_counter()
        res = work()
        _sync(self.device)
        self.ms.append((time.perf_counter() - t0) * 1e3)
        self.hosts.append(self.host.take())
        self.gcs.append(self.watch.take())
        return res


def steady_frames(tr: StreamingTracker, stream: SyntheticCamera,
                  a: argparse.Namespace) -> Dict[str, object]:
    """``a.steady_frames`` more frames of the stream on the same tracker, no prompts, timed
    as the stream's frames, after ``SETTLE`` untimed ones (an object corrected near the
    stream's end leaves its padded bucket within the bank's pointer count, 16 frames): every
    timed one replays the same graphs on the same shapes, so their spread is the machine's.
    The result says so: the modes ``track`` reported, the step counters, the collections and
    what the host took (``host_frames``) of the timed frames (an eager step or a collection
    there is not the machine's)."""
    t0 = a.frames + 1
    for t in range(t0, t0 + SETTLE):
        tr.track(stream.frame(t))
    before = dict(tr.stats)
    times = FrameTimes(a.device)
    modes: Dict[str, int] = {}
    with times.watch:
        for t in range(t0 + SETTLE, t0 + SETTLE + a.steady_frames):
            frame = stream.frame(t)
            mode = times.time(lambda: tr.track(frame).mode)
            modes[mode] = modes.get(mode, 0) + 1
    p50, p99 = (float(np.percentile(times.ms, q)) for q in (50, 99))
    return {'frames': len(times.ms), 'ms_p50': round(p50, 3), 'ms_p99': round(p99, 3),
            'p99_over_p50': round(p99 / p50, 3) if p50 else None, 'modes': modes,
            'steps': step_counts(dict(tr.stats), before), 'gc': gc_watch.summary(times.gcs),
            'host': host_frames.summary(times.ms, times.hosts)}
