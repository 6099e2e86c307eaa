"""ROS messages <-> the tracker core's plain types (numpy frames, Prompt, FrameResult).

Everything here is a pure function of its inputs, so it is tested without DDS. Incoming images
are validated BEFORE cv_bridge: the PyPI cv_bridge port trusts ``height``/``width``/``data``
blindly (it ignores ``step`` and would read garbage or raise obscure numpy errors), so every
defect a camera driver or a hand-written publisher can produce becomes a :class:`FrameError`
with a sentence a user can act on. That port also hard-codes OpenCV 4's type layout, so under
OpenCV 5 it fails on colour images: decoding goes through :mod:`sam2_ros.ros.cv_bridge_compat`,
which self-tests each bridge once. Outgoing images are built by hand: that port's
``cv2_to_imgmsg`` is broken under numpy 2. The overlay itself is drawn by
:mod:`sam2_ros.overlay`, shared with the offline CLI.
"""

from __future__ import annotations

import array
import struct
from types import SimpleNamespace
from typing import Any, Dict, Iterable, List, Optional, Tuple

import cv2
import numpy as np

from sam2_ros.engine.errors import FrameError, PromptError
from sam2_ros.ros import cv_bridge_compat
from sam2_ros.ros.cv_bridge_compat import ENCODING_CHANNELS
from sam2_ros.engine.types import LOST, OCCLUDED, TRACKING, FrameResult, Prompt

COMPRESSED_FORMATS = ('jpeg', 'jpg', 'png')
# Default limit of compressed_to_rgb (NodeOptions.max_image_pixels): 8K UHD.
MAX_IMAGE_PIXELS = 7680 * 4320
# Prompt.msg action constants (mirrored so this module works without generated messages).
ACTION_ADD, ACTION_REMOVE, ACTION_RESET = 0, 1, 2
STATE_CODES = {TRACKING: 0, OCCLUDED: 1, LOST: 2}


def interfaces() -> SimpleNamespace:
    """The generated ``sam2_ros.msg`` classes, or an ImportError that says how to get them."""
    try:
        from sam2_ros.msg import ObjectState, Prompt as PromptMsg, TrackingState
    except ImportError as exc:  # pragma: no cover - exercised only in a broken install
        raise ImportError(
            'sam2_ros.msg (generated from msg/*.msg) is not importable: build the interfaces '
            'with scripts/setup.sh and run with the .venv python') from exc
    return SimpleNamespace(Prompt=PromptMsg, ObjectState=ObjectState, TrackingState=TrackingState)


# ----------------------------------------------------------------------------- images in

def check_image(msg: Any) -> int:
    """Validate a sensor_msgs/Image before decoding; return its channel count.

    Raises FrameError for an unknown encoding, zero size, ``step`` shorter than a row or
    ``data`` shorter than ``height * step``.
    """
    enc = msg.encoding
    if enc not in ENCODING_CHANNELS:
        raise FrameError(f'unsupported image encoding {enc!r}; accepted: '
                         f'{", ".join(ENCODING_CHANNELS)}')
    if msg.width == 0 or msg.height == 0:
        raise FrameError(f'zero-size image ({msg.width}x{msg.height})')
    channels = ENCODING_CHANNELS[enc]
    row = msg.width * channels
    if msg.step < row:
        raise FrameError(f'image step {msg.step} < width*channels {row} ({enc})')
    if len(msg.data) < msg.height * msg.step:
        raise FrameError(f'image data has {len(msg.data)} bytes, height*step needs '
                         f'{msg.height * msg.step}')
    return channels


def _packed_view(msg: Any, channels: int) -> Any:
    """``msg`` itself when cv_bridge can read it as is, else a packed stand-in.

    cv_bridge ignores ``step`` (rows padded by a driver would shear the image) and calls
    ``ndarray.newbyteorder`` for ``is_bigendian`` (removed in numpy 2; meaningless for 8-bit
    data), so such messages are repacked into an object with the attributes it reads.
    """
    row = msg.width * channels
    if msg.step == row and len(msg.data) == msg.height * row and not msg.is_bigendian:
        return msg
    rows = np.frombuffer(msg.data, np.uint8, count=msg.height * msg.step)
    packed = rows.reshape(msg.height, msg.step)[:, :row].tobytes()
    return SimpleNamespace(encoding=msg.encoding, is_bigendian=0, height=msg.height,
                           width=msg.width, step=row, data=packed)


def image_to_rgb(msg: Any, bridge: Any) -> np.ndarray:
    """sensor_msgs/Image -> [H, W, 3] uint8 RGB (a copy; the message may be reused)."""
    channels = check_image(msg)
    view = _packed_view(msg, channels)
    try:
        img = cv_bridge_compat.decode(bridge, view, 'rgb8')
    except Exception as exc:  # cv_bridge raises CvBridgeError, KeyError, TypeError...
        raise FrameError(f'cv_bridge could not convert {msg.encoding}: {exc}') from exc
    return np.array(img, dtype=np.uint8, copy=True, order='C')


def compressed_header(data: bytes) -> Optional[Tuple[str, int, int, int]]:
    """(kind, width, height, bits per sample) read from a PNG or JPEG header without
    decoding it; None when neither header is found."""
    if data[:8] == b'\x89PNG\r\n\x1a\n' and len(data) >= 26 and data[12:16] == b'IHDR':
        w, h = struct.unpack('>II', data[16:24])
        return 'png', w, h, data[24]
    if data[:2] == b'\xff\xd8':
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                return None
            marker = data[i + 1]
            if marker == 0xFF:          # fill byte
                i += 1
                continue
            if 0xD0 <= marker <= 0xD9 or marker == 0x01:   # markers without a length
                i += 2
                continue
            seg = struct.unpack('>H', data[i + 2:i + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):   # SOFn
                bits = data[i + 4]
                h, w = struct.unpack('>HH', data[i + 5:i + 9])
                return 'jpeg', w, h, bits
            i += 2 + seg
    return None


def compressed_to_rgb(msg: Any, bridge: Any,
                      max_pixels: int = MAX_IMAGE_PIXELS) -> np.ndarray:
    """sensor_msgs/CompressedImage (jpeg or png, 8 bit) -> [H, W, 3] uint8 RGB.

    The header is checked before decoding: a small PNG can declare 20000x20000 (1.2 GB
    decoded, and the allocator keeps it), so more than ``max_pixels`` is refused; 16-bit
    images (depth, HDR) are refused rather than silently cut to 8 bit.
    """
    fmt = (msg.format or '').lower()
    if not any(f in fmt for f in COMPRESSED_FORMATS) or 'compresseddepth' in fmt:
        raise FrameError(f'unsupported compressed format {msg.format!r}; accepted: jpeg, png')
    if len(msg.data) == 0:
        raise FrameError('compressed image with no data')
    head = compressed_header(bytes(msg.data[:65536]))
    if head is None:
        raise FrameError(f'cannot decode compressed image ({msg.format!r}, '
                         f'{len(msg.data)} bytes): no PNG or JPEG header')
    kind, w, h, bits = head
    if w * h > max_pixels:
        raise FrameError(f'{kind} declares {w}x{h} = {w * h} pixels, more than '
                         f'max_image_pixels {max_pixels}: not decoded')
    if bits != 8:
        raise FrameError(f'{kind} has {bits} bits per sample; only 8-bit images are tracked '
                         f'(convert it, e.g. depth, to 8-bit colour first)')
    try:
        img = bridge.compressed_imgmsg_to_cv2(msg)  # passthrough: what cv2.imdecode gives
    except Exception as exc:
        raise FrameError(f'cv_bridge could not decode {msg.format!r}: {exc}') from exc
    if img is None or img.size == 0:
        raise FrameError(f'could not decode {msg.format!r} image ({len(msg.data)} bytes)')
    if img.dtype != np.uint8:
        raise FrameError(f'decoded {msg.format!r} image is {img.dtype}, expected 8-bit')
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
    if img.shape[2] == 4:
        return cv2.cvtColor(img, cv2.COLOR_BGRA2RGB)
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def mask_to_bool(msg: Any, bridge: Any) -> np.ndarray:
    """A mono8 mask image (sensor_msgs/Image) -> [H, W] bool (nonzero = object)."""
    if msg.encoding != 'mono8':
        raise PromptError(f'prompt mask must be mono8, got {msg.encoding!r}')
    try:
        channels = check_image(msg)
    except FrameError as exc:
        raise PromptError(f'prompt mask: {exc}') from exc
    view = _packed_view(msg, channels)
    return np.asarray(cv_bridge_compat.decode(bridge, view, 'passthrough')) > 0


# ----------------------------------------------------------------------------- prompts in

def prompt_from_msg(msg: Any, bridge: Any) -> Tuple[int, Optional[Prompt]]:
    """sam2_ros/msg/Prompt -> (action, core Prompt or None for remove/reset).

    Checks only what the message layout can get wrong (action, id range, label count); the
    core checks geometry (NaN, out of frame) because only it knows the frame size.
    """
    action = int(msg.action)
    if action not in (ACTION_ADD, ACTION_REMOVE, ACTION_RESET):
        raise PromptError(f'unknown prompt action {action}')
    if action == ACTION_RESET:
        return action, None
    obj_id = int(msg.object_id)
    if not 1 <= obj_id <= 255:
        raise PromptError(f'object_id must be in 1..255, got {obj_id}')
    if action == ACTION_REMOVE:
        return action, Prompt(obj_id=obj_id)
    points = labels = box = mask = None
    if len(msg.points):
        points = np.array([[p.x, p.y] for p in msg.points], dtype=np.float32)
        if len(msg.labels) == 0:
            labels = np.ones(len(points), dtype=np.int64)  # no labels: all positive
        elif len(msg.labels) != len(points):
            raise PromptError(f'{len(msg.labels)} labels for {len(points)} points')
        else:
            labels = np.array(list(msg.labels), dtype=np.int64)
    elif len(msg.labels):
        raise PromptError(f'{len(msg.labels)} labels but no points')
    if msg.has_box:
        box = tuple(float(v) for v in msg.box)
    if msg.mask.width > 0 or msg.mask.height > 0:
        mask = mask_to_bool(msg.mask, bridge)
    if mask is not None:       # msg/Prompt.msg: with a mask, points and box are ignored
        return action, Prompt(obj_id=obj_id, mask=mask)
    if points is None and box is None:
        raise PromptError(f'add prompt for object {obj_id} has no points, box or mask')
    return action, Prompt(obj_id=obj_id, points=points, labels=labels, box=box)


def click_to_prompt(point: Any, obj_id: int, positive: bool = True) -> Prompt:
    """A click (geometry_msgs/Point, x and y in source px; a PointStamped's ``.point``) ->
    one point for ``obj_id``, positive (label 1) or negative (label 0)."""
    return Prompt(obj_id=int(obj_id), points=np.array([[point.x, point.y]], np.float32),
                  labels=np.full(1, 1 if positive else 0, np.int64))


def stamp_ns(stamp: Any) -> int:
    """builtin_interfaces/Time -> integer nanoseconds (0 means 'no stamp')."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


# ----------------------------------------------------------------------------- images out

def image_msg(img: np.ndarray, encoding: str, header: Any) -> Any:
    """[H, W] mono8 or [H, W, 3] rgb8 array -> sensor_msgs/Image with ``header`` as given."""
    from sensor_msgs.msg import Image

    img = np.ascontiguousarray(img, dtype=np.uint8)
    msg = Image()
    msg.header = header
    msg.height, msg.width = int(img.shape[0]), int(img.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = msg.width * (1 if img.ndim == 2 else int(img.shape[2]))
    msg.data = image_data(img)
    return msg


def image_data(img: np.ndarray) -> array.array:
    """A C-contiguous uint8 array -> the ``array.array('B')`` that rclpy keeps as the message's
    ``data`` as is (any other type is converted by its setter). One copy of the pixels:
    ``array.array('B', img.tobytes())`` makes two (0.32 vs 0.22 ms for a 720p rgb8 frame on a
    2-core CPU); publish() then serializes it once more, which no Python type avoids."""
    data = array.array('B')
    data.frombytes(memoryview(img).cast('B'))
    return data


# ----------------------------------------------------------------------------- state out

def tracking_state_msg(res: FrameResult, header: Any, *, decode_ms: float, publish_ms: float,
                       dropped: int, processed: int, errors: Iterable[str]) -> Any:
    """FrameResult -> sam2_ros/msg/TrackingState (header of the input image, unchanged).

    An empty mask has area 0, an all-zero box and a zero centroid (as msg/ObjectState.msg
    documents). ``publish_ms`` is the time spent publishing the PREVIOUS frame's messages
    (this message is itself part of the current frame's publishing).
    """
    from geometry_msgs.msg import Point
    from sensor_msgs.msg import RegionOfInterest

    m = interfaces()
    msg = m.TrackingState()
    msg.header = header
    msg.frame_index = max(0, int(res.frame_index))
    objs = []
    for o in sorted(res.objects, key=lambda o: o.obj_id):
        s = m.ObjectState()
        s.object_id = int(o.obj_id)
        s.state = STATE_CODES.get(o.state, 2)
        s.score = float(o.score)
        if o.box is not None:
            x0, y0, x1, y1 = (int(v) for v in o.box)
            s.box = RegionOfInterest(x_offset=x0, y_offset=y0, width=x1 - x0 + 1,
                                     height=y1 - y0 + 1, do_rectify=False)
        if o.centroid is not None:
            s.centroid = Point(x=float(o.centroid[0]), y=float(o.centroid[1]), z=0.0)
        s.area = int(o.area)
        s.frames_since_prompt = max(0, int(o.frames_since_prompt))
        objs.append(s)
    msg.objects = objs
    msg.decode_ms = float(decode_ms)
    msg.engine_ms = float(res.engine_ms)
    msg.publish_ms = float(publish_ms)
    msg.engine_mode = str(res.mode)
    msg.dropped_frames = int(dropped)
    msg.processed_frames = int(processed)
    msg.errors = [str(e) for e in errors]
    return msg


def diagnostics_msg(stamp: Any, name: str, level: str, message: str,
                    values: Dict[str, Any]) -> Any:
    """One diagnostic_msgs/DiagnosticArray with one status; level is 'OK'|'WARN'|'ERROR'."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    levels = {'OK': DiagnosticStatus.OK, 'WARN': DiagnosticStatus.WARN,
              'ERROR': DiagnosticStatus.ERROR}
    status = DiagnosticStatus(level=levels[level], name=name, message=message,
                              hardware_id='sam2_ros')
    status.values = [KeyValue(key=str(k), value=_fmt(v)) for k, v in values.items()]
    arr = DiagnosticArray()
    arr.header.stamp = stamp
    arr.status = [status]
    return arr


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return 'nan' if v != v else f'{v:.3f}'
    return str(v)


def errors_text(errors: List[str], limit: int = 20) -> List[str]:
    """At most ``limit`` error strings, the rest summarized, so one message stays small."""
    if len(errors) <= limit:
        return list(errors)
    return list(errors[:limit]) + [f'... and {len(errors) - limit} more errors']


# ----------------------------------------------------------------------------- vision_msgs

def vision_interfaces() -> SimpleNamespace:
    """``vision_msgs`` Detection2DArray & co., or an ImportError that says how to get them
    (a ROS install: the distribution's vision_msgs; a venv: ../shared/ros_cli/install.sh)."""
    try:
        from vision_msgs.msg import (BoundingBox2D, Detection2D, Detection2DArray,
                                     ObjectHypothesisWithPose)
    except ImportError as exc:
        raise ImportError(
            f'vision_msgs is not importable ({exc}); install ros-<distro>-vision-msgs, or in '
            f'the venv run `bash ../shared/ros_cli/install.sh .venv`') from exc
    return SimpleNamespace(Detection2DArray=Detection2DArray, Detection2D=Detection2D,
                           BoundingBox2D=BoundingBox2D,
                           ObjectHypothesisWithPose=ObjectHypothesisWithPose)


def detections_from_msg(msg: Any) -> List[Any]:
    """vision_msgs/Detection2DArray -> [detections.RawDetection] (not validated: that needs the
    frame size, see detections.to_detection). Class and score come from the best hypothesis
    (highest score); a detection without hypotheses has class '' (none) and score 1.0."""
    from sam2_ros.ros.detections import RawDetection

    out = []
    for d in msg.detections:
        best = max(d.results, key=lambda r: r.hypothesis.score, default=None)
        c = d.bbox.center
        out.append(RawDetection(
            cx=float(c.position.x), cy=float(c.position.y), size_x=float(d.bbox.size_x),
            size_y=float(d.bbox.size_y), theta=float(c.theta),
            class_id='' if best is None else str(best.hypothesis.class_id),
            score=1.0 if best is None else float(best.hypothesis.score)))
    return out


def objects_msg(res: FrameResult, header: Any, class_of: Any) -> Any:
    """FrameResult -> vision_msgs/Detection2DArray (header of the input image, unchanged): one
    Detection2D per object with a non-empty mask, in id order: ``id`` = the object id, ``bbox``
    = the mask's box (centre and full size in px, as ~/state's box), ``results[0]`` = the class
    it was prompted with (``class_of(obj_id)``, '' = none) and the score sigmoid(object score
    logit) in (0, 1) (> 0.5 means visible)."""
    from sam2_ros.ros.detections import sigmoid

    v = vision_interfaces()
    arr = v.Detection2DArray()
    arr.header = header
    dets = []
    for o in sorted(res.objects, key=lambda o: o.obj_id):
        if o.box is None:
            continue
        x0, y0, x1, y1 = (int(b) for b in o.box)
        d = v.Detection2D()
        d.header = header
        d.id = str(int(o.obj_id))
        d.bbox.center.position.x = (x0 + x1 + 1) / 2.0
        d.bbox.center.position.y = (y0 + y1 + 1) / 2.0
        d.bbox.size_x = float(x1 - x0 + 1)
        d.bbox.size_y = float(y1 - y0 + 1)
        h = v.ObjectHypothesisWithPose()
        h.hypothesis.class_id = str(class_of(int(o.obj_id)) or '')
        h.hypothesis.score = sigmoid(float(o.score))
        h.pose.pose.position.x = d.bbox.center.position.x
        h.pose.pose.position.y = d.bbox.center.position.y
        d.results = [h]
        dets.append(d)
    arr.detections = dets
    return arr
