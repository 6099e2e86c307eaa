"""``~/segment_image`` end to end: the node in a subprocess (CPU, the tests' tiny random model at
image size 64), an rclpy service client here.

A good request (raw and compressed image, a box and a click, multimask off and on) answers
one mono8 mask per prompt with the request's header, equal to an in-process ``ImageSegmenter``
on the same weights (CPU fp32 is deterministic); a bad image and a bad prompt answer
``success`` false with the reason; and the node keeps tracking: every frame before and after
the calls equals an in-process tracker that never served a request (image mode leaves the
tracking state alone).
"""

import numpy as np
import pytest
import torch

from ros_helpers import (NODE_THREADS, TEST_PARAMS, Client, DomainLease, compressed_msg,
                         frames, image_msg, mask_array, prompt_msg, require_messages, stamp,
                         start_node, wait_until)

from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.slow
MODEL_KEYS = ('model_size', 'image_size', 'random_weights', 'seed', 'device', 'precision',
              'use_cuda_graphs', 'extra_hydra_overrides')


class ServiceClient(Client):
    def add_entities(self) -> None:
        super().add_entities()
        from sam2_ros.srv import SegmentImage

        self.srv_type = SegmentImage
        self.srv = self.node.create_client(SegmentImage, '/sam2_tracker/segment_image')

    def segment(self, image=None, compressed=None, prompts=(), multimask=False,
                timeout: float = 120.0):
        wait_until(self.srv.service_is_ready, 30, 'the ~/segment_image service')
        req = self.srv_type.Request()
        if image is not None:
            req.image = image
        if compressed is not None:
            req.compressed_image = compressed
        req.prompts, req.multimask_output = list(prompts), multimask
        fut = self.srv.call_async(req)
        wait_until(fut.done, timeout, 'the ~/segment_image response')
        return fut.result()


@pytest.fixture(scope='module')
def node(tmp_path_factory):
    require_messages()
    try:
        import sam2_ros.srv  # noqa: F401
    except ImportError as exc:
        pytest.fail(f'sam2_ros.srv is not importable ({exc}): rebuild the interfaces with '
                    f'scripts/setup.sh', pytrace=False)
    lease = DomainLease()
    proc = start_node(lease, tmp_path_factory.mktemp('srv'), 'srv', max_objects=2)
    try:
        proc.wait_log(r'\]: active:', 90)
        client = ServiceClient(lease)
        client.wait_connected(30)
    except BaseException:
        proc.stop()
        lease.release()
        raise
    yield proc, client
    client.close()
    proc.stop()
    lease.release()


def _config():
    from sam2_ros.engine.config import TrackerConfig
    torch.set_num_threads(NODE_THREADS)          # as the node: the same reduction order
    return TrackerConfig(max_objects=2, **{k: TEST_PARAMS[k] for k in MODEL_KEYS})


STILL = frames(1, 96, 80, seed=3)[0]              # another size than the stream's frames
BOX, CLICK = (10.0, 8.0, 60.0, 50.0), (70.0, 40.0)


def _prompts():
    return [prompt_msg(3, box=BOX), prompt_msg(5, points=[CLICK], labels=[1])]


def _check(res, header_stamp, reference):
    assert res.success, res.message
    assert list(res.object_ids) == [3, 5] and len(res.masks) == 2
    assert res.header.stamp.sec * 10 ** 9 + res.header.stamp.nanosec == header_stamp
    for i, m in enumerate(res.masks):
        assert (m.height, m.width, m.encoding) == (80, 96, 'mono8')
        assert m.header.stamp == res.header.stamp
        arr = mask_array(m)
        assert set(np.unique(arr)) <= {0, 255}
        np.testing.assert_array_equal(arr > 0, reference.masks[i])
    np.testing.assert_allclose(res.iou, reference.iou, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res.object_scores, reference.object_score, rtol=1e-5, atol=1e-5)
    assert res.mode == 'eager' and res.engine_ms > 0


def test_tracking_goes_on_around_good_and_bad_requests(node):
    from sam2_ros.engine.image import ImageSegmenter
    from sam2_ros.engine.tracker import StreamingTracker
    proc, c = node
    cfg = _config()
    fr = frames(4)
    ref_tracker = StreamingTracker(cfg)
    c.send_prompts(prompt_msg(1, stamp(0), box=(10, 20, 50, 60)))
    for i in (0, 1):
        c.pub_image.publish(image_msg(fr[i], stamp(i)))
    c.wait_state(stamp(1), 60)

    seg = ImageSegmenter(cfg)
    ours = [Prompt(3, box=BOX), Prompt(5, points=np.array([CLICK], np.float32),
                                       labels=np.ones(1, np.int64))]
    for multimask in (False, True):
        ref = seg.segment(STILL, ours, multimask)
        _check(c.segment(image_msg(STILL, stamp(50)), prompts=_prompts(),
                         multimask=multimask), stamp(50), ref)
    # compressed (png: lossless) gives the same masks; the header is the compressed one's
    _check(c.segment(compressed=compressed_msg(STILL, stamp(51)), prompts=_prompts()),
           stamp(51), seg.segment(STILL, ours))

    bad = image_msg(STILL, stamp(52))
    bad.data = bad.data[:-10]                                     # shorter than height*step
    res = c.segment(image=bad, prompts=_prompts())
    assert not res.success and res.message.startswith('bad image:') and 'height*step' in \
        res.message and len(res.masks) == 0
    res = c.segment(prompts=_prompts())                           # no image at all
    assert not res.success and 'no image' in res.message
    far = prompt_msg(4, box=(10.0, 8.0, 500.0, 50.0))              # outside the 96x80 image
    res = c.segment(image_msg(STILL, stamp(53)), prompts=[prompt_msg(3, box=BOX), far])
    assert not res.success and res.message.startswith('bad prompt: prompt 1 (object 4)')
    remove = prompt_msg(3, action=1)
    res = c.segment(image_msg(STILL, stamp(54)), prompts=[remove])
    assert not res.success and 'ACTION_ADD' in res.message

    for i in (2, 3):
        c.pub_image.publish(image_msg(fr[i], stamp(i)))
    c.wait_state(stamp(3), 60)
    # every frame equals a tracker that never served a request
    ref_tracker.queue_prompt(Prompt(1, box=(10, 20, 50, 60)))
    want = [ref_tracker.track(f) for f in fr]
    masks = {m.header.stamp.sec * 10 ** 9 + m.header.stamp.nanosec: m
             for m in c.snapshot(c.masks)}
    states = {i: c.states_for(stamp(i))[-1] for i in range(4)}
    for i, r in enumerate(want):
        np.testing.assert_array_equal(mask_array(masks[stamp(i)]), r.label_mask())
        assert [(o.object_id, o.area) for o in states[i].objects] == \
            [(o.obj_id, o.area) for o in r.objects]
        for o, w in zip(states[i].objects, r.objects):
            assert o.score == pytest.approx(w.score, rel=1e-6, abs=1e-6)
    assert states[3].processed_frames >= 4 and proc.alive()
