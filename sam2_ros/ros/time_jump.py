"""Time going backwards, e.g. a bag replayed again into a node that already tracked it.

ROS nodes treat a backwards jump of their clock as a reset (tf2 clears its buffer): what was
kept by time no longer lines up with the new time line. The tracker node does the same when
the image stamps jump back (any frame older than the last processed one), or, under
``use_sim_time``, when ``/clock`` does: objects, held prompts and the stamp table are reset and
one line is logged. Nothing here imports ROS at import time.
"""

from __future__ import annotations

from typing import Callable, Optional

# PromptItem.kind the node queues when /clock jumps back (after the prompts received before)
TIME_JUMP = 'time_jump'


def went_back(last_ns: Optional[int], stamp_ns: int) -> bool:
    """Whether a frame stamped ``stamp_ns`` is older than the last processed one (``last_ns``;
    None: no frame yet). Unstamped frames (0) say nothing about time."""
    return last_ns is not None and 0 < stamp_ns < last_ns


def glitch(before_last_ns: Optional[int], stamp_ns: int) -> bool:
    """Whether a frame that went back (``went_back``) is still after the frame before the last
    one (``before_last_ns``): not a new time line, the last frame alone was stamped ahead (a
    driver's glitch), which must not reset the tracker. A replay that restarts goes back to
    its first stamp, at or before that frame's. A single frame stamped in the past cannot be
    told from a restart: it resets."""
    return before_last_ns is not None and 0 < before_last_ns < stamp_ns


def glitch_reason(last_ns: int, stamp_ns: int) -> str:
    return (f'an image was stamped {last_ns} ns, ahead of the frames before and after it '
            f'(now {stamp_ns} ns): a wrong stamp, tracking goes on (nothing reset)')


def image_jump_reason(last_ns: int, stamp_ns: int) -> str:
    return (f'image stamps jumped back from {last_ns} ns to {stamp_ns} ns (a replay restarted?)')


CLOCK_JUMP_REASON = 'the ROS clock (/clock, use_sim_time) jumped back (a replay restarted?)'


def watch_clock(clock: object, on_back: Callable[[int], None]) -> object:
    """Call ``on_back(now_ns)`` whenever the ROS ``clock`` (an rclpy Clock) jumps backwards,
    which happens under use_sim_time when /clock does; now_ns: the clock's time after the
    jump. Keep the returned handle alive (rclpy drops the callback with it). rclpy is imported
    here, not by the module."""
    from rclpy.clock import JumpThreshold
    from rclpy.duration import Duration

    threshold = JumpThreshold(min_forward=None, min_backward=Duration(nanoseconds=-1),
                              on_clock_change=False)
    return clock.create_jump_callback(
        threshold, post_callback=lambda jump: on_back(clock.now().nanoseconds))
