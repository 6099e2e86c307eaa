"""Keeps a GPU's clocks up while the tracker waits for a camera's next frame (opt-in).

Why: a GPU with nothing to run lowers its clocks (``nvidia-smi -q -d PERFORMANCE`` names the
reason ``Idle``), and at a camera's pace the tracker leaves it idle for most of every frame
period. The next frame's first kernels then run before the clocks are raised again: the
engine benchmark paced at a camera's rate is slower and far less even than back to back on
the same GPU (docs/performance.md, *The host and the GPU between frames*). Locking the
clocks (``nvidia-smi --lock-gpu-clocks``, an administrator's setting) is the real fix. Where
that is not allowed, a :class:`ClockKeeper` keeps one GPU thread spinning: a host thread of
its own launches a one-thread spin kernel of ``spin_us`` on a stream of its own and waits for
it (the GIL is released while it waits), again and again until stopped, also while no camera
streams. It takes a warp's place on one multiprocessor and some power; whether it pays is a
benchmark's to say (``tools.bench.cli --clock-keeper-us``), so it is off by default. Graph
captures are unaffected: they run in the capturing thread's own error mode
(``cuda/capture.py``).
"""

from __future__ import annotations

import threading
from typing import Callable, Optional

import torch

# clock cycles per microsecond the spin is sized for (a 2 GHz SM clock); at a lower clock one
# spin lasts longer, which is what it is for
CYCLES_PER_US = 2000

Spin = Callable[[int], None]


class ClockKeeper:
    """One spinning GPU thread on ``device`` between :meth:`start` and :meth:`stop`.

    ``spin_us``: one spin kernel's length at 2 GHz; 0 or a CPU device: nothing runs.
    ``spin``: the spin itself (cycles -> returns when done), for tests; by default a spin
    kernel on the keeper's own stream, waited for. ``on_error(text)``: told, from the
    keeper's thread, why it stopped keeping (its spin failed).
    """

    def __init__(self, device: str, spin_us: float, spin: Optional[Spin] = None,
                 on_error: Optional[Callable[[str], None]] = None) -> None:
        self.device = torch.device(device)
        if self.device.type == 'cuda' and self.device.index is None and \
                torch.cuda.is_available():   # 'cuda': the caller's current GPU, not thread 0's
            self.device = torch.device('cuda', torch.cuda.current_device())
        self.spin_us = float(spin_us)
        self.cycles = int(self.spin_us * CYCLES_PER_US)
        self.spins = 0                         # spins completed since start
        self.error: Optional[str] = None       # why the thread ended early, if it did
        self._spin = spin
        self._on_error = on_error
        self._stream: Optional[torch.cuda.Stream] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def enabled(self) -> bool:
        return self.spin_us > 0 and (self._spin is not None or self.device.type == 'cuda')

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if not self.enabled or self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name='sam2_clock_keeper',
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        try:
            spin = self._spin or self._gpu_spin()
            while not self._stop.is_set():
                spin(self.cycles)
                self.spins += 1
        except Exception as exc:  # noqa: BLE001 - a keeper that fails only stops keeping
            self.error = repr(exc)
            if self._on_error is not None:
                self._on_error(f'GPU clock keeper stopped: {self.error}')

    def _gpu_spin(self) -> Spin:
        torch.cuda.set_device(self.device)
        self._stream = torch.cuda.Stream(self.device)
        stream = self._stream

        def spin(cycles: int) -> None:
            with torch.cuda.stream(stream):
                torch.cuda._sleep(cycles)     # one GPU thread busy for `cycles` SM cycles
            stream.synchronize()
        return spin
