"""Prompts and detections stamped for a frame the worker has not processed yet.

A prompt or a detection message whose header stamp is newer than the latest processed frame
(or zero, for a prompt: the next frame) waits here, in arrival order, until its frame: a prompt
is applied before tracking the first frame whose stamp is >= its own; detections are associated
after the frame with exactly their stamp (a later frame first means theirs never came). Both
are bounded by ``prompt_queue_size`` each; when full the newest is refused, and neither may be
stamped more than ``MAX_LEAD_S`` ahead of the frames (:func:`far_ahead`). Nothing here imports
ROS; only the worker thread changes it (other threads read its length).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

from sam2_ros.engine.types import Prompt
from sam2_ros.ros.inputs import ACTION_ADD
from sam2_ros.ros.mailbox import PromptItem

DETECTIONS = 'detections'   # PromptItem.kind of a vision_msgs Detection2DArray
# Where an item goes (StampHold.place): refused, held for a later frame, applied to the last
# processed frame (NOW), or older than that frame and applied to it with a warning (OLD)
REFUSE, HOLD, NOW, OLD = 'refuse', 'hold', 'now', 'old'
# A prompt or detection message stamped further ahead of the latest frame than this has a wrong
# stamp (a clock of another host, a typo): held, it would wait for a frame that never comes and
# fill the hold, which then refuses every good one.
MAX_LEAD_S = 10.0
MAX_LEAD_NS = int(MAX_LEAD_S * 1e9)


@dataclass
class Held:
    """One held item: as received, and for a prompt its conversion (checked on arrival)."""

    item: PromptItem
    what: str                           # for reports, e.g. 'click (stamp 5 ns)'
    action: int = 0
    prompt: Optional[Prompt] = None

    @property
    def detections(self) -> bool:
        return self.item.kind == DETECTIONS


class StampHold:
    """Held items in arrival order (see the module docstring)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self._items: List[Held] = []

    def __len__(self) -> int:
        return len(self._items)

    def count(self, detections: bool) -> int:
        """Held detection messages (True) or prompts (False)."""
        return sum(h.detections == detections for h in self._items)

    def full(self, detections: bool) -> bool:
        return self.count(detections) >= self.capacity

    def object_ids(self) -> List[int]:
        """Object ids of the held add prompts (objects about to start or be corrected)."""
        return [p.obj_id for p in self.add_prompts()]

    def add_prompts(self) -> List[Prompt]:
        """The held add prompts, in arrival order."""
        return [h.prompt for h in self._items
                if not h.detections and h.action == ACTION_ADD and h.prompt is not None]

    def place(self, held: Held, last_ns: Optional[int], unstamped: bool) -> Tuple[str, str]:
        """Where an item goes, and why when REFUSE, given the last stamped frame processed
        (``last_ns``; None: none yet). ``unstamped``: the frames processed are unstamped.
        Stamp 0: the next frame (a prompt), refused (detections)."""
        stamp, dets = held.item.stamp_ns, held.detections
        if dets and stamp <= 0:
            return REFUSE, 'no stamp: stamp detections like the image they were computed on'
        if stamp > 0 and last_ns is None and unstamped:
            return REFUSE, unstamped_reason(dets)
        if stamp > 0 and last_ns is not None and stamp > last_ns + MAX_LEAD_NS:
            return REFUSE, far_ahead(stamp, last_ns, dets)
        if last_ns is not None and 0 < stamp <= last_ns:
            return (OLD if stamp < last_ns and not dets else NOW), ''
        if not self.full(dets):
            return HOLD, ''
        if dets:
            return REFUSE, f'{self.count(True)} detection messages already wait for their frames'
        return REFUSE, (f'{self.count(False)} prompts already wait for the next frame or later '
                        f'ones (prompt_queue_size {self.capacity}); send them once that frame '
                        f'is processed, or raise prompt_queue_size')

    def hold(self, held: Held) -> None:
        self._items = self._items + [held]

    def take_due(self, stamp_ns: int, detections: bool) -> List[Held]:
        """Remove and return the prompts (or detections) due by the frame ``stamp_ns``: stamp
        zero or <= it, in arrival order."""
        return self._take(lambda h: h.detections == detections and h.item.stamp_ns <= stamp_ns)

    def take_far(self, stamp_ns: int) -> List[Held]:
        """Remove and return the prompts and detections stamped more than MAX_LEAD_S after
        ``stamp_ns`` (a frame's): held before any frame came, they were not checked on
        arrival."""
        return self._take(lambda h: h.item.stamp_ns > stamp_ns + MAX_LEAD_NS)

    def never_due(self, stamp_ns: int, unstamped: bool) -> List[Tuple[Held, str]]:
        """Remove and return the items a frame stamped ``stamp_ns`` shows will not find their
        frames, each with why: stamped too far after it, or stamped at all when it and every
        frame before are unstamped (``unstamped``; an unstamped frame after stamped ones says
        nothing about time)."""
        if stamp_ns > 0:
            return [(h, far_ahead(h.item.stamp_ns, stamp_ns, h.detections))
                    for h in self.take_far(stamp_ns)]
        if not unstamped:
            return []
        return [(h, unstamped_reason(h.detections))
                for h in self._take(lambda h: h.item.stamp_ns > 0)]

    def _take(self, chosen) -> List[Held]:
        """Remove and return the held items ``chosen(item)`` picks, in arrival order."""
        taken = [h for h in self._items if chosen(h)]
        if taken:
            self._items = [h for h in self._items if not chosen(h)]
        return taken

    def drop_prompts(self) -> None:
        """Forget the held prompts (a reset applied now); detections keep waiting."""
        self._items = [h for h in self._items if h.detections]

    def drain(self) -> List[Held]:
        """Remove and return everything, prompts first (the worker is stopping)."""
        items, self._items = self._items, []
        return [h for h in items if not h.detections] + [h for h in items if h.detections]


def far_ahead(stamp_ns: int, frame_ns: int, detections: bool = False) -> str:
    """Why a prompt (or a detection message) stamped too far after a frame is refused."""
    advice = ('stamp detections like the image they were computed on' if detections else
              'stamp a prompt like the image it was given on, or 0 for the next frame')
    return (f'stamped {(stamp_ns - frame_ns) / 1e9:.1f} s after the latest frame (more than '
            f'{MAX_LEAD_S:g} s ahead: a wrong stamp?); {advice}')


def unstamped_reason(detections: bool = False) -> str:
    """Why a stamped prompt (or detection message) is refused by a camera whose frames are
    unstamped (stamp 0): no frame will ever show its stamp."""
    return ('the images are unstamped (stamp 0): ' +
            ('detections cannot name the frame they were computed on' if detections else
             'a stamped prompt never finds its frame; stamp it 0 for the next frame'))


def dropped_line(whats: Sequence[str], why: str) -> str:
    """One warning for held items dropped unapplied (deactivate, time going back): how many,
    and which."""
    return f'{len(whats)} prompt(s) held for {why} were dropped: {"; ".join(whats)[:500]}'


def warn_dropped(log: Any, whats: Sequence[str]) -> None:
    """The worker stopped (deactivate): what it held for frames that never came, on ``log``
    (the node's logger), not dropped silently."""
    if whats:
        log.warning(dropped_line(whats, 'frames that did not arrive'))
