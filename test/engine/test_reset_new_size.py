"""Defect 7 of issue 14: after a resolution change the node tells the user to reset; a reset
followed by a prompt at the NEW size, both before the next frame, must be accepted (a reset
that kept the old frame size would reject the click as outside the old frame).

Engine level (the node applies both with queue_prompt before the next frame, see worker.py).
"""

import numpy as np
import pytest

from conftest import make_tracker, textured_frame
from sam2_ros.engine.errors import PromptError
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')


def tracked_small():
    tr = make_tracker(image_size=64, max_objects=3)
    tr.track(textured_frame(48, 64, seed=0))
    tr.add_prompt(Prompt(1, points=np.array([[20.0, 20.0]]), labels=np.array([1])))
    tr.track(textured_frame(48, 64, seed=1))
    return tr


def test_point_at_the_new_size_queued_after_reset():
    tr = tracked_small()
    tr.reset()
    tr.queue_prompt(Prompt(2, points=np.array([[90.0, 70.0]]), labels=np.array([1])))
    res = tr.track(textured_frame(80, 100, seed=2))
    assert (res.height, res.width) == (80, 100) and tr.object_ids == [2]


def test_mask_at_the_new_size_queued_after_reset():
    tr = tracked_small()
    tr.reset()
    mask = np.zeros((80, 100), bool)
    mask[50:75, 70:95] = True
    tr.queue_prompt(Prompt(3, mask=mask))
    res = tr.track(textured_frame(80, 100, seed=2))
    assert res.by_id(3).mask.shape == (80, 100)


def test_after_reset_a_queued_prompt_still_must_fit_the_frame_it_lands_on():
    tr = tracked_small()
    tr.reset()
    tr.queue_prompt(Prompt(2, points=np.array([[90.0, 70.0]]), labels=np.array([1])))
    with pytest.raises(PromptError, match='do not fit'):
        tr.track(textured_frame(48, 64, seed=2))      # the old size again: (90, 70) is outside
    res = tr.track(textured_frame(48, 64, seed=2))
    assert tr.object_ids == [] and res.objects == []
    # and once a frame is tracked, prompts are checked at once again
    with pytest.raises(PromptError):
        tr.queue_prompt(Prompt(2, points=np.array([[90.0, 70.0]]), labels=np.array([1])))
