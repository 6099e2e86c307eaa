"""A camera without hardware: ``synthetic_camera`` publishes the synthetic camera's frames.

    ros2 run sam2_ros synthetic_camera [--ros-args -p rate:=30.0 -p width:=640 -p height:=480]
    ros2 run sam2_ros synthetic_camera --ros-args -p stereo:=true
    python -m sam2_ros.ros.synthetic_camera --help

Frames of :class:`~sam2_ros.synthetic.SyntheticCamera` (``objects`` discs moving over a
textured background, object 1 first) as ``sensor_msgs/Image`` (rgb8) on ``image_raw`` and its
calibration as ``sensor_msgs/CameraInfo`` on ``camera_info``, ``rate`` times a second. Started
without a namespace it publishes under ``camera/`` (``/camera/image_raw``, the tracker's
default ``image_topic``); in a namespace (``-r __ns:=/cam0``, a launch file's) directly under
it (``/cam0/image_raw``).

``stereo:=true``: a rectified pair (:mod:`sam2_ros.synthetic_stereo`: same intrinsics, the
right camera ``baseline`` metres to the right, ``Tx = -fx * baseline`` in the right P; disc
``k`` at a depth from ``depth_far`` for object 1 to ``depth_near`` for the last, the background
infinitely far) on ``left/image_raw``, ``left/camera_info`` and the same under ``right/``,
both images and both camera_info of a pair stamped alike; without a namespace under
``stereo/``, where ``stereo.launch.py``'s node reads them. The log names the topics, the depths
and the disparities.

Stamps are the node clock's (``use_sim_time``: ``/clock``'s time), and so is the rate: with
``use_sim_time`` and no ``/clock`` nothing is published. Frame ``i`` depends only on the
parameters and ``i``. Parameters are read once at start; a value the node cannot run with is
one error line and exit status 1.
"""

from __future__ import annotations

import array
import dataclasses
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np

from sam2_ros.knobs import knob, knobs
from sam2_ros.ros import small_node
from sam2_ros.synthetic import SyntheticCamera
from sam2_ros.synthetic_stereo import SyntheticStereo, projection

NODE_NAME = 'synthetic_camera'
# where the frames go when the node runs without a namespace: the tracker launch files'
# defaults (config/tracker.yaml's image_topic /camera/image_raw; stereo.launch.py's namespace)
DEFAULT_PREFIX = {False: 'camera/', True: 'stereo/'}
SIDES = ('left', 'right')
IMAGE_DEPTH = 5        # frames a reliable publisher keeps for a slow subscriber


class ParameterError(ValueError):
    """A parameter value the camera refuses (the message names it)."""


@dataclass
class CameraOptions:
    """What the synthetic camera publishes."""

    rate: float = knob(30.0, kind='float', doc=(
        'frames per second, on the node clock (with use_sim_time: /clock time)'))
    width: int = knob(640, kind='int', doc='image width in pixels')
    height: int = knob(480, kind='int', doc='image height in pixels')
    objects: int = knob(2, kind='int', doc='moving discs (object ids 1..objects), 1..255')
    seed: int = knob(0, kind='int', doc='background, colours, starts and velocities')
    noise: float = knob(0.0, kind='float', doc=(
        'standard deviation of per-frame pixel noise, 0: none'))
    frame_id: str = knob('camera_optical_frame', kind='str', doc=(
        "the images' frame_id; stereo: left_<frame_id> and right_<frame_id>"))
    stereo: bool = knob(False, kind='bool', doc=(
        'a rectified pair on left/ and right/ (under stereo/ without a namespace)'))
    focal_px: float = knob(0.0, kind='float', doc=(
        'focal length in pixels of camera_info (fx = fy); 0: the width (53 degrees wide)'))
    baseline: float = knob(0.1, kind='float', doc=(
        'stereo: metres between the cameras (the right P has Tx = -fx * baseline)'))
    depth_far: float = knob(2.0, kind='float', doc=(
        'stereo: depth of object 1 in metres (disparity fx * baseline / depth, whole px)'))
    depth_near: float = knob(1.0, kind='float', doc=(
        'stereo: depth of the last object in metres; those between evenly spaced'))

    @property
    def focal(self) -> float:
        return float(self.focal_px or self.width)

    def validate(self) -> 'CameraOptions':
        """Raise ParameterError naming the first bad option; return self for chaining."""
        if not 0 < self.rate <= 1000:
            raise ParameterError(f'rate must be in (0, 1000] Hz, got {self.rate!r}')
        if not 1 <= self.objects <= 255:
            raise ParameterError(f'objects must be in 1..255, got {self.objects!r}')
        if self.width < 1 or self.height < 1:
            raise ParameterError(f'width and height must be >= 1, got {self.width}x'
                                 f'{self.height}')
        for name in ('noise', 'focal_px'):
            if getattr(self, name) < 0:
                raise ParameterError(f'{name} must be >= 0, got {getattr(self, name)!r}')
        if not self.frame_id:
            raise ParameterError('frame_id must not be empty')
        try:
            make_scene(self)
        except ValueError as exc:       # the frame too small, a depth that does not fit
            raise ParameterError(f'the parameters give no scene: {exc}') from None
        return self


DEFAULTS = CameraOptions()


def make_scene(o: CameraOptions) -> Any:
    """The renderer of ``o``: a SyntheticCamera, or a SyntheticStereo with ``stereo``."""
    if o.stereo:
        return SyntheticStereo(o.width, o.height, o.objects, o.seed, focal_px=o.focal,
                               baseline=o.baseline, depth_far=o.depth_far,
                               depth_near=o.depth_near, noise=o.noise)
    return SyntheticCamera(o.width, o.height, o.objects, o.seed, noise=o.noise)


class Views:
    """The cameras of ``o``: their topic prefixes (``''``, or ``left/`` and ``right/``),
    frame_ids and projections P [3, 4], and their frames."""

    def __init__(self, o: CameraOptions) -> None:
        self.scene = make_scene(o)
        if o.stereo:
            g = self.scene.geometry
            self.prefixes = [f'{side}/' for side in SIDES]
            self.frame_ids = [f'{side}_{o.frame_id}' for side in SIDES]
            self.projections = [g.P_left, g.P_right]
        else:
            self.prefixes, self.frame_ids = [''], [o.frame_id]
            self.projections = [projection(o.width, o.height, o.focal)]

    def frames(self, i: int) -> List[np.ndarray]:
        """Frame ``i`` of each camera: [h, w, 3] uint8 RGB, in the order of ``prefixes``."""
        if len(self.prefixes) == 1:
            return [self.scene.frame(i)]
        return list(self.scene.pair(i))


def field_value(kind: str, name: str, value: Any) -> Any:
    """A ROS parameter value as the field's Python value; ParameterError for the wrong type
    (an integer is a float parameter's value: ``-p rate:=15``)."""
    ok = {'float': isinstance(value, (int, float)) and not isinstance(value, bool),
          'int': isinstance(value, int) and not isinstance(value, bool),
          'bool': isinstance(value, bool), 'str': isinstance(value, str)}[kind]
    if not ok:
        what = {'float': 'a number', 'int': 'an integer', 'bool': 'true or false',
                'str': 'a string'}[kind]
        raise ParameterError(f'parameter {name} must be {what}, got {value!r}')
    return float(value) if kind == 'float' else value


def build(values: Dict[str, Any]) -> CameraOptions:
    """Parameter values (missing names keep defaults) -> validated options (ParameterError)."""
    kw = {f.name: field_value(k.kind, f.name, values[f.name])
          for f, k in knobs(CameraOptions) if f.name in values}
    return dataclasses.replace(CameraOptions(), **kw).validate()


def camera_info(o: CameraOptions, frame_id: str, P: np.ndarray, stamp: Any) -> Any:
    """sensor_msgs/CameraInfo of a distortion-free camera with projection ``P`` [3, 4]."""
    from sensor_msgs.msg import CameraInfo

    msg = CameraInfo()
    msg.header.stamp, msg.header.frame_id = stamp, frame_id
    msg.width, msg.height = o.width, o.height
    msg.distortion_model = 'plumb_bob'
    msg.d = [0.0] * 5
    msg.k = [float(v) for v in P[:, :3].ravel()]
    msg.r = [float(v) for v in np.eye(3).ravel()]
    msg.p = [float(v) for v in P.ravel()]
    return msg


def image(rgb: np.ndarray, frame_id: str, stamp: Any) -> Any:
    """sensor_msgs/Image (rgb8) of [h, w, 3] uint8 ``rgb``."""
    from sensor_msgs.msg import Image

    msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding='rgb8', is_bigendian=0,
                step=rgb.shape[1] * 3)
    msg.header.stamp, msg.header.frame_id = stamp, frame_id
    data = array.array('B')             # rclpy keeps an array.array('B') as it is: one copy
    data.frombytes(memoryview(np.ascontiguousarray(rgb)).cast('B'))
    msg.data = data
    return msg


def make_node() -> Any:
    """The camera node (parameters declared and read; ParameterError for a bad one)."""
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.node import Node
    from sensor_msgs.msg import CameraInfo, Image

    class SyntheticCameraNode(Node):
        def __init__(self) -> None:
            super().__init__(NODE_NAME)
            # dynamic typing: a value of another type reaches build(), which names it,
            # instead of rclpy raising in the constructor
            for f, k in knobs(CameraOptions):
                self.declare_parameter(f.name, getattr(DEFAULTS, f.name), ParameterDescriptor(
                    name=f.name, dynamic_typing=True, description=f'[{k.kind}] {k.doc}'))
            self.options = build({f.name: self.get_parameter(f.name).value
                                  for f, _ in knobs(CameraOptions)})
            o = self.options
            self.views = Views(o)
            # relative topics; in no namespace, under the tracker launch files' defaults
            ns = DEFAULT_PREFIX[o.stereo] if self.get_namespace() == '/' else ''
            self.pubs = [(self.create_publisher(Image, f'{ns}{side}image_raw', IMAGE_DEPTH),
                          self.create_publisher(CameraInfo, f'{ns}{side}camera_info',
                                                IMAGE_DEPTH))
                         for side in self.views.prefixes]
            self.index = 0
            self.timer = self.create_timer(1.0 / o.rate, self.tick)
            topics = ', '.join(p.topic_name for pair in self.pubs for p in pair)
            self.get_logger().info(f'{o.width}x{o.height} frames of {o.objects} discs at '
                                   f'{o.rate:g} Hz on {topics}{self.describe()}')

        def describe(self) -> str:
            if not self.options.stereo:
                return ''
            s = self.views.scene
            return (f'; baseline {s.geometry.baseline:g} m, fx {s.geometry.focal_px:g} px, '
                    f'object depths {", ".join(f"{z:.3f}" for z in s.depths)} m (disparities '
                    f'{", ".join(str(d) for d in s.disparities)} px)')

        def tick(self) -> None:
            stamp = self.get_clock().now().to_msg()      # one stamp for both of a pair
            v = self.views
            for (pub_image, pub_info), frame_id, rgb, P in zip(
                    self.pubs, v.frame_ids, v.frames(self.index), v.projections):
                pub_image.publish(image(rgb, frame_id, stamp))
                pub_info.publish(camera_info(self.options, frame_id, P, stamp))
            self.index += 1

    return SyntheticCameraNode()


def usage() -> str:
    """--help: the module's description and every parameter with its default."""
    return __doc__ + '\nThe parameters (--ros-args -p name:=value), with their defaults:\n' + \
        '\n'.join(f'  {f.name:<11} {getattr(DEFAULTS, f.name)!r:<22} {k.doc}'
                  for f, k in knobs(CameraOptions))


def main(argv: Optional[List[str]] = None) -> int:
    return small_node.run(NODE_NAME, make_node, usage, (ParameterError,), argv)


if __name__ == '__main__':
    sys.exit(main())
