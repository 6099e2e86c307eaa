"""The diagnostics tick kept out of frames (sam2_ros/ros/quiet_tick.py): while frames flow, a
tick waits for the next frame's output and runs there, on the thread that published it; it
runs at the tick itself without frames (a tick due when they stopped: at the next tick); a job
raising on a publisher's thread is reported, never raised into that thread. Times are passed
in (no clock, no sleep)."""

from __future__ import annotations

import threading

import numpy as np

from sam2_ros.ros.quiet_tick import QuietTick
from test_ros_publishers import outputs, published


def ticker():
    runs = []
    tick = QuietTick(lambda: runs.append(threading.get_ident()))
    return tick, runs


def test_without_frames_the_tick_runs_the_job_itself():
    tick, runs = ticker()
    tick.tick(10.0)
    tick.tick(11.0)
    assert len(runs) == 2 and not tick.due()


def test_while_frames_flow_the_tick_waits_for_the_next_frames_output():
    tick, runs = ticker()
    t = 100.0
    tick.frame_out(t)                            # frames flow at 60 Hz
    tick.tick(t + 0.004)                         # inside the next frame: only marked due
    assert runs == [] and tick.due()
    tick.tick(t + 0.010)                         # a second tick does not run it either
    assert runs == []
    tick.frame_out(t + 0.0167)                   # that frame's output runs it, once
    tick.frame_out(t + 0.0333)
    assert len(runs) == 1 and not tick.due() and tick.deferred == 1


def test_the_job_runs_on_the_thread_that_published_the_frame():
    tick, runs = ticker()
    tick.frame_out(0.0)
    tick.tick(0.005)
    publisher = threading.Thread(target=tick.frame_out, args=(0.0167,))
    publisher.start()
    publisher.join()
    assert runs == [publisher.ident]


def test_a_tick_due_when_the_frames_stopped_runs_at_the_next_tick():
    tick, runs = ticker()
    tick.frame_out(50.0)
    tick.tick(50.1)                                      # flowing: due
    assert runs == [] and tick.due()
    tick.tick(51.1)                                      # no frame since: runs here
    assert len(runs) == 1 and not tick.due() and tick.deferred == 0
    tick.frame_out(51.2)                                 # nothing due: nothing runs
    assert len(runs) == 1


def test_a_failing_job_on_a_publisher_thread_is_reported_not_raised():
    errors = []

    def job():
        raise RuntimeError('injected')
    tick = QuietTick(job, errors.append)
    tick.frame_out(0.0)
    tick.tick(0.001)
    tick.frame_out(0.0167)                       # must not raise into the publisher
    assert len(errors) == 1 and 'injected' in str(errors[0])


def test_the_publishers_tell_the_tick_after_each_frames_state():
    seen = []
    out, pubs = outputs({'mask': 1, 'state': 1})
    out.on_frame_out = seen.append
    out.publish(published())
    assert len(seen) == 1 and len(pubs['state'].sent) == 1
    assert isinstance(seen[0], float) and np.isfinite(seen[0])
