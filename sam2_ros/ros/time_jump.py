"""Time going backwards, e.g. a bag replayed again into a node that already tracked it.

ROS nodes treat a backwards jump of their clock as a reset (tf2 clears its buffer): what was
kept by time no longer lines up with the new time line. The tracker node does the same when
the image stamps jump back (a frame older than the last processed one), or, under
``use_sim_time``, when ``/clock`` does, by more than ``time_jump_reset_s`` or to the first stamp
of the run or before it: objects, held prompts and the stamp table are reset and one line is
logged. A smaller step back (NTP or PTP stepping a live camera's clock, a driver delivering two
frames out of order) is reported and the objects are kept: a surgeon's objects must not vanish
because a clock was corrected by 50 ms. Nothing here imports ROS at import time.
"""

from __future__ import annotations

from typing import Callable, Optional

# time_jump_reset_s's default: a bag restarted goes back by its length (seconds or more, or to
# its first stamp, caught apart from this); a clock corrected goes back by milliseconds
RESET_AFTER_S = 1.0


def went_back(last_ns: Optional[int], stamp_ns: int) -> bool:
    """Whether a frame stamped ``stamp_ns`` is older than the last processed one (``last_ns``;
    None: no frame yet). Unstamped frames (0) say nothing about time."""
    return last_ns is not None and 0 < stamp_ns < last_ns


def glitch(before_last_ns: Optional[int], stamp_ns: int) -> bool:
    """Whether a frame that went back (``went_back``) is still after the frame before the last
    one (``before_last_ns``): not a new time line, the last frame alone was stamped ahead (a
    driver's glitch), which must not reset the tracker. A replay that restarts goes back to
    its first stamp, at or before that frame's."""
    return before_last_ns is not None and 0 < before_last_ns < stamp_ns


def restarted(back_ns: int, to_ns: int, first_ns: Optional[int], reset_after_ns: int) -> bool:
    """Whether time going back by ``back_ns`` to ``to_ns`` starts a new time line (a reset):
    further back than ``reset_after_ns`` (0: any step back), or to the first stamp of the run
    (``first_ns``) or before it, which a short bag played again does in less than that."""
    return back_ns > reset_after_ns or (first_ns is not None and to_ns <= first_ns)


def glitch_reason(last_ns: int, stamp_ns: int) -> str:
    return (f'an image was stamped {last_ns} ns, ahead of the frames before and after it '
            f'(now {stamp_ns} ns): a wrong stamp, tracking goes on (nothing reset)')


def image_jump_reason(last_ns: int, stamp_ns: int) -> str:
    return (f'image stamps jumped back from {last_ns} ns to {stamp_ns} ns (a replay restarted?)')


CLOCK_JUMP_REASON = 'the ROS clock (/clock, use_sim_time) jumped back (a replay restarted?)'


def image_step_reason(last_ns: int, stamp_ns: int, reset_after_ns: int) -> str:
    return (f'image stamps stepped back by {(last_ns - stamp_ns) / 1e6:.1f} ms (from {last_ns} '
            f'ns to {stamp_ns} ns; a clock corrected, frames out of order?): less than '
            f'time_jump_reset_s ({reset_after_ns / 1e9:g} s), objects kept')


def clock_step_reason(back_ns: int, reset_after_ns: int) -> str:
    return (f'the ROS clock (/clock, use_sim_time) stepped back by {back_ns / 1e6:.1f} ms: less '
            f'than time_jump_reset_s ({reset_after_ns / 1e9:g} s), not back to the first stamp '
            f'of the run, objects kept')


def watch_clock(clock: object, on_back: Callable[[int, int], None]) -> object:
    """Call ``on_back(now_ns, back_ns)`` whenever the ROS ``clock`` (an rclpy Clock) jumps
    backwards, which happens under use_sim_time when /clock does; now_ns: the clock's time after
    the jump, back_ns: how far it went back. Every step back is passed on: whether it resets is
    decided against the frames' stamps (:func:`restarted`). Keep the returned handle alive
    (rclpy drops the callback with it). rclpy is imported here, not by the module."""
    from rclpy.clock import JumpThreshold
    from rclpy.duration import Duration

    threshold = JumpThreshold(min_forward=None, min_backward=Duration(nanoseconds=-1),
                              on_clock_change=False)
    return clock.create_jump_callback(
        threshold,
        post_callback=lambda jump: on_back(clock.now().nanoseconds, -jump.delta.nanoseconds))
