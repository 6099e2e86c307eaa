"""Lifecycle transitions in many orders, on ONE node process, through the standard
``~/change_state`` / ``~/get_state`` services.

A seeded random walk over configure / cleanup / activate / deactivate, mixed with requests
that are invalid in the current state (refused: success False, state unchanged, node alive),
checking ``get_state`` after every request. When active, a prompt and a frame give a
TrackingState with the frame's stamp and the expected frame index (the index proves which
tracker answered: deactivate/activate keeps its history, cleanup/configure starts a new one);
when inactive or unconfigured a published frame gives no output at all. Also: deactivate while
frames are flowing, and shutdown last (process exit 0).
"""

import random
import threading
import time

import pytest

from ros_helpers import (Client, Lifecycle, frames, image_msg, prompt_msg,
                         require_messages, stamp, stamp_of, start_node, wait_until)

pytestmark = pytest.mark.slow

# lifecycle_msgs/Transition ids (the standard ones)
CONFIGURE, CLEANUP, ACTIVATE, DEACTIVATE = 1, 2, 3, 4
SHUTDOWN = {'unconfigured': 5, 'inactive': 6, 'active': 7}
# state -> {transition id: next state}; everything else must be refused
VALID = {
    'unconfigured': {CONFIGURE: 'inactive'},
    'inactive': {CLEANUP: 'unconfigured', ACTIVATE: 'active'},
    'active': {DEACTIVATE: 'inactive'},
}
ALL_IDS = (CONFIGURE, CLEANUP, ACTIVATE, DEACTIVATE, 5, 6, 7)
W, H = 64, 48
BOX = (8, 18, 40, 44)
STEPS = 30
SEED = 20240611


def outputs(c: Client) -> tuple:
    """Counts of the outputs of tracking (diagnostics of a node that is not active, 'not
    tracking', are published in every state and not counted)."""
    tracking = [d for d in c.snapshot(c.diags) if 'not tracking' not in d.status[0].message]
    return (len(c.snapshot(c.masks)), len(c.snapshot(c.states)), len(c.snapshot(c.overlays)),
            len(tracking))


def not_tracking(diags: list):
    """The values of the last of ``diags`` if it says the node is not tracking, else None."""
    if not diags or 'not tracking' not in diags[-1].status[0].message:
        return None
    return {kv.key: kv.value for kv in diags[-1].status[0].values}


def test_random_transition_orders(tmp_path, lease):
    require_messages()
    t_start = time.monotonic()
    proc = start_node(lease, tmp_path, 'orders', autostart=False, image_size=64,
                      stale_timeout_s=5.0, diagnostics_period_s=0.2)
    c = Client(lease)
    fr = frames(16, W, H, seed=4)
    rng = random.Random(SEED)
    n_frame = 0          # global frame counter: stamps only go forward
    next_index = None    # expected frame_index of the next frame for the current tracker
    silent_stamps = []   # frames published while not active: must never produce outputs
    log = []
    counts = {'valid': 0, 'refused': 0, 'active_frames': 0, 'silent_frames': 0}

    def send_frame():
        nonlocal n_frame
        s = stamp(n_frame)
        c.pub_image.publish(image_msg(fr[n_frame % len(fr)], s))
        n_frame += 1
        return s

    def check_active():
        """A prompt (due on the next frame) and a frame -> the state of that frame."""
        nonlocal next_index
        c.wait_connected(30)
        s_next = stamp(n_frame)
        c.send_prompts(prompt_msg(1, s_next, box=BOX))
        s = send_frame()
        assert s == s_next
        st = c.wait_state(s, 30)
        assert st.frame_index == next_index, (log, st.frame_index, next_index)
        assert [o.object_id for o in st.objects] == [1], log
        next_index += 1
        counts['active_frames'] += 1

    def check_silent():
        """Not active: no subscription; a published frame produces nothing."""
        wait_until(lambda: c.pub_image.get_subscription_count() == 0, 30,
                   'the image subscription to go')
        # instead of a fixed sleep, the node's diagnostics say when everything sent before the
        # transition has arrived: not tracking, a state and mask for every frame processed
        c.wait_inactive_outputs(30)
        before = outputs(c)
        received = not_tracking(c.snapshot(c.diags)[-1:])['received_frames']
        n_diags = len(c.snapshot(c.diags))
        silent_stamps.append(send_frame())
        # two diagnostics periods after the frame, the node still reports it never received it
        wait_until(lambda: len(c.snapshot(c.diags)) >= n_diags + 2, 30, 'two diagnostics')
        last = not_tracking(c.snapshot(c.diags)[-1:])
        assert last is not None and last['received_frames'] == received, (log, last)
        now = outputs(c)    # overlays (index 2) of earlier frames may still come: by stamp below
        assert now[:2] + now[3:] == before[:2] + before[3:], (log, before, now)
        counts['silent_frames'] += 1

    try:
        lc = Lifecycle(c, timeout=60.0)
        state = lc.state()
        assert state == 'unconfigured'
        for step in range(STEPS):
            # mostly valid transitions (so the walk visits every state), some refused ones
            valid = VALID[state]
            if rng.random() < 0.65:
                tid = rng.choice(sorted(valid))
            else:
                tid = rng.choice([t for t in ALL_IDS if t not in valid
                                  and t != SHUTDOWN[state]])
            ok = lc.transition(tid)
            new = lc.state()
            log.append((step, state, tid, ok, new))
            assert proc.p.poll() is None, (log, proc.log()[-3000:])
            if tid in valid:
                assert ok and new == valid[tid], log
                counts['valid'] += 1
                if tid == CONFIGURE:
                    next_index = 0  # a new tracker
            else:
                assert not ok and new == state, log  # refused cleanly, nothing changed
                counts['refused'] += 1
            state = new
            if state == 'active':
                check_active()
            else:
                check_silent()

        # every state was visited and some requests were refused
        visited = {entry[4] for entry in log}
        assert visited == {'unconfigured', 'inactive', 'active'}, log
        assert counts['refused'] >= 3 and counts['active_frames'] >= 3, counts

        # cleanup then configure again: a new, working tracker (frame index restarts at 0)
        if state == 'active':
            assert lc.transition(DEACTIVATE)
        if lc.state() == 'inactive':
            assert lc.transition(CLEANUP)
        assert lc.state() == 'unconfigured'
        assert lc.transition(CONFIGURE) and lc.transition(ACTIVATE)
        assert lc.state() == 'active'
        next_index = 0
        check_active()
        check_active()

        # deactivate while frames are flowing (~20 Hz, faster than the node tracks them)
        flowing = threading.Event()
        flowing.set()
        sent = []

        def stream():
            while flowing.is_set():
                sent.append(send_frame())
                time.sleep(0.05)

        th = threading.Thread(target=stream, daemon=True)
        n0 = len(c.snapshot(c.states))
        th.start()
        wait_until(lambda: len(c.snapshot(c.states)) >= n0 + 2, 30, 'states while flowing')
        assert lc.transition(DEACTIVATE) and lc.state() == 'inactive'
        t_deact = len(sent)
        c.wait_inactive_outputs()
        before = outputs(c)
        time.sleep(1.0)  # frames still flowing, node inactive
        flowing.clear()
        th.join(5)
        after = outputs(c)
        # masks, states and tracking diagnostics stop; an overlay of a frame tracked before
        # may still arrive, but none of a frame sent after deactivate returned
        assert after[:2] + after[3:] == before[:2] + before[3:], 'outputs after deactivate'
        late = set(sent[t_deact:])
        assert not late & {stamp_of(m.header) for m in c.snapshot(c.states)
                           + c.snapshot(c.masks) + c.snapshot(c.overlays)}
        assert proc.p.poll() is None
        flow_states = c.snapshot(c.states)[n0:]
        got = [stamp_of(s.header) for s in flow_states]
        assert got == sorted(set(got)), 'stamps went backwards or repeated'
        next_index = max(s.frame_index for s in flow_states) + 1

        # the same tracker goes on after re-activation
        assert lc.transition(ACTIVATE) and lc.state() == 'active'
        check_active()

        # frames published while not active never produced any output
        published = {stamp_of(m.header) for m in c.snapshot(c.states) + c.snapshot(c.masks)
                     + c.snapshot(c.overlays)}
        assert not published & set(silent_stamps)

        # shutdown last (from active), then the process ends cleanly
        assert lc.transition(SHUTDOWN['active'])
        assert proc.p.wait(30) == 0, proc.log()[-3000:]
    finally:
        c.close()
        proc.stop()
    print(f'\nlifecycle walk: {counts}, {len(log)} requests, '
          f'{time.monotonic() - t_start:.1f} s')
