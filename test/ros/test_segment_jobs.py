"""``~/segment_image``'s parts without DDS: the job handed to the worker (run once, given up
before it starts, a timeout, a failure), the mailbox's job queue, and a request filled from
a fake tracker (bad image, bad prompt, failed computation: a reason, no exception)."""

import numpy as np
import pytest

from ros_helpers import image_msg, prompt_msg, require_messages

from sam2_ros.engine.errors import StepError
from sam2_ros.ros import segment_service as ss
from sam2_ros.ros.mailbox import Mailbox


def _job(work=lambda: None):
    failed = []
    return ss.SegmentJob(work, failed.append), failed


def test_a_job_runs_once():
    runs = []
    job, failed = _job(lambda: runs.append(1))
    job.run()
    job.run()
    assert runs == [1] and not failed and job.finished.is_set()
    assert not job.abandon('late')              # it ran: nothing to give up


def test_a_job_given_up_never_runs():
    runs = []
    job, failed = _job(lambda: runs.append(1))
    assert job.abandon('stopping')
    job.run()
    assert runs == [] and failed == ['stopping'] and job.finished.is_set()


def test_a_job_not_started_in_time_is_answered_timed_out():
    job, failed = _job()
    job.wait(0.0)
    assert len(failed) == 1 and failed[0].startswith('timed out')
    job.run()
    assert len(failed) == 1


def test_a_failing_job_reports_and_finishes():
    def boom():
        raise RuntimeError('kaput')
    job, failed = _job(boom)
    job.run()                                    # never raises into the worker
    assert failed[0].startswith("internal error: RuntimeError('kaput')")


def test_mailbox_jobs_wake_the_worker_and_close_abandons_them():
    mb = Mailbox(False, 1, 10)
    job, failed = _job()
    assert mb.put_job(job)
    frame, prompts = mb.take(30.0)               # returns at once: a job waits
    assert frame is None and prompts == [] and mb.take_jobs() == [job] and mb.take_jobs() == []
    late, late_failed = _job()
    assert mb.put_job(late)
    mb.close()
    assert late_failed and 'stopped' in late_failed[0] and late.finished.is_set()
    assert not mb.put_job(_job()[0])


class FakeSegmenter:
    def __init__(self, exc=None):
        self.exc, self.calls = exc, []

    def segment(self, rgb, prompts, multimask):
        self.calls.append((rgb.shape, [p.obj_id for p in prompts], multimask))
        if self.exc:
            raise self.exc
        n, (h, w) = len(prompts), rgb.shape[:2]
        from sam2_ros.engine.image import ImageResult
        masks = np.zeros((n, h, w), bool)
        masks[:, :2, :3] = True
        return ImageResult(h, w, masks, np.full(n, 0.5), np.full(n, -1.0), np.zeros((n, 7)),
                           None, 'eager', 1.5)


class FakeTracker:
    def __init__(self, seg):
        self.seg = seg

    def image_mode(self):
        return self.seg


def _request(prompts, image=True):
    require_messages()
    from sam2_ros.srv import SegmentImage
    req = SegmentImage.Request()
    if image:
        req.image = image_msg(np.full((20, 30, 3), 100, np.uint8), 123)
    req.prompts = prompts
    return req, SegmentImage.Response()


@pytest.fixture(scope='module')
def bridge():
    from cv_bridge import CvBridge
    return CvBridge()


def test_fill_a_good_request(bridge):
    seg = FakeSegmenter()
    req, res = _request([prompt_msg(4, box=(1, 1, 9, 9)), prompt_msg(6, points=[(3, 3)])])
    req.multimask_output = True
    ss.fill(res, FakeTracker(seg), req, bridge, 10 ** 6)
    assert res.success and list(res.object_ids) == [4, 6] and seg.calls == [((20, 30, 3),
                                                                             [4, 6], True)]
    assert res.header.stamp.nanosec == 123 and list(res.iou) == [0.5, 0.5]
    m = np.frombuffer(bytes(res.masks[1].data), np.uint8).reshape(20, 30)
    assert m[:2, :3].min() == 255 and m.sum() == 255 * 6 and res.masks[1].encoding == 'mono8'


@pytest.mark.parametrize('case, start', [
    ('no image', 'bad image: no image'), ('short data', 'bad image: image data has'),
    ('remove', 'bad prompt: prompt 0 (object 4): action must be ACTION_ADD'),
    ('labels', 'bad prompt: prompt 1 (object 6): 2 labels for 1 points'),
    ('step', 'StepError: kaput'),
    ('huge', 'bad image: image of 30x20 is larger than max_image_pixels 599: not converted')])
def test_fill_a_bad_request_says_why(bridge, case, start):
    seg = FakeSegmenter(StepError('kaput') if case == 'step' else None)
    prompts = [prompt_msg(4, box=(1, 1, 9, 9), action=1 if case == 'remove' else 0),
               prompt_msg(6, points=[(3, 3)], labels=[1, 0] if case == 'labels' else [1])]
    req, res = _request(prompts, image=case != 'no image')
    if case == 'short data':
        req.image.data = req.image.data[:100]
    ss.fill(res, FakeTracker(seg), req, bridge, 599 if case == 'huge' else 10 ** 6)
    assert not res.success and res.message.startswith(start), res.message
    assert len(res.masks) == 0 and len(seg.calls) == (case == 'step')
