"""How far back is a new time line (sam2_ros/ros/time_jump.py ``restarted``,
``time_jump_reset_s``), frames stamped 0, and what a jump keeps bounded or names: a live
camera's clock stepped back by milliseconds keeps its objects (reported), a bag looping goes
back to its first stamp and resets; an unstamped frame is not "the last stamp"; the prompts
kept for a jump back are bounded; what a reset drops is named. Fake tracker, no DDS."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ros_helpers import stamp
from test_ros_worker import ADD, frame, make_worker, prompt

from sam2_ros.ros.mailbox import LATEST, PromptItem
from sam2_ros.ros.options import NodeOptions
from sam2_ros.ros.time_line import TimeLine

P60 = 16_666_667                 # a 60 Hz camera's frame period, ns


def errors_of(pub):
    return [e for p in pub for e in p.errors]


def live_camera(reset_after_s=None):
    """A worker tracking object 1 on five 60 Hz frames stamped from the host clock."""
    w, tr, pub, logs = make_worker(every_frame=False)
    if reset_after_s is not None:
        w.time.line = TimeLine(reset_after_s)
    w.handle_prompt(prompt(ADD, 1, 0))
    for i in range(5):
        w.handle_frame(frame(1, stamp(0) + i * P60))
    return w, tr, pub, logs


# ---------------------------------------------------------------------- time_jump_reset_s
def test_a_clock_stepped_back_50_ms_keeps_the_objects_and_says_so():
    w, tr, pub, logs = live_camera()
    w.handle_frame(frame(2, stamp(0) + 5 * P60 - 50_000_000))     # NTP/PTP stepped the clock
    assert ('reset',) not in tr.calls and tr.ids == {1} and tr.calls[-1] == ('track', 2)
    assert any('stepped back by 33.3 ms' in e and 'objects kept' in e
               for e in pub[-1].errors), pub[-1].errors
    assert any(lvl == 'warn' and 'stepped back' in t for lvl, t in logs)
    w.handle_frame(frame(3, stamp(0) + 6 * P60 - 50_000_000))     # on from the new stamps
    assert pub[-1].errors == [] and ('reset',) not in tr.calls


def test_two_frames_swapped_are_only_reported():
    w, tr, pub, logs = make_worker(every_frame=False)
    w.handle_prompt(prompt(ADD, 1, 0))
    for i in (0, 1, 3, 2, 4):
        w.handle_frame(frame(1, stamp(0) + i * P60))
    assert ('reset',) not in tr.calls and tr.ids == {1}
    assert any('ahead of the frames before and after' in e for e in errors_of(pub))


def test_zero_resets_on_any_step_back_as_before():
    w, tr, pub, logs = live_camera(reset_after_s=0)
    w.handle_frame(frame(2, stamp(0) + 5 * P60 - 50_000_000))
    assert tr.calls[-2:] == [('reset',), ('track', 2)] and tr.ids == set()


def test_a_step_back_over_the_knob_resets():
    w, tr, pub, logs = live_camera(reset_after_s=0.02)
    w.handle_frame(frame(2, stamp(0) + 5 * P60 - 50_000_000))     # 33 ms > 20 ms
    assert tr.calls[-2:] == [('reset',), ('track', 2)]
    assert [t for _, t in logs if 'image stamps jumped back' in t]


def test_a_short_bag_looping_goes_back_to_its_first_stamp_and_resets():
    """A bag of 0.3 s played again goes back by less than time_jump_reset_s, to its first
    stamp: a new run."""
    w, tr, pub, logs = make_worker()
    w.time.line = TimeLine(5.0)
    w.handle_prompt(prompt(ADD, 1, 0))
    for i in (0, 1, 2, 3, 0):
        w.handle_frame(frame(1, stamp(i)))
    assert tr.calls[-2:] == [('reset',), ('track', 1)] and tr.ids == set()


def test_a_small_clock_step_back_is_reported_and_a_loop_resets():
    w, tr, pub, logs = make_worker()
    for i in range(5):
        w.handle_frame(frame(1, stamp(i)))
    w.time.line.note_jump(stamp(4) - 50_000_000, 50_000_000)
    w.run_once(0)
    assert ('reset',) not in tr.calls
    w.handle_frame(frame(1, stamp(5)))
    assert any('clock (/clock, use_sim_time) stepped back by 50.0 ms' in e
               for e in pub[-1].errors), pub[-1].errors
    w.time.line.note_jump(stamp(0) - 1, stamp(5) - stamp(0) + 1)   # back before the first
    w.run_once(0)
    assert tr.calls[-1] == ('reset',)


def test_time_jump_reset_s_is_checked():
    assert NodeOptions().time_jump_reset_s == 1.0
    NodeOptions(time_jump_reset_s=0.0).validate()
    for bad in (-0.1, float('nan'), float('inf')):
        with pytest.raises(ValueError, match='time_jump_reset_s'):
            NodeOptions(time_jump_reset_s=bad).validate()


# ---------------------------------------------------------------------- frames stamped 0
def test_an_unstamped_frame_does_not_hide_a_restart():
    w, tr, pub, logs = make_worker()
    for s in (stamp(5), 0, stamp(0)):
        w.handle_frame(frame(1, s))
    assert tr.calls == [('track', 1), ('track', 1), ('reset',), ('track', 1)]
    assert w.time.line.last_ns == stamp(0)


def test_an_unstamped_frame_is_not_the_last_stamp_of_the_far_ahead_check():
    w, tr, pub, logs = make_worker()
    w.handle_frame(frame(1, stamp(0)))
    w.handle_frame(frame(1, 0))
    assert w.time.line.last_ns == stamp(0) and w.latest_frame_ns == 0
    w.handle_prompt(prompt(ADD, 1, stamp(0) + 3600 * 10 ** 9))    # an hour ahead: refused
    assert w.waiting_prompts == 0 and w.counters.prompt_errors == 1
    w.handle_frame(frame(1, stamp(1)))
    assert any('more than 10 s ahead' in e for e in pub[-1].errors), pub[-1].errors


def detections(stamp_ns):
    return PromptItem(SimpleNamespace(), 'detections', stamp_ns)


def test_stamped_items_on_an_unstamped_camera_are_refused_as_such():
    w, tr, pub, logs = make_worker()
    w.handle_prompt(prompt(ADD, 2, stamp(3)))                     # held before any frame
    w.handle_frame(frame(1, 0))                                    # then the camera is unstamped
    w.handle_prompt(detections(stamp(1)))
    w.handle_prompt(prompt(ADD, 3, stamp(1)))
    w.handle_frame(frame(1, 0))
    errors = errors_of(pub)
    assert sum('the images are unstamped (stamp 0)' in e for e in errors) == 3, errors
    assert not any('after the latest frame' in e for e in errors)
    assert w.waiting_prompts == 0 and w.detection_counts['rejected'] == 1


def test_a_point_click_on_an_unstamped_camera_corrects_the_frame_on_screen():
    w, tr, pub, logs = make_worker()
    w.handle_frame(frame(1, 0))
    w.handle_prompt(PromptItem((ADD, 1), 'click', LATEST))
    assert tr.calls == [('track', 1), ('add', 1)] and w.waiting_prompts == 0
    assert pub[-1].recv_t is None and pub[-1].header.stamp == 0     # re-published


# ---------------------------------------------------------------------- bounds, reports
def test_prompts_kept_for_a_jump_back_are_bounded():
    """While no frame comes every old prompt is applied and kept for a possible jump back: the
    newest prompt_queue_size only, and a jump holds no more than that."""
    w, tr, pub, logs = make_worker()                            # prompt queue 3
    w.handle_frame(frame(1, stamp(0)))
    w.handle_frame(frame(1, stamp(50)))
    for k in range(5000):
        w.handle_prompt(prompt(ADD, 1 + k % 200, stamp(1) + k))
    assert w.time.old_prompts == w.hold.capacity == 3
    w.time.line.note_jump(stamp(0), stamp(50) - stamp(0))
    w.run_once(0)
    assert tr.calls[-1] == ('reset',) and w.waiting_prompts == 3
    w.handle_frame(frame(1, stamp(2)))
    ids = [1 + k % 200 for k in range(4997, 5000)]
    assert tr.calls[-4:] == [('queue', i) for i in ids] + [('track', 1)]


def test_a_reset_names_what_it_drops():
    w, tr, pub, logs = make_worker()
    w.handle_frame(frame(1, stamp(3)))
    w.handle_prompt(prompt(ADD, 1, stamp(5)))
    w.handle_prompt(detections(stamp(4)))
    assert w.waiting_prompts == 2
    w.handle_frame(frame(1, stamp(0)))
    dropped = [t for lvl, t in logs if lvl == 'warn' and 'were dropped' in t]
    assert dropped == [f'2 prompt(s) held for frames before the jump were dropped: prompt '
                       f'(stamp {stamp(5)} ns); detections (stamp {stamp(4)} ns)'], logs


# ---------------------------------------------------------------------- one topic, two cameras
def test_two_cameras_on_one_topic_are_named_once_per_change():
    """Frames whose frame_id alternates (a stereo driver publishing both eyes on one topic,
    stamps alike) are tracked as one video: the worker says so, once per change, in the log
    and the next state's errors; one camera's frames say nothing."""
    from sam2_ros.ros.mailbox import FrameItem
    import time

    w, tr, pub, logs = make_worker(every_frame=False)
    for i in range(6):
        fid = ('left', 'right')[i % 2]
        w.handle_frame(FrameItem(1, stamp(i // 2), SimpleNamespace(stamp=stamp(i // 2),
                                                                frame_id=fid),
                              time.monotonic()))
    said = [e for e in errors_of(pub) if 'changed frame_id' in e]
    assert len(said) == 2 and "'left' to 'right'" in said[0] and "'right' to 'left'" in said[1]
    assert sum('changed frame_id' in t for _, t in logs) == 2
    w, tr, pub, logs = make_worker(every_frame=False)
    for i in range(4):
        w.handle_frame(FrameItem(1, stamp(i), SimpleNamespace(stamp=stamp(i), frame_id='left'),
                              time.monotonic()))
    assert not [e for e in errors_of(pub) if 'frame_id' in e]
