"""The counters that outlive an activation: what TrackingState and /diagnostics report "since
start". Each activation has a fresh mailbox and worker whose counters start at zero; at
deactivate their values are added here, so a count since start is the finished activations'
sum plus the live one's. Nothing here imports ROS.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

# Counters that TrackingState / diagnostics report "since start".
NAMES = ('received', 'dropped', 'processed', 'frame_errors', 'prompt_errors')


def live_counts(worker: Optional[Any], mailbox: Optional[Any]) -> Dict[str, int]:
    """The counters of the current activation (zeros when inactive)."""
    if worker is None or mailbox is None:
        return dict.fromkeys(NAMES, 0)
    c = worker.counters
    return {'received': mailbox.received, 'dropped': mailbox.dropped,
            'processed': c.processed, 'frame_errors': c.frame_errors,
            'prompt_errors': c.prompt_errors}


class Totals:
    """The finished activations' counters, and the detection counts (kept over deactivate)."""

    def __init__(self) -> None:
        self.done: Dict[str, int] = dict.fromkeys(NAMES, 0)
        self.detections: Dict[str, int] = {}

    def add_activation(self, worker: Any, mailbox: Any) -> None:
        """A stopped activation's counters, added to the totals."""
        for name, value in worker.detection_counts.items():
            self.detections[name] = self.detections.get(name, 0) + value
        for name, value in live_counts(worker, mailbox).items():
            self.done[name] += value

    def since_start(self, worker: Optional[Any], mailbox: Optional[Any]) -> Dict[str, int]:
        """Every counter since the process started (over all activations)."""
        live = live_counts(worker, mailbox)
        return {name: self.done[name] + live[name] for name in NAMES}

    def detections_since_start(self, worker: Optional[Any]) -> Dict[str, int]:
        counts = dict(self.detections)
        if worker is not None:
            for name, value in dict(worker.detection_counts).items():
                counts[name] = counts.get(name, 0) + value
        return counts
