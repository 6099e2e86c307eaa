"""The receiving process of raw images (node parameter image_receiver_process,
sam2_ros/ros/receiver.py) over real DDS: every published image arrives once, in order, with
the fields rclpy's own deserialization gives and its pixels in shared memory; a receiving
process that dies is restarted and the stream goes on; stop ends the process; a message it
does not hand over reaches the node as a refused frame, reported like any bad frame."""

import contextlib
import threading
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from ros_helpers import DomainLease, image_msg, wait_until
from sam2_ros.ros.receiver import ImageReceiver

TOPIC = '/rx_test/image_raw'


@contextlib.contextmanager
def camera_and_receiver(name: str, topic: str, on_image: Callable[[Any, float], None],
                        **receiver_args: Any) -> Iterator[SimpleNamespace]:
    """A camera node publishing on ``topic`` in a context of its own and a receiving process
    of ``topic`` handing each image to ``on_image`` (called under ``lock``), over real DDS:
    (pub, rx, logs, lock, spin_until); everything stopped and released on exit."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image

    lease = DomainLease()
    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=lease.domain_id)
    node = rclpy.create_node(f'{name}_camera', context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    logs, lock = [], threading.Lock()

    def locked(msg, t):
        with lock:
            on_image(msg, t)

    def spin_until(pred, what):
        def step():
            ex.spin_once(timeout_sec=0.02)
            with lock:
                return pred()
        wait_until(step, 60.0, what)
    rx = ImageReceiver(topic, locked, lambda level, text: logs.append((level, text)),
                       name=f'{name}_receiver', slots=4, reliability='reliable', depth=0,
                       env=lease.env(), **receiver_args)
    try:
        yield SimpleNamespace(pub=node.create_publisher(Image, topic, 100), rx=rx, logs=logs,
                              lock=lock, spin_until=spin_until)
    finally:
        rx.stop()
        node.destroy_node()
        rclpy.shutdown(context=ctx)
        lease.release()


def test_images_arrive_in_order_through_shared_memory_and_survive_a_restart():
    got = []
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (24, 32, 3), dtype=np.uint8) for _ in range(12)]

    def on_image(msg, t):
        got.append((msg.header.stamp.nanosec, msg.encoding, msg.height, msg.width,
                    np.frombuffer(msg.data, np.uint8).copy(), t))
    with camera_and_receiver('rx_test', TOPIC, on_image, max_bytes=1 << 20,
                             tune_malloc=True) as r:
        rx, spin_until = r.rx, r.spin_until

        def send(i, enc='rgb8'):
            r.pub.publish(image_msg(frames[i], i + 1, enc))
        rx.start()                                   # returns once the process subscribed
        spin_until(lambda: r.pub.get_subscription_count() > 0, 'the receiver to subscribe')
        for i in range(6):
            send(i)
        spin_until(lambda: len(got) == 6, 'six images')
        assert [g[0] for g in got] == [1, 2, 3, 4, 5, 6]
        for i, (_, enc, h, w, data, _) in enumerate(got):
            assert (enc, h, w) == ('rgb8', 24, 32)
            np.testing.assert_array_equal(data, frames[i].reshape(-1))
        assert all(a[-1] <= b[-1] for a, b in zip(got, got[1:]))   # receipt times in order
        assert rx.held == 0                          # every view dropped: slots given back

        rx.proc.kill()                               # the receiving process dies
        spin_until(lambda: rx.restarts == 1 and rx.ready.is_set(), 'a restart')
        # the dead subscriber may still count as matched for a while: send until one arrives
        spin_until(lambda: send(6, 'bgr8') or len(got) > 6, 'an image after the restart')
        assert got[-1][:4] == (7, 'bgr8', 24, 32)
        assert any(level == 'error' and 'exited' in text for level, text in r.logs)
    assert rx.proc.poll() is not None                # the process ended with stop()


def test_the_node_with_receiving_processes_tracks_as_in_process(tmp_path):
    """image_receiver_process on: the node's masks and states equal the in-process tracker's
    on the same frames and prompt, a frame the node cannot decode is reported and the next
    one tracked, and the node's log names the receiving process."""
    import torch

    from ros_helpers import (NODE_THREADS, TEST_PARAMS, Client, frames, mask_array,
                             prompt_msg, require_messages, stamp, start_node)
    from sam2_ros.engine.config import TrackerConfig
    from sam2_ros.engine.tracker import StreamingTracker
    from sam2_ros.engine.types import Prompt

    require_messages()
    lease = DomainLease()
    proc = start_node(lease, tmp_path, 'rx_node', max_objects=2, image_receiver_process=True)
    client = None
    try:
        proc.wait_log(r'\]: active:', 90)
        client = Client(lease)
        client.wait_connected(30)
        fr = frames(4, seed=3)
        box = (10, 20, 50, 60)
        client.send_prompts(prompt_msg(1, stamp(0), box=box))
        for i in range(2):
            client.pub_image.publish(image_msg(fr[i], stamp(i)))
        client.wait_state(stamp(1), 60)
        bad = image_msg(fr[2], stamp(2))
        bad.encoding = 'yuv422_nonsense'
        client.pub_image.publish(bad)
        client.pub_image.publish(image_msg(fr[3], stamp(3)))
        client.wait_state(stamp(3), 60)
        states, masks = client.snapshot(client.states), client.snapshot(client.masks)
    finally:
        if client is not None:
            client.close()
        proc.stop()
        lease.release()
    torch.set_num_threads(NODE_THREADS)
    keys = ('model_size', 'image_size', 'random_weights', 'seed', 'device', 'precision',
            'use_cuda_graphs', 'extra_hydra_overrides')
    tr = StreamingTracker(TrackerConfig(max_objects=2, **{k: TEST_PARAMS[k] for k in keys}))
    tr.queue_prompt(Prompt(1, box=box))
    ref = {stamp(i): tr.track(fr[i]) for i in (0, 1, 3)}
    got = {(s.header.stamp.sec * 10**9 + s.header.stamp.nanosec): (s, m)
           for s, m in zip(states, masks)}
    assert sorted(got) == sorted(ref)                # the bad frame has no result
    for st, r in ref.items():
        s, m = got[st]
        np.testing.assert_array_equal(mask_array(m), r.label_mask())
        assert [o.score for o in s.objects] == pytest.approx([o.score for o in r.objects],
                                                             rel=1e-6, abs=1e-6)
    assert any('yuv422_nonsense' in e for s in states for e in s.errors)
    assert 'received by a process of its own' in proc.log_path.read_text(errors='replace')


def test_a_message_over_the_limit_is_handed_on_as_a_refused_frame_with_its_stamp():
    """A message the receiving process does not hand over reaches the node as a frame with
    its stamp whose decode fails with the reason (so the worker reports it as a bad frame),
    and the frames around it arrive as they are."""
    from sam2_ros.engine.errors import FrameError
    from sam2_ros.ros import images

    got = []
    with camera_and_receiver('rx_limit', TOPIC + '_limit', lambda msg, t: got.append(msg),
                             max_bytes=1 << 16, tune_malloc=False) as r:
        r.rx.start()
        r.spin_until(lambda: r.pub.get_subscription_count() > 0, 'the receiver to subscribe')
        small, large = np.zeros((24, 32, 3), np.uint8), np.zeros((200, 200, 3), np.uint8)
        for i, img in enumerate((small, large, small)):
            r.pub.publish(image_msg(img, i + 1))
        r.spin_until(lambda: len(got) == 3, 'three frames')
    rx, logs = r.rx, r.logs
    assert [m.header.stamp.nanosec for m in got] == [1, 2, 3]
    assert images.image_to_rgb(got[0], None).shape == (24, 32, 3)
    with pytest.raises(FrameError, match=r'image message of \d+ bytes dropped: more than the '
                                         r'65536 bytes the receiving process hands over'):
        images.image_to_rgb(got[1], None)
    assert rx.rejected == 1 and logs == [('error', f'{rx.topic}: {got[1].refused}')]


def test_a_refused_frame_is_reported_in_the_next_state_and_counted():
    """Through the tracking worker with the node's raw decode (images.image_to_rgb): the
    refused frame is a frame error and its reason in the next published state's errors."""
    from types import SimpleNamespace

    from sam2_ros.engine.types import FrameResult
    from sam2_ros.ros import images
    from sam2_ros.ros.image_cdr import refused_image
    from sam2_ros.ros.worker import FrameItem, Mailbox, TrackingWorker

    tracked, published = [], []
    tracker = SimpleNamespace(track=lambda rgb: tracked.append(rgb.shape) or FrameResult(
        len(tracked) - 1, 2, 2))
    host = SimpleNamespace(decode=lambda msg: images.image_to_rgb(msg, None), convert=None,
                           log=lambda level, text: None, convert_detections=None,
                           detection_rules=None, thread_init=lambda: None)
    outputs = SimpleNamespace(publish=published.append, publish_overlay=None,
                              has_overlay=False, wants_overlay=lambda: False,
                              alive=lambda: True)
    w = TrackingWorker(tracker, Mailbox(True, 4, 3), host, outputs)
    bad = refused_image(0, 5, 'image message of 9 bytes dropped: too large')
    good = image_msg(np.zeros((2, 2, 3), np.uint8), 6)
    for msg in (bad, good):
        w.handle_frame(FrameItem(msg, msg.header.stamp.nanosec, msg.header, 0.0))
    assert tracked == [(2, 2, 3)] and w.counters.frame_errors == 1
    assert any('image message of 9 bytes dropped: too large' in e for e in published[-1].errors)


def test_the_receivers_limit_is_not_max_image_pixels(monkeypatch):
    """max_image_pixels bounds compressed input only: the receiving process takes any raw
    frame the tracker takes, whatever it is set to."""
    from types import SimpleNamespace

    from sam2_ros.engine.frame_in import MAX_SIDE
    from sam2_ros.ros import receiver

    made = []

    class Fake:
        def __init__(self, topic, on_image, log, **kw):
            made.append(kw)
            self.topic, self.proc = topic, SimpleNamespace(pid=1)

        def start(self):
            pass
    monkeypatch.setattr(receiver, 'ImageReceiver', Fake)
    logger = SimpleNamespace(info=lambda *a, **k: None, error=lambda *a, **k: None)
    node = SimpleNamespace(get_logger=lambda: logger, resolve_topic_name=lambda t: t,
                           get_name=lambda: 'n')
    opts = SimpleNamespace(image_receiver_process=True, fifo_size=4, max_image_pixels=640 * 480,
                           qos_reliability='reliable', process_every_frame=True, qos_depth=1,
                           tune_malloc=False)
    receiver.image_input(node, '/cam', lambda m, t: None, None, opts)
    assert made[0]['max_bytes'] == receiver.MAX_MESSAGE_BYTES >= MAX_SIDE * MAX_SIDE * 4 + 65536


def test_a_failing_image_callback_restarts_the_receiver_instead_of_ending_the_input():
    """The reading thread's callback raises once (a bug, a lost ring): said in the log, the
    receiving process restarted, and the images after it arrive (the thread used to end
    silently, the input with it)."""
    got, fail = [], [True]

    def on_image(msg, t):
        if fail[0]:
            fail[0] = False
            raise RuntimeError('injected')
        got.append(msg.header.stamp.nanosec)
    frame = np.zeros((24, 32, 3), np.uint8)
    with camera_and_receiver('rx_fail', TOPIC, on_image, max_bytes=1 << 20,
                             tune_malloc=False) as r:
        rx, spin_until = r.rx, r.spin_until
        rx.start()
        spin_until(lambda: r.pub.get_subscription_count() > 0, 'the receiver to subscribe')
        r.pub.publish(image_msg(frame, 1, 'rgb8'))
        spin_until(lambda: rx.restarts == 1 and rx.ready.is_set(), 'a restart')
        assert any(level == 'error' and 'injected' in text for level, text in r.logs)
        spin_until(lambda: r.pub.publish(image_msg(frame, 2, 'rgb8')) or got, 'an image after')
        assert got[0] == 2
