"""The real node (CPU, random weights) with ``pipeline: true`` publishes the same masks and
states as the serial reference (``pipeline: false``) for the same frames and prompts; every
frame gets its mask and state, in order, and deactivate leaves no publisher thread behind."""

import threading
import time

import numpy as np
import pytest

from ros_helpers import (ROOT, Client, Lifecycle, click_msg, frames, image_msg, mask_array,
                         prompt_msg, require_messages, stamp, stamp_of, start_node, wait_until)

pytestmark = pytest.mark.slow
N = 8
CLEANUP, DEACTIVATE = 2, 4


def run(tmp_path, lease, pipeline, **overrides):
    """One node; prompts held for frames 0 and 3, a click on frame 5, 8 frames sent back to
    back (the FIFO keeps them all), overlay subscribed. Returns the outputs and the log."""
    require_messages()
    name = '_'.join([f'pipeline_{pipeline}', *overrides])
    proc = start_node(lease, tmp_path, name, pipeline=pipeline,
                      max_objects=3, diagnostics_period_s=0.2, **overrides)
    c = None
    try:
        proc.wait_log(r'\]: active:', 90)
        c = Client(lease)
        c.wait_connected(30)
        wait_until(lambda: c.link.sub_overlay.get_publisher_count() > 0, 30, 'overlay')
        c.send_prompts(prompt_msg(1, stamp(0), box=(10, 20, 50, 60)),
                       prompt_msg(2, stamp(3), points=[(120, 60)], labels=[1]))
        c.pub_click.publish(click_msg(30, 40, stamp(5)))
        fr = frames(N)
        for i in range(N):
            c.pub_image.publish(image_msg(fr[i], stamp(i)))
        c.wait_state(stamp(N - 1), 120)
        # the last frame's mask and overlay may come after its state (the overlay is rendered
        # after the state is sent, on another thread when pipelined)
        wait_until(lambda: len(c.snapshot(c.masks)) >= N and c.snapshot(c.overlays) and
                   stamp_of(c.snapshot(c.overlays)[-1].header) == stamp(N - 1), 60,
                   "the last frame's mask and overlay")
        out = (c.snapshot(c.states), c.snapshot(c.masks), c.snapshot(c.overlays))
        assert Lifecycle(c).transition(DEACTIVATE)
        return out, proc.log()
    finally:
        if c is not None:
            c.close()
        proc.stop()


@pytest.mark.parametrize('masks_from_worker', [False, True])
def test_pipelined_node_publishes_what_the_serial_node_does(tmp_path, lease, masks_from_worker):
    """Also with the worker publishing the masks itself (``masks_from_worker``)."""
    (s_states, s_masks, s_ov), _ = run(tmp_path, lease, False)
    (p_states, p_masks, p_ov), log = run(tmp_path, lease, True,
                                         masks_from_worker=masks_from_worker)
    assert 'pipeline' not in log or 'Traceback' not in log, log[-3000:]

    def key(st):
        return (stamp_of(st.header), st.frame_index, st.processed_frames, st.dropped_frames,
                list(st.errors), [(o.object_id, o.state, o.area, o.frames_since_prompt,
                                   o.box.x_offset, o.box.y_offset, o.box.width, o.box.height)
                                  for o in st.objects])

    assert [stamp_of(s.header) for s in s_states] == [stamp(i) for i in range(N)]
    assert [key(s) for s in p_states] == [key(s) for s in s_states]
    for a, b in zip(p_states, s_states):
        assert [o.score for o in a.objects] == pytest.approx([o.score for o in b.objects],
                                                             abs=1e-6)
    assert [o.object_id for o in s_states[-1].objects] == [1, 2]
    assert len(p_masks) == len(s_masks) == N
    for a, b in zip(p_masks, s_masks):
        assert stamp_of(a.header) == stamp_of(b.header)
        np.testing.assert_array_equal(mask_array(a), mask_array(b))
    assert len(s_ov) == N and 1 <= len(p_ov) <= N     # pipelined overlays: newest only
    assert stamp_of(p_ov[-1].header) == stamp(N - 1)


def test_deactivate_and_cleanup_under_load_wait_only_for_what_is_needed(tmp_path, lease):
    """Issue 14 item 12: frames streaming at 10 Hz, overlay subscribed, the node with the
    shipped Fast DDS profile (as the launch files start it). Deactivate drains the publisher
    threads and nothing is published after it; cleanup waits for the last mask and state to
    be acknowledged, which the profile's 0.1 s writer heartbeat makes quick: no transition
    takes the 1 s bound and no acknowledgement warning is logged."""
    require_messages()
    env = dict(lease.env(), FASTDDS_DEFAULT_PROFILES_FILE=str(
        ROOT / 'config' / 'fastdds_large_frames.xml'))
    proc = start_node(lease, tmp_path, 'load', env=env, process_every_frame=False,
                      diagnostics_period_s=0.2)
    c, stop = None, threading.Event()
    try:
        proc.wait_log(r'\]: active:', 90)
        c = Client(lease)
        c.wait_connected(30)
        wait_until(lambda: c.link.sub_overlay.get_publisher_count() > 0, 30, 'overlay')
        c.send_prompts(prompt_msg(1, stamp(0), box=(10, 20, 50, 60)))
        fr = frames(4)

        def stream():
            i = 0
            while not stop.is_set():
                c.pub_image.publish(image_msg(fr[i % 4], stamp(i)))
                i += 1
                stop.wait(0.1)

        threading.Thread(target=stream, daemon=True).start()
        wait_until(lambda: len(c.snapshot(c.states)) >= 3, 120, 'three states while streaming')
        lc = Lifecycle(c)
        t0 = time.monotonic()
        assert lc.transition(DEACTIVATE)
        took_deactivate = time.monotonic() - t0
        c.wait_inactive_outputs()                     # what was sent before has arrived
        n = (len(c.snapshot(c.masks)), len(c.snapshot(c.states)))
        time.sleep(1.0)                               # frames still streaming
        assert (len(c.snapshot(c.masks)), len(c.snapshot(c.states))) == n  # none after it
        masks, states = c.snapshot(c.masks), c.snapshot(c.states)
        assert [stamp_of(m.header) for m in masks] == [stamp_of(s.header) for s in states]
        # an overlay may still arrive after the state, but only of a frame tracked before
        assert {stamp_of(o.header) for o in c.snapshot(c.overlays)} <= {
            stamp_of(s.header) for s in states}
        t0 = time.monotonic()
        assert lc.transition(CLEANUP)
        took_cleanup = time.monotonic() - t0
        log = proc.log()
    finally:
        stop.set()
        if c is not None:
            c.close()
        proc.stop()
    # the last mask and state were acknowledged within the flush bound (the profile's 0.1 s
    # heartbeat); the transitions' wall times are printed, not bounded (a loaded machine)
    assert 'did not acknowledge' not in log and 'cannot wait' not in log, log[-2000:]
    print(f'deactivate {took_deactivate:.2f} s, cleanup {took_cleanup:.2f} s')
