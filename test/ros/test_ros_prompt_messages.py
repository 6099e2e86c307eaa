"""The messages of refused prompts (issue 32, defect 7): one style ('rejected <prompt>:
<error type>: <reason>'), a stamp-less rqt click not named 'stamp -1 ns', a flood of stamp-0
prompts told what waits and what to do, 'box contains NaN'."""

from __future__ import annotations

import numpy as np
import pytest

from test_ros_worker import ADD, REMOVE, frame, make_worker, prompt

from sam2_ros.engine.errors import PromptError
from sam2_ros.engine.prompts import prompt_points
from sam2_ros.engine.types import Prompt
from sam2_ros.ros.mailbox import LATEST, PromptItem, describe


def errors(logs):
    return [t for lvl, t in logs if lvl == 'error']


def test_describe_names_a_prompt_by_its_stamp_or_the_latest_frame():
    assert describe('click', LATEST) == 'click (no stamp: the latest frame)'
    assert describe('prompt', 0) == 'prompt (stamp 0: the next frame)'
    assert describe('prompt', 5) == 'prompt (stamp 5 ns)'


def test_one_style_for_refused_prompts_and_no_sentinel_stamp():
    w, tr, pub, logs = make_worker()

    def bad_convert(item):
        raise PromptError('object_id must be in 1..255, got 0')
    w.handle_frame(frame(1, 10))
    w.handle_prompt(prompt(REMOVE, 9, 10))                     # refused by the tracker
    w.host.convert = bad_convert
    w.handle_prompt(PromptItem(None, 'click', LATEST))         # refused by the conversion
    assert errors(logs) == [
        'rejected prompt (stamp 10 ns): UnknownObjectError: cannot remove object 9',
        'rejected click (no stamp: the latest frame): PromptError: object_id must be in '
        '1..255, got 0']
    assert not any('-1 ns' in t for _, t in logs)


def test_flood_of_stamp_0_prompts_says_what_waits():
    w, tr, pub, logs = make_worker()      # prompt_queue_size 3
    for i in range(4):
        w.handle_prompt(prompt(ADD, i + 1, 0))
    assert errors(logs) == [
        'rejected prompt (stamp 0: the next frame): 3 prompts already wait for the next frame '
        'or later ones (prompt_queue_size 3); send them once that frame is processed, or raise '
        'prompt_queue_size']


@pytest.mark.parametrize('prompt_kw, text', [
    ({'box': np.array([0, 0, np.nan, 4.0])}, 'box contains NaN or inf'),
    ({'points': np.array([[np.nan, 1.0]]), 'labels': np.array([1])},
     'points contain NaN or inf')])
def test_nan_in_a_box_or_points_is_refused_saying_nan_or_inf(prompt_kw, text):
    import torch

    with pytest.raises(PromptError, match=text):
        prompt_points(Prompt(1, **prompt_kw), 8, 8, 64, torch.device('cpu'))


def test_a_mask_of_width_0_is_no_mask_whatever_its_height():
    """msg/Prompt.msg: mask width == 0 means no mask, so the points are the prompt."""
    from types import SimpleNamespace

    from sam2_ros.ros.inputs import ACTION_ADD, prompt_from_msg

    msg = SimpleNamespace(action=ACTION_ADD, object_id=3, points=[SimpleNamespace(x=4.0, y=5.0)],
                          labels=[1], has_box=False, box=[0.0] * 4,
                          mask=SimpleNamespace(width=0, height=5, encoding='', data=b''))
    action, p = prompt_from_msg(msg, bridge=None)
    assert action == ACTION_ADD and p.mask is None and p.points.tolist() == [[4.0, 5.0]]
