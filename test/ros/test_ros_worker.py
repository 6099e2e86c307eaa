"""The real-time policy (sam2_ros/ros/worker.py) with a fake tracker, no DDS, no model:
mailbox dropping vs. blocking FIFO, prompt queue overflow, and which frame a prompt lands on."""

import threading
import time
from types import SimpleNamespace

import numpy as np

from sam2_ros.engine.errors import FrameError, PromptError, UnknownObjectError
from sam2_ros.ros.worker import FrameItem, Mailbox, PromptItem, TrackingWorker
from sam2_ros.engine.types import FrameResult, Prompt

ADD, REMOVE, RESET = 0, 1, 2


class FakeTracker:
    def __init__(self):
        self.calls = []
        self.frame = -1
        self.ids = set()
        self.bad_track = 0

    def track(self, rgb):
        if self.bad_track:
            self.bad_track -= 1
            raise PromptError('queued prompt outside the frame')
        self.frame += 1
        self.calls.append(('track', int(rgb[0, 0, 0])))
        return FrameResult(self.frame, 2, 2)

    def add_prompt(self, p):
        self.calls.append(('add', p.obj_id))
        self.ids.add(p.obj_id)
        return FrameResult(self.frame, 2, 2)

    def queue_prompt(self, p):
        self.calls.append(('queue', p.obj_id))
        self.ids.add(p.obj_id)

    def remove_object(self, i):
        if i not in self.ids:
            raise UnknownObjectError(f'cannot remove object {i}')
        self.ids.discard(i)
        self.calls.append(('remove', i))

    def reset(self):
        self.ids.clear()
        self.calls.append(('reset',))


def host(decode=None, convert=None, log=lambda lvl, t: None, convert_detections=None,
         detection_rules=None):
    """The worker's host (sam2_ros.ros.worker_types.WorkerHost) from plain functions."""
    return SimpleNamespace(decode=decode, convert=convert, log=log,
                           convert_detections=convert_detections,
                           detection_rules=detection_rules, thread_init=lambda: None)


def outputs(publish, publish_overlay=None, wants_overlay=lambda: True, alive=lambda: True):
    """The worker's outputs (sam2_ros.ros.pipeline.Outputs) from plain functions."""
    return SimpleNamespace(publish=publish, publish_overlay=publish_overlay,
                           has_overlay=publish_overlay is not None,
                           wants_overlay=wants_overlay, alive=alive)


def make_worker(every_frame=True):
    tr = FakeTracker()
    published, logs = [], []

    def decode(msg):
        if msg == 'bad':
            raise FrameError('unsupported image encoding')
        return np.full((2, 2, 3), msg, np.uint8)

    def convert(item):
        action, obj = item.msg
        return action, None if action == RESET else Prompt(obj, points=np.zeros((1, 2)))

    w = TrackingWorker(tr, Mailbox(every_frame, 4, 3),
                       host(decode, convert, log=lambda lvl, t: logs.append((lvl, t))),
                       outputs(published.append))
    return w, tr, published, logs


def frame(value, stamp):
    return FrameItem(value, stamp, SimpleNamespace(stamp=stamp), time.monotonic())


def prompt(action, obj, stamp):
    return PromptItem((action, obj), 'prompt', stamp)


def test_prompt_lands_on_the_frame_its_stamp_names():
    w, tr, pub, logs = make_worker()
    w.handle_prompt(prompt(ADD, 1, 0))        # zero stamp: next frame
    w.handle_prompt(prompt(ADD, 2, 300))      # future stamp: held until a frame >= 300
    w.handle_frame(frame(10, 100))
    assert tr.calls == [('queue', 1), ('track', 10)]
    w.handle_frame(frame(20, 300))
    assert tr.calls[2:] == [('queue', 2), ('track', 20)]
    w.handle_prompt(prompt(ADD, 1, 300))      # the last processed frame: a correction there, now
    assert tr.calls[4:] == [('add', 1)]
    assert len(pub) == 3 and pub[-1].header.stamp == 300 and pub[-1].recv_t is None
    w.handle_prompt(prompt(ADD, 1, 100))      # older: latest frame, with a warning
    assert tr.calls[5:] == [('add', 1)]
    assert any(lvl == 'warn' and 'older' in t for lvl, t in logs)
    w.handle_prompt(prompt(REMOVE, 2, 350))   # removal is scheduled like any prompt
    w.handle_frame(frame(30, 400))
    assert tr.calls[6:] == [('remove', 2), ('track', 30)]
    w.handle_prompt(prompt(RESET, 0, 400))
    assert tr.calls[8:] == [('reset',)]


def test_errors_reach_the_next_published_state_and_tracking_goes_on():
    w, tr, pub, logs = make_worker()
    w.handle_frame(frame('bad', 1))
    w.handle_prompt(prompt(REMOVE, 9, 1))     # unknown id, applied now (stamp <= last)
    w.handle_frame(frame(5, 2))
    assert tr.calls == [('track', 5)]
    errs = pub[-1].errors
    assert any('unsupported image encoding' in e for e in errs)
    assert any('UnknownObjectError' in e for e in errs)
    assert w.counters.frame_errors == 1 and w.counters.prompt_errors == 1
    w.handle_frame(frame(6, 3))
    assert pub[-1].errors == []            # errors are reported once
    assert sum(lvl == 'error' for lvl, _ in logs) == 2


def test_track_refusing_a_queued_prompt_is_retried_once():
    w, tr, pub, _ = make_worker()
    tr.bad_track = 1
    w.handle_frame(frame(7, 1))
    assert tr.calls == [('track', 7)] and 'outside the frame' in pub[-1].errors[0]
    tr.bad_track = 2
    w.handle_frame(frame(8, 2))
    assert w.counters.frame_errors == 1 and len(pub) == 1


def test_latest_mailbox_keeps_newest_and_counts_dropped():
    mb = Mailbox(False, 99, 3)
    for i in range(5):
        mb.put_frame(frame(i, i + 1))
    got, prompts = mb.take(0)
    assert got.msg == 4 and prompts == [] and mb.dropped == 4 and mb.received == 5
    assert mb.take(0)[0] is None


def test_fifo_blocks_when_full_and_never_drops():
    mb = Mailbox(True, 2, 3)
    mb.put_frame(frame(0, 1))
    mb.put_frame(frame(1, 2))
    done = threading.Event()
    t = threading.Thread(target=lambda: (mb.put_frame(frame(2, 3)), done.set()))
    t.start()
    assert not done.wait(0.3), 'put into a full FIFO must block'
    assert mb.take(0)[0].msg == 0
    assert done.wait(30)
    assert [mb.take(0)[0].msg for _ in range(2)] == [1, 2] and mb.dropped == 0
    t.join()


def test_prompt_queue_rejects_newest_when_full():
    mb = Mailbox(True, 2, 2)
    assert mb.put_prompt(prompt(ADD, 1, 0)) and mb.put_prompt(prompt(ADD, 2, 0))
    assert not mb.put_prompt(prompt(ADD, 3, 0))
    assert [p.msg[1] for p in mb.take(0)[1]] == [1, 2]


def test_too_many_future_prompts_rejects_newest():
    w, tr, pub, logs = make_worker()
    for i in range(4):
        w.handle_prompt(prompt(ADD, i + 1, 0))
    w.handle_frame(frame(1, 1))
    assert [c for c in tr.calls if c[0] == 'queue'] == [('queue', 1), ('queue', 2), ('queue', 3)]
    assert any('prompt_queue_size' in e for e in pub[-1].errors)


def test_thread_processes_and_stops():
    w, tr, pub, _ = make_worker()
    w.start()
    w.mailbox.put_prompt(prompt(ADD, 1, 0))
    w.mailbox.put_frame(frame(3, 1))
    end = time.monotonic() + 5
    while not pub and time.monotonic() < end:
        time.sleep(0.01)
    w.stop()
    assert not w.alive and tr.calls == [('queue', 1), ('track', 3)]
    s = w.latency.summary(time.monotonic(), 10.0)
    assert s['rate_hz'] > 0 and s['latency_p50_ms'] >= 0


def test_waiting_prompts_counts_prompts_held_for_a_future_frame():
    """The diagnostics value ``waiting_prompts`` = mailbox prompts + prompts held by stamp."""
    w, tr, pub, _ = make_worker()
    assert w.mailbox.put_prompt(prompt(ADD, 1, 300))
    assert (w.mailbox.pending_prompts(), w.waiting_prompts) == (1, 0)
    frame_item, prompts = w.mailbox.take(0.0)
    assert frame_item is None
    for p in prompts:
        w.handle_prompt(p)
    assert (w.mailbox.pending_prompts(), w.waiting_prompts) == (0, 1)
    w.handle_frame(frame(10, 100))            # older than the prompt: it keeps waiting
    assert w.waiting_prompts == 1 and tr.calls == [('track', 10)]
    w.handle_frame(frame(20, 300))            # its frame: applied, nothing waits
    assert w.waiting_prompts == 0 and tr.calls[1:] == [('queue', 1), ('track', 20)]


def test_one_hold_serves_prompts_and_detections():
    """Prompts and detection messages stamped for a future frame wait in one StampHold: each
    kind bounded by prompt_queue_size, both counted in waiting_prompts, reported on stop
    (prompts first); a reset applied now drops the held prompts, not the detections."""
    w, tr, pub, _ = make_worker()
    w.handle_frame(frame(1, 100))
    w.handle_prompt(prompt(ADD, 1, 300))
    for _ in range(4):                     # prompt_queue_size 3: the fourth is refused
        w.handle_prompt(PromptItem([], 'detections', 400))
    w.handle_prompt(prompt(ADD, 2, 350))
    assert w.waiting_prompts == 5 and w.hold.count(detections=True) == 3
    assert w.counters.prompt_errors == 1 and w.detection_counts['rejected'] == 1
    w.handle_prompt(prompt(RESET, 0, 100))    # the last processed frame: applied now
    assert w.waiting_prompts == 3 and tr.calls[-1] == ('reset',)
    w.handle_prompt(prompt(ADD, 3, 500))
    assert w.drop_pending() == ['prompt (stamp 500 ns)'] + ['detections (stamp 400 ns)'] * 3
    assert w.waiting_prompts == 0


def test_jobs_run_on_the_worker_thread_after_prompts_before_the_frame():
    """~/segment_image's requests (segment_service.SegmentJob) run on the worker's thread,
    the only one touching the tracker, between the prompts and the frame taken with them."""
    import threading
    from sam2_ros.ros.segment_service import SegmentJob
    w, tr, pub, _ = make_worker()
    seen = []
    job = SegmentJob(lambda: seen.append((threading.current_thread().name, list(tr.calls))),
                     seen.append)
    w.mailbox.put_prompt(prompt(ADD, 1, 0))     # held for the frame: applied before tracking
    w.mailbox.put_job(job)
    w.mailbox.put_frame(frame(3, 1))
    w.start()
    job.wait(30.0)
    w.stop()
    assert seen == [('sam2_tracker_worker', [])]
    assert tr.calls == [('queue', 1), ('track', 3)] and len(pub) == 1


def test_a_prompt_refused_by_a_full_queue_is_counted_and_reported():
    """The node's callbacks refuse a prompt the full queue cannot take through the worker:
    the diagnostics' prompt_errors count it, as every other refused prompt."""
    w, tr, pub, logs = make_worker()
    w.refuse('prompt (stamp 0 ns)', 'the prompt queue is full (3, prompt_queue_size)')
    w.handle_frame(frame(1, 100))
    assert w.counters.prompt_errors == 1
    assert pub[-1].errors == ['rejected prompt (stamp 0 ns): the prompt queue is full (3, '
                              'prompt_queue_size)']


def test_inactive_diagnostics_keep_the_objects_the_tracker_keeps():
    from types import SimpleNamespace

    from sam2_ros.ros import diagnostics
    kept = diagnostics.inactive_report(SimpleNamespace(object_ids=[1, 4]), {}, 'tiny@64')
    assert kept.level == 'WARN' and kept.values['objects'] == 2
    assert kept.values['lifecycle_state'] == 'inactive'
    none = diagnostics.inactive_report(None, {}, None)
    assert none.values == {'lifecycle_state': 'unconfigured', 'objects': 0}
