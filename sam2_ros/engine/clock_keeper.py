"""Keeps a GPU's clocks up between a camera's frames (opt-in).

Why: a GPU with nothing to run lowers its clocks (``nvidia-smi -q -d PERFORMANCE`` names the
reason ``Idle``), and at a camera's pace the tracker leaves it idle for most of every frame
period. The next frame's first kernels then run before the clocks are raised again: the
engine benchmark paced at a camera's rate is slower and far less even than back to back on
the same GPU (docs/performance.md, *The host and the GPU between frames*). Locking the
clocks (``nvidia-smi --lock-gpu-clocks``, an administrator's setting) is the real fix. Where
that is not allowed, a :class:`ClockKeeper` fills the gap: after each frame it queues one
spin kernel (one GPU thread, ``torch.cuda._sleep``) of ``hold_us`` on a stream of its own,
behind the frame's work, so the GPU stays busy until shortly before the next frame. Sized
below the frame period (about three quarters of it), the spin has ended when the next frame's
kernels start. A spin still running when a frame ends (frames faster than ``hold_us``) is not
followed by another: nothing queues up.

No thread and no wait: one launch per frame from the tracking thread, which the GPU runner
makes when it reads a frame's masks out (``cuda/runner.py``). An earlier keeper ran a thread
of short spins, each waited for; it made the paced engine slower, not faster
(docs/performance.md). The keeper is process-wide per GPU, like the clocks it keeps:
:func:`keep` sets it (the node at activate, from ``gpu_clock_keeper_us``), :func:`release`
removes it, :func:`frame_done` is the runner's call.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, Optional

import torch

log = logging.getLogger(__name__)

# clock cycles per microsecond the spin is sized for (a 2 GHz SM clock); at a lower clock one
# spin lasts longer, which is what it is for
CYCLES_PER_US = 2000

# (cycles) -> a handle whose query() is True once that spin has ended
Launch = Callable[[int], object]


def device_key(device: object) -> torch.device:
    """``device`` with its index: an unindexed 'cuda' is the caller's current GPU."""
    d = torch.device(device)
    if d.type == 'cuda' and d.index is None and torch.cuda.is_available():
        d = torch.device('cuda', torch.cuda.current_device())
    return d


def keeps_clocks(device: object) -> bool:
    """Whether a keeper on ``device`` would run (a GPU)."""
    return device_key(device).type == 'cuda'


class ClockKeeper:
    """One spin of ``hold_us`` queued on ``device`` after each frame (:meth:`frame_done`).

    ``hold_us``: the spin's length at 2 GHz; 0 or a CPU device: nothing runs. ``launch``:
    the spin itself, for tests; by default a spin kernel on the keeper's stream behind the
    work queued so far on the caller's stream. ``on_error(text)``: told once why the keeper
    stopped (a launch failed).
    """

    def __init__(self, device: object, hold_us: float, launch: Optional[Launch] = None,
                 on_error: Optional[Callable[[str], None]] = None) -> None:
        self.device = device_key(device)
        self.hold_us = float(hold_us)
        self.cycles = int(self.hold_us * CYCLES_PER_US)
        self.spins = 0                          # spins queued
        self.skipped = 0                        # frames that ended while a spin still ran
        self.error: Optional[str] = None        # why the keeper stopped, if it did
        self._launch = launch
        self._on_error = on_error
        self._stream: Optional[torch.cuda.Stream] = None
        self._event: Optional[torch.cuda.Event] = None
        self._last: Optional[object] = None     # the handle of the last spin

    @property
    def enabled(self) -> bool:
        return self.hold_us > 0 and self.error is None and (
            self._launch is not None or self.device.type == 'cuda')

    def frame_done(self) -> bool:
        """Queue a spin behind the frame's work unless the last one still runs; True when
        one was queued."""
        if not self.enabled:
            return False
        try:
            if self._last is not None and not self._last.query():
                self.skipped += 1
                return False
            self._last = (self._launch or self._gpu_spin)(self.cycles)
        except Exception as exc:  # noqa: BLE001 - a keeper that fails only stops keeping
            self.error = repr(exc)
            if self._on_error is not None:
                self._on_error(f'GPU clock keeper stopped: {self.error}')
            return False
        self.spins += 1
        return True

    def _gpu_spin(self, cycles: int) -> torch.cuda.Event:
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
            self._event = torch.cuda.Event()
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._stream):
            torch.cuda._sleep(cycles)     # one GPU thread busy for `cycles` SM cycles
        self._event.record(self._stream)
        return self._event


_KEEPERS: Dict[torch.device, ClockKeeper] = {}
_LOCK = threading.Lock()


def keep(device: object, hold_us: float, launch: Optional[Launch] = None,
         on_error: Optional[Callable[[str], None]] = None) -> ClockKeeper:
    """Keep ``device``'s clocks from now on (replacing its keeper, if it had one); a keeper
    that cannot run (``hold_us`` 0, a CPU device) is returned but not kept. ``on_error``: as
    :class:`ClockKeeper`'s (by default this module's logger warns)."""
    k = ClockKeeper(device, hold_us, launch=launch,
                    on_error=on_error or (lambda text: log.warning('%s', text)))
    with _LOCK:
        _KEEPERS.pop(k.device, None)
        if k.enabled:
            _KEEPERS[k.device] = k
    return k


def release(device: object) -> None:
    """No keeper for ``device`` any more (a spin already queued still ends by itself)."""
    with _LOCK:
        _KEEPERS.pop(device_key(device), None)


def kept(device: object) -> Optional[ClockKeeper]:
    """``device``'s keeper, None when its clocks are not kept."""
    with _LOCK:
        return _KEEPERS.get(device_key(device))


def frame_done(device: object) -> None:
    """A frame's work on ``device`` is queued: its keeper, if any, queues a spin behind it."""
    if _KEEPERS:
        k = _KEEPERS.get(device_key(device))
        if k is not None and not torch.cuda.is_current_stream_capturing():
            k.frame_done()
