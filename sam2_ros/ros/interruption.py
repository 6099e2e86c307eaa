"""Ctrl-C while the node is busy in its main thread (configure builds the model, captures
graphs, maybe compiles: seconds to minutes).

rclpy handles SIGTERM only (it shuts the context down); SIGINT goes to Python's handler,
which :func:`sam2_ros.ros.node_cli.main` sets to :meth:`Sigint.on_sigint`. That one only notes
the request, except inside :meth:`Sigint.interruptible`, where it raises KeyboardInterrupt
into the work in progress (torch ops return within milliseconds; the Python between them is
where it lands), turned into :class:`Interrupted` there. Elsewhere (the executor's spin)
raising could leave a half-built rclpy Task behind, so nothing is raised. Between phases,
:meth:`check` stops a configure whose context is gone (SIGTERM) or that was asked to stop.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable, Iterator, Optional

# Test-only: configure waits at this phase until Ctrl-C (a deterministic slow configure).
PAUSE_ENV = 'SAM2_ROS_TEST_PAUSE_CONFIGURE'


class Interrupted(Exception):
    """Ctrl-C (or a shut-down context) stopped the work in progress."""


class Sigint:
    """Whether Ctrl-C was pressed, and where it may interrupt the main thread."""

    def __init__(self) -> None:
        self.requested = False
        self._raise = False

    def on_sigint(self, signum: int, frame: Any) -> None:
        """The Python-level SIGINT handler (runs in the main thread)."""
        self.requested = True
        if self._raise:
            self._raise = False
            raise KeyboardInterrupt

    def check(self, context_ok: Callable[[], bool] = lambda: True) -> None:
        """Raise Interrupted if Ctrl-C was pressed or the context is shut down."""
        if self.requested or not context_ok():
            raise Interrupted('Ctrl-C' if self.requested else 'the context was shut down')

    @contextlib.contextmanager
    def interruptible(self, context_ok: Callable[[], bool] = lambda: True) -> Iterator[None]:
        """Ctrl-C inside raises Interrupted here instead of waiting for the work to end."""
        self.check(context_ok)
        self._raise = True
        try:
            yield
        except KeyboardInterrupt:
            raise Interrupted('Ctrl-C') from None
        finally:
            self._raise = False


SIGINT = Sigint()


def pause_for_test(phase: str, log: Optional[Callable[[str], None]] = None) -> None:
    """Test-only: with ``SAM2_ROS_TEST_PAUSE_CONFIGURE=<phase>`` wait here until Ctrl-C (call
    it inside :meth:`Sigint.interruptible`). Nothing happens without the variable."""
    if os.environ.get(PAUSE_ENV) != phase:
        return
    if log is not None:
        log(f'configure paused before {phase} ({PAUSE_ENV}, test only)')
    while not SIGINT.requested:
        time.sleep(0.05)
