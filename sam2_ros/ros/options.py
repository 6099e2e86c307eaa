"""The node's own options: topics, QoS, the real-time policy, clicks and detections (the
tracker core never sees them; its knobs are :class:`sam2_ros.engine.config.TrackerConfig`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List

from sam2_ros.ros.images import MAX_IMAGE_PIXELS

INPUT_TYPES = ('raw', 'compressed')
RELIABILITIES = ('reliable', 'best_effort')
# What a click (~/click PointStamped, or a Point from rqt_image_view) does; see NodeOptions.
CLICK_MODES = ('positive', 'negative', 'new')


@dataclass
class NodeOptions:
    """Node-only options: topics, QoS and the real-time policy (the core never sees them)."""

    image_topic: str = '/camera/image_raw'
    # 'raw' subscribes sensor_msgs/Image, 'compressed' sensor_msgs/CompressedImage.
    input_type: str = 'raw'
    # RELIABLE by default: BEST_EFFORT loses most large frames with default DDS transports.
    qos_reliability: str = 'reliable'
    qos_depth: int = 10
    # False: keep only the newest frame (older ones count as dropped) - live cameras.
    # True: bounded FIFO, the image callback blocks when full, the subscription keeps ALL
    # history so nothing is lost - deterministic bag replay.
    process_every_frame: bool = False
    fifo_size: int = 16
    # Prompts waiting for the worker; when full the NEWEST prompt is rejected with an error.
    prompt_queue_size: int = 16
    publish_overlay: bool = True
    # True: mask and state are published by their own thread while the worker tracks the next
    # frame, the overlay by a third one (newest only: it never delays a mask). False: the
    # worker publishes everything before the next frame (the serial reference).
    pipeline: bool = True
    # Raise glibc's mmap/trim thresholds so multi-megabyte message buffers (each incoming
    # image) are reused instead of page-faulted in anew for every message
    # (sam2_ros/ros/malloc.py; process-wide, set at configure, not undone).
    tune_malloc: bool = True
    # Exempt everything alive at the end of configure (model, graphs, imports) from Python's
    # garbage collections, so a full collection no longer walks ~200,000 objects on the frame
    # path (sam2_ros/ros/gc_policy.py; undone at cleanup).
    gc_freeze: bool = True
    # No frame for this long -> diagnostics WARN 'no frames'.
    stale_timeout_s: float = 2.0
    diagnostics_period_s: float = 1.0
    # Object that a click (geometry_msgs/PointStamped on ~/click, or Point from rqt_image_view)
    # is for. Changeable at run time (`ros2 param set`), like click_mode.
    click_object_id: int = 1
    # 'positive': a positive point on click_object_id (starts it, or corrects it if tracked);
    # 'negative': a negative point on click_object_id (removes the clicked area from it);
    # 'new': starts a new object with the next unused id, which becomes click_object_id.
    click_mode: str = 'positive'
    # Compressed images declaring more pixels than this are refused BEFORE decoding (a 425 KB
    # PNG can declare 20000x20000 and take 1.2 GB decoded). Default: 8K UHD.
    max_image_pixels: int = MAX_IMAGE_PIXELS
    # Configure and activate on start-up (the `ros2 lifecycle` CLI is not always at hand).
    autostart: bool = False
    # Detections (vision_msgs/Detection2DArray on ~/detections) as box prompts; all settable at
    # run time. See sam2_ros/ros/detections.py and docs/ros.md "Detector in, objects out".
    detection_min_score: float = 0.5          # lower-scored detections are ignored
    detection_class_ids: List[str] = dataclasses.field(default_factory=list)  # [] = all
    detection_match_iou: float = 0.3          # IoU with an object's box to be that object's
    detection_drift_iou: float = 0.5          # matched below this: the object is re-prompted
    detection_max_age_frames: int = 15        # detections of older frames are rejected

    def validate(self) -> 'NodeOptions':
        """Raise ValueError naming the first bad option; return self for chaining."""
        if self.input_type not in INPUT_TYPES:
            raise ValueError(f'input_type must be one of {INPUT_TYPES}, got {self.input_type!r}')
        if self.qos_reliability not in RELIABILITIES:
            raise ValueError(f'qos_reliability must be one of {RELIABILITIES}, '
                             f'got {self.qos_reliability!r}')
        for name in ('qos_depth', 'fifo_size', 'prompt_queue_size'):
            if int(getattr(self, name)) < 1:
                raise ValueError(f'{name} must be >= 1, got {getattr(self, name)!r}')
        if not 1 <= int(self.click_object_id) <= 255:
            raise ValueError(f'click_object_id must be in 1..255, got {self.click_object_id!r}')
        if self.click_mode not in CLICK_MODES:
            raise ValueError(f'click_mode must be one of {CLICK_MODES}, got {self.click_mode!r}')
        if int(self.max_image_pixels) < 1:
            raise ValueError(f'max_image_pixels must be >= 1, got {self.max_image_pixels!r}')
        if self.stale_timeout_s <= 0 or self.diagnostics_period_s <= 0:
            raise ValueError('stale_timeout_s and diagnostics_period_s must be > 0')
        if not self.image_topic:
            raise ValueError('image_topic must not be empty')
        from sam2_ros.ros.detections import check_rules

        check_rules(self.detection_min_score, self.detection_match_iou,
                    self.detection_drift_iou)
        if int(self.detection_max_age_frames) < 0:
            raise ValueError(f'detection_max_age_frames must be >= 0, got '
                             f'{self.detection_max_age_frames!r}')
        return self
