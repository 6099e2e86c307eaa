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
    """Ctrl-C inside the block is raised when it ends, so a frame's outputs (mask, overlay
    frame, states line) and its count in the summary are written whole or not at all. Only
    the main thread receives signals; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pending:
        raise KeyboardInterrupt
