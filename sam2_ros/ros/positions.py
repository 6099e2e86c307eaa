"""3D positions of the objects tracked in both cameras of a calibrated pair (a multi-camera
node's cameras 0 and 1, e.g. ``left`` and ``right``): ``~/positions``.

From the pair's ``<ns>/camera_info`` (:mod:`~sam2_ros.ros.stereo_msgs`), every group of frames
in which an object id is tracked in both cameras gives that object's 3D centroid, triangulated
from its two mask centroids (:func:`sam2_ros.stereo.triangulate`: disparity for a rectified
pair, DLT otherwise), in the left camera's frame (its camera_info's ``frame_id``).

The message is ``vision_msgs/Detection3DArray`` (the stamp of the left frame; one
``Detection3D`` per valid position: ``id`` the object id, ``bbox.center.position`` the point,
``bbox.size`` zero: a centroid has no extent) rather than a message of our own, so RViz and
other nodes read it as it is and no new interface is needed. Only VALID positions are
published (a consumer must not act on an invalid one); each object's last validity and reason
(not visible in one image, disparity too small, rows apart, behind a camera...) are in the
left camera's /diagnostics values (``position_<id>``) with counts of valid and invalid
estimates. Off (the reason in diagnostics) without vision_msgs, with fewer than two cameras,
or until both camera_info messages are valid.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Protocol

from sam2_ros.engine.types import FrameResult
from sam2_ros.ros.pairing import Group
from sam2_ros.ros.stereo_msgs import calibration_from_msgs
from sam2_ros.stereo import Calibration, Limits, Triangulation, triangulate

OUTPUT_TOPIC = '~/positions'


class PairCalibration:
    """The newest camera_info of cameras 0 and 1 (left, right) and the pair's calibration
    from them, rebuilt when either changes; written from the executor thread, read from the
    worker's."""

    def __init__(self, rectified: bool = False) -> None:
        self.rectified = rectified      # the images are rectified: K and D are not used
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
                except ValueError as exc:
                    self.error = str(exc)
                    self._info = [None, None]
            return self._calib


class Positions:
    """The ``~/positions`` publisher and the pair's calibration (see the module docstring)."""

    def __init__(self, node: Any, pub: Any, off: Optional[str], rectified: bool,
                 limits: Limits = Limits()) -> None:
        self.node, self.pub, self.off = node, pub, off
        self.rectified = rectified
        self.limits = limits
        self.pair = PairCalibration(rectified)
        self.last: Dict[int, Triangulation] = {}
        self.mismatch = ''          # camera_info of another size than the images ('' if not)
        self.valid = 0
        self.invalid = 0

    @classmethod
    def create(cls, node: Any, names: List[str]) -> 'Positions':
        rectified = bool(node.opts.positions_rectified)
        limits = node.opts.positions_limits
        if len(names) < 2:
            return cls(node, None, 'one camera', rectified, limits)
        try:
            from vision_msgs.msg import Detection3DArray
        except ImportError as exc:
            return cls(node, None, f'no vision_msgs ({exc})', rectified, limits)
        from sam2_ros.ros.publishers import OUTPUT_QOS

        warning = rectified_mismatch(str(node.opts.camera_image), rectified)
        if warning:
            node.get_logger().warning(warning)
        return cls(node, node.create_lifecycle_publisher(Detection3DArray, OUTPUT_TOPIC,
                                                         OUTPUT_QOS), None, rectified, limits)

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
        found = triangulate_objects(
            calib, {o.obj_id: visible(o) for o in results[0].objects},
            {o.obj_id: visible(o) for o in results[1].objects}, self.rectified, self.limits)
        self.last = found
        self.valid += sum(t.valid for t in found.values())
        self.invalid += sum(not t.valid for t in found.values())
        self.pub.publish(detections(group.frames[0].item.header, calib.left.frame_id, found))

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


def triangulate_objects(calib: Calibration, left: Dict[int, Optional[Any]],
                        right: Dict[int, Optional[Any]], rectified: bool,
                        limits: Limits = Limits()) -> Dict[int, Triangulation]:
    """Every object id of either camera -> its triangulation from the two centroids (pixel
    (x, y), None where the object is not visible in that camera, or not tracked there: an
    invalid position saying which image lacks it), valid within ``limits``."""
    return {obj_id: triangulate(calib, left.get(obj_id), right.get(obj_id), limits,
                                rectified=rectified)
            for obj_id in sorted(set(left) | set(right))}


def visible(obj: Any) -> Optional[Any]:
    """An object's centroid where it is visible (score > 0 and a non-empty mask)."""
    return obj.centroid if obj.score > 0 and obj.centroid is not None else None


def detections(header: Any, frame_id: str, found: Dict[int, Triangulation]) -> Any:
    """The Detection3DArray of the valid positions (the frame's stamp, the left frame)."""
    from vision_msgs.msg import Detection3D, Detection3DArray

    arr = Detection3DArray()
    arr.header.stamp = header.stamp
    arr.header.frame_id = frame_id
    for obj_id, t in sorted(found.items()):
        if not t.valid:
            continue
        d = Detection3D()
        d.header = arr.header
        d.id = str(obj_id)
        x, y, z = (float(v) for v in t.point)
        d.bbox.center.position.x, d.bbox.center.position.y, d.bbox.center.position.z = x, y, z
        d.bbox.center.orientation.w = 1.0
        arr.detections.append(d)
    return arr
