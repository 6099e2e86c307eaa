"""``main`` of the package's small nodes (positions_node, synthetic_camera): ``--help``, one
line and exit status 1 for a parameter value the node cannot run with, spin until Ctrl-C or
a shutdown, exit 0. The tracker node has its own (``node_cli.py``: lifecycle, autostart)."""

from __future__ import annotations

import sys
from typing import Any, Callable, List, Optional, Tuple, Type


def run(name: str, make_node: Callable[[], Any], usage: Callable[[], str],
        refused: Tuple[Type[Exception], ...], argv: Optional[List[str]] = None) -> int:
    """Run the node ``make_node()`` builds (after rclpy.init); its exit status. ``refused``:
    the exceptions ``make_node`` raises for a bad parameter (logged as one fatal line)."""
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.logging import get_logger
    from rclpy.utilities import remove_ros_args

    argv = list(sys.argv if argv is None else argv)
    if {'-h', '--help'} & set(remove_ros_args(argv)[1:]):
        print(usage())          # a node's parameters are given as --ros-args -p name:=value
        return 0
    rclpy.init(args=argv)
    try:
        node = make_node()
    except refused as exc:      # what to fix, as the tracker says it: no traceback
        get_logger(name).fatal(f'{exc}; exiting')
        rclpy.try_shutdown()
        return 1
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0
