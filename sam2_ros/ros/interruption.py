"""Ctrl-C while the node is busy in its main thread (configure builds the model, captures
graphs, maybe compiles: seconds to minutes).

rclpy handles SIGTERM only (it shuts the context down); SIGINT goes to Python's handler,
which :func:`sam2_ros.ros.node_cli.main` sets to :meth:`Sigint.on_sigint`. That one only notes
the request, except inside :meth:`Sigint.interruptible`, where it raises KeyboardInterrupt
into the work in progress (torch ops return within milliseconds; the Python between them is
where it lands), turned into :class:`Interrupted` there. Elsewhere (the executor's spin)
raising could leave a half-built rclpy Task behind, so nothing is raised. Between phases,
:meth:`check` stops a configure whose context is gone (SIGTERM) or that was asked to stop.

In the node's own process the handler is set when this module is imported, which
:mod:`sam2_ros.ros.node` does before its heavy imports (rclpy, torch: a second or more):
Python's default handler raised KeyboardInterrupt into those imports (exit -2 and a traceback
when `ros2 launch` stopped the node right after starting it); the request is now noted and
``main`` exits 0 before starting anything.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator, Optional

# Test-only: start-up waits at this phase until Ctrl-C ('import': while the node's modules are
# imported; 'tracker': in configure, before the model build), a deterministic slow start.
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

# What runs the node: ``python -m sam2_ros.ros.node``, or a script that calls its ``main``
# (setup.py's console script, the launch files' executable).
NODE_MODULE = 'sam2_ros.ros.node'
NODE_PROGRAMS = ('sam2-ros-node', 'tracker_node')


def in_node_program() -> bool:
    """Whether this process runs the tracker node (not a test or tool importing it: their
    Ctrl-C stays Python's KeyboardInterrupt)."""
    spec = getattr(sys.modules.get('__main__'), '__spec__', None)
    if getattr(spec, 'name', None) == NODE_MODULE:
        return True
    argv = getattr(sys, 'argv', None) or ['']
    return os.path.basename(argv[0]) in NODE_PROGRAMS


def pause_for_test(phase: str, log: Optional[Callable[[str], None]] = None) -> None:
    """Test-only: with ``SAM2_ROS_TEST_PAUSE_CONFIGURE=<phase>`` wait here until Ctrl-C (in
    configure: call it inside :meth:`Sigint.interruptible`). Nothing happens without the
    variable."""
    if os.environ.get(PAUSE_ENV) != phase:
        return
    if log is not None:
        log(f'{"start-up" if phase == "import" else "configure"} paused before {phase} '
            f'({PAUSE_ENV}, test only)')
    while not SIGINT.requested:
        time.sleep(0.05)


if in_node_program() and threading.current_thread() is threading.main_thread():
    # From here on a Ctrl-C is noted, never raised outside interruptible(): see the docstring
    signal.signal(signal.SIGINT, SIGINT.on_sigint)
    pause_for_test('import', lambda line: print(f'[sam2_tracker] {line}', flush=True))
