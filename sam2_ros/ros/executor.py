"""The executors that run the node's callbacks (``node_cli``: the node's ``executor``
parameter, 'events' by default, the single-threaded one where this rclpy has no
EventsExecutor) and the DDS probe's (``dds_probe --executor``): rclpy's single-threaded one or
its events one.

Why: the node's callbacks only hand messages over (the worker does the GPU work), so the
executor's own overhead is part of every frame's latency. rclpy's ``SingleThreadedExecutor``
rebuilds a wait set in Python on each ``spin_once``; ``rclpy.experimental.EventsExecutor``
(C++, from rclpy in Kilted) is woken by the middleware's events and dispatches without one.
"""

from __future__ import annotations

from typing import Any, Optional

EXECUTORS = ('single', 'events')


def make_executor(kind: str = 'single', context: Optional[Any] = None) -> Any:
    """An executor of ``kind`` ('single' or 'events'); ValueError for anything else, and
    for 'events' where this rclpy has no EventsExecutor."""
    if kind == 'single':
        from rclpy.executors import SingleThreadedExecutor
        return SingleThreadedExecutor(context=context)
    if kind == 'events':
        try:
            from rclpy.experimental import EventsExecutor
        except ImportError as exc:
            raise ValueError(f'executor "events" needs rclpy.experimental.EventsExecutor '
                             f'(rclpy of Kilted or newer): {exc}') from exc
        return EventsExecutor(context=context)
    raise ValueError(f'unknown executor {kind!r}; choose one of {EXECUTORS}')
