"""Command-line tools that run the tracker core without ROS (offline video / image folders).

Every error a user can cause (a bad prompt file, an unreadable input, a missing checkpoint) is
a :class:`CliError`: the tools print its message and exit with status 2, never a traceback.
"""

import contextlib
import signal
import threading
from typing import Iterator


class CliError(Exception):
    """A user error: the message says what is wrong and where; the tool exits with status 2."""


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (or SIGTERM) inside the block is raised when it ends, so a frame's outputs (mask,
    overlay frame, states line) and its count in the summary are written whole or not at all.
    Only the main thread receives signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending = []
    previous = {sig: signal.signal(sig, lambda signum, frame: pending.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if pending:
        raise KeyboardInterrupt


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``timeout``, ``docker stop``, a cluster's time limit) inside the block ends it
    as Ctrl-C does: the outputs written so far are finished (the video closed, the summary
    written) instead of the process dying with them half-written. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
