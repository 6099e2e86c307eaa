"""How long a deferred correction waits for the frame that would show it.

With ``corrections_on_next_frame`` (the default) a click on a tracked object is computed with
the next frame, so a live camera pays no extra step for it. A camera that stopped (a paused
video, a frozen endoscope image, the end of a bag) sends no next frame: the click would wait
unseen, and the next click for the same object would replace it (``defer_prompt``: the newest
per id wins). After ``deferred_wait_ms`` without a frame the worker applies the waiting
corrections to the last frame and publishes that frame again, as ``corrections_on_next_frame:
false`` does at once. No ROS here: the worker drives it in its idle rounds.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional


class DeferredWait:
    """When the corrections deferred on the last frame stop waiting for the next one."""

    def __init__(self, wait_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_s = wait_s           # 0: they wait for the next frame however long
        self.clock = clock
        self.since: Optional[float] = None   # when the first of them was deferred
        self.frame = -1                      # the frame they were deferred on

    def note(self, frame_index: int) -> None:
        """A correction was deferred on frame ``frame_index`` (the tracker's latest)."""
        if self.since is None or self.frame != frame_index:
            self.since, self.frame = self.clock(), frame_index

    def due(self, tracker: Any) -> bool:
        """Whether the corrections deferred on ``tracker``'s latest frame have waited long
        enough; forgets them once a frame ran them (or a reset dropped them)."""
        if self.since is None:
            return False
        if tracker.frame_index != self.frame or not tracker.deferred_ids:
            self.since = None
            return False
        return self.wait_s > 0 and self.clock() - self.since >= self.wait_s

    def apply(self, tracker: Any, publish: Callable[[Any], None],
              refuse: Callable[[str, str], None]) -> None:
        """At an idle round: when due, run them on the last frame and ``publish`` its updated
        result; a failure is ``refuse``d (what, why) as the prompt would have been."""
        if not self.due(tracker):
            return
        self.since = None
        ids = list(tracker.deferred_ids)
        try:
            res = tracker.apply_deferred()
        except Exception as exc:  # noqa: BLE001 - a StepError: reported, the node goes on
            refuse(f'corrections of objects {ids} deferred on frame {self.frame}',
                   f'{type(exc).__name__}: {exc}')
            return
        if res is not None:
            publish(res)
