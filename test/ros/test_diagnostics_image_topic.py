"""A misspelt image_topic is reported: with no frame yet, /diagnostics names the topic
subscribed and its publishers ("no frames since activation on /camera/imag_raw (0 publishers:
check image_topic)"), and the log says so once per activation. It used to say only "no frames
since activation", the camera's real topic beside it unmentioned."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ros_helpers import Client, DomainLease, require_messages, start_node, wait_until
from test_receiver_diagnostics import snapshot_args

from sam2_ros.ros import diagnostics
from sam2_ros.ros.mailbox import Mailbox


class Image:
    """Stands for sensor_msgs/Image (a subscription's msg_type is the message class)."""


class FakeNode:
    """count_publishers per topic and the warnings logged."""

    def __init__(self, publishers):
        self.publishers, self.warnings = publishers, []

    def count_publishers(self, topic):
        return self.publishers.get(topic, 0)

    def get_logger(self):
        return SimpleNamespace(warning=self.warnings.append)


def tick(node, mailbox, now=100.0, inputs=None):
    """One diagnostics round of an active node whose image subscription is on
    /camera/imag_raw (after the prompt and click ones, as the node subscribes them)."""
    args = list(snapshot_args(now))
    args[2] = mailbox
    opts = args[5]
    opts.image_receiver_process = False
    if inputs is None:
        inputs = [SimpleNamespace(msg_type=Image, topic_name='/camera/imag_raw'),
                  SimpleNamespace(msg_type=type('Prompt', (), {}), topic_name='/x/prompt')]
    return diagnostics.report(diagnostics.snapshot(*args, vision_on=False, inputs=inputs,
                                                   node=node))


def test_no_frames_names_the_topic_and_its_publishers():
    node, box = FakeNode({'/camera/image_raw': 1}), Mailbox(False, 1, 10)
    r = tick(node, box)
    assert r.level == 'WARN'
    assert r.message == ('no frames since activation on /camera/imag_raw (0 publishers: check '
                         'image_topic)')
    node.publishers['/camera/imag_raw'] = 2
    assert tick(node, box).message == 'no frames since activation on /camera/imag_raw (2 ' \
                                      'publishers)'
    box.last_recv_t = 97.0               # frames came, then stopped
    assert tick(node, box).message == 'no frames for 3.0 s on /camera/imag_raw (2 publishers)'
    # a camera's image topic among a rig's inputs: the c-th image input
    rig = [SimpleNamespace(msg_type=Image, topic_name='/left/image_raw'),
           SimpleNamespace(msg_type=Image, topic_name='/right/image_raw')]
    assert diagnostics.image_topics(node, rig, 1) == (('/right/image_raw', 0),)
    assert diagnostics.image_topics(node, rig, 2) == ()
    # without the node (as before): no topic named
    assert diagnostics.no_frames('since activation', ()) == 'no frames since activation'


def test_a_silent_image_topic_is_logged_once_per_activation():
    node = FakeNode({'/camera/image_raw': 1})
    first = Mailbox(False, 1, 10)
    for _ in range(diagnostics.SILENT_TICKS_BEFORE_WARN - 1):
        tick(node, first)
    assert node.warnings == []           # a camera started beside the tracker gets a tick
    for _ in range(3):
        tick(node, first)
    assert len(node.warnings) == 1, node.warnings
    assert 'nothing publishes /camera/imag_raw (0 publishers). Check image_topic' in \
        node.warnings[0]
    second = Mailbox(False, 1, 10)       # the next activation: said again
    for _ in range(diagnostics.SILENT_TICKS_BEFORE_WARN + 2):
        tick(node, second)
    assert len(node.warnings) == 2
    # a topic with a publisher, or one that delivered a frame, is not silent
    node = FakeNode({'/camera/imag_raw': 1})
    for _ in range(4):
        tick(node, Mailbox(False, 1, 10))
    node = FakeNode({})
    box = Mailbox(False, 1, 10)
    box.last_recv_t = 99.0
    for _ in range(4):
        tick(node, box)
    assert node.warnings == []


@pytest.mark.slow
def test_node_with_a_misspelt_image_topic_names_it_in_diagnostics_and_log(tmp_path):
    """The node itself, a camera (this client's publisher) on /camera/image_raw."""
    require_messages()
    from diagnostic_msgs.msg import DiagnosticStatus

    lease = DomainLease()
    proc = start_node(lease, tmp_path, 'typo', image_topic='/camera/imag_raw')
    c = None
    try:
        proc.wait_log(r'\]: active:', 90)
        c = Client(lease)                # publishes /camera/image_raw

        def warned():
            return [d.status[0] for d in c.snapshot(c.diags)
                    if d.status[0].level == DiagnosticStatus.WARN
                    and 'on /camera/imag_raw' in d.status[0].message]
        s = wait_until(warned, 30, 'diagnostics naming /camera/imag_raw')[0]
        assert s.message == ('no frames since activation on /camera/imag_raw (0 publishers: '
                             'check image_topic)')
        proc.wait_log(r'nothing publishes /camera/imag_raw \(0 publishers\)', 30)
        n = len(c.snapshot(c.diags))
        wait_until(lambda: len(c.snapshot(c.diags)) >= n + 3, 30, 'three more diagnostics')
        assert proc.log().count('nothing publishes /camera/imag_raw') == 1, proc.log_tail()
    finally:
        if c is not None:
            c.close()
        proc.stop()
        lease.release()
