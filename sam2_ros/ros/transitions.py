"""Lifecycle transition callbacks that fail loudly.

Why: rclpy's lifecycle wrapper turns an exception raised by a transition callback into a
failed transition (the node then runs ``on_error``) without logging anything, so a configure
or activate that fails after the tracker was built (a publisher's timing log that cannot be
opened, a subscription to a topic name the middleware refuses) left the user with no reason,
and ``autostart`` exited pointing at "the error above" that was never printed. ``loud`` logs
the exception with the transition's name, undoes what the callback had started, and returns
FAILURE, as the node's own configure errors do.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from rclpy.lifecycle import TransitionCallbackReturn


def loud(name: str, undo: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate the node's ``on_<name>``: an exception is logged as '<name> failed: <type>:
    <text>', then the node's method ``undo`` runs, and the transition fails."""
    def wrap(callback: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(callback)
        def run(node: Any, state: Any) -> TransitionCallbackReturn:
            try:
                return callback(node, state)
            except Exception as exc:  # noqa: BLE001 - any failure: logged, undone, failed
                node.get_logger().error(f'{name} failed: {type(exc).__name__}: {exc}')
                getattr(node, undo)()
                return TransitionCallbackReturn.FAILURE
        return run
    return wrap
