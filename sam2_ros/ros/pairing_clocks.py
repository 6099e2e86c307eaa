"""Which cameras of a rig stamp on different clocks, for the pairer (pure Python, no ROS).

A camera driver restarted on another time base (sim time against wall time, a clock offset of
seconds, a clock that jumped forward) gives stamps that never pair with the other cameras'.
A stamp going back resets the pairer, but nothing else ends the wait: the camera whose stamps
are ahead is never the pivot, and the other camera never moves past its frames, so each of
them would wait a period, every frame, for ever.

Two cameras are *apart* once the latest ``SPLIT_FRAMES`` frames of each of them were all
farther than ``SPLIT_PERIODS`` periods from every stamp the other one kept (the pairer keeps
a camera's latest ``GAPS_KEPT + 1``). One frame near the other's stamps ends it at once (the
cameras back on one clock pair again); a reset forgets it with the stamps.

Why this tells clocks from a late camera: a camera late by a few frames on the same clock
finds its partner's stamps among those kept, so its count never grows; a silent camera adds
no frames, and a slower one finds the faster one's stamps near, so neither is apart. The cost
of the rule: a steady offset of up to ``GAPS_KEPT + 1 + SPLIT_PERIODS`` periods looks like
such a late camera (each frame of the camera ahead still waits a period, as before), and a
backlog of one camera that stalled for longer is apart until it catches up (meanwhile the
other camera's frames leave without the up to one period they would have waited for it).
"""

from __future__ import annotations

from typing import Iterable, List, Sequence, Tuple

# frames of each camera, in a row, far from the other's stamps: a few, so that one frame of a
# stall or a dropped burst does not split a rig, and the wait ends within a few frames
SPLIT_FRAMES = 3
# "far": beyond what a late or slower camera of the same clock shows (a lag of two frames, a
# camera at a quarter of the rate), far beyond the tolerance (at most half a period)
SPLIT_PERIODS = 4


class ClockSplit:
    """Per pair of cameras, whether they stamp on different clocks (module docstring)."""

    def __init__(self, cameras: int, period_ns: int) -> None:
        self.far_ns = SPLIT_PERIODS * int(period_ns)
        # far[c][d]: camera c's latest frames in a row far from every stamp camera d kept
        self.far: List[List[int]] = [[0] * cameras for _ in range(cameras)]

    def apart(self, c: int, d: int) -> bool:
        return min(self.far[c][d], self.far[d][c]) >= SPLIT_FRAMES

    def observe(self, camera: int, stamp_ns: int,
                kept: Sequence[Iterable[Tuple[int, int]]]) -> int:
        """Camera ``camera``'s frame of ``stamp_ns`` against the (stamp, receipt) pairs
        ``kept[d]`` of every other camera d (the pairer's own record; empty: none kept, nothing
        to compare); how many pairs of cameras it found apart that were not."""
        parted = 0
        for d, stamps in enumerate(kept):
            if d == camera or not stamps:
                continue
            near = min(abs(stamp_ns - s) for s, _ in stamps) <= self.far_ns
            was = self.apart(camera, d)
            self.far[camera][d] = 0 if near else self.far[camera][d] + 1
            parted += int(not was and self.apart(camera, d))
        return parted

    def forget(self) -> None:
        """A reset: the stamps compared are forgotten, so are the counts."""
        for row in self.far:
            row[:] = [0] * len(row)
