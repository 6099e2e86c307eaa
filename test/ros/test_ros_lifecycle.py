"""Lifecycle transitions through the standard lifecycle services (what `ros2 lifecycle set`
calls; the CLI itself is not installable from PyPI): a failing configure is a failed
transition with the reason logged; activate/deactivate/cleanup/shutdown create and release the
subscriptions; autostart with a bad checkpoint exits with status 1."""

import pytest

from ros_helpers import Client, Lifecycle, frames, image_msg, stamp, start_node, wait_until

pytestmark = pytest.mark.slow


def test_configure_failure_is_a_failed_transition(tmp_path, lease):
    from lifecycle_msgs.msg import Transition

    proc = start_node(lease, tmp_path, 'badckpt', autostart=False, random_weights=False,
                      checkpoint='/nonexistent/sam2.1_hiera_tiny.pt')
    c = Client(lease)
    try:
        lc = Lifecycle(c)
        assert lc.state() == 'unconfigured'
        assert lc.transition(Transition.TRANSITION_CONFIGURE) is False
        assert lc.state() == 'unconfigured'
        proc.wait_log(r'configure failed: .*sam2\.1_hiera_tiny\.pt', 10)
        assert lc.transition(Transition.TRANSITION_UNCONFIGURED_SHUTDOWN) is True
        assert proc.p.wait(20) == 0, proc.log()  # the process ends after shutdown
    finally:
        c.close()
        proc.stop()


def test_autostart_failure_exits_nonzero(tmp_path, lease):
    proc = start_node(lease, tmp_path, 'badparam', image_size=500)
    try:
        assert proc.p.wait(60) == 1
        assert 'configure failed: ValueError: image_size must be a multiple of 32' in proc.log()
    finally:
        proc.stop()


def test_a_non_bool_autostart_exits_with_the_reason(tmp_path, lease):
    """autostart: 'true' (a string in a params file) was read as false: the node waited
    unconfigured for ever, its log saying autostart is false."""
    proc = start_node(lease, tmp_path, 'autostart_str', autostart='true')
    try:
        assert proc.p.wait(60) == 1
        assert "parameter autostart must be a bool, got 'true'" in proc.log()
        assert 'waiting unconfigured' not in proc.log()
    finally:
        proc.stop()


def test_a_params_file_rcl_cannot_parse_is_one_line_not_a_traceback(tmp_path, lease):
    """An array of mixed types is refused by rcl's own parser inside rclpy.init."""
    proc = start_node(lease, tmp_path, 'mixed_array', batch_buckets=[1, 2.0])
    try:
        assert proc.p.wait(60) == 1
        log = proc.log()
        assert '[sam2_tracker] cannot start: ' in log and 'Sequence should be of same type' in log
        assert 'Traceback' not in log, log
    finally:
        proc.stop()


def test_activate_deactivate_cleanup_shutdown(tmp_path, lease):
    from lifecycle_msgs.msg import Transition

    proc = start_node(lease, tmp_path, 'lifecycle', autostart=False, diagnostics_period_s=0.2)
    c = Client(lease)
    fr = frames(3)
    try:
        lc = Lifecycle(c)
        assert c.pub_image.get_subscription_count() == 0
        assert lc.transition(Transition.TRANSITION_CONFIGURE)
        assert lc.state() == 'inactive' and c.pub_image.get_subscription_count() == 0
        assert lc.transition(Transition.TRANSITION_ACTIVATE) and lc.state() == 'active'
        c.wait_connected(30)
        c.pub_image.publish(image_msg(fr[0], stamp(0)))
        c.wait_state(stamp(0), 60)

        assert lc.transition(Transition.TRANSITION_DEACTIVATE) and lc.state() == 'inactive'
        wait_until(lambda: c.pub_image.get_subscription_count() == 0, 10,
                   'the image subscription to go')
        # inactive: the frame is not received; two diagnostics after it (not a fixed sleep)
        # the node, not tracking, still counts the one frame of the first activation
        n_diags = len(c.snapshot(c.diags))
        c.pub_image.publish(image_msg(fr[1], stamp(1)))
        wait_until(lambda: len(c.snapshot(c.diags)) >= n_diags + 2, 10, 'two diagnostics')
        status = c.snapshot(c.diags)[-1].status[0]
        values = {kv.key: kv.value for kv in status.values}
        assert 'not tracking' in status.message and values['received_frames'] == '1', values
        assert c.states_for(stamp(1)) == []

        assert lc.transition(Transition.TRANSITION_ACTIVATE)
        c.wait_connected(30)
        c.pub_image.publish(image_msg(fr[2], stamp(2)))
        assert c.wait_state(stamp(2), 60).frame_index == 1  # same tracker kept its history

        assert lc.transition(Transition.TRANSITION_DEACTIVATE)
        assert lc.transition(Transition.TRANSITION_CLEANUP) and lc.state() == 'unconfigured'
        assert lc.transition(Transition.TRANSITION_UNCONFIGURED_SHUTDOWN)
        assert proc.p.wait(20) == 0, proc.log()
    finally:
        c.close()
        proc.stop()
