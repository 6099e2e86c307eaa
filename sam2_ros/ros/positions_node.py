"""3D positions for a stereo rig run as a tracker node per camera: ``positions_node``.

    ros2 run sam2_ros positions_node --ros-args -p left:=left -p right:=right
    ros2 launch sam2_ros multi_camera.launch.py cameras:=left,right positions:=true

Why a node of its own: one tracker node serving both cameras (``cameras: [left, right]``)
publishes ``~/positions`` itself, but at 60 Hz with several objects two tracker nodes keep up
better on one GPU (docs/performance.md, two cameras). This node gives that configuration the
same output: it pairs the two trackers' ``TrackingState`` messages by stamp (both carry their
image's stamp; a stereo driver stamps a pair alike), triangulates every object id visible in
both from its two mask centroids with the pair's ``camera_info`` (``/<left>/camera_info`` and
``/<right>/camera_info``, or ``left_camera_info`` and ``right_camera_info``; ``positions.py``,
the same code as the one-node path, the same rules: ids pair by number, a mask touching the
image border is invalid unless ``allow_clipped``, camera_info is subscribed best effort) and
publishes ``vision_msgs/Detection3DArray`` on ``~/positions`` (only valid positions, in the
left camera's frame) and its counts on ``/diagnostics``. As in the one-node path, a
camera_info of another size than the images (each state carries its image's size) turns
positions off, the reason in the diagnostics and the log (a size of 0, a tracker that does
not fill it, is not checked).

States are paired as the one-node tracker pairs frames (``pairing.StampPairer``); a state
without a partner waits at most ``pair_wait_ms`` (the two trackers' outputs may be that far
apart), or until the other camera has moved past it or ``pair_depth`` of its camera wait, then
is dropped (counted): a camera that stops leaves nothing behind.

Parameters (``sam2_ros/ros/positions_options.py``, docs/ros.md has the table): a value the node
cannot run with is one error line and exit status 1, before anything is subscribed.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from sam2_ros.ros.inputs import stamp_ns
from sam2_ros.ros import small_node
from sam2_ros.ros.pairing import StampPairer
from sam2_ros.ros.positions import (PairCalibration, View, camera_info_qos, detections,
                                    size_mismatch, touches_border, triangulate_objects)
from sam2_ros.stereo import Triangulation

OUTPUT_TOPIC = '~/positions'
NODE_NAME = 'sam2_positions'


class StatePairs:
    """Left (side 0) and right (side 1) states paired by stamp with the tracker's own pairing
    policy (``pairing.StampPairer``: equal stamps or within ``tolerance_ns``, a stamp going
    back resets it); a state waits for its partner at most ``wait_ns`` of receipt time, or
    until the other side has moved past it or more than ``depth`` of its side wait, then is
    dropped (counted). Pure Python, so the policy is tested without ROS."""

    def __init__(self, wait_ns: int, tolerance_ns: int = 0, depth: int = 30) -> None:
        # wait_ns is a wait in receipt time as pair_wait_ms documents it (how far apart the
        # two trackers' outputs come), not a period of the stamps: not scaled by their rate
        self.pairer = StampPairer(2, wait_ns, tolerance_ns, queue_size=depth, follow_rate=False)

    def put(self, side: int, stamp_ns: int, item: Any, now_ns: int) -> List[Tuple[Any, Any]]:
        """Add one side's state received at ``now_ns``; the (left, right) pairs it completes
        (or that leave with it), oldest first."""
        return [(g.frames[0].item, g.frames[1].item)
                for g in self.pairer.put(side, stamp_ns, item, now_ns) if g.complete]

    @property
    def paired(self) -> int:
        return self.pairer.counts.complete

    @property
    def dropped(self) -> int:
        """States that left without a partner."""
        return self.pairer.counts.partial


def views(state: Any, size: Tuple[int, int] = (0, 0)) -> Dict[int, View]:
    """A TrackingState's objects -> {id: View}: the mask centroid (x, y) px, None where not
    visible (object score <= 0 or an empty mask); the box (ObjectState's x_offset, y_offset,
    width, height -> inclusive corners, None when empty) and whether it touches the border
    of the image, whose size is the state's or, where the tracker left it 0, ``size`` (the
    camera_info's)."""
    width, height = int(state.width) or size[0], int(state.height) or size[1]
    out = {}
    for o in state.objects:
        b = o.box
        box = ((int(b.x_offset), int(b.y_offset), int(b.x_offset) + int(b.width) - 1,
                int(b.y_offset) + int(b.height) - 1)
               if o.area > 0 and b.width > 0 and b.height > 0 else None)
        out[int(o.object_id)] = View(
            (float(o.centroid.x), float(o.centroid.y)) if o.score > 0 and o.area > 0 else None,
            float(o.score), box, box is not None and touches_border(box, width, height))
    return out


class StatePositions:
    """What positions_node does with the two trackers' states, without ROS: pairs them
    (``StatePairs``), triangulates each complete pair with the calibration of ``calib``
    (``PairCalibration``, fed by the node's camera_info subscriptions) and counts what
    happened for the diagnostics. ``warn``/``info`` log a change of the size check once,
    ``error`` a pair that failed (the node throttles it)."""

    def __init__(self, options: Any, calib: PairCalibration, warn: Callable[[str], None],
                 info: Callable[[str], None], error: Callable[[str], None]) -> None:
        self.options = options
        self.pairs = StatePairs(options.wait_ns, options.tolerance_ns, options.pair_depth)
        self.calib = calib
        self.warn, self.info, self.error = warn, info, error
        self.valid = self.invalid = self.waiting = self.refused = self.failed = 0
        self.mismatch = ''      # camera_info of another size than the images ('' if not)
        self.last: Dict[int, Triangulation] = {}

    def take(self, side: int, state: Any, now_ns: int) -> List[Tuple[Any, Any, Any]]:
        """One side's TrackingState received at ``now_ns`` -> (header, calibration,
        triangulations, views) of each pair it completes that has positions to publish."""
        out = []
        for left, right in self.pairs.put(side, stamp_ns(state.header.stamp), state, now_ns):
            try:
                found = self.positions(left, right)
            except Exception as exc:  # noqa: BLE001 - one pair must not stop the node
                self.failed += 1
                self.error(f'positions of a pair failed: {exc!r}')
                continue
            if found is not None:
                out.append((left.header, *found))
        return out

    def positions(self, left: Any, right: Any) -> Optional[Tuple[Any, Any, Any, Any]]:
        """(calibration, triangulations, left views, right views) of one pair, None where
        there is no calibration yet or it is for images of another size (counted)."""
        calib = self.calib.calibration()
        if calib is None:
            self.waiting += 1
            return None
        mismatch = size_mismatch(calib, left, right)
        if mismatch != self.mismatch:           # logged once per change, not per pair
            if mismatch:
                self.warn(f'positions off: {mismatch}')
            else:
                self.info('positions on: camera_info matches the images')
        self.mismatch = mismatch
        if mismatch:            # calibrated for other images: positions would be wrong
            self.refused += 1
            return None
        lv = views(left, (calib.left.width, calib.left.height))
        rv = views(right, (calib.right.width, calib.right.height))
        found = triangulate_objects(calib, lv, rv, self.options.rectified,
                                    self.options.limits, self.options.allow_clipped)
        self.last = found
        self.valid += sum(t.valid for t in found.values())
        self.invalid += sum(not t.valid for t in found.values())
        return calib, found, lv, rv

    def status(self) -> Tuple[bool, str, List[Tuple[str, str]]]:
        """(ok, message, key/values) of the diagnostics."""
        values = [
            ('pairs', str(self.pairs.paired)), ('unpaired_dropped', str(self.pairs.dropped)),
            ('positions_valid', str(self.valid)), ('positions_invalid', str(self.invalid)),
            ('pairs_before_camera_info', str(self.waiting)),
            ('pairs_size_mismatch', str(self.refused)), ('pairs_failed', str(self.failed))]
        values += [(f'position_{i}', 'valid' if t.valid else f'invalid: {t.reason}')
                   for i, t in sorted(self.last.items())]
        calib = self.calib.calibration()
        if calib is not None:
            msg = f'off (camera_info: {self.mismatch})' if self.mismatch else 'ok'
        else:
            msg = (f'camera_info refused: {self.calib.error[:200]}'
                   if self.calib.error else 'waiting for camera_info of both')
        return calib is not None and not self.mismatch, msg, values


def make_node(node_name: str = NODE_NAME, **node_kwargs: Any) -> Any:
    """The rclpy node (built here so that importing this module needs no ROS); ``node_kwargs``
    go to rclpy's Node (a context, parameter_overrides). ParameterError for a parameter value
    it cannot run with (the node is destroyed first)."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
    from rclpy.clock import Clock, ClockType
    from rclpy.node import Node
    from sensor_msgs.msg import CameraInfo
    from vision_msgs.msg import Detection3DArray

    from sam2_ros.ros import messages, params, positions_options
    from sam2_ros.ros.positions_options import ParameterError
    from sam2_ros.ros.publishers import OUTPUT_QOS

    class PositionsNode(Node):
        def __init__(self) -> None:
            super().__init__(node_name, **node_kwargs)
            positions_options.declare(self)
            try:
                o = positions_options.read(self)
            except ParameterError:
                self.destroy_node()
                raise
            # ROS ignores a parameter nobody declares: a typo would run with the default
            for name, close in params.unknown(list(self._parameter_overrides),
                                              list(self._parameters)):
                self.get_logger().warning(f'unknown parameter {name!r} ignored' + (
                    f' (did you mean {close!r}?)' if close else ''))
            self.options = o
            pair = PairCalibration(o.rectified, warn=self.get_logger().warning)
            log = self.get_logger()
            self.core = StatePositions(o, pair, log.warning, log.info, lambda text: log.error(
                text, throttle_duration_sec=5.0))
            self.pub = self.create_publisher(Detection3DArray, OUTPUT_TOPIC, OUTPUT_QOS)
            self.diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
            state_type = messages.interfaces().TrackingState
            self.subs = []
            for side, ns in enumerate((o.left, o.right)):
                self.subs.append(self.create_subscription(
                    state_type, f'/{ns}/{o.tracker}/state', self.on_state(side), OUTPUT_QOS))
                self.subs.append(self.create_subscription(
                    CameraInfo, o.camera_info_topic(side), pair.on_camera_info(side),
                    camera_info_qos()))
            # a steady clock, as the tracker node's: under use_sim_time the node's clock stands
            # still while /clock does (a bag paused or ended), and a monitor would see silence
            self.timer = self.create_timer(o.diagnostics_period_s, self.on_diagnostics,
                                           clock=Clock(clock_type=ClockType.STEADY_TIME))
            infos = ' and '.join(self.resolve_topic_name(o.camera_info_topic(side))
                                 for side in (0, 1))
            self.get_logger().info(f'3D positions of /{o.left} and /{o.right} '
                                   f'({o.tracker}) on {self.resolve_topic_name(OUTPUT_TOPIC)}, '
                                   f'calibrated by {infos}')

        def on_state(self, side: int) -> Callable[[Any], None]:
            def take(msg: Any) -> None:
                for found in self.core.take(side, msg, time.monotonic_ns()):
                    try:
                        self.pub.publish(detections(*found))
                    except Exception as exc:  # noqa: BLE001 - one pair must not stop the node
                        self.core.failed += 1
                        self.core.error(f'positions of a pair failed: {exc!r}')
            return take

        def on_diagnostics(self) -> None:
            ok, msg, values = self.core.status()
            st = DiagnosticStatus(level=DiagnosticStatus.OK if ok else DiagnosticStatus.WARN,
                                  name=f'{self.get_name()}: positions', message=msg,
                                  hardware_id=self.get_fully_qualified_name(),
                                  values=[KeyValue(key=k, value=v) for k, v in values])
            arr = DiagnosticArray(status=[st])
            arr.header.stamp = self.get_clock().now().to_msg()
            self.diag.publish(arr)

    return PositionsNode()


def usage() -> str:
    """--help: the module's description and every parameter with its default."""
    from sam2_ros.ros import positions_options

    return __doc__ + '\nThe parameters, with their defaults:\n' + '\n'.join(
        f'  {s.name:<22} {getattr(positions_options.DEFAULTS, s.field)!r:<15} {s.description}'
        for s in positions_options.SPECS)


def main(argv: Optional[List[str]] = None) -> int:
    from sam2_ros.ros.positions_options import ParameterError

    return small_node.run(NODE_NAME, make_node, usage, (ParameterError,), argv)


if __name__ == '__main__':
    sys.exit(main())
