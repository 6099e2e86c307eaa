"""3D positions of the objects tracked in both cameras of a calibrated pair (a multi-camera
node's cameras 0 and 1, e.g. ``left`` and ``right``): ``~/positions``.

From the pair's ``<ns>/camera_info`` (or the topics of ``camera_info_topics``;
:mod:`~sam2_ros.ros.stereo_msgs`), every group of frames in which an object id is tracked in
both cameras gives that object's 3D centroid, triangulated from its two mask centroids
(:func:`sam2_ros.stereo.triangulate`: disparity for a rectified pair, DLT otherwise), in the
left camera's frame (its camera_info's ``frame_id``).

An object is the same id in both cameras (prompt it with the same id in each): an id tracked
in one camera only is invalid, "not tracked in the other camera", apart from one tracked there
but hidden ("not visible"). One id given to two objects gives two centroids that are not of
one point: invalid when they lie off each other's epipolar line (rows apart, reprojection) or
give a point outside the scene's depth range (``positions_min_depth``, ``positions_max_depth``;
off by default). A mask touching an image border (an instrument entering from the edge) is
invalid too unless ``allow_clipped``: the border cuts the object at other points in the two
views (they differ by the disparity), so the two centroids are not of one 3D point (a
horizontal shaft came out twice as far, valid).

The message is ``vision_msgs/Detection3DArray`` (the stamp of the left frame; one
``Detection3D`` per valid position: ``id`` the object id, ``bbox.center.position`` the point,
``bbox.size`` the left mask box's extent at the point's depth, ``results[0]`` class_id the
object id, score the smaller sigmoid of the two object score logits, pose the point; RViz's
vision_msgs plugin reads ``results[0]``) rather than a message of our own, so RViz and other
nodes read it as it is and no new interface is needed. Only VALID positions are published (a
consumer must not act on an invalid one); each object's last validity and reason (not tracked
or not visible in one camera, clipped, disparity too small, rows apart, behind a camera, depth
out of range...) are in the left camera's /diagnostics values (``position_<id>``) with counts
of valid and invalid estimates. Off (the reason in diagnostics) without vision_msgs, with
fewer than two cameras, or until both camera_info messages are valid (subscribed best effort:
:func:`camera_info_qos`).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

from sam2_ros.engine.types import FrameResult
from sam2_ros.ros.pairing import Group
from sam2_ros.ros.stereo_msgs import calibration_from_msgs
from sam2_ros.stereo import Calibration, Limits, Triangulation, triangulate

OUTPUT_TOPIC = '~/positions'
# Why a position is invalid besides stereo.triangulate's reasons (Triangulation.reason)
NOT_TRACKED_LEFT = 'not tracked in the left camera (prompt it there with the same id)'
NOT_TRACKED_RIGHT = 'not tracked in the right camera (prompt it there with the same id)'
CLIPPED_LEFT = ("the mask touches the left image border (cut off: its centroid is not the "
                "object's)")
CLIPPED_RIGHT = CLIPPED_LEFT.replace('left', 'right')
# bbox.size (P's units: metres for a metric calibration) where the mask box is unknown
NOMINAL_SIZE = 0.005
# camera_info's subscription depth: only the newest message is used
CAMERA_INFO_DEPTH = 10


def camera_info_qos() -> Any:
    """The QoS of the camera_info subscriptions: best effort, which receives from a reliable
    publisher and from a best-effort one (a driver's sensor-data QoS) alike; a reliable
    subscription never connects to the latter, and positions stayed off without a word."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=CAMERA_INFO_DEPTH,
                      reliability=ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.VOLATILE)


@dataclass(frozen=True)
class View:
    """What the positions read of one object in one camera: the mask centroid (x, y) px, None
    where not visible; the object score logit; the mask's box (x0, y0, x1, y1) px inclusive,
    None when unknown; clipped: the box touches the image border (:func:`touches_border`)."""

    centroid: Optional[Tuple[float, float]]
    score: float = 0.0
    box: Optional[Tuple[int, int, int, int]] = None
    clipped: bool = False


class PairCalibration:
    """The newest camera_info of cameras 0 and 1 (left, right) and the pair's calibration
    from them, rebuilt when either changes; written from the executor thread, read from the
    worker's."""

    def __init__(self, rectified: bool = False,
                 warn: Optional[Callable[[str], None]] = None) -> None:
        self.rectified = rectified      # the images are rectified: K and D are not used
        self.warn = warn                # gets each built calibration's warnings (units)
        self._lock = threading.Lock()
        self._info: List[Any] = [None, None]
        self._calib: Optional[Calibration] = None
        self.error = ''                 # why the newest pair was refused ('' when it was not)

    def on_camera_info(self, camera: int) -> Callable[[Any], None]:
        """The callback of camera ``camera``'s camera_info (only cameras 0 and 1 count)."""
        def store(msg: Any) -> None:
            if camera > 1:
                return
            with self._lock:
                self._info[camera] = msg
                self._calib = None             # rebuilt from the newest pair when next read
        return store

    def calibration(self) -> Optional[Calibration]:
        """The pair's calibration from the newest camera_info of both, None until both came
        (or while they are invalid: the reason is kept in ``error``)."""
        with self._lock:
            if self._calib is None and all(m is not None for m in self._info):
                try:
                    self._calib = calibration_from_msgs(*self._info, self.rectified)
                    self.error = ''
                    for line in self._calib.warnings if self.warn is not None else ():
                        self.warn(line)
                except ValueError as exc:
                    self.error = str(exc)
                    self._info = [None, None]
            return self._calib


class Positions:
    """The ``~/positions`` publisher and the pair's calibration (see the module docstring)."""

    def __init__(self, node: Any, pub: Any, off: Optional[str], rectified: bool,
                 limits: Limits = Limits(), allow_clipped: bool = False,
                 warn: Optional[Callable[[str], None]] = None) -> None:
        self.node, self.pub, self.off = node, pub, off
        self.rectified = rectified
        self.limits = limits
        self.allow_clipped = allow_clipped
        self.pair = PairCalibration(rectified, warn)
        self.last: Dict[int, Triangulation] = {}
        self.mismatch = ''          # camera_info of another size than the images ('' if not)
        self.valid = 0
        self.invalid = 0

    @classmethod
    def create(cls, node: Any, names: List[str]) -> 'Positions':
        # what every Positions of this node takes besides its publisher and why it is off
        args = (bool(node.opts.positions_rectified), node.opts.positions_limits,
                bool(node.opts.positions_allow_clipped), node.get_logger().warning)
        if len(names) < 2:
            return cls(node, None, 'one camera', *args)
        try:
            from vision_msgs.msg import Detection3DArray
        except ImportError as exc:
            return cls(node, None, f'no vision_msgs ({exc})', *args)
        from sam2_ros.ros.publishers import OUTPUT_QOS

        warning = rectified_mismatch(str(node.opts.camera_image), args[0])
        if warning:
            node.get_logger().warning(warning)
        return cls(node, node.create_lifecycle_publisher(Detection3DArray, OUTPUT_TOPIC,
                                                         OUTPUT_QOS), None, *args)

    def on_camera_info(self, camera: int) -> Callable[[Any], None]:
        return self.pair.on_camera_info(camera)

    def calibration(self) -> Optional[Calibration]:
        return self.pair.calibration()

    def on_group(self, group: Group, results: List[Optional[FrameResult]]) -> None:
        """The worker's hook after a group: triangulate the objects of both cameras."""
        if self.off is not None or results[0] is None or results[1] is None:
            return
        calib = self.calibration()
        if calib is None:
            return
        self.mismatch = size_mismatch(calib, results[0], results[1])
        if self.mismatch:           # calibrated for other images: positions would be wrong
            return
        left, right = result_views(results[0]), result_views(results[1])
        found = triangulate_objects(calib, left, right, self.rectified, self.limits,
                                    self.allow_clipped)
        self.last = found
        self.valid += sum(t.valid for t in found.values())
        self.invalid += sum(not t.valid for t in found.values())
        self.pub.publish(detections(group.frames[0].item.header, calib, found, left, right))

    def values(self, camera: int) -> Dict[str, Any]:
        """The diagnostics values of the positions (on camera 0's status)."""
        if camera != 0:
            return {}
        if self.off is not None:
            return {'positions': f'off ({self.off})'}
        out: Dict[str, Any] = {'positions_valid': self.valid,
                               'positions_invalid': self.invalid}
        if self.calibration() is None:
            out['positions'] = (f'off (camera_info: {self.pair.error[:200]})'
                                if self.pair.error else 'waiting for camera_info of both')
        elif self.mismatch:
            out['positions'] = f'off (camera_info: {self.mismatch})'
        for obj_id, t in sorted(self.last.items()):
            out[f'position_{obj_id}'] = 'valid' if t.valid else f'invalid: {t.reason}'
        return out

    def release(self) -> None:
        if self.pub is not None:
            self.node.destroy_lifecycle_publisher(self.pub)
            self.pub = None


class ImageSize(Protocol):
    """What :func:`size_mismatch` reads of an image: a FrameResult, or a TrackingState (which
    carries its image's size)."""

    height: int
    width: int


def size_mismatch(calib: Calibration, left: ImageSize, right: ImageSize) -> str:
    """Why the pair's camera_info does not describe these images ('' when it does; a size of
    0x0 in camera_info, or of an image (a TrackingState whose tracker did not fill its height
    and width), says nothing and is taken as it is)."""
    for name, cam, res in (('left', calib.left, left), ('right', calib.right, right)):
        size = (int(res.width), int(res.height))
        if (0, 0) not in ((cam.width, cam.height), size) and (cam.width, cam.height) != size:
            return (f'the {name} camera_info is for {cam.width}x{cam.height} images, the images '
                    f'are {res.width}x{res.height}')
    return ''


def rectified_mismatch(camera_image: str, rectified: bool) -> str:
    """A warning when the tracked images look rectified (``image_rect...``) but
    ``positions_rectified`` is false: their centroids would be undistorted and rotated a
    second time, positions off by centimetres yet valid ('' when nothing looks wrong)."""
    if rectified or 'rect' not in camera_image.rsplit('/', 1)[-1]:
        return ''
    return (f'camera_image {camera_image!r} looks rectified but positions_rectified is false: '
            f'the centroids would be undistorted and rectified again (3D positions off); set '
            f'positions_rectified: true for rectified images')


def triangulate_objects(calib: Calibration, left: Dict[int, View], right: Dict[int, View],
                        rectified: bool, limits: Limits = Limits(),
                        allow_clipped: bool = False) -> Dict[int, Triangulation]:
    """Every object id of either camera -> its triangulation from the two centroids, valid
    within ``limits``. Invalid, saying which camera: an id the other camera does not track
    (ids pair by number: the same object must have the same id in both), one it tracks but
    does not see, and (unless ``allow_clipped``) one whose mask touches either image's border
    (the point computed is kept for inspection)."""
    out = {}
    for obj_id in sorted(set(left) | set(right)):
        lv, rv = left.get(obj_id), right.get(obj_id)
        t = triangulate(calib, None if lv is None else lv.centroid,
                        None if rv is None else rv.centroid, limits, rectified=rectified)
        if lv is None or rv is None:
            t = dataclasses.replace(t, reason=NOT_TRACKED_LEFT if lv is None
                                    else NOT_TRACKED_RIGHT)
        elif (not allow_clipped and (lv.clipped or rv.clipped)
              and lv.centroid is not None and rv.centroid is not None):
            # before the other reasons: a row error or a far depth may be the clipping's
            t = dataclasses.replace(t, valid=False,
                                    reason=CLIPPED_LEFT if lv.clipped else CLIPPED_RIGHT)
        out[obj_id] = t
    return out


def visible(obj: Any) -> Optional[Any]:
    """An object's centroid where it is visible (score > 0 and a non-empty mask)."""
    return obj.centroid if obj.score > 0 and obj.centroid is not None else None


def touches_border(box: Tuple[int, int, int, int], width: int, height: int) -> bool:
    """The inclusive box (x0, y0, x1, y1) reaches the image's first or last column or row (a
    width or height of 0, unknown: only the first column or row is checked)."""
    x0, y0, x1, y1 = (int(v) for v in box)
    return (x0 <= 0 or y0 <= 0 or (width > 0 and x1 >= width - 1)
            or (height > 0 and y1 >= height - 1))


def result_views(res: FrameResult) -> Dict[int, View]:
    """A frame's objects (ObjectResult: box inclusive, None when the mask is empty) -> views."""
    return {o.obj_id: View(visible(o), float(o.score), o.box, o.box is not None
                           and touches_border(o.box, res.width, res.height))
            for o in res.objects}


def extent(calib: Calibration, box: Optional[Tuple[int, int, int, int]],
           depth: float) -> Tuple[float, float, float]:
    """A nominal bbox.size of a position at ``depth`` (left camera frame, P's units): the left
    mask box's width and height back-projected at that depth (the left K's focal lengths),
    the smaller of the two as the depth (not measured: an elongated tool's thickness);
    NOMINAL_SIZE where the box is unknown. Never zero: RViz draws nothing of a zero box."""
    if box is None or not depth > 0 or not math.isfinite(depth):
        return (NOMINAL_SIZE,) * 3
    x0, y0, x1, y1 = (int(v) for v in box)
    k = calib.left.K
    sx, sy = (x1 - x0 + 1) * depth / abs(k[0, 0]), (y1 - y0 + 1) * depth / abs(k[1, 1])
    return sx, sy, min(sx, sy)


def detections(header: Any, calib: Calibration, found: Dict[int, Triangulation],
               left: Dict[int, View], right: Dict[int, View]) -> Any:
    """The Detection3DArray of the valid positions (the frame's stamp, the left camera's
    frame; each with ``results[0]``, as RViz's vision_msgs plugin reads it unchecked)."""
    from vision_msgs.msg import Detection3D, Detection3DArray, ObjectHypothesisWithPose

    from sam2_ros.ros.messages import sigmoid

    arr = Detection3DArray()
    arr.header.stamp = header.stamp
    arr.header.frame_id = calib.left.frame_id
    for obj_id, t in sorted(found.items()):
        if not t.valid:
            continue
        d = Detection3D()
        d.header = arr.header
        d.id = str(obj_id)
        x, y, z = (float(v) for v in t.point)
        d.bbox.center.position.x, d.bbox.center.position.y, d.bbox.center.position.z = x, y, z
        d.bbox.center.orientation.w = 1.0
        d.bbox.size.x, d.bbox.size.y, d.bbox.size.z = extent(calib, left[obj_id].box, z)
        h = ObjectHypothesisWithPose()
        h.hypothesis.class_id = str(obj_id)
        # a position needs both views: as sure as the less sure one
        h.hypothesis.score = min(sigmoid(left[obj_id].score), sigmoid(right[obj_id].score))
        p = h.pose.pose.position
        p.x, p.y, p.z = x, y, z
        h.pose.pose.orientation.w = 1.0
        d.results = [h]
        arr.detections.append(d)
    return arr
