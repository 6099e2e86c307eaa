"""One publisher thread for several cameras' output stages (sam2_ros/ros/shared_publisher.py):
each committed batch goes out masks first (every camera's), then the states, each camera's
messages in order; a camera whose masks fail gets no state (reported) and the others are
unaffected; a full FIFO blocks the committing worker; stop publishes what was handed over. And
the multi-camera worker with the pipeline: one group's masks both before either state, or a
publisher thread per camera with ``shared_publisher`` off."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np

from sam2_ros.engine.types import FrameResult
from sam2_ros.ros import detections as det
from sam2_ros.ros.mailbox import Published
from sam2_ros.ros.multi_worker import MultiCameraWorker
from sam2_ros.ros.paired_mailbox import PairedMailbox
from sam2_ros.ros.pipeline import OutputStage
from sam2_ros.ros.shared_publisher import SharedPublisher
from test_ros_multi_worker import FakeCore, group
from test_ros_worker import host


def split_outputs(cam, events, fail_masks=lambda p: False, overlay=True):
    """Outputs whose halves record (what, camera, frame) into ``events``."""
    def masks(p):
        if fail_masks(p):
            raise RuntimeError(f'mask of {cam}')
        events.append(('mask', cam, p.header))

    def state(p):
        events.append(('state', cam, p.header))

    def both(p):
        masks(p)
        state(p)
    return SimpleNamespace(
        publish=both, publish_masks=masks, publish_state=state,
        publish_overlay=(lambda p: events.append(('overlay', cam, p.header))) if overlay
        else None, has_overlay=overlay, wants_overlay=lambda: True, alive=lambda: True)


def item(frame):
    return Published(FrameResult(0, 2, 2), None, frame, 0.0, None, [])


def stages(events, shared, n=2, **kw):
    errors = []
    out = [OutputStage(split_outputs(c, events, **kw), threaded=True, shared=shared,
                       report_error=errors.append) for c in range(n)]
    return out, errors


def run(shared, cams):
    shared.start()
    for s in cams:
        s.start()


def stop(shared, cams):
    shared.stop()
    for s in cams:
        s.stop()


def test_each_batch_sends_every_cameras_mask_before_any_state():
    events = []
    shared = SharedPublisher()
    cams, errors = stages(events, shared)
    run(shared, cams)
    for frame in ('a', 'b'):
        cams[0].put(item(frame))
        cams[1].put(item(frame))
        shared.commit()
    cams[1].put(item('c'))          # put, never committed: stop publishes it too
    stop(shared, cams)
    results = [e for e in events if e[0] != 'overlay']
    assert results == [('mask', 0, 'a'), ('mask', 1, 'a'), ('state', 0, 'a'), ('state', 1, 'a'),
                       ('mask', 0, 'b'), ('mask', 1, 'b'), ('state', 0, 'b'), ('state', 1, 'b'),
                       ('mask', 1, 'c'), ('state', 1, 'c')]
    assert [s.published for s in cams] == [2, 3] and errors == []
    assert shared.batches == 3 and [shared.pending(s) for s in cams] == [0, 0]
    # overlays: each camera's latest at least, after its state (newest-only slots)
    assert [e[1:] for e in events if e[0] == 'overlay'][-1] in ((0, 'b'), (1, 'c'))
    assert all(cams[c].overlays >= 1 for c in (0, 1))


def test_a_camera_whose_masks_fail_gets_no_state_and_the_other_is_unaffected():
    events, errors = [], {0: [], 1: []}
    shared = SharedPublisher()
    cams = [OutputStage(split_outputs(c, events, overlay=False,
                                      fail_masks=lambda p, c=c: c == 0 and p.header == 'a'),
                        threaded=True, shared=shared, report_error=errors[c].append)
            for c in (0, 1)]
    run(shared, cams)
    for frame in ('a', 'b'):
        cams[0].put(item(frame))
        cams[1].put(item(frame))
        shared.commit()
    stop(shared, cams)
    assert events == [('mask', 1, 'a'), ('state', 1, 'a'), ('mask', 0, 'b'), ('mask', 1, 'b'),
                      ('state', 0, 'b'), ('state', 1, 'b')]
    assert [s.published for s in cams] == [1, 2]
    assert len(errors[0]) == 1 and 'mask of 0' in errors[0][0] and errors[1] == []


def test_a_full_fifo_blocks_the_commit_until_the_thread_takes_a_batch():
    events, gate = [], threading.Event()
    shared = SharedPublisher(depth=1)
    cams, _ = stages(events, shared, n=1, overlay=False)
    taken = threading.Event()

    def slow_masks(p):          # the thread holds the first batch until the gate opens
        taken.set()
        gate.wait(60)
        events.append(('mask', 0, p.header))
    cams[0].outputs.publish_masks = slow_masks
    run(shared, cams)
    cams[0].put(item('a'))
    shared.commit()
    assert taken.wait(60)                 # batch a is being published
    cams[0].put(item('b'))
    shared.commit()                       # waits in the FIFO (depth 1)
    cams[0].put(item('c'))
    done = threading.Event()
    threading.Thread(target=lambda: (shared.commit(), done.set()), daemon=True).start()
    assert not done.wait(0.3)             # blocked: the FIFO is full
    assert shared.pending(cams[0]) == 3
    gate.set()
    assert done.wait(60)
    stop(shared, cams)
    assert [e[2] for e in events if e[0] == 'mask'] == ['a', 'b', 'c']


def two_camera_worker(events, shared_publisher):
    core = FakeCore()
    return MultiCameraWorker(
        core, PairedMailbox(2, True, 4, 8, period_ns=33_000_000),
        [host(decode=lambda m: np.zeros((2, 2, 3), np.uint8))] * 2,
        [split_outputs(c, events, overlay=False) for c in range(2)],
        [det.Association(), det.Association()], pipeline=True,
        shared_publisher=shared_publisher)


def test_the_multi_camera_worker_sends_a_groups_masks_before_its_states():
    events = []
    w = two_camera_worker(events, shared_publisher=True)
    w.start()
    try:
        for stamp in (100, 200):
            w.handle_group(group(stamp))     # one group, as the thread would
    finally:
        w.stop()
    frames = [(e[0], e[1], e[2].stamp) for e in events]
    assert frames == [('mask', 0, 100), ('mask', 1, 100), ('state', 0, 100), ('state', 1, 100),
                      ('mask', 0, 200), ('mask', 1, 200), ('state', 0, 200), ('state', 1, 200)]
    assert all(lane.output.shared is w.publisher for lane in w.lanes)


def test_without_the_shared_publisher_each_camera_has_its_own_thread():
    events = []
    w = two_camera_worker(events, shared_publisher=False)
    assert w.publisher is None and all(lane.output.shared is None for lane in w.lanes)
    w.start()
    try:
        w.handle_group(group(100))
    finally:
        w.stop()
    for c in (0, 1):                      # each camera's mask, then its state
        assert [e[0] for e in events if e[1] == c] == ['mask', 'state']


def test_masks_inline_go_out_from_the_putting_thread_and_the_rest_from_the_publisher():
    """``masks_inline``: put() publishes the masks in the caller's thread (the worker), the
    publisher thread the state; a failed mask leaves its state unsent; a shared publisher
    does not send such masks again."""
    events, threads = [], {}

    def record(what):
        def f(p):
            threads.setdefault(what, set()).add(threading.get_ident())
            if p.header == 'bad' and what == 'mask':
                raise RuntimeError('mask failed')
            events.append((what, p.header))
        return f
    errors = []
    out = SimpleNamespace(publish=None, publish_masks=record('mask'),
                          publish_state=record('state'), publish_overlay=None,
                          has_overlay=False, wants_overlay=lambda: True, alive=lambda: True)
    for shared in (None, SharedPublisher()):
        events.clear()
        threads.clear()
        stage = OutputStage(out, threaded=True, masks_inline=True, shared=shared,
                            report_error=errors.append)
        if shared is not None:
            shared.start()
        stage.start()
        for frame in ('a', 'bad', 'b'):
            stage.put(item(frame))
            assert ('mask', frame) in events or frame == 'bad'   # sent before put returns
            if shared is not None:
                shared.commit()
        if shared is not None:
            shared.stop()
        stage.stop()
        assert [e for e in events if e[0] == 'mask'] == [('mask', 'a'), ('mask', 'b')]
        assert [e for e in events if e[0] == 'state'] == [('state', 'a'), ('state', 'b')]
        assert threads['mask'] == {threading.get_ident()}
        assert threading.get_ident() not in threads['state']
        assert stage.published == 2
    assert len(errors) == 2 and all('mask failed' in e for e in errors)
