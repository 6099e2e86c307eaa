"""Releasing the node's I/O (deactivate / cleanup / shutdown) waits for subscribers to
acknowledge what was already published before destroying the publishers.

Why: destroying a reliable Fast DDS writer right after ``publish`` can discard samples not yet
taken by the readers (publishing one message and destroying the publisher, many times on a
loaded machine, loses some without the wait and none with ``wait_for_all_acked``). In the
node that loses the state of the frame in progress at deactivate (its frame index used, its
TrackingState never seen, which test_ros_lifecycle_orders would catch). These tests call the
node's methods on a stand-in ``self`` (no DDS, no model) to check the order and the time bound.
"""

import time
from types import SimpleNamespace

from sam2_ros.ros import publishers as pubs_mod
from sam2_ros.ros.node import TrackerNode
from sam2_ros.ros.process_tuning import ProcessTuning
from sam2_ros.ros.publishers import Publishers
from sam2_ros.ros.totals import Totals


class FakeClock:
    """publishers.time with a monotonic clock that only FakePub's waits advance: the bounds
    below are exact, whatever else the machine runs."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def perf_counter(self):
        return self.now


class FakePub:
    def __init__(self, name, events, acked=True, delay=0.0, clock=None):
        self.name, self.events, self.acked, self.delay = name, events, acked, delay
        self.clock = clock
        self.timeouts = []

    def wait_for_all_acked(self, timeout):
        if self.acked is None:
            raise RuntimeError('cannot use Destroyable because destruction was requested')
        self.timeouts.append(timeout.nanoseconds / 1e9)
        self.events.append(('flush', self.name))
        waited = min(self.delay, self.timeouts[-1])
        if self.clock is not None:
            self.clock.now += waited
        else:
            time.sleep(waited)
        return self.acked


class FakeLogger:
    def __init__(self):
        self.warnings = []

    def warning(self, text):
        self.warnings.append(text)


def fake_node(pubs, events, context_ok=True):
    """A stand-in TrackerNode with its Publishers (the real ones) over fake publishers."""
    logger = FakeLogger()
    self = SimpleNamespace(
        context=SimpleNamespace(ok=lambda: context_ok),
        input_subs=['image_sub'], worker=SimpleNamespace(stop=lambda: events.append(('stop', '')),
                                                         drop_pending=lambda: [],
                                                         detection_counts={}),
        mailbox=None, rig=None, totals=Totals(), logger=logger, get_logger=lambda: logger,
        tuning=ProcessTuning(),
        destroy_subscription=lambda s: events.append(('destroy_sub', s)),
        destroy_lifecycle_publisher=lambda p: events.append(('destroy_pub', p.name)))
    self.outputs = Publishers(self, pubs, self.totals, lambda i: '', serial=False)
    self.outputs.unacked = dict.fromkeys(pubs, time.monotonic())
    self.stop_io = lambda: TrackerNode.stop_io(self)
    return self


def test_release_flushes_after_the_worker_and_before_destroying():
    events = []
    pubs = {'mask': FakePub('mask', events), 'overlay': None,
            'state': FakePub('state', events)}
    self = fake_node(pubs, events)
    outputs = self.outputs
    TrackerNode.release_io(self)
    kinds = [k for k, _ in events]
    # no new frames, then the frame in progress finishes (and publishes), then flush, destroy
    # (the diagnostics publisher and timer live as long as the node: not released here)
    assert kinds == ['destroy_sub', 'stop', 'flush', 'flush', 'destroy_pub', 'destroy_pub'], \
        events
    assert [n for k, n in events if k == 'flush'] == ['mask', 'state']
    assert outputs.pubs == {} and self.outputs is None and self.input_subs == []
    assert self.worker is None
    assert self.logger.warnings == []


def test_flush_is_bounded_in_all_and_warns_when_not_acknowledged(monkeypatch):
    events = []
    clock = FakeClock()
    monkeypatch.setattr(pubs_mod, 'time', clock)
    slow = FakePub('mask', events, acked=False, delay=10.0, clock=clock)  # never acknowledges
    pubs = {'mask': slow, 'state': FakePub('state', events, acked=False, clock=clock)}
    self = fake_node(pubs, events)
    self.outputs.unacked = dict.fromkeys(pubs, clock.now)
    t0 = clock.now
    self.outputs.flush()
    assert clock.now - t0 == pubs_mod.FLUSH_TIMEOUT_S
    # one shared deadline: the second publisher gets only what the first one left
    assert slow.timeouts == [pubs_mod.FLUSH_TIMEOUT_S] and pubs['state'].timeouts == [0.0]
    assert len(self.logger.warnings) == 2
    assert 'mask' in self.logger.warnings[0] and 'may miss them' in self.logger.warnings[0]


def test_after_ctrl_c_publishers_are_destroyed_without_waiting():
    """SIGINT shuts the context down before main()'s finally releases the I/O; the handles then
    refuse wait_for_all_acked (rclpy raises InvalidHandle). Exit must stay clean (status 0 in
    test_ros_camera_restart / test_ros_node)."""
    events = []
    pubs = {'mask': FakePub('mask', events, acked=None), 'state': FakePub('state', events)}
    self = fake_node(pubs, events, context_ok=False)
    TrackerNode.release_io(self)
    assert [k for k, _ in events] == ['destroy_sub', 'stop', 'destroy_pub', 'destroy_pub'], \
        events
    assert self.logger.warnings == []


def test_a_publisher_that_refuses_the_wait_is_still_destroyed():
    events = []
    pubs = {'mask': FakePub('mask', events, acked=None), 'state': FakePub('state', events)}
    self = fake_node(pubs, events)  # context still ok, but the handle already refuses
    TrackerNode.release_io(self)
    assert [n for k, n in events if k == 'destroy_pub'] == ['mask', 'state']
    assert [n for k, n in events if k == 'flush'] == ['state']
    assert len(self.logger.warnings) == 1 and 'cannot wait' in self.logger.warnings[0]


def test_only_result_publishers_that_sent_since_the_last_wait_are_waited_for(monkeypatch):
    """Issue 14 item 12: no wait for the overlay (eyes only, the largest), for publishers
    that sent nothing since the last wait, nor for those whose last message is older than a
    heartbeat period (acknowledged by then); a second release waits for nothing."""
    events = []
    clock = FakeClock()
    monkeypatch.setattr(pubs_mod, 'time', clock)
    pubs = {'mask': FakePub('mask', events, acked=False, delay=10.0, clock=clock),
            'overlay': FakePub('overlay', events, acked=False, delay=10.0, clock=clock),
            'state': FakePub('state', events, clock=clock),
            'objects': FakePub('objects', events, clock=clock)}
    self = fake_node(pubs, events)
    now = clock.now
    # state and overlay sent just now, objects 5 s ago (acknowledged by now), mask not at all
    self.outputs.unacked = {'state': now, 'overlay': now, 'objects': now - 5.0}
    self.outputs.flush()
    assert clock.now == now             # the state acknowledged at once: no time waited
    assert [n for k, n in events if k == 'flush'] == ['state'] and self.outputs.unacked == {}
    self.outputs.flush()
    assert [n for k, n in events if k == 'flush'] == ['state']
    assert self.logger.warnings == []


def test_publishing_marks_the_result_publishers_unacknowledged(tmp_path):
    """A published frame makes mask, state (and objects) waited for at the next release;
    the overlay never is. The mask is built and sent only while it has a reader; with a
    timing log each frame's times are written, in publishing order, and the log is closed at
    release."""
    import numpy as np
    from ros_helpers import require_messages

    from sam2_ros.engine.types import FrameResult
    from sam2_ros.ros import timing_log
    from sam2_ros.ros.mailbox import FrameTimes, Published

    require_messages()
    sent, readers = [], {'mask': 1, 'state': 1, 'overlay': 1}
    pub = lambda name: SimpleNamespace(  # noqa: E731
        publish=lambda m: sent.append(name), get_subscription_count=lambda: readers[name],
        wait_for_all_acked=lambda timeout: True)
    node = SimpleNamespace(context=SimpleNamespace(ok=lambda: True), get_logger=FakeLogger,
                           destroy_lifecycle_publisher=lambda p: None)
    path = tmp_path / 't.jsonl'
    outputs = Publishers(node, {'mask': pub('mask'), 'state': pub('state'), 'objects': None,
                                'overlay': pub('overlay')}, Totals(), lambda i: '',
                         serial=False, timing_log=timing_log.TimingLog(str(path)))
    from std_msgs.msg import Header
    p = Published(FrameResult(0, 4, 4), np.zeros((4, 4, 3), np.uint8), Header(), 0.0, 0.0, [])
    outputs.publish(p)                   # a re-publish (no times): no line
    assert sent == ['mask', 'state']
    assert set(outputs.unacked) == {'mask', 'mask_compressed', 'state', 'objects'}
    readers['mask'] = 0                  # nobody reads the mask: not built, not sent
    header = Header()
    header.stamp.sec = 3
    times = FrameTimes(recv=1.0, decode0=1.1, decode1=1.2, engine0=1.3, engine1=1.4)
    outputs.publish(Published(FrameResult(1, 4, 4), np.zeros((4, 4, 3), np.uint8), header,
                              0.0, 0.0, [], times=times))
    readers['mask'] = 1
    header2 = Header()
    header2.stamp.sec = 4
    outputs.publish(Published(FrameResult(2, 4, 4), np.zeros((4, 4, 3), np.uint8), header2,
                              0.0, 0.0, [], times=FrameTimes(engine1=2.0)))
    outputs.release()
    assert outputs.timing_log is None
    assert sent == ['mask', 'state', 'state', 'mask', 'state']
    got = timing_log.read(str(path))
    a, b = got[3_000_000_000], got[4_000_000_000]
    assert a['mask0'] == a['mask1'] == 0.0 and 1.4 < a['out0'] < a['state1']
    assert 2.0 < b['out0'] <= b['mask0'] <= b['mask1'] <= b['state1'] and len(got) == 2
