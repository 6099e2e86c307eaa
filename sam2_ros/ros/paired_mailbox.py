"""The hand-off of a multi-camera node: frames of N cameras grouped by stamp
(:class:`~sam2_ros.ros.pairing.StampPairer`), each camera's prompts, and jobs, behind one
condition variable, so the one worker thread wakes for any of them.

Groups follow the one-camera :class:`~sam2_ros.ros.mailbox.Mailbox`'s frame policy: by default
only the newest group waits (a replaced group's frames count as dropped for their cameras);
``every_frame=True`` keeps up to ``fifo_size`` groups and a camera's ``put_frame`` blocks
while that many wait. A lone frame leaves by the pairer's rules (its partner moved past, or
one ``period_ns`` passed, of receipt time stretched where the stamps run slower than it, a bag
played at rate 0.5: :meth:`take` wakes at the pairer's deadline). The pairer's clock
stands still while the FIFO is full: a partner's put is blocked then, so a frame waiting for
it would time out although its partner came (a burst behind a busy worker left unpaired), and
a group released then would only wait behind the full FIFO; its period counts the time the
FIFO had room. Each camera's side (:meth:`camera`) looks like a Mailbox to that camera's
worker, diagnostics and totals. Nothing here imports ROS.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

from sam2_ros.ros.mailbox import FrameItem, Job, PromptItem
from sam2_ros.ros.pairing import Group, StampPairer


class CameraBox:
    """Camera c's side of a :class:`PairedMailbox`: its counters and prompts."""

    def __init__(self, parent: 'PairedMailbox', camera: int) -> None:
        self.parent, self.camera = parent, camera
        self.prompt_queue_size = parent.prompt_queue_size
        self.received = 0
        self.dropped = 0
        self.last_recv_t: Optional[float] = None
        # diagnostics ticks in a row with no frame and no image publisher; None once logged
        # (diagnostics.warn_silent_topic: once per activation, as each has its own mailbox)
        self.silent_ticks: Optional[int] = 0
        self.prompts: Deque[PromptItem] = collections.deque()

    def put_frame(self, item: FrameItem) -> None:
        self.parent.put_frame(self.camera, item)

    def put_prompt(self, item: PromptItem) -> bool:
        return self.parent.put_prompt(self.camera, item)

    def pending_frames(self) -> int:
        return self.parent.pending_frames(self.camera)

    def pending_prompts(self) -> int:
        with self.parent.cond:
            return len(self.prompts)

    def close(self) -> None:
        self.parent.close()


class PairedMailbox:
    """Groups of frames, per-camera prompts and jobs waiting for the multi-camera worker."""

    def __init__(self, cameras: int, every_frame: bool, fifo_size: int,
                 prompt_queue_size: int, period_ns: int, tolerance_ns: int = 0) -> None:
        self.every_frame = every_frame
        self.fifo_size = max(1, int(fifo_size)) if every_frame else 1
        self.prompt_queue_size = max(1, int(prompt_queue_size))
        self.pairer = StampPairer(cameras, period_ns, tolerance_ns,
                                  queue_size=max(1, int(fifo_size)))
        self.cond = threading.Condition()
        self.cameras = [CameraBox(self, c) for c in range(cameras)]
        self._groups: Deque[Group] = collections.deque()
        self._jobs: Deque[Job] = collections.deque()
        self._closed = False
        # the worker waits in take() for work: groups released then are not yet "behind"
        self._idle = False
        # the pairer's clock: the monotonic one less the time the FIFO stood full (see the
        # module docstring); _full_since: when it filled, None while it has room
        self._stood_full_ns = 0
        self._full_since: Optional[int] = None

    def camera(self, c: int) -> CameraBox:
        return self.cameras[c]

    def pairing(self) -> Dict[str, int]:
        """The pairer's counts for diagnostics (a copy taken under the lock): groups complete
        and partial, every group by the reason it was released, stamp resets, cameras found
        on different clocks."""
        with self.cond:
            c = self.pairer.counts
            out = {'pairs_complete': c.complete, 'pairs_partial': c.partial,
                   'pairing_resets': c.resets, 'pairing_clock_splits': c.clock_splits}
            out.update({f'pairs_released_{k}': v for k, v in sorted(c.by_reason.items())})
        return out

    # ------------------------------------------------------------------ producers
    def put_frame(self, camera: int, item: FrameItem) -> None:
        """Camera ``camera``'s frame to the pairer; the groups it releases wait for the
        worker (newest only, or a FIFO that blocks this call while full)."""
        with self.cond:
            box = self.cameras[camera]
            box.received += 1
            box.last_recv_t = item.recv_t
            if self.every_frame:
                while len(self._groups) >= self.fifo_size and not self._closed:
                    self.cond.wait(0.1)
            if self._closed:
                return
            now = time.monotonic_ns()
            self._add(self.pairer.put(camera, item.stamp_ns, item, self._pairer_ns(now)), now)
            self.cond.notify_all()

    def put_prompt(self, camera: int, item: PromptItem) -> bool:
        """Queue camera ``camera``'s prompt; False (newest rejected) when its queue is full."""
        with self.cond:
            prompts = self.cameras[camera].prompts
            if len(prompts) >= self.prompt_queue_size:
                return False
            prompts.append(item)
            self.cond.notify_all()
            return True

    def put_job(self, job: Job) -> bool:
        with self.cond:
            if self._closed:
                return False
            self._jobs.append(job)
            self.cond.notify_all()
            return True

    # ------------------------------------------------------------------ the worker
    def take(self, timeout: float) -> Tuple[Optional[Group], List[List[PromptItem]]]:
        """Wait up to ``timeout`` s (less when a lone frame's period ends sooner); return
        (the oldest group or None, each camera's waiting prompts)."""
        with self.cond:
            self._idle = True
            now = time.monotonic_ns()
            self._add(self.pairer.flush(self._pairer_ns(now)), now)
            if not (self._groups or self._jobs or self._closed
                    or any(b.prompts for b in self.cameras)):
                # no group waits, so the FIFO has room: the pairer's clock runs with this one
                deadline = self.pairer.next_deadline()
                wait = timeout if deadline is None else min(
                    timeout, max(0.0, (deadline - self._pairer_ns(time.monotonic_ns())) / 1e9))
                self.cond.wait(wait)
                now = time.monotonic_ns()
                self._add(self.pairer.flush(self._pairer_ns(now)), now)
            prompts = [list(b.prompts) for b in self.cameras]
            for b in self.cameras:
                b.prompts.clear()
            group = self._groups.popleft() if self._groups else None
            self._fifo_changed(now)
            self._idle = group is None
            self.cond.notify_all()  # a blocked FIFO put may go on
            return group, prompts

    def take_jobs(self) -> List[Job]:
        with self.cond:
            jobs = list(self._jobs)
            self._jobs.clear()
            return jobs

    def pending_frames(self, camera: int) -> int:
        """Camera ``camera``'s frames in waiting groups and in the pairer."""
        with self.cond:
            grouped = sum(1 for g in self._groups if g.frames[camera] is not None)
            return grouped + self.pairer.pending(camera)

    def close(self) -> None:
        with self.cond:
            self._closed = True
            self._groups.clear()
            self.pairer.drain()
            for b in self.cameras:
                b.prompts.clear()
            jobs = list(self._jobs)
            self._jobs.clear()
            self.cond.notify_all()
        for job in jobs:
            job.abandon('the tracker stopped (deactivated) before the request ran')

    def _add(self, groups: List[Group], now_ns: int) -> None:
        """Released groups (at monotonic ``now_ns``) to the waiting ones; newest-only mode drops
        the older ones, as the one-camera node drops a frame only when a newer one comes while
        the worker is busy: a lone frame that leaves at its period's end (the next frame's
        arrival, typically) beside the next group is not dropped while the worker waits for
        work."""
        self._groups.extend(groups)
        if not self.every_frame:
            self._drop_older(2 if self._idle else 1)
        self._fifo_changed(now_ns)

    def _drop_older(self, keep: int) -> None:
        """Newest-only mode, down to ``keep`` waiting groups, oldest first: a camera's frame
        that a later waiting group has a newer frame of is dropped (counted); a group left
        without frames goes, one still holding a camera's newest frame stays (a lone frame of
        one camera never drops the other camera's only frame)."""
        i = 0
        while len(self._groups) > keep and i < len(self._groups) - 1:
            group = self._groups[i]
            later = {a.camera for g in itertools.islice(self._groups, i + 1, None)
                     for a in g.frames if a is not None}
            for c, a in enumerate(group.frames):
                if a is not None and c in later:
                    self.cameras[c].dropped += 1
                    group.frames[c] = None
            if any(a is not None for a in group.frames):
                i += 1
            else:
                del self._groups[i]

    def _pairer_ns(self, now_ns: int) -> int:
        """The pairer's time at monotonic ``now_ns``: standing still while the FIFO is full."""
        at = now_ns if self._full_since is None else self._full_since
        return at - self._stood_full_ns

    def _fifo_changed(self, now_ns: int) -> None:
        """Stop the pairer's clock when the FIFO fills, run it again when it has room. Only
        a FIFO blocks puts: newest-only mode keeps the clock as it is."""
        full = self.every_frame and len(self._groups) >= self.fifo_size
        if full and self._full_since is None:
            self._full_since = now_ns
        elif not full and self._full_since is not None:
            self._stood_full_ns += now_ns - self._full_since
            self._full_since = None
