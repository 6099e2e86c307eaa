"""What a receiving process counts (sam2_ros/ros/receiver.py) reaches the node's diagnostics
(sam2_ros/ros/diagnostics.py), per camera, without DDS or a child process: a restart is
counted with its reason and time (a process that exited, a reading thread that failed), the
receiving process's waits for a slot add up across restarts, and the status is WARN after a
restart (at least once, then while it is recent) and OK again later."""

import struct
from types import SimpleNamespace

import pytest

from sam2_ros.ros import diagnostics
from sam2_ros.ros import frame_ring as fr
from sam2_ros.ros import receiver
from sam2_ros.ros.receiver import ImageReceiver


class FakeProc:
    """A receiving process that has exited with ``code`` (or is running: ``code`` None)."""

    def __init__(self, code=None, pid=4242):
        self.code, self.pid, self.killed = code, pid, False

    def poll(self):
        return self.code

    def wait(self, timeout=None):
        return self.code

    def kill(self):
        self.killed = True


def make_receiver(on_image=lambda msg, t: None, camera=0):
    logs = []
    rx = ImageReceiver(f'/cam{camera}/image_raw', on_image,
                       lambda level, text: logs.append((level, text)), name='rx', slots=4,
                       max_bytes=1 << 20, reliability='reliable', depth=0, tune_malloc=False,
                       camera=camera)
    return rx, logs


def run_until_restarted(rx, monkeypatch):
    """The reading thread's loop, in this thread, until its first restart: the process is not
    respawned (the pause before the respawn stops the loop instead)."""
    monkeypatch.setattr(receiver.time, 'sleep', lambda s: rx.stopping.set())
    rx.read_frames()


def test_a_process_that_exited_is_a_restart_with_its_code_and_time(monkeypatch):
    rx, logs = make_receiver()
    mine, theirs = fr.socket_pair()
    rx.attach_reader(mine)
    rx.proc = FakeProc(code=-9)
    theirs.close()                                   # the process died: end of its stream
    run_until_restarted(rx, monkeypatch)
    st = rx.stats(take=True)
    assert (st.restarts, st.read_failures, st.new_restarts) == (1, 0, 1)
    assert st.last_restart == 'exited with code -9' and st.last_restart_t is not None
    assert st.pid is None                            # not running: restarting
    assert rx.stats(take=True).new_restarts == 0     # taken once
    assert any('exited (code -9)' in text for _, text in logs)


def test_a_failed_read_is_counted_and_named_as_the_restarts_reason(monkeypatch):
    def on_image(msg, t):
        raise RuntimeError('injected')
    rx, logs = make_receiver(on_image)
    mine, theirs = fr.socket_pair()
    rx.attach_reader(mine)
    rx.proc = FakeProc(code=0)
    # an unreadable message with a stamp: handed on as a refused frame, and the callback fails
    stamped = b'\x00\x01\x00\x00' + struct.pack('<iI', 12, 34) + b'not an image'
    assert fr.RingWriter(theirs, 2, 1 << 16).write(stamped, 1.0)
    theirs.close()                 # the stream ends after that frame (if the failure is lost)
    run_until_restarted(rx, monkeypatch)
    st = rx.stats()
    assert (st.restarts, st.read_failures, st.refused) == (1, 1, 1)
    assert st.last_restart == "reading failed: RuntimeError('injected')" and rx.proc.killed


def test_the_waits_for_a_slot_add_up_across_restarts():
    rx, _ = make_receiver()
    rx.attach_reader(fr.socket_pair()[0])
    rx.reader.writer_waits = 3                       # the first process's count
    rx.attach_reader(fr.socket_pair()[0])           # a restart: the new one counts from 0
    rx.reader.writer_waits = 2
    rx.reader.ring_bytes = 8192
    st = rx.stats()
    assert (st.slot_waits, st.ring_bytes, st.slots_held) == (5, 8192, 0)


def snapshot_fakes(now):
    """The node's parts diagnostics.snapshot reads: a streaming, healthy node."""
    counts = dict.fromkeys(('received', 'processed', 'dropped', 'frame_errors',
                            'prompt_errors'), 0)
    worker = SimpleNamespace(
        errors=SimpleNamespace(take_count=lambda: SimpleNamespace(count=0, last='')),
        counters=SimpleNamespace(consecutive_failures=0, objects=1), alive=True,
        latency=SimpleNamespace(summary=lambda now, window: {}), waiting_prompts=0,
        output=SimpleNamespace(pending=lambda: 0, overlays=0, overlays_dropped=0))
    mailbox = SimpleNamespace(last_recv_t=now, pending_frames=lambda: 0,
                              pending_prompts=lambda: 0)
    tracker = SimpleNamespace(stats={})
    cfg = SimpleNamespace(model_size='tiny', image_size=512, device='cpu', precision='fp32',
                          checkpoint='')
    opts = SimpleNamespace(stale_timeout_s=2.0, pipeline=False, image_receiver_process=True,
                           input_type='raw')
    totals = SimpleNamespace(since_start=lambda w, m: counts)
    gc_pauses = SimpleNamespace(full_collections=0, max_pause_ms=0.0)
    return worker, mailbox, tracker, cfg, opts, totals, gc_pauses


def snapshot_args(now):
    worker, mailbox, tracker, cfg, opts, totals, gc_pauses = snapshot_fakes(now)
    return (now, worker, mailbox, tracker, cfg, opts, totals, 0, gc_pauses)


def report_for(now, inputs, camera=0):
    return diagnostics.report(diagnostics.snapshot(*snapshot_args(now), vision_on=False,
                                                   inputs=inputs, camera=camera))


def test_each_cameras_receiver_counts_are_in_its_diagnostics_and_a_restart_warns():
    rx0, _ = make_receiver(camera=0)
    rx1, _ = make_receiver(camera=1)
    for rx in (rx0, rx1):
        rx.attach_reader(fr.socket_pair()[0])
        rx.proc = FakeProc()
        rx.ready.set()
    rx1.frames, rx1.rejected, rx1.reader.ring_bytes = 120, 2, 4 * 8192
    rx1.restarts, rx1.last_restart, rx1.last_restart_t = 1, 'exited with code -9', 100.0
    inputs = [object(), rx0, object(), rx1]            # the node's subscriptions, in order
    ok = report_for(200.0, inputs, camera=0)
    assert ok.level == 'OK' and ok.values['receiver_process'] == 'on (pid 4242)'
    assert ok.values['receiver_restarts'] == 0 and 'receiver_last_restart' not in ok.values
    # camera 1's restart, 100 s ago: WARN once (not yet reported), whatever the period
    warn = report_for(200.0, inputs, camera=1)
    assert warn.level == 'WARN'
    assert warn.message == ('image receiving process restarted 100.0 s ago (exited with '
                            'code -9; 1 restarts since activation)')
    v = warn.values
    assert (v['receiver_frames'], v['receiver_refused_frames'], v['receiver_restarts'],
            v['receiver_read_failures'], v['receiver_slots_held'], v['receiver_slot_waits'],
            v['receiver_ring_bytes']) == (120, 2, 1, 0, 0, 0, 4 * 8192)
    assert v['receiver_last_restart'] == 'exited with code -9, 100.0 s ago'
    later = report_for(201.0, inputs, camera=1)      # reported, and not recent: OK
    assert later.level == 'OK' and later.values['receiver_restarts'] == 1
    # a restart within the window stays WARN after it was reported
    rx1.restarts, rx1.last_restart_t = 2, 195.0
    assert report_for(200.0, inputs, camera=1).level == 'WARN'
    assert report_for(195.0 + diagnostics.DIAG_WINDOW_S, inputs, camera=1).level == 'WARN'
    assert report_for(195.5 + diagnostics.DIAG_WINDOW_S, inputs, camera=1).level == 'OK'
    rx1.proc = FakeProc(code=1)                      # exited, not yet respawned
    assert report_for(300.0, inputs, camera=1).values['receiver_process'] == 'restarting'


@pytest.mark.parametrize('inputs, on, input_type, expected', [
    (None, True, 'raw', {}),                          # the node did not pass its inputs
    ([], False, 'raw', {'receiver_process': 'off'}),
    ([], True, 'compressed', {'receiver_process': 'off: compressed input (raw images only)'}),
    ([object()], True, 'raw',
     {'receiver_process': "off: did not start (receiving in the node's process)"}),
])
def test_without_a_receiving_process_diagnostics_say_why(inputs, on, input_type, expected):
    opts = SimpleNamespace(image_receiver_process=on, input_type=input_type)
    assert diagnostics.receiver_values(inputs, opts, 0.0) == (expected, '')
