"""``~/segment_image`` (srv/SegmentImage.srv): image mode from ROS, beside tracking.

The tracker is not thread safe and the worker thread is the only one that touches it, so a
request becomes a :class:`SegmentJob` handed to the worker through the mailbox
(:meth:`~sam2_ros.ros.mailbox.Mailbox.put_job`); the worker runs it between two frames (after
the frame in progress) and the service callback waits for it. Everything of the request is
decoded and checked in the job: a bad image or prompt is a response with ``success`` false and
the reason, never an exception in the executor, and the tracking state is not touched either
way (image mode keeps its own features, ``StreamingTracker.image_mode``).

The callback blocks the node's executor while it waits (a frame arriving meanwhile waits in
DDS as it would behind any slow callback); a request not started within
``SERVICE_TIMEOUT_S`` is answered as timed out and never runs.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any, Callable, List, Optional

import numpy as np

from sam2_ros.engine.errors import FrameError, PromptError, TrackerError
from sam2_ros.engine.types import Prompt
from sam2_ros.ros import images, inputs

SERVICE = '~/segment_image'
# How long a request may wait for the worker to start it (a frame in progress on a slow device
# and the first call's graph capture included).
SERVICE_TIMEOUT_S = 60.0
WAITING, RUNNING, DONE = 'waiting', 'running', 'done'


class SegmentJob:
    """One request, run once on the worker thread (``run``) or given up before it started
    (``abandon``); ``wait`` is the caller's side."""

    def __init__(self, work: Callable[[], None], fail: Callable[[str], None]) -> None:
        self.work, self.fail = work, fail
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self.state = WAITING

    def run(self) -> None:
        with self._lock:
            if self.state != WAITING:
                return
            self.state = RUNNING
        try:
            self.work()
        except Exception as exc:  # noqa: BLE001 - the worker must go on tracking
            self.fail(f'internal error: {exc!r}\n{traceback.format_exc()}')
        finally:
            self.state = DONE
            self.finished.set()

    def abandon(self, reason: str) -> bool:
        """Answer ``reason`` instead, if the job has not started; False when it runs or ran."""
        with self._lock:
            if self.state != WAITING:
                return False
            self.state = DONE
        self.fail(reason)
        self.finished.set()
        return True

    def wait(self, timeout: float) -> None:
        """Until the job is done; one not started within ``timeout`` s is abandoned (a running
        one is waited for: a model call cannot be interrupted)."""
        if not self.finished.wait(timeout):
            if not self.abandon(f'timed out: the tracker did not start the request within '
                                f'{timeout:.0f} s'):
                self.finished.wait()


# ---- the request, on the worker thread ------------------------------------------------------
def request_image(request: Any, bridge: Any, max_pixels: int) -> np.ndarray:
    """The request's image as [H, W, 3] uint8 RGB: ``image`` if it has pixels, else
    ``compressed_image``; either of at most ``max_pixels`` (a raw image checked before any
    conversion: a huge mono8 image would be converted and copied first). Raises FrameError."""
    if request.image.width or request.image.height:
        raw = request.image
        if int(raw.width) * int(raw.height) > max_pixels:
            raise FrameError(f'image of {raw.width}x{raw.height} is larger than '
                             f'max_image_pixels {max_pixels}: not converted')
        return images.image_to_rgb(raw, bridge)
    if len(request.compressed_image.data):
        return images.compressed_to_rgb(request.compressed_image, max_pixels)
    raise FrameError('no image: set image (sensor_msgs/Image) or compressed_image')


def request_prompts(msgs: List[Any], bridge: Any) -> List[Prompt]:
    """The request's prompts (ACTION_ADD each). Raises PromptError naming the prompt."""
    out = []
    for i, m in enumerate(msgs):
        try:
            if int(m.action) != inputs.ACTION_ADD:
                raise PromptError(f'action must be ACTION_ADD ({inputs.ACTION_ADD}), got '
                                  f'{int(m.action)}: remove and reset act on tracked objects')
            out.append(inputs.prompt_from_msg(m, bridge)[1])
        except PromptError as exc:
            raise PromptError(f'prompt {i} (object {int(m.object_id)}): {exc}') from None
    return out


def header_of(request: Any) -> Any:
    """The header of the image the request carries (raw or compressed)."""
    raw = request.image.width or request.image.height or not len(request.compressed_image.data)
    return request.image.header if raw else request.compressed_image.header


def fill(response: Any, tracker: Any, request: Any, bridge: Any, max_pixels: int) -> None:
    """Segment the request's image on ``tracker``'s image mode into ``response``; a bad
    image, bad prompt or failed computation is ``success`` false with the reason."""
    response.header = header_of(request)
    try:
        rgb = request_image(request, bridge, max_pixels)
        prompts = request_prompts(request.prompts, bridge)
        res = tracker.image_mode().segment(rgb, prompts, bool(request.multimask_output))
    except TrackerError as exc:
        kind = ('bad image' if isinstance(exc, FrameError) else
                'bad prompt' if isinstance(exc, PromptError) else type(exc).__name__)
        response.success, response.message = False, f'{kind}: {exc}'
        return
    response.object_ids = [int(p.obj_id) for p in prompts]
    response.masks = [images.image_msg(m.view(np.uint8) * np.uint8(255), 'mono8',
                                       response.header) for m in res.masks]
    response.iou = [float(v) for v in res.iou]
    response.object_scores = [float(v) for v in res.object_score]
    response.engine_ms, response.mode = float(res.engine_ms), res.mode
    response.success = True
    response.message = f'{len(prompts)} mask(s), {res.width}x{res.height}'


# ---- the node's side -------------------------------------------------------------------------
class ImageService:
    """The service callback: hands the request to the active worker and waits for it."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.calls = 0
        self.failures = 0

    def handle(self, request: Any, response: Any) -> Any:
        node = self.node
        self.calls += 1
        mailbox, tracker, worker = node.mailbox, node.tracker, node.worker
        if worker is None or mailbox is None or tracker is None:
            return self._failed(response, 'the tracker is not active: configure and activate '
                                          'the node first')

        def fail(text: str) -> None:
            response.success, response.message = False, text
        opts = node.opts
        job = SegmentJob(lambda: fill(response, tracker, request, node.bridge,
                                      opts.max_image_pixels), fail)
        if not mailbox.put_job(job):
            return self._failed(response, 'the tracker is stopping')
        job.wait(SERVICE_TIMEOUT_S)
        if not response.success:
            self._failed(response, response.message)
        return response

    def _failed(self, response: Any, text: str) -> Any:
        self.failures += 1
        response.success, response.message = False, text
        self.node.log.log('warn', f'{SERVICE}: {text}')
        return response


def create(node: Any) -> Optional[Any]:
    """``~/segment_image`` on ``node`` (answers in every lifecycle state), or None with a
    warning when the generated service type is missing (interfaces built before it existed)."""
    try:
        from sam2_ros.srv import SegmentImage
    except ImportError as exc:
        node.get_logger().warning(f'{SERVICE} is off: sam2_ros.srv is not importable ({exc}); '
                                  f'rebuild the interfaces (scripts/setup.sh)')
        return None
    service = ImageService(node)
    try:
        node.create_service(SegmentImage, SERVICE, service.handle)
    except Exception as exc:  # noqa: BLE001 - e.g. type support of an older build: no service
        node.get_logger().warning(f'{SERVICE} is off: {type(exc).__name__}: {exc}; rebuild '
                                  f'the interfaces (scripts/setup.sh)')
        return None
    return service
