"""Defect 11 of issue 14: the '(previous message repeated N more times)' count must not be
appended to the next, DIFFERENT log line, which would then read as the repeated one."""

from sam2_ros.ros.log_filter import RepeatFilter


class Clock:
    t = 0.0

    def __call__(self):
        return self.t


def test_repeats_are_summarised_on_their_own_line_before_the_next_message():
    clock = Clock()
    f = RepeatFilter(2.0, clock)
    assert f.filter('error', 'frame skipped: bad encoding') == [
        ('error', 'frame skipped: bad encoding')]
    for _ in range(3):
        clock.t += 0.1
        assert f.filter('error', 'frame skipped: bad encoding') == []
    out = f.filter('warn', 'prompt rejected')
    assert out == [('error', 'previous message repeated 3 more times: frame skipped: bad '
                             'encoding'),
                   ('warn', 'prompt rejected')]
    assert 'repeated' not in out[1][1]


def test_same_line_after_the_window_is_logged_again_after_its_summary():
    clock = Clock()
    f = RepeatFilter(2.0, clock)
    f.filter('error', 'x')
    clock.t = 1.0
    assert f.filter('error', 'x') == []
    clock.t = 5.0
    assert f.filter('error', 'x') == [('error', 'previous message repeated 1 more time: x'),
                                      ('error', 'x')]
    assert f.flush() == []


def test_flush_reports_pending_repeats():
    f = RepeatFilter(2.0, Clock())
    f.filter('info', 'a')
    f.filter('info', 'a')
    assert f.flush() == [('info', 'previous message repeated 1 more time: a')]
    assert f.flush() == []
