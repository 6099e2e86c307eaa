"""corrections_on_next_frame (NodeOptions; sam2_ros/ros/worker.py ``_apply``), with a real small
tracker in the worker (CPU, no DDS): a click on the last processed frame is deferred to the next
frame, whose published result has the correction applied (bitwise the in-process add_prompt
then track), and the old frame is not published again; false keeps the immediate correction
and its re-publish. The multi-camera worker's lanes do the same per camera."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import LEAN, shared_model, small_cfg, textured_frame, tracker_on_shared_model
from test_ros_worker import host, outputs
from sam2_ros.engine.camera import CameraTracker
from sam2_ros.engine.multistream import MultiStreamTracker
from sam2_ros.engine.types import Prompt
from sam2_ros.ros import detections as det
from sam2_ros.ros.inputs import ACTION_ADD
from sam2_ros.ros.multi_worker import MultiCameraWorker
from sam2_ros.ros.paired_mailbox import PairedMailbox
from sam2_ros.ros.pairing import Arrival, Group
from sam2_ros.ros.worker import FrameItem, Mailbox, PromptItem, TrackingWorker

pytestmark = pytest.mark.usefixtures('one_thread')

H, W = 48, 64
BOX = Prompt(1, box=(5, 5, 30, 30))
CLICK = Prompt(1, points=np.array([[28.0, 22.0]]), labels=np.array([0]))   # a negative click


def cfg_of():
    return small_cfg(image_size=64, max_objects=3, extra_hydra_overrides=list(LEAN))


def multi(cfg):
    return MultiStreamTracker(cfg, cameras=2, model=shared_model(
        cfg.image_size, cfg.corrections_as_cond, cfg.extra_hydra_overrides))


def image(i, cam=0):
    return textured_frame(H, W, seed=100 * cam + i)


def frame_item(i, stamp, cam=0):
    return FrameItem(image(i, cam), stamp, SimpleNamespace(stamp=stamp), time.monotonic())


def prompt_item(p, stamp):
    return PromptItem(p, 'prompt', stamp)


def lane_host():
    return host(decode=lambda rgb: rgb, convert=lambda item: (ACTION_ADD, item.msg))


def reference():
    """The in-process calls: box queued for frame 0, frame 0, the click on it, frame 1."""
    r = tracker_on_shared_model(cfg_of())
    r.queue_prompt(BOX)
    r.track(image(0))
    corrected = r.add_prompt(CLICK)
    return corrected, r.track(image(1))


def same(a, b):
    assert [o.obj_id for o in a.objects] == [o.obj_id for o in b.objects]
    for x, y in zip(a.objects, b.objects):
        assert torch.equal(x.low_res_logits, y.low_res_logits) and x.score == y.score
        assert np.array_equal(x.mask, y.mask) and x.state == y.state


@pytest.mark.parametrize('deferred', [True, False])
def test_click_on_the_last_frame_shows_on_the_next(deferred):
    tr = tracker_on_shared_model(cfg_of())
    published = []
    w = TrackingWorker(tr, Mailbox(True, 4, 8), lane_host(), outputs(published.append),
                       corrections_on_next_frame=deferred)
    w.handle_prompt(prompt_item(BOX, 0))              # stamp 0: the next frame
    w.handle_frame(frame_item(0, 100))
    w.handle_prompt(prompt_item(CLICK, 100))          # the frame just processed
    corrected, after = reference()
    if deferred:                                   # computed with the next frame, not now
        assert len(published) == 1 and tr.deferred_ids == [1]
    else:                                          # applied at once, frame 100 re-published
        assert [p.header.stamp for p in published] == [100, 100]
        assert published[-1].recv_t is None
        same(published[-1].result, corrected)
    w.handle_frame(frame_item(1, 200))
    assert [p.header.stamp for p in published] == [100] + [100] * (not deferred) + [200]
    same(published[-1].result, after)              # the correction applied, either way
    assert tr.deferred_ids == [] and published[-1].result.by_id(1).frames_since_prompt == 1
    # and not trivially: without the click frame 1 is another result
    plain = tracker_on_shared_model(cfg_of())
    plain.queue_prompt(BOX)
    plain.track(image(0))
    assert not torch.equal(plain.track(image(1)).by_id(1).low_res_logits,
                           after.by_id(1).low_res_logits)


def test_multi_camera_lanes_defer_per_camera():
    core = multi(cfg_of())
    ref = multi(cfg_of())
    published = [[], []]
    w = MultiCameraWorker(core, PairedMailbox(2, True, 4, 8, period_ns=33_000_000),
                          [lane_host(), lane_host()],
                          [outputs(published[0].append), outputs(published[1].append)],
                          [det.Association(), det.Association()],
                          corrections_on_next_frame=True)
    assert all(lane.defer_corrections for lane in w.lanes)

    def group(i, stamp):
        return Group(stamp, [Arrival(c, stamp, 0, frame_item(i, stamp, c)) for c in range(2)],
                     'complete')
    for c in range(2):
        w.lanes[c].handle_prompt(prompt_item(BOX, 0))
        ref.stream(c).queue_prompt(BOX)
    w.handle_group(group(0, 100))
    ref.track([image(0, 0), image(0, 1)])
    w.lanes[1].handle_prompt(prompt_item(CLICK, 100))     # camera 1's last frame
    CameraTracker(ref, 1).add_prompt(CLICK)
    assert w.lanes[1].tracker.deferred_ids == [1] and [len(p) for p in published] == [1, 1]
    w.handle_group(group(1, 200))
    want = ref.track([image(1, 0), image(1, 1)])
    assert [len(p) for p in published] == [2, 2]           # no re-publish of frame 100
    for c in range(2):
        same(published[c][-1].result, want.results[c])


def test_new_object_clicks_on_the_last_frame_apply_at_once_with_distinct_ids():
    """click_mode 'new' (NodeHost.convert) with deferred corrections: a new object is not a
    correction, so each click starts its object on the last frame at once (the frame
    re-published) and the second click takes another id."""
    from sam2_ros.ros.node_host import NodeHost

    values = {'click_mode': 'new', 'click_object_id': 1}
    node = SimpleNamespace(
        get_parameter=lambda name: SimpleNamespace(value=values[name]),
        set_parameters=lambda ps: values.update({p.name: p.value for p in ps}))
    tr = tracker_on_shared_model(cfg_of())
    h = NodeHost(node, tr, tr.cfg, None, None, SimpleNamespace(log=lambda lvl, t: None),
                 held_ids=lambda: w.hold.object_ids())
    published = []
    w = TrackingWorker(tr, Mailbox(True, 4, 8),
                       host(decode=lambda rgb: rgb, convert=h.convert),
                       outputs(published.append), corrections_on_next_frame=True)
    w.handle_frame(frame_item(0, 100))
    for x in (15.0, 45.0):
        w.handle_prompt(PromptItem(SimpleNamespace(x=x, y=20.0), 'click', 100))
    assert tr.deferred_ids == [] and tr.object_ids == [1, 2] and values['click_object_id'] == 2
    assert [[o.obj_id for o in p.result.objects] for p in published] == [[], [1], [1, 2]]
    w.handle_frame(frame_item(1, 200))
    assert [o.obj_id for o in published[-1].result.objects] == [1, 2] and len(published) == 4
