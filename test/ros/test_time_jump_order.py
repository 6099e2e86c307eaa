"""A replay restarting while the worker is behind (sam2_ros/ros/time_line.py, worker_time.py):
a /clock jump takes effect in arrival order with the frames (those received before it are
tracked on the old time line first), prompts received after it wait for it, a prompt applied
as old is kept until a frame received after it is processed, the jump is never refused, and a
jump or a restart while the node is inactive is seen by the next activation. Fake tracker, no
DDS, no threads: ``run_once`` is one round of the worker's thread."""

from __future__ import annotations

from types import SimpleNamespace

from ros_helpers import stamp
from test_ros_worker import ADD, frame, make_worker, outputs, prompt

from sam2_ros.ros import time_jump
from sam2_ros.ros.mailbox import Mailbox
from sam2_ros.ros.time_line import TimeLine
from sam2_ros.ros.worker import TrackingWorker

PROMPT_LEAD_NS = 30_000_000      # a replay's frame-0 prompt is recorded 30 ms before frame 0


def drain(w):
    while w.run_once(0):
        pass


def run_one_behind(w, tr):
    """Run 1 (a prompt for frame 0, frames 0..9) with the worker 4 frames behind at its end:
    frames 6..9 still queued. Returns the index of the first tracker call after frame 5."""
    mb = w.mailbox
    mb.put_prompt(prompt(ADD, 1, stamp(0)))
    for i in range(6):
        mb.put_frame(frame(i, stamp(i)))
        w.run_once(0)
    for i in range(6, 10):
        mb.put_frame(frame(i, stamp(i)))
    assert tr.calls[-1] == ('track', 5)
    return len(tr.calls)


def jump_logs(logs):
    return [t for _, t in logs if 'jumped back' in t]


def test_clock_jump_waits_for_the_frames_received_before_it():
    """use_sim_time: /clock jumps back while run 1's last frames are queued, then run 2's
    frame-0 prompt and frames come. Run 1's frames are tracked before the reset without run 2's
    prompt; one reset; the prompt starts the object on run 2's frame 0."""
    w, tr, pub, logs = make_worker(every_frame=True)           # FIFO 4, prompt queue 3
    n = run_one_behind(w, tr)
    w.time.line.note_jump(stamp(0) - PROMPT_LEAD_NS, stamp(9) - stamp(0) + PROMPT_LEAD_NS)
    w.mailbox.put_prompt(prompt(ADD, 1, stamp(0)))             # run 2's frame-0 prompt
    w.run_once(0)                                              # frame 6; the prompt waits
    assert tr.calls[n:] == [('track', 6)] and w.waiting_prompts == 1
    for i in range(3):                                         # run 2's frames, queued too
        w.mailbox.put_frame(frame(100 + i, stamp(i)))
        w.run_once(0)
    drain(w)
    assert tr.calls[n:] == [('track', 6), ('track', 7), ('track', 8), ('track', 9), ('reset',),
                            ('queue', 1), ('track', 100), ('track', 101), ('track', 102)]
    assert tr.ids == {1}
    assert len(jump_logs(logs)) == 1 and time_jump.CLOCK_JUMP_REASON in jump_logs(logs)[0]
    assert not [t for _, t in logs if 'older than the latest frame' in t]
    assert [p.header.stamp for p in pub[-7:]] == [stamp(i) for i in (6, 7, 8, 9, 0, 1, 2)]


def test_clock_jump_is_applied_when_the_old_frames_are_done():
    """No frame of run 2 yet: once run 1's queued frames are tracked the worker is idle and
    applies the jump; run 2's prompt is then held for its frame."""
    w, tr, pub, logs = make_worker(every_frame=True)
    n = run_one_behind(w, tr)
    w.time.line.note_jump(stamp(0) - PROMPT_LEAD_NS, stamp(9) - stamp(0) + PROMPT_LEAD_NS)
    w.mailbox.put_prompt(prompt(ADD, 1, stamp(0)))
    drain(w)
    w.run_once(0)                                              # idle: the jump applies
    assert tr.calls[n:] == [('track', 6), ('track', 7), ('track', 8), ('track', 9), ('reset',)]
    assert w.waiting_prompts == 1 and w.time.line.last_ns is None
    w.mailbox.put_frame(frame(100, stamp(0)))
    w.run_once(0)
    assert tr.calls[-2:] == [('queue', 1), ('track', 100)] and tr.calls.count(('reset',)) == 1


def test_a_prompt_taken_as_old_behind_queued_frames_is_held_for_the_new_run():
    """Image stamps only: run 2's frame-0 prompt comes while run 1's last frames are queued. It
    is applied as old (to frame 5) and kept past frames 6..9, which were received before it;
    run 2's frame 0 jumps back once and gets it."""
    w, tr, pub, logs = make_worker(every_frame=True)
    n = run_one_behind(w, tr)
    w.mailbox.put_prompt(prompt(ADD, 1, stamp(0)))
    drain(w)
    assert tr.calls[n:] == [('add', 1), ('track', 6), ('track', 7), ('track', 8), ('track', 9)]
    assert tr.ids == {1}                                        # run 1's object only
    for i in range(3):
        w.mailbox.put_frame(frame(100 + i, stamp(i)))
        w.run_once(0)
    assert tr.calls[n + 5:] == [('reset',), ('queue', 1), ('track', 100), ('track', 101),
                                ('track', 102)]
    assert tr.ids == {1} and len(jump_logs(logs)) == 1


def test_a_prompt_taken_as_old_is_old_once_a_later_frame_is_done():
    """A frame received after an old prompt continues the time line: the prompt was old, and a
    later jump back does not hold it again."""
    w, tr, pub, logs = make_worker()
    for i in range(3):
        w.handle_frame(frame(i, stamp(i)))
    w.handle_prompt(prompt(ADD, 1, stamp(0)))                     # old: applied to frame 2
    assert tr.calls[-1] == ('add', 1) and w.time.old_prompts == 1
    w.handle_frame(frame(3, stamp(3)))
    assert w.time.old_prompts == 0
    w.handle_frame(frame(4, stamp(0)))
    assert tr.calls[-2:] == [('reset',), ('track', 4)] and w.waiting_prompts == 0


def test_a_new_runs_frame_delivered_before_its_clock_jump_resets_once():
    """/clock and the images are separate topics: run 2's first frame may come before its
    /clock. The image stamps restart the time line; the jump, seen then, finds the frames near
    its new time already and resets nothing more: run 2 keeps its object."""
    w, tr, pub, logs = make_worker()
    w.handle_prompt(prompt(ADD, 1, stamp(0)))
    for i in range(20):
        w.handle_frame(frame(1, stamp(i)))
    w.handle_prompt(prompt(ADD, 2, stamp(0)))                     # run 2's: taken as old
    w.handle_frame(frame(2, stamp(0)))                            # run 2's frame 0: a restart
    assert tr.calls[-3:] == [('reset',), ('queue', 2), ('track', 2)]
    w.time.line.note_jump(stamp(0) - PROMPT_LEAD_NS, stamp(19) - stamp(0) + PROMPT_LEAD_NS)
    w.run_once(0)
    w.handle_frame(frame(3, stamp(1)))
    assert tr.calls.count(('reset',)) == 1 and tr.ids == {2}
    assert len(jump_logs(logs)) == 1


def test_what_waits_for_a_clock_jump_is_bounded():
    w, tr, pub, logs = make_worker()                            # prompt queue 3
    w.handle_frame(frame(1, stamp(5)))
    w.time.line.note_jump(stamp(0), stamp(5) - stamp(0))
    for k in range(4):
        w.handle_prompt(prompt(ADD, 1 + k, stamp(0)))
    assert w.waiting_prompts == 3 and w.counters.prompt_errors == 1
    w.handle_frame(frame(2, stamp(0)))
    assert tr.calls[-5:] == [('reset',), ('queue', 1), ('queue', 2), ('queue', 3), ('track', 2)]
    assert any('3 prompts already wait for the frames after a /clock jump' in e
               for e in pub[-1].errors), pub[-1].errors


def test_the_clock_jump_is_never_refused_by_a_full_prompt_queue():
    w, tr, pub, logs = make_worker()                            # prompt queue 3
    w.handle_frame(frame(1, stamp(5)))
    for _ in range(3):
        assert w.mailbox.put_prompt(prompt(ADD, 1, 0))
    assert not w.mailbox.put_prompt(prompt(ADD, 2, 0))         # the queue is full
    w.time.line.note_jump(stamp(0), stamp(5) - stamp(0))
    w.run_once(0)
    assert ('reset',) in tr.calls and w.counters.prompt_errors == 0
    assert len(jump_logs(logs)) == 1


def test_the_node_notes_a_clock_jump_for_every_camera_active_or_not():
    """node.on_clock_jump hands the jump to the cameras' time lines, also while no worker
    exists (inactive): nothing queued, nothing refused."""
    from sam2_ros.ros.node import TrackerNode

    lines = [TimeLine(), TimeLine()]
    TrackerNode.on_clock_jump(SimpleNamespace(time_lines=lines, worker=None), 7, 3)
    assert [line.pending_jumps for line in lines] == [1, 1]
    assert lines[0].take_jumps().to_ns == 7 and lines[1].take_jumps().back_ns == 3


def reactivated(w, tr, pub, logs, line):
    """A new worker on the same tracker and time line, as the node's next activation makes."""
    return TrackingWorker(tr, Mailbox(True, 4, 3), w.host, outputs(pub.append), time_line=line)


def tracked_then_deactivated():
    """A worker that tracked object 1 on five frames, then stopped (deactivate: the objects
    and the time line kept): (worker, tracker, published, logs, its time line)."""
    w, tr, pub, logs = make_worker()
    line = TimeLine()
    w.time.line = line
    w.handle_prompt(prompt(ADD, 1, 0))
    for i in range(5):
        w.handle_frame(frame(1, stamp(i)))
    w.stop(1.0)
    return w, tr, pub, logs, line


def test_a_restart_while_inactive_is_seen_by_the_next_activation():
    w, tr, pub, logs, line = tracked_then_deactivated()
    w2 = reactivated(w, tr, pub, logs, line)
    w2.handle_frame(frame(2, stamp(0)))                            # the bag played again
    assert tr.calls[-2:] == [('reset',), ('track', 2)] and tr.ids == set()
    assert len(jump_logs(logs)) == 1


def test_a_clock_jump_while_inactive_is_applied_at_activation():
    w, tr, pub, logs, line = tracked_then_deactivated()
    line.note_jump(stamp(0) - PROMPT_LEAD_NS, stamp(4) - stamp(0) + PROMPT_LEAD_NS)
    w2 = reactivated(w, tr, pub, logs, line)
    w2.mailbox.put_prompt(prompt(ADD, 1, stamp(0)))             # the new run's prompt
    w2.run_once(0)                                              # the first round: no frame
    assert tr.calls[-1] == ('reset',) and w2.waiting_prompts == 1
    w2.mailbox.put_frame(frame(2, stamp(0)))
    w2.run_once(0)
    assert tr.calls[-3:] == [('reset',), ('queue', 1), ('track', 2)]
    assert len(jump_logs(logs)) == 1 and line.pending_jumps == 0


def test_without_the_idle_round_a_jump_applies_at_the_next_frame_received_after_it():
    """A camera of the multi-camera worker is driven through handle_prompt, begin_frame and
    finish_frame, without rounds of its own: the jump applies before the first frame received
    after it, a frame received before it is still the old time line's."""
    w, tr, pub, logs = make_worker()
    w.handle_frame(frame(1, stamp(3)))
    old = frame(2, stamp(4))                                    # received before the jump
    w.time.line.note_jump(stamp(0), stamp(4) - stamp(0))
    w.handle_prompt(prompt(ADD, 1, stamp(0)))                   # after it: waits
    assert w.waiting_prompts == 1 and ('reset',) not in tr.calls
    w.handle_frame(old)
    assert tr.calls[-1] == ('track', 2) and ('reset',) not in tr.calls
    w.handle_frame(frame(3, stamp(0)))
    assert tr.calls[-3:] == [('reset',), ('queue', 1), ('track', 3)]
