"""The options of ``positions_node`` (:mod:`sam2_ros.ros.positions_node`): one knob each
(:mod:`sam2_ros.knobs`), from which its ROS parameters (names, defaults, descriptions) and the
docs/ros.md table (``python -m tools.knobs``) are derived.

Why apart from :class:`~sam2_ros.ros.options.NodeOptions`: positions_node is another node
with parameters of its own; the tracker's parameters are not its. Values are converted as the
tracker's are (:func:`sam2_ros.ros.params.to_field_value`: an integer is a float parameter's
value, ``-p pair_wait_ms:=300`` included), so the parameters are declared with dynamic typing
and a wrong value is one clear error instead of rclpy's exception in the constructor.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Tuple

from sam2_ros.knobs import knobs, knob
from sam2_ros.ros import params
from sam2_ros.ros.options import ALLOW_CLIPPED_DOC, check_topic
from sam2_ros.stereo import LIMIT_DOCS, Limits

TARGET = 'positions'         # ParamSpec.target of these parameters
# diagnostics_period_s: a timer of less than a millisecond publishes as fast as a core can;
# more than a day is surely a mistake (and rclpy's timer overflows at ~292 years)
PERIOD_RANGE_S = (0.001, 86400.0)


class ParameterError(ValueError):
    """A parameter value positions_node refuses (the message names it)."""


@dataclass
class PositionsOptions:
    """What positions_node pairs, triangulates and reports."""

    left: str = knob('left', kind='str', doc=(
        "the left camera's namespace: its tracker's states on /<left>/<tracker>/state, its "
        'calibration on /<left>/camera_info (unless left_camera_info); positions are in its '
        'frame'))
    right: str = knob('right', kind='str', doc=(
        "the right camera's namespace (as left)"))
    tracker: str = knob('sam2_tracker', kind='str', doc=(
        'the name of the tracker node in each camera namespace'))
    left_camera_info: str = knob('', kind='str', doc=(
        "the left camera's sensor_msgs/CameraInfo topic where its driver publishes it elsewhere "
        '(e.g. /stereo/left/camera_info); empty: /<left>/camera_info'))
    right_camera_info: str = knob('', kind='str', doc=(
        "the right camera's CameraInfo topic (as left_camera_info); empty: "
        '/<right>/camera_info'))
    rectified: bool = knob(False, kind='bool', doc=(
        'the images are rectified (image_rect): mask centroids are triangulated as they are; '
        'false: raw images, centroids undistorted and rectified with camera_info first'))
    pair_tolerance_ms: float = knob(0.0, kind='float', doc=(
        'states stamped this close are one pair (0 = equal stamps; at most half of '
        'pair_wait_ms)'))
    pair_wait_ms: float = knob(200.0, kind='float', doc=(
        "a state waits at most this long for the other camera's (the two trackers' outputs "
        'may be that far apart), then is dropped'))
    pair_depth: int = knob(30, kind='int', doc=(
        'states of one camera waiting for a partner; with more, the oldest is dropped'))
    diagnostics_period_s: float = knob(1.0, kind='float', doc=(
        f'period of /diagnostics (wall clock), {PERIOD_RANGE_S[0]:g}..{PERIOD_RANGE_S[1]:g}'))
    # when a position counts as valid: stereo.Limits' fields and defaults, under their names
    min_disparity_px: float = knob(Limits.min_disparity_px, kind='float',
                                   doc=LIMIT_DOCS['min_disparity_px'])
    max_row_error_px: float = knob(Limits.max_row_error_px, kind='float',
                                   doc=LIMIT_DOCS['max_row_error_px'])
    max_reprojection_px: float = knob(Limits.max_reprojection_px, kind='float',
                                      doc=LIMIT_DOCS['max_reprojection_px'])
    min_depth: float = knob(Limits.min_depth, kind='float', doc=LIMIT_DOCS['min_depth'])
    max_depth: float = knob(Limits.max_depth, kind='float', doc=LIMIT_DOCS['max_depth'])
    allow_clipped: bool = knob(False, kind='bool', doc=ALLOW_CLIPPED_DOC)

    @property
    def limits(self) -> Limits:
        """The validity bounds of a position (ValueError naming a bad one)."""
        return Limits(self.min_disparity_px, self.max_row_error_px, self.max_reprojection_px,
                      self.min_depth, self.max_depth)

    def camera_info_topic(self, side: int) -> str:
        """The CameraInfo topic of the left (0) or right (1) camera."""
        name, given = ((self.left, self.left_camera_info) if side == 0
                       else (self.right, self.right_camera_info))
        return given or f'/{name}/camera_info'

    @property
    def wait_ns(self) -> int:
        return ms_to_ns(self.pair_wait_ms)

    @property
    def tolerance_ns(self) -> int:
        return ms_to_ns(self.pair_tolerance_ms)

    def validate(self) -> 'PositionsOptions':
        """Raise ParameterError naming the first bad option; return self for chaining.

        The checks are those the node would otherwise fail on later, with a traceback:
        ``pairing.StampPairer``'s (in ns, as it checks them), rclpy's topic names, the timer.
        """
        for name in ('left', 'right'):
            try:
                check_topic(f'/{getattr(self, name)}/{self.tracker}/state',
                            f'/<{name}>/<tracker>/state (parameters {name}, tracker)')
            except ValueError as exc:
                raise ParameterError(str(exc)) from None
        if self.left == self.right:     # every state would pair with itself
            raise ParameterError(f'left and right must be different cameras, both are '
                                 f'{self.left!r}')
        topics = [self.camera_info_topic(side) for side in (0, 1)]
        for name, topic in zip(('left_camera_info', 'right_camera_info'), topics):
            try:
                check_topic(topic, name)
            except ValueError as exc:
                raise ParameterError(str(exc)) from None
        if topics[0] == topics[1]:      # each message would be taken for both cameras
            raise ParameterError(f'left_camera_info and right_camera_info must be different '
                                 f'topics (one CameraInfo per camera), both are '
                                 f'{topics[0]!r}')
        if self.wait_ns < 1:
            raise ParameterError(f'pair_wait_ms must be > 0, got {self.pair_wait_ms!r}')
        if not 0 <= self.tolerance_ns <= self.wait_ns // 2:
            raise ParameterError(f'pair_tolerance_ms must be in 0..pair_wait_ms/2 '
                                 f'({self.pair_wait_ms / 2:g}), got {self.pair_tolerance_ms!r}: '
                                 f'a wider one can pair a state with the neighbour of its '
                                 f'partner')
        if self.pair_depth < 1:
            raise ParameterError(f'pair_depth must be >= 1, got {self.pair_depth!r}')
        try:
            self.limits
        except ValueError as exc:
            raise ParameterError(str(exc)) from None
        low, high = PERIOD_RANGE_S
        if not low <= self.diagnostics_period_s <= high:
            raise ParameterError(f'diagnostics_period_s must be in {low:g}..{high:g}, got '
                                 f'{self.diagnostics_period_s!r}')
        return self


def ms_to_ns(ms: float) -> int:
    return int(round(float(ms) * 1e6))


# One ROS parameter per knob, described as the tracker's are (sam2_ros.ros.params.ParamSpec).
SPECS: Tuple[params.ParamSpec, ...] = tuple(
    params.ParamSpec(f.name, TARGET, f.name, k.kind, k.doc, k.runtime, k.tuning, k.startup)
    for f, k in knobs(PositionsOptions))
DEFAULTS = PositionsOptions()


def build(values: Dict[str, Any]) -> PositionsOptions:
    """Parameter values (name -> ROS value; missing names keep defaults) -> validated options;
    ParameterError for an unknown name, a wrong type or a bad value."""
    unknown = sorted(set(values) - {s.name for s in SPECS})
    if unknown:
        raise ParameterError(f'unknown parameters: {unknown}')
    kw = {}
    for spec in SPECS:
        if spec.name in values:
            try:
                kw[spec.field] = params.to_field_value(spec, values[spec.name], DEFAULTS)
            except ValueError as exc:
                raise ParameterError(str(exc)) from None
    return dataclasses.replace(PositionsOptions(), **kw).validate()


def declare(node: Any) -> None:
    """Declare every parameter on ``node`` with its default and description (``ros2 param
    describe``). Dynamic typing: a value of another type than the default's (an integer for
    a float, a string for a bool) reaches :func:`build`, which accepts or names it, instead
    of rclpy raising InvalidParameterTypeException in the constructor."""
    from rcl_interfaces.msg import ParameterDescriptor

    for spec in SPECS:
        desc = ParameterDescriptor(name=spec.name, dynamic_typing=True,
                                   description=f'[{spec.kind}] {spec.description}')
        node.declare_parameter(spec.name, getattr(DEFAULTS, spec.field), desc)


def read(node: Any) -> PositionsOptions:
    """The declared parameters of ``node`` -> validated options (ParameterError)."""
    return build({s.name: node.get_parameter(s.name).value for s in SPECS})
