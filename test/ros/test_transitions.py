"""A lifecycle transition callback that raises is logged with its reason, undone and failed
(rclpy's lifecycle wrapper would fail it silently); bad topic names and timing-log paths are
refused when the configuration is checked, before a tracker is built."""

import pytest
from rclpy.lifecycle import TransitionCallbackReturn

from sam2_ros.ros import params, transitions


class FakeNode:
    def __init__(self):
        self.lines, self.undone = [], 0

    def get_logger(self):
        return self

    def error(self, text):
        self.lines.append(text)

    def stop_io(self):
        self.undone += 1

    @transitions.loud('activate', undo='stop_io')
    def on_activate(self, state):
        if state == 'bad':
            raise ValueError("topic name 'a b' is invalid")
        return TransitionCallbackReturn.SUCCESS


def test_a_raising_transition_is_logged_undone_and_failed():
    node = FakeNode()
    assert node.on_activate('good') == TransitionCallbackReturn.SUCCESS
    assert node.lines == [] and node.undone == 0
    assert node.on_activate('bad') == TransitionCallbackReturn.FAILURE
    assert node.lines == ["activate failed: ValueError: topic name 'a b' is invalid"]
    assert node.undone == 1


@pytest.mark.parametrize('change, reason', [
    ({'image_topic': 'bad topic name'}, 'image_topic must be a valid ROS topic name'),
    ({'image_topic': '/cam//image'}, 'image_topic must be a valid ROS topic name'),
    ({'image_topic': ''}, 'image_topic must be a valid ROS topic name'),
    ({'cameras': ['left', 'right'], 'camera_image': '##'},
     'camera_image under each camera must be a valid ROS topic name'),
    ({'timing_log': '/nonexistent/folder/t.jsonl'}, 'timing_log must be a file we can write'),
    ({'timing_log': '/'}, 'timing_log must be a file we can write'),         # a folder
])
def test_bad_topic_names_and_timing_log_folders_are_refused(change, reason):
    current = {'random_weights': True, 'image_size': 64}
    assert reason in params.refusal(current, change)
    with pytest.raises(ValueError, match=reason):
        params.build({**current, **change})


def test_good_topic_names_pass(tmp_path):
    current = {'random_weights': True, 'image_size': 64}
    for change in ({'image_topic': '/stereo/left/image_rect'}, {'image_topic': 'image_raw'},
                   {'image_topic': '~/input'}, {'timing_log': str(tmp_path / 't.jsonl')},
                   {'cameras': ['left', 'right'], 'camera_image': 'image_rect'}):
        assert params.refusal(current, change) == ''
