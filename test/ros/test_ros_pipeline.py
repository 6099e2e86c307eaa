"""The node's output stage (sam2_ros/ros/pipeline.py) and the pipelined worker, with fakes (no
DDS, no model): masks and states in frame order and never dropped, the overlay newest-only and
never delaying a mask, errors reported per frame, stop() draining every thread; and the worker
publishing the same results pipelined as serially. The same with the real node is in
test_ros_pipeline_node.py."""

import threading
import time
from types import SimpleNamespace

import numpy as np

from sam2_ros.engine.types import FrameResult, Prompt
from sam2_ros.ros.mailbox import FrameItem, Mailbox, PromptItem, Published
from sam2_ros.ros.pipeline import OutputStage
from sam2_ros.ros.worker import TrackingWorker

from test_ros_worker import FakeTracker, frame, host, outputs, prompt


def item(i):
    return Published(FrameResult(i, 2, 2), np.zeros((2, 2, 3), np.uint8), i, 0.0, 0.0, [])


def stage_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith('sam2_tracker_')]


def test_threaded_stage_publishes_every_frame_in_order_and_drains_on_stop():
    sent, overlays, done = [], [], []
    s = OutputStage(outputs(lambda p: (time.sleep(0.002), sent.append(p.header)),
                            publish_overlay=lambda p: overlays.append(p.header)),
                    done=lambda p: done.append(p.header), threaded=True, depth=2)
    s.start()
    assert len(stage_threads()) == 2
    for i in range(50):
        s.put(item(i))
        assert s.pending() <= 2          # bounded: put blocks while two wait
    s.stop()
    assert sent == done == list(range(50)) and s.published == 50
    assert overlays == sorted(overlays) and overlays[-1] == 49   # the last one is never lost
    assert s.overlays + s.overlays_dropped == 50
    assert stage_threads() == [] and s.pending() == 0
    s.put(item(50))                      # after stop nothing is published
    assert sent[-1] == 49


def test_a_slow_overlay_never_delays_masks_and_is_dropped_newest_only():
    """The overlay thread blocks until released; every mask must go out meanwhile (were one
    held back by the overlay, the wait below would end at its limit with masks missing)."""
    sent, overlays = [], []
    release = threading.Event()

    def slow_overlay(p):
        release.wait(120)
        overlays.append(p.header)

    s = OutputStage(outputs(lambda p: sent.append(p.header), publish_overlay=slow_overlay),
                    threaded=True)
    s.start()
    for i in range(20):
        s.put(item(i))
    deadline = time.monotonic() + 60
    while len(sent) < 20 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sent == list(range(20)) and not release.is_set()   # no mask waited for it
    release.set()
    s.stop()
    # one early frame's overlay was being rendered, the others were replaced by newer ones
    # while it blocked; the last frame's is sent
    assert overlays == sorted(overlays) and overlays[-1] == 19 and len(overlays) <= 3
    assert s.overlays_dropped == 20 - len(overlays)


def test_overlay_only_while_wanted_and_errors_are_reported_not_fatal():
    sent, errors, overlays = [], [], []
    wanted = {'on': False, 'asked': 0}

    def wants() -> bool:             # asked once per frame, after its mask and state
        wanted['asked'] += 1
        return wanted['on']

    def publish(p):
        if p.header == 3:
            raise RuntimeError('publisher destroyed')
        sent.append(p.header)

    for threaded in (False, True):
        sent.clear(), errors.clear(), overlays.clear()
        wanted['asked'] = 0
        s = OutputStage(outputs(publish, publish_overlay=lambda p: overlays.append(p.header),
                                wants_overlay=wants),
                        report_error=errors.append, threaded=threaded)
        s.start()
        for i in range(6):
            wanted['on'] = i >= 4
            s.put(item(i))
            deadline = time.monotonic() + 60
            # the publisher asked about this frame's overlay before the next frame's change
            while wanted['asked'] < i + 1 and time.monotonic() < deadline:
                time.sleep(0.001)
        s.stop()
        assert sent == [0, 1, 2, 4, 5] and s.published == 5, threaded
        assert len(errors) == 1 and 'publisher destroyed' in errors[0]
        assert overlays and set(overlays) <= {4, 5} and overlays[-1] == 5, (threaded, overlays)


def run_worker(pipeline, slow_publish=0.0):
    """The same frames and prompts through a worker; returns what it published."""
    tr = FakeTracker()
    published, overlays = [], []

    def publish(p):
        time.sleep(slow_publish)
        published.append(p)

    def convert(it):
        action, obj = it.msg
        from sam2_ros.engine.types import Prompt
        return action, None if action == 2 else Prompt(obj, points=np.zeros((1, 2)))

    w = TrackingWorker(tr, Mailbox(True, 4, 8),
                       host(lambda m: np.full((2, 2, 3), m, np.uint8), convert),
                       outputs(publish, publish_overlay=overlays.append), pipeline=pipeline)
    w.start()
    mb = w.mailbox
    mb.put_prompt(prompt(0, 1, 100))                      # object 1 on frame 100
    for k in range(8):
        if k == 4:
            mb.put_prompt(prompt(0, 2, 0))                # object 2 on the next frame
            mb.put_prompt(PromptItem((1, 7), 'prompt', 0))  # remove an unknown id: an error
        mb.put_frame(frame(k + 1, 100 + k))
    deadline = time.monotonic() + 10
    while w.counters.processed < 8 and time.monotonic() < deadline:
        time.sleep(0.005)
    w.stop()
    assert not w.alive and stage_threads() == []
    return [(p.header.stamp, p.result.frame_index, p.processed, p.dropped, p.errors)
            for p in published], tr.calls, overlays


def test_failures_after_the_context_is_down_are_not_reported():
    """Ctrl-C shuts the ROS context down while frames wait in the stage: their publishing
    fails, as expected then, and is not reported as an error (no traceback at exit)."""
    up, errors = {'ok': True}, []

    def publish(p):
        if not up['ok']:
            raise RuntimeError("publisher's context is invalid")

    for threaded in (False, True):
        errors.clear()
        up['ok'] = True
        s = OutputStage(outputs(publish, alive=lambda: up['ok']), report_error=errors.append,
                        threaded=threaded)
        s.start()
        s.put(item(0))
        while s.published < 1:           # frame 0 went out while the context was up
            time.sleep(0.001)
        up['ok'] = False
        s.put(item(1))
        s.stop()
        assert errors == [] and s.published == 1, (threaded, errors, s.published)


def test_pipelined_worker_publishes_what_the_serial_one_does():
    serial, calls_s, ov_s = run_worker(False)
    piped, calls_p, ov_p = run_worker(True, slow_publish=0.01)
    assert piped == serial and calls_p == calls_s
    assert [s[0] for s in serial] == list(range(100, 108))
    assert [s[2] for s in serial] == list(range(1, 9))    # counters as handed over
    errs = [s[4] for s in serial if s[4]]
    assert len(errs) == 1 and 'cannot remove object 7' in errs[0][0]   # on the next state
    assert len(ov_s) == 8 and 1 <= len(ov_p) <= 8 and ov_p[-1].header == ov_s[-1].header


def test_worker_stop_publishes_the_frame_in_progress_then_nothing():
    published = []
    gate = threading.Event()

    def publish(p):
        gate.wait(5)
        published.append(p.header.stamp)

    tr = FakeTracker()
    w = TrackingWorker(tr, Mailbox(False, 1, 4),
                       host(lambda m: np.zeros((2, 2, 3), np.uint8), lambda it: (0, None)),
                       outputs(publish), pipeline=True)
    w.start()
    w.mailbox.put_frame(frame(1, 1))
    deadline = time.monotonic() + 5
    while w.counters.processed < 1 and time.monotonic() < deadline:
        time.sleep(0.002)
    threading.Timer(0.2, gate.set).start()
    w.stop()                                  # waits for the publisher to finish frame 1
    assert published == [1] and stage_threads() == []
    w.mailbox.put_frame(FrameItem(2, 2, SimpleNamespace(stamp=2), time.monotonic()))
    time.sleep(0.1)
    assert published == [1]


def test_the_tracker_is_built_on_its_own_cuda_device():
    """configure runs in the executor thread (current device cuda:0): a tracker for cuda:1 is
    built inside torch.cuda.device(1), so its CUDA graphs are captured on that device."""
    import contextlib

    import torch

    from sam2_ros.ros.node import device_context

    assert isinstance(device_context('cpu'), contextlib.nullcontext)
    assert isinstance(device_context('cuda'), contextlib.nullcontext)
    ctx = device_context('cuda:1')
    assert isinstance(ctx, torch.cuda.device) and ctx.idx == 1


def test_frame_times_follow_each_frame_and_are_logged(tmp_path):
    """Each tracked frame carries its stage times (receipt <= decode <= engine, in order) to the
    publisher; a re-publish after a prompt carries none. The timing log writes one line per
    frame, read back by stamp (what tools/bench/node_latency.py joins with its own times)."""
    from sam2_ros.ros import timing_log

    published = []
    w = TrackingWorker(FakeTracker(), Mailbox(True, 4, 8),
                       host(decode=lambda m: np.full((2, 2, 3), m, np.uint8),
                            convert=lambda it: (0, Prompt(1, points=np.zeros((1, 2))))),
                       outputs(published.append))
    items = [frame(k + 1, 100 + k) for k in range(3)]
    for it in items:
        w.handle_frame(it)
    w.handle_prompt(prompt(0, 1, 102))                 # on the last frame: re-published at once
    assert [p.header.stamp for p in published] == [100, 101, 102, 102]
    assert published[-1].times is None
    for it, p in zip(items, published):
        t = p.times
        assert t.recv == it.recv_t <= t.decode0 <= t.decode1 <= t.engine0 <= t.engine1, t
        assert abs(p.decode_ms - (t.decode1 - t.decode0) * 1e3) < 1e-9
    log = timing_log.TimingLog(str(tmp_path / 'times.jsonl'))
    for p in published[:3]:
        p.times.mask0, p.times.mask1 = p.times.engine1 + 1, p.times.engine1 + 2
        log.write(p.header.stamp, p.times)
    log.write(100, published[1].times)               # a second line for a stamp: ignored
    got = timing_log.read(str(tmp_path / 'times.jsonl'))   # flushed before close
    log.close()
    assert sorted(got) == [100, 101, 102]
    assert got[100]['engine1'] == published[0].times.engine1
    assert got[101]['mask1'] == published[1].times.engine1 + 2
    assert timing_log.read(str(tmp_path / 'none.jsonl')) == {}
