"""Collapse floods of identical log lines (a bad camera logs the same error 30 times a second).

Why a class of its own: the count of suppressed repeats must be reported as a line about the
repeated message, not glued onto whatever different line comes next (which then read as if
that new message had repeated). Pure Python, so it is tested without a node.
"""

from __future__ import annotations

import time
from typing import Any, Callable, List, Tuple

Line = Tuple[str, str]   # (level, text)


class RepeatFilter:
    """An identical line within ``window_s`` of the last emitted one is counted, not emitted.

    :meth:`filter` returns the lines to log now: when a repeated line is followed by a different
    one (or by itself after the window), first a summary at the repeated line's level, then the
    new line unchanged.
    """

    def __init__(self, window_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._last: Line = ('', '')
        self._t = float('-inf')
        self._suppressed = 0

    def filter(self, level: str, text: str) -> List[Line]:
        now = self._clock()
        if (level, text) == self._last and now - self._t < self.window_s:
            self._suppressed += 1
            return []
        out = self.flush()
        self._last, self._t = (level, text), now
        return out + [(level, text)]

    def flush(self) -> List[Line]:
        """The pending summary line, if repeats were suppressed (e.g. at shutdown)."""
        if not self._suppressed:
            return []
        level, text = self._last
        n, self._suppressed = self._suppressed, 0
        short = text if len(text) <= 200 else text[:200] + '...'
        return [(level, f'previous message repeated {n} more time{"s" if n > 1 else ""}: '
                        f'{short}')]


class FilteredLog:
    """``log(level, text)`` through an rclpy logger, identical lines within ``window_s``
    counted by a :class:`RepeatFilter` instead of repeated. ``logger()`` returns the logger."""

    def __init__(self, logger: Callable[[], Any], window_s: float = 2.0) -> None:
        self._logger = logger
        self._filter = RepeatFilter(window_s)

    def log(self, level: str, text: str) -> None:
        logger = self._logger()
        for lvl, line in self._filter.filter(level, text):
            # one call site per severity: rclpy keys its logging cache on the caller's line
            # and raises 'Logger severity cannot be changed between calls' otherwise
            if lvl == 'info':
                logger.info(line)
            elif lvl == 'warn':
                logger.warning(line)
            else:
                logger.error(line)
