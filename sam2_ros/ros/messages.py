"""Outgoing messages of the node, built from the core's plain types, and the message classes.

``TrackingState`` from a FrameResult, ``vision_msgs/Detection2DArray`` of the tracked objects,
``DiagnosticArray``; the generated ``sam2_ros.msg`` and ``vision_msgs`` classes are loaded here
with an ImportError that says how to get them. Images out are :mod:`sam2_ros.ros.images`'.
Pure functions of their inputs, tested without DDS.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Dict, Iterable, List, Tuple

from sam2_ros.engine.types import LOST, OCCLUDED, TRACKING, FrameResult

STATE_CODES = {TRACKING: 0, OCCLUDED: 1, LOST: 2}


def sigmoid(logit: float) -> float:
    """Object score logit -> probability-like score in (0, 1) (what ~/objects reports)."""
    if logit >= 0:
        return 1.0 / (1.0 + math.exp(-logit))
    e = math.exp(logit)
    return e / (1.0 + e)


def interfaces() -> SimpleNamespace:
    """The generated ``sam2_ros.msg`` classes, or an ImportError that says how to get them."""
    try:
        from sam2_ros.msg import ObjectState, Prompt as PromptMsg, TrackingState
    except ImportError as exc:  # pragma: no cover - exercised only in a broken install
        raise ImportError(
            'sam2_ros.msg (generated from msg/*.msg) is not importable: build the interfaces '
            'with scripts/setup.sh and run with the .venv python') from exc
    return SimpleNamespace(Prompt=PromptMsg, ObjectState=ObjectState, TrackingState=TrackingState)


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


def tracking_state_msg(res: FrameResult, header: Any, *, decode_ms: float, publish_ms: float,
                       dropped: int, processed: int, errors: Iterable[str]) -> Any:
    """FrameResult -> sam2_ros/msg/TrackingState (header of the input image, unchanged, and
    its size: what a consumer checks a camera_info against).

    An empty mask has area 0, an all-zero box and a zero centroid (as msg/ObjectState.msg
    documents). ``publish_ms`` is the time spent publishing the PREVIOUS frame's messages
    (this message is itself part of the current frame's publishing).
    """
    from geometry_msgs.msg import Point
    from sensor_msgs.msg import RegionOfInterest

    m = interfaces()
    msg = m.TrackingState()
    msg.header = header
    msg.height, msg.width = max(0, int(res.height)), max(0, int(res.width))
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
    return diagnostics_array(stamp, [(name, level, message, values)])


def diagnostics_array(stamp: Any, statuses: List[Tuple[str, str, str, Dict[str, Any]]]) -> Any:
    """One diagnostic_msgs/DiagnosticArray with a status per (name, level, message, values)
    (a multi-camera node: one per camera)."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    levels = {'OK': DiagnosticStatus.OK, 'WARN': DiagnosticStatus.WARN,
              'ERROR': DiagnosticStatus.ERROR}
    arr = DiagnosticArray()
    arr.header.stamp = stamp
    for name, level, message, values in statuses:
        status = DiagnosticStatus(level=levels[level], name=name, message=message,
                                  hardware_id='sam2_ros')
        status.values = [KeyValue(key=str(k), value=_fmt(v)) for k, v in values.items()]
        arr.status.append(status)
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


def objects_msg(res: FrameResult, header: Any, class_of: Any) -> Any:
    """FrameResult -> vision_msgs/Detection2DArray (header of the input image, unchanged): one
    Detection2D per object with a non-empty mask, in id order: ``id`` = the object id, ``bbox``
    = the mask's box (centre and full size in px, as ~/state's box), ``results[0]`` = the class
    it was prompted with (``class_of(obj_id)``, '' = none) and the score sigmoid(object score
    logit) in (0, 1) (> 0.5 means visible)."""
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
