"""What the tracker core's input errors say: each names what was wrong, with what, and the fix.

The error classes and when each is raised: docs/streaming.md (Errors and limits). The prompt
checks run on the host (prompts.py), so most cases call them directly; the messages that need
the tracker's state (capacity, queued prompts, removal, resolution) use a small random model.
"""

import numpy as np
import pytest

from conftest import assert_unchanged, make_tracker, snapshot, textured_frame
from sam2_ros.engine import prompts
from sam2_ros.engine.errors import CapacityError, FrameError, PromptError, UnknownObjectError
from sam2_ros.engine.types import Prompt

pytestmark = pytest.mark.usefixtures('one_thread')

H, W = 48, 64
CPU = 'cpu'


def click(obj_id, x=20.0, y=20.0, label=1):
    return Prompt(obj_id, points=np.array([[x, y]]), labels=np.array([label]))


def message(prompt) -> str:
    fn = prompts.prompt_mask if prompt.mask is not None else prompts.prompt_points
    with pytest.raises(PromptError) as err:
        fn(prompt, H, W, 64, CPU)
    return str(err.value)


# ---- points and labels ----------------------------------------------------------------------
def test_points_without_labels_say_labels_are_required_one_per_point():
    assert message(Prompt(1, points=[[3.0, 4.0]])) == (
        'labels are required with points: one per point (1 positive, 0 negative); got 1 point '
        'and 0 labels')
    assert message(Prompt(1, points=[[3.0, 4.0], [5.0, 6.0]], labels=[1])) == (
        'points need one label each (1 positive, 0 negative); got 2 points and 1 label')


def test_bad_labels_are_shown_as_given_not_as_floats():
    assert message(Prompt(1, points=[[3.0, 4.0]], labels=[2])).endswith('got [2]')
    assert message(Prompt(1, points=[[3.0, 4.0], [5.0, 6.0]], labels=[1, 0.5])).endswith(
        'got [1, 0.5]')


@pytest.mark.parametrize('prompt', [
    Prompt(1, points=np.zeros((0, 2)), labels=[1], box=(1, 1, 5, 5)),
    Prompt(1, labels=[1], box=(1, 1, 5, 5)),
    Prompt(1, labels=[1, 0]),
    Prompt(1, mask=np.ones((H, W), bool), labels=[1]),
], ids=['empty_points_and_box', 'no_points_and_box', 'labels_alone', 'mask'])
def test_labels_without_points_are_refused_not_ignored(prompt):
    """sam2's add_new_points_or_box refuses labels without points; a box alone with them was
    accepted and the labels dropped."""
    assert 'label' in message(prompt)


def test_a_box_with_empty_points_and_empty_labels_is_still_a_box():
    for p in (Prompt(1, points=np.zeros((0, 2)), labels=[], box=(1, 1, 5, 5)),
              Prompt(1, points=np.zeros((0, 2)), labels=None, box=(1, 1, 5, 5))):
        assert prompts.prompt_points(p, H, W, 64, CPU)['point_labels'].tolist() == [[2, 3]]


# ---- sizes: always width x height ------------------------------------------------------------
def test_sizes_are_written_width_x_height_and_say_so():
    assert message(click(1, x=W + 1.0)) == (
        f'point ({W + 1}, 20) is outside the {W}x{H} frame (width x height)')
    assert message(Prompt(1, box=(0, 0, 5, H + 1))).endswith(
        f'outside the {W}x{H} frame (width x height)')
    assert message(Prompt(1, mask=np.ones((W, H), bool))) == (
        f"mask prompt must have the frame's size, {W}x{H} (width x height): an array of shape "
        f'({H}, {W}), got shape ({W}, {H})')


def test_a_resolution_change_is_written_width_x_height():
    tr = make_tracker(image_size=64, max_objects=2)
    tr.track(textured_frame(H, W, seed=0))
    tr.add_prompt(click(1))
    with pytest.raises(FrameError, match=rf'from {W}x{H} to 80x60 \(width x height\)'):
        tr.track(textured_frame(60, 80, seed=1))


# ---- the tracker's state ---------------------------------------------------------------------
def test_capacity_error_names_the_id_and_the_fix_and_counts_deferred_prompts_as_deferred():
    tr = make_tracker(image_size=64, max_objects=2)
    tr.track(textured_frame(H, W, seed=0))
    tr.add_prompt(click(1))
    tr.defer_prompt(click(2, x=45.0))                   # a new object, deferred
    snap = snapshot(tr)
    want = ('cannot add object 3: max_objects=2 reached (1 tracked, 0 queued and 1 deferred to '
            'start); remove_object() one of them, or configure a larger max_objects')
    for call in (tr.add_prompt, tr.defer_prompt, tr.queue_prompt):
        with pytest.raises(CapacityError) as err:
            call(click(3, x=30.0))
        assert str(err.value) == want
        assert_unchanged(tr, snap)


def test_a_queued_prompt_that_does_not_fit_says_the_frame_was_not_tracked():
    tr = make_tracker(image_size=64, max_objects=2)
    tr.queue_prompt(click(1))                           # before any frame: checked on arrival
    tr.queue_prompt(click(2, x=W + 10.0))
    with pytest.raises(PromptError) as err:
        tr.track(textured_frame(H, W, seed=0))
    assert str(err.value) == (
        f'frame not tracked: the queued prompts that do not fit it were dropped (object 2: '
        f'point ({W + 10}, 20) is outside the {W}x{H} frame (width x height)); pass the frame '
        f'again (the other queued prompts stay queued)')
    assert tr.frame_index == -1 and tr.queued_ids == [1]      # as it says
    res = tr.track(textured_frame(H, W, seed=0))
    assert res.frame_index == 0 and tr.object_ids == [1]


@pytest.mark.parametrize('value', ['1', 1.0, True, 0, 256])
def test_remove_object_of_a_value_that_is_no_id_says_so_and_removes_nothing(value):
    """'1', 1.0 and True used to find object 1 (or claim it was not tracked)."""
    tr = make_tracker(image_size=64, max_objects=2)
    tr.track(textured_frame(H, W, seed=0))
    tr.add_prompt(click(1))
    with pytest.raises(UnknownObjectError, match=f'cannot remove object {value!r}: object id '
                                                 f'must be'):
        tr.remove_object(value)
    assert tr.object_ids == [1]
    tr.remove_object(np.int64(1))                       # an integer of numpy's is an id
    assert tr.object_ids == []
    with pytest.raises(UnknownObjectError, match=r'object 1: not tracked, queued or deferred'):
        tr.remove_object(1)
