"""The ``sam2-ros-node`` entry point: argument handling, autostart, the executor loop and a
clean exit on Ctrl-C; plus the checks made before the node exists (device, input topic).
Kept apart from :mod:`sam2_ros.ros.node` (the lifecycle node itself) so each file holds one
concern; ``sam2_ros.ros.node.main`` calls :func:`main` with the node class.
"""

from __future__ import annotations

import signal
import sys
from typing import Any, Callable, List, Optional

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.signals import SignalHandlerOptions

from sam2_ros.ros import params
from sam2_ros.ros.executor import EXECUTORS, make_executor
from sam2_ros.ros.interruption import SIGINT

USAGE = '''usage: sam2-ros-node [--ros-args -p NAME:=VALUE ... --params-file FILE ...]

The sam2_tracker lifecycle node. With autostart:=true it configures and activates itself;
otherwise it waits for `ros2 lifecycle set /sam2_tracker configure` (then activate).
Example (CPU, random weights: the pipeline runs, masks are meaningless):
  sam2-ros-node --ros-args --params-file config/tracker.yaml -p autostart:=true \\
      -p device:=cpu -p precision:=fp32 -p random_weights:=true -p image_size:=512
Parameters (docs/ros.md has the full table):
'''


def check_device(device: str) -> None:
    """A CUDA device on a machine without one fails later with torch's 'Torch not compiled
    with CUDA enabled', one past the GPUs visible with 'invalid device ordinal'; say what to
    set instead. Also what `ros2 param set device ...` is checked by (runtime_params)."""
    if not str(device).startswith('cuda'):
        return
    import torch

    if not torch.cuda.is_available():
        why = ('this PyTorch build has no CUDA' if torch.version.cuda is None
               else 'no CUDA GPU is visible')
        raise ValueError(f'device {device!r} but {why}: run on the CPU with -p device:=cpu '
                         f'-p precision:=fp32 (launch files: device:=cpu)')
    try:
        index = torch.device(device).index
    except (RuntimeError, TypeError):       # not a device name: the config's check says so
        return
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        raise ValueError(f'device {device!r} but {count} CUDA GPU(s) are visible (cuda:0 to '
                         f'cuda:{count - 1}; CUDA_VISIBLE_DEVICES renumbers them)')


def input_topic(image_topic: str, input_type: str) -> str:
    """The topic actually subscribed: image_transport's convention puts the compressed
    stream of `<topic>` on `<topic>/compressed`; a topic already ending so is kept."""
    if input_type == 'compressed' and not image_topic.rstrip('/').endswith('/compressed'):
        return image_topic.rstrip('/') + '/compressed'
    return image_topic


def print_usage() -> None:
    def lines(tuning: bool) -> str:
        return '\n'.join(f'  {s.name:<24} {s.description}' + (' (run time)' if s.runtime else '')
                         for s in params.PARAMS if s.tuning == tuning)
    print(USAGE + lines(False) + '\nTuning (the defaults are the measured best):\n' + lines(True))


def main(argv: Optional[List[str]], node_cls: Callable[[], Any]) -> int:
    """Console entry point. With ``autostart: true`` the node configures and activates itself
    and exits with status 1 if that fails; otherwise it waits for lifecycle service calls."""
    args = list(argv if argv is not None else sys.argv)
    user = args[1:args.index('--ros-args')] if '--ros-args' in args else args[1:]
    if any(a in ('-h', '--help') for a in user):
        print_usage()
        return 0
    try:
        return run_node(args, node_cls)
    except KeyboardInterrupt:   # a late Ctrl-C (see run_node): the node is already released
        return 0


def node_executor(node: Any) -> Any:
    """The executor the node's ``executor`` parameter names (NodeOptions; 'single' for a node
    without that parameter). One that cannot be made here (an unknown name, an rclpy without
    the EventsExecutor) is logged and the single-threaded one is used: the node still starts,
    and its configure refuses an unknown name with the options' error."""
    kind = node.get_parameter('executor').value if node.has_parameter('executor') else 'single'
    try:
        executor = make_executor(kind)
    except ValueError as exc:
        # an rclpy before Kilted lacks the default 'events': a warning, not an error
        log = node.get_logger().warning if kind in EXECUTORS else node.get_logger().error
        log(f'{exc}; running the single-threaded executor')
        return make_executor('single')
    node.get_logger().info(f'callbacks run on the {kind} executor ({type(executor).__name__})')
    return executor


AUTOSTART = next(s for s in params.PARAMS if s.name == 'autostart')


def run_node(args: List[str], node_cls: Callable[[], Any]) -> int:
    """Run ``node_cls()`` on ROS ``args`` until it finishes, Ctrl-C or shutdown, then release
    it; the exit status. ``main`` without its help and its late-Ctrl-C guard."""
    # Ctrl-C is ours, SIGTERM rclpy's (it shuts the context down). Our handler only notes
    # Ctrl-C, and the spin loop below ends on it with the context still up, so what is
    # released after it (the configure it interrupted included) can still publish and log. A
    # KeyboardInterrupt raised at an arbitrary point of the executor left a half-built rclpy
    # Task whose finalizer printed a traceback under `ros2 launch` (CI, test_ros_colcon); only
    # inside configure does the handler raise, to stop the model build (interruption.py).
    signal.signal(signal.SIGINT, SIGINT.on_sigint)
    if SIGINT.requested:    # Ctrl-C while the node's modules were imported (interruption.py)
        print('[sam2_tracker] stopped (Ctrl-C) before the node started', flush=True)
        return 0
    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.SIGTERM)
    except Exception as exc:  # noqa: BLE001 - rcl's RCLError, e.g. a params file it cannot parse
        # (an array of mixed types): one line, as for any other bad parameter, no traceback
        print(f'[sam2_tracker] cannot start: {exc}', file=sys.stderr)
        return 1
    node = node_cls()
    # One executor thread: callbacks only hand messages to the worker, which does the work in
    # its own thread. rclpy's MultiThreadedExecutor (3 threads, tried first) delayed the
    # hand-off of 720p frames by up to seconds through GIL contention with the worker
    # (docs/performance.md). In FIFO mode a full FIFO now also holds back prompts and
    # diagnostics for up to one frame time.
    executor = node_executor(node)
    executor.add_node(node)
    rc = 0
    try:
        try:    # checked as every parameter is: 'true' or 1 would read as false
            autostart = params.to_field_value(AUTOSTART, node.get_parameter('autostart').value)
        except ValueError as exc:
            node.get_logger().fatal(f'{exc}; exiting')
            rc = 1
            autostart = False
        if autostart:
            ok = node.trigger_configure() == TransitionCallbackReturn.SUCCESS
            ok = ok and node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            if not ok and not (SIGINT.requested or not rclpy.ok()):
                node.get_logger().fatal('autostart failed (see the error above); exiting')
                rc = 1
        elif rc == 0:
            node.get_logger().info(
                f'waiting unconfigured (autostart is false): `ros2 lifecycle set '
                f'{node.get_fully_qualified_name()} configure`, then `activate`; or start with '
                f'-p autostart:=true')
        while rc == 0 and rclpy.ok() and not node.finished and not SIGINT.requested:
            try:
                executor.spin_once(timeout_sec=0.2)
            except Exception:  # noqa: BLE001 - re-raised unless Ctrl-C caused it
                # Ctrl-C shut the context down while a callback ran (a timer's publish then
                # fails: "publisher's context is invalid", seen in a full CI-like run of
                # test_examples): the shutdown asked for, not an error
                if rclpy.ok():
                    raise
                break
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        # Ctrl-C has been heard (or the context is gone): a repeat must not raise inside the
        # release below (seen under `ros2 launch`: exit -2 with a traceback). Ignore repeats.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        node.release()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return rc
