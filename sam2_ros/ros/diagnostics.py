"""/diagnostics of the tracker node, in every lifecycle state: rate, latency percentiles,
counters since start and what is wrong (no frames, CUDA graph fallbacks, errors, a stopped
worker, a receiving process that restarted).

No frames names the image topic subscribed and how many publishers it has: a misspelt
``image_topic`` has none, and the node logs that once per activation (:func:`snapshot` with
the node), where the diagnostics alone said only "no frames since activation".

:func:`snapshot` reads what the node's parts show publicly (worker, mailbox, tracker, totals)
into a :class:`Snapshot`; :func:`report` is a pure function of it (tested without a node).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from sam2_ros.ros.receiver import ImageReceiver, find_receiver
from sam2_ros.ros.totals import Totals
from sam2_ros.ros.worker_detections import COUNT_KEYS

# Percentiles and rate in /diagnostics cover this many seconds of frames.
DIAG_WINDOW_S = 10.0
# A run of this many failed frames turns diagnostics ERROR (a few bad frames are only WARN).
ERROR_AFTER_FAILURES = 5
# Diagnostics ticks in a row with no frame since activation and no publisher on the image topic
# before the log says so: one tick is left for a camera started beside the tracker to appear.
SILENT_TICKS_BEFORE_WARN = 2
IMAGE_TYPES = ('Image', 'CompressedImage')


@dataclass
class Snapshot:
    """What an active node's diagnostics show, read at one moment."""

    now: float                          # time.monotonic()
    last_recv_t: Optional[float]        # the last frame's arrival, None: none yet
    stale_timeout_s: float
    fallbacks: int                      # CUDA graph fallbacks since configure
    fallbacks_seen: int                 # ... already reported
    fallback_reasons: Dict[str, int]
    errors: int                         # errors since the previous diagnostics
    last_error: str
    consecutive_failures: int
    worker_alive: bool
    counts: Dict[str, int]              # totals.NAMES since start
    latency: Dict[str, float]           # rate_hz, latency_p50_ms, latency_p99_ms
    objects: int
    waiting_frames: int
    waiting_prompts: int
    graph_steps: int
    eager_steps: int
    pipeline: bool
    publish_waiting: int
    overlays_published: int
    overlays_dropped: int
    model: str
    random_weights: bool
    gc_full_collections: int
    gc_max_pause_ms: float
    detections: Optional[Dict[str, int]] = field(default=None)   # None: vision_msgs is off
    decode: Dict[str, Any] = field(default_factory=dict)          # decode_values()
    late_imports: int = 0          # modules imported since activation (late_imports.py)
    receiver: Dict[str, Any] = field(default_factory=dict)        # receiver_values()
    receiver_restarted: str = ''   # a recent restart of the receiving process, described
    # the camera's image topic as subscribed (remapped, absolute) and its publishers; () when
    # not known (no node given)
    image_topics: Tuple[Tuple[str, int], ...] = ()


@dataclass
class Report:
    """One DiagnosticStatus: level 'OK' | 'WARN' | 'ERROR', message, key-values."""

    level: str
    message: str
    values: Dict[str, Any]


def model_name(cfg: Any) -> str:
    return f'{cfg.model_size}@{cfg.image_size} {cfg.device} {cfg.precision}'


def decode_values(decoder: Any) -> Dict[str, Any]:
    """Where frames are decoded: ``gpu_decode`` 'on (nvJPEG)' or 'off: <why>', and for a
    compressed input the frames decoded on the GPU and on the host, and the JPEGs nvJPEG
    refused (decoded on the host instead) with the last refusal. ``decoder``: the node's
    :class:`~sam2_ros.engine.decode.FrameDecoder`, None for raw input."""
    if decoder is None:
        return {'gpu_decode': 'off: raw input (input_type raw)'}
    c = decoder.counts
    values: Dict[str, Any] = {
        'gpu_decode': 'on (nvJPEG)' if decoder.on_gpu else f'off: {decoder.gpu_off}',
        'decoded_on_gpu': c.gpu, 'decoded_on_host': c.cpu, 'gpu_decode_failures': c.gpu_failures}
    if decoder.last_gpu_error:
        values['last_gpu_decode_error'] = decoder.last_gpu_error[:200]
    return values


def receiver_values(inputs: Optional[Iterable[Any]], opts: Any, now: float,
                    camera: int = 0) -> Tuple[Dict[str, Any], str]:
    """Camera ``camera``'s receiving process (``image_receiver_process``): its counts since
    activation as ``receiver_*`` values, and a description of its restart if one was not
    reported yet or came within DIAG_WINDOW_S ('' if none). ``inputs``: the node's input
    subscriptions (None: not known, no values). Takes the receiver's new restarts."""
    if inputs is None:
        return {}, ''
    rx = find_receiver(inputs, camera)
    if rx is None:
        if not getattr(opts, 'image_receiver_process', False):
            return {'receiver_process': 'off'}, ''
        if getattr(opts, 'input_type', 'raw') != 'raw':
            return {'receiver_process': f'off: {opts.input_type} input (raw images only)'}, ''
        # it did not start (logged then): the images are received in the node's process
        return {'receiver_process': "off: did not start (receiving in the node's process)"}, ''
    st = rx.stats(take=True)
    values: Dict[str, Any] = {
        'receiver_process': f'on (pid {st.pid})' if st.pid is not None and st.ready
        else 'restarting',
        'receiver_frames': st.frames, 'receiver_refused_frames': st.refused,
        'receiver_restarts': st.restarts, 'receiver_read_failures': st.read_failures,
        # slots the node holds, and the receiving process's waits with none free (then DDS
        # keeps the backlog, or drops it with a history depth)
        'receiver_slots_held': st.slots_held, 'receiver_slot_waits': st.slot_waits,
        'receiver_ring_bytes': st.ring_bytes}
    if st.last_restart_t is None:
        return values, ''
    age = now - st.last_restart_t
    values['receiver_last_restart'] = f'{st.last_restart}, {age:.1f} s ago'
    if not st.new_restarts and age > DIAG_WINDOW_S:
        return values, ''
    return values, (f'image receiving process restarted {age:.1f} s ago ({st.last_restart}; '
                    f'{st.restarts} restarts since activation)')


def snapshot(now: float, worker: Any, mailbox: Any, tracker: Any, cfg: Any, opts: Any,
             totals: Totals, fallbacks_seen: int, gc_pauses: Any,
             vision_on: bool, decoder: Any = None, late_imports: int = 0,
             inputs: Optional[Iterable[Any]] = None, camera: int = 0,
             node: Any = None) -> Snapshot:
    """Read an active node's parts (takes the worker's error count and the receiving
    process's restarts: reported once); ``decoder``: the compressed input's FrameDecoder
    (None: raw input); ``late_imports``: modules imported since activation; ``inputs``: the
    node's input subscriptions, where camera ``camera``'s receiving process and image topic
    are found; ``node``: the rclpy node, to count the image topic's publishers (and log once
    per activation when it has none and no frame came)."""
    errors = worker.errors.take_count()
    topics = image_topics(node, list(inputs or ()), camera) if node is not None else ()
    if node is not None:
        warn_silent_topic(node.get_logger(), mailbox, topics)
    rx_values, rx_restarted = receiver_values(inputs, opts, now, camera)
    stats = tracker.stats
    return Snapshot(
        now=now, last_recv_t=mailbox.last_recv_t, stale_timeout_s=opts.stale_timeout_s,
        fallbacks=int(stats.get('fallbacks', 0)), fallbacks_seen=fallbacks_seen,
        fallback_reasons=dict(getattr(tracker, 'fallback_reasons', {}) or {}),
        errors=errors.count, last_error=errors.last,
        consecutive_failures=worker.counters.consecutive_failures, worker_alive=worker.alive,
        counts=totals.since_start(worker, mailbox),
        latency=dict(worker.latency.summary(now, DIAG_WINDOW_S)),
        objects=worker.counters.objects, waiting_frames=mailbox.pending_frames(),
        waiting_prompts=mailbox.pending_prompts() + worker.waiting_prompts,
        graph_steps=int(stats.get('graph_steps', 0)),
        eager_steps=int(stats.get('eager_steps', 0)), pipeline=bool(opts.pipeline),
        publish_waiting=worker.output.pending(), overlays_published=worker.output.overlays,
        overlays_dropped=worker.output.overlays_dropped, model=model_name(cfg),
        random_weights=not cfg.checkpoint, gc_full_collections=gc_pauses.full_collections,
        gc_max_pause_ms=gc_pauses.max_pause_ms,
        detections=totals.detections_since_start(worker) if vision_on else None,
        decode=decode_values(decoder), late_imports=late_imports, receiver=rx_values,
        receiver_restarted=rx_restarted, image_topics=topics)


def image_topics(node: Any, inputs: List[Any], camera: int = 0) -> Tuple[Tuple[str, int], ...]:
    """Camera ``camera``'s image topic among a node's ``inputs`` (its receiving process or
    subscription of Image or CompressedImage: one per camera, in camera order) with its
    publishers (``node.count_publishers``); () if it has none."""
    images = [s for s in inputs if isinstance(s, ImageReceiver) or
              getattr(getattr(s, 'msg_type', None), '__name__', '') in IMAGE_TYPES]
    if camera >= len(images):
        return ()
    sub = images[camera]
    topic = sub.topic if isinstance(sub, ImageReceiver) else sub.topic_name
    return ((topic, int(node.count_publishers(topic))),)


def warn_silent_topic(logger: Any, mailbox: Any, topics: Tuple[Tuple[str, int], ...]) -> None:
    """One warning per activation (``mailbox``: its own) when SILENT_TICKS_BEFORE_WARN ticks
    in a row found no frame since activation and no publisher on the image topic: the
    diagnostics say so too, but a misspelt image_topic belongs in the log a user reads."""
    if mailbox.last_recv_t is not None or not topics:
        return
    ticks = mailbox.silent_ticks
    if ticks is None:                               # said already in this activation
        return
    silent = [t for t, n in topics if n == 0]
    ticks = ticks + 1 if silent else 0
    if ticks < SILENT_TICKS_BEFORE_WARN:
        mailbox.silent_ticks = ticks
        return
    mailbox.silent_ticks = None
    logger.warning(f'no frames since activation: nothing publishes {", ".join(silent)} (0 '
                   f'publishers). Check image_topic (and input_type): `ros2 topic list` shows '
                   f"the camera's topics")


def no_frames(since: str, topics: Tuple[Tuple[str, int], ...]) -> str:
    """'no frames <since>', with the image topic and its publishers when known."""
    if not topics:
        return f'no frames {since}'
    on = ', '.join(f'{t} ({n} publisher{"" if n == 1 else "s"}'
                   f'{": check image_topic" if n == 0 else ""})' for t, n in topics)
    return f'no frames {since} on {on}'


def report(s: Snapshot) -> Report:
    """The diagnostics of an active node."""
    level, problems = 'OK', []
    if s.last_recv_t is None or s.now - s.last_recv_t > s.stale_timeout_s:
        level = 'WARN'
        since = 'since activation' if s.last_recv_t is None else \
            f'for {s.now - s.last_recv_t:.1f} s'
        problems.append(no_frames(since, s.image_topics))
    if s.fallbacks > s.fallbacks_seen:
        level = 'WARN'
        reasons = s.fallback_reasons
        top = max(reasons, key=reasons.get) if reasons else 'unknown'
        problems.append(f'{s.fallbacks - s.fallbacks_seen} CUDA graph fallbacks to eager '
                        f'(most frequent reason: {top})')
    if s.errors:
        level = 'WARN'
        problems.append(f'{s.errors} errors, last: {s.last_error[:200]}')
    if s.receiver_restarted:
        level = 'WARN'
        problems.append(s.receiver_restarted)
    if s.consecutive_failures >= ERROR_AFTER_FAILURES or not s.worker_alive:
        level = 'ERROR'
        problems.insert(0, 'worker stopped' if not s.worker_alive else
                        f'last {s.consecutive_failures} frames failed')
    return Report(level, '; '.join(problems) if problems else 'tracking', _values(s))


def _values(s: Snapshot) -> Dict[str, Any]:
    c = s.counts
    values: Dict[str, Any] = dict(s.latency)
    values.update({
        'objects': s.objects, 'received_frames': c['received'],
        'processed_frames': c['processed'], 'dropped_frames': c['dropped'],
        'waiting_frames': s.waiting_frames, 'waiting_prompts': s.waiting_prompts,
        'frame_errors': c['frame_errors'], 'prompt_errors': c['prompt_errors'],
        'graph_steps': s.graph_steps, 'eager_steps': s.eager_steps, 'fallbacks': s.fallbacks,
        # the output stage (pipeline): results waiting for the publisher thread, overlays
        # sent and replaced by a newer frame's before they could be sent
        'pipeline': s.pipeline, 'publish_waiting': s.publish_waiting,
        'overlays_published': s.overlays_published, 'overlays_dropped': s.overlays_dropped,
        'model': s.model, 'random_weights': s.random_weights,
        # Python's full garbage collections in this process (gc_freeze keeps them short)
        'gc_full_collections': s.gc_full_collections,
        'gc_max_pause_ms': round(s.gc_max_pause_ms, 2),
        # modules imported while streaming (each held the GIL: logged with their names)
        'late_imports': s.late_imports,
    })
    values.update(s.decode)
    values.update(s.receiver)
    if s.detections is not None:
        for k in COUNT_KEYS:
            values[f'detections_{k}'] = s.detections.get(k, 0)
    else:
        values['detections'] = 'off (no vision_msgs)'
    values['lifecycle_state'] = 'active'
    return values


def inactive_report(tracker: Any, done: Dict[str, int], model: Optional[str]) -> Report:
    """WARN 'not tracking' while unconfigured (``tracker`` None) or inactive (a monitor must
    not mistake a stopped tracker for a silent one), with the totals so far (``done``:
    totals.NAMES) and the objects an inactive tracker keeps for its next activation."""
    state = 'inactive' if tracker is not None else 'unconfigured'
    values: Dict[str, Any] = {'lifecycle_state': state,
                              'objects': 0 if tracker is None else len(tracker.object_ids)}
    values.update({f'{k}_frames' if k in ('received', 'dropped', 'processed') else k: v
                   for k, v in done.items()})
    if model is not None:
        values['model'] = model
    return Report('WARN', f'{state}: not tracking', values)


def status_name(node_name: str) -> str:
    """'sam2_tracker: tracker', or 'cam0/sam2_tracker: tracker' in a namespace (from the fully
    qualified name), so the trackers of several cameras stay apart on /diagnostics."""
    return f'{node_name.lstrip("/")}: tracker'

