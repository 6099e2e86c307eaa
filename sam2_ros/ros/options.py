"""The node's own options: topics, QoS, the real-time policy, clicks and detections (the
tracker core never sees them; its knobs are :class:`sam2_ros.engine.config.TrackerConfig`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List

from sam2_ros.engine.decode import MAX_IMAGE_PIXELS
from sam2_ros.ros.executor import EXECUTORS
from sam2_ros.ros.time_jump import RESET_AFTER_S
from sam2_ros.knobs import knob
from sam2_ros.stereo import LIMIT_DOCS, Limits

# positions_allow_clipped here, allow_clipped in positions_node (positions_options.py)
ALLOW_CLIPPED_DOC = (
    'a mask touching an image border (an instrument entering from the edge) gives a valid 3D '
    'position (false: invalid, as the border cuts the object differently in the two views and '
    'the centroids are not of one point, depth off by up to 2x)')

INPUT_TYPES = ('raw', 'compressed')
RELIABILITIES = ('reliable', 'best_effort')
# What a click (~/click PointStamped, or a Point from rqt_image_view) does; see NodeOptions.
CLICK_MODES = ('positive', 'negative', 'new')
# qos_depth, fifo_size and prompt_queue_size at most: each holds up to that many frames (2.7 MB
# at 720p) or prompts; more is a typo, which would surface as a failed subscription or memory
MAX_QUEUE = 1000
# float options and their range: (name, low, high, what the low end means)
RANGES = (('deferred_wait_ms', 0.0, 1e9, '0: wait for the next frame'),
          ('time_jump_reset_s', 0.0, 1e9, '0: any step back resets'),
          ('stall_trace_ms', 0.0, 1e9, '0: off'),
          ('gil_switch_interval_ms', 0.0, 100.0, "0: Python's default"),
          ('gpu_clock_keeper_us', 0.0, 100000.0, '0: off'))


@dataclass
class NodeOptions:
    """Node-only options: topics, QoS and the real-time policy (the core never sees them)."""

    image_topic: str = knob('/camera/image_raw', kind='str', doc=(
        'input image topic (remappable too)'))
    # Several cameras on one tracker (a stereo rig): camera c's topics live under its namespace
    # (docs/ros.md "Several cameras"); empty: one camera on image_topic and today's topics.
    cameras: List[str] = knob(default_factory=list, kind='str_array', doc=(
        "camera namespaces of one node (e.g. ['left', 'right']): images on <ns>/<camera_image>, "
        'prompts on ~/<ns>/prompt, outputs on ~/<ns>/...; empty = one camera on image_topic'))
    camera_image: str = knob('image_raw', kind='str', doc=(
        'with cameras: the image topic under each camera namespace'))
    # positions_node's left_camera_info / right_camera_info, for the node serving the cameras
    camera_info_topics: List[str] = knob(default_factory=list, kind='str_array', doc=(
        "with cameras: each camera's sensor_msgs/CameraInfo topic (for ~/positions), in the "
        'order of cameras, where its driver publishes it elsewhere (e.g. '
        "['/stereo/left/camera_info', '/stereo/right/camera_info']); empty, or an empty "
        'entry: <ns>/camera_info'))
    pair_tolerance_ms: float = knob(0.0, kind='float', doc=(
        "with cameras: stamps this close are one group (0 = equal stamps; at most half of "
        'camera_period_ms)'))
    camera_period_ms: float = knob(1000.0 / 30.0, kind='float', doc=(
        'with cameras: the frame period; a frame whose partner has not come waits at most this '
        'long, then is tracked alone'))
    positions_rectified: bool = knob(False, kind='bool', doc=(
        'with cameras: the images are rectified (e.g. image_rect), so ~/positions triangulates '
        'mask centroids as they are; false: raw images, centroids undistorted and rectified '
        'with camera_info first'))
    # ~/positions' validity bounds: stereo.Limits' fields and defaults, under positions_<name>
    positions_min_disparity_px: float = knob(Limits.min_disparity_px, kind='float', doc=(
        'with cameras: ' + LIMIT_DOCS['min_disparity_px']))
    positions_max_row_error_px: float = knob(Limits.max_row_error_px, kind='float', doc=(
        'with cameras: ' + LIMIT_DOCS['max_row_error_px']))
    positions_max_reprojection_px: float = knob(Limits.max_reprojection_px, kind='float', doc=(
        'with cameras: ' + LIMIT_DOCS['max_reprojection_px']))
    positions_min_depth: float = knob(Limits.min_depth, kind='float', doc=(
        'with cameras: ' + LIMIT_DOCS['min_depth']))
    positions_max_depth: float = knob(Limits.max_depth, kind='float', doc=(
        'with cameras: ' + LIMIT_DOCS['max_depth']))
    positions_allow_clipped: bool = knob(False, kind='bool', doc=(
        'with cameras: ' + ALLOW_CLIPPED_DOC))
    input_type: str = knob('raw', kind='str', doc=(
        "'raw' (sensor_msgs/Image) or 'compressed' (sensor_msgs/CompressedImage on "
        '<image_topic>/compressed)'))
    # RELIABLE by default: BEST_EFFORT loses most large frames with default DDS transports.
    qos_reliability: str = knob('reliable', kind='str', doc=(
        "image QoS 'reliable' or 'best_effort' (best_effort loses large frames with default DDS "
        'transports)'))
    qos_depth: int = knob(10, kind='int', doc=(
        'image subscription history depth (ignored with process_every_frame: KEEP_ALL)'))
    # False: keep only the newest frame (older ones count as dropped) - live cameras.
    # True: bounded FIFO, the image callback blocks when full, the subscription keeps ALL
    # history so nothing is lost - deterministic bag replay.
    process_every_frame: bool = knob(False, kind='bool', doc=(
        'true: bounded blocking FIFO, no frame dropped (bag replay); false: only the newest '
        'frame is processed (live)'))
    fifo_size: int = knob(16, kind='int', doc=(
        'frames held by the FIFO of process_every_frame before the callback blocks'))
    prompt_queue_size: int = knob(16, kind='int', doc=(
        'pending prompts; when full the newest is rejected with an error'))
    # Time going back (sam2_ros/ros/time_jump.py): a bag restarted goes back by its length, or
    # to its first stamp; a live camera's clock stepped by NTP/PTP, or two frames delivered out
    # of order, by milliseconds, and must not cost the objects.
    time_jump_reset_s: float = knob(RESET_AFTER_S, kind='float', doc=(
        'image stamps (or /clock, use_sim_time) going back by more than this, or to the first '
        'stamp of the run or before it, reset the objects (a replay restarted); a smaller step '
        'back is reported and the objects kept; 0: any step back resets'))
    publish_overlay: bool = knob(True, kind='bool', doc=(
        'publish ~/overlay (rgb8; rendered only while subscribed)'))
    # True: mask and state are published by their own thread while the worker tracks the next
    # frame, the overlay by a third one (newest only: it never delays a mask). False: the
    # worker publishes everything before the next frame (the serial reference).
    pipeline: bool = knob(True, kind='bool', doc=(
        'mask and state published on a thread of their own while the next frame is tracked, the '
        'overlay on another (newest only, never delays a mask); false: everything published '
        'before the next frame (the serial reference)'))
    # With pipeline: the worker publishes each frame's masks itself as it hands the frame
    # over (sam2_ros/ros/pipeline.py, masks_inline), instead of waking the publisher thread for
    # them: the mask goes out without a thread switch and its wait for Python's GIL.
    masks_from_worker: bool = knob(False, kind='bool', tuning=True, doc=(
        "pipeline on: the tracking worker publishes each frame's masks as soon as it is "
        'tracked; the publisher thread sends state, objects and overlay (false: the publisher '
        'thread sends the masks too)'))
    # With cameras and pipeline: ONE publisher thread sends every camera's masks, then their
    # states (sam2_ros/ros/shared_publisher.py); with a thread per camera, the one that lost
    # the race for Python's GIL waited for the other's whole publish before its mask.
    shared_publisher: bool = knob(True, kind='bool', tuning=True, doc=(
        "with cameras (pipeline on): one publisher thread sends every camera's masks of a "
        "group, then their states; false: a publisher thread per camera"))
    # Raise glibc's mmap/trim thresholds so multi-megabyte message buffers (each incoming
    # image) are reused instead of page-faulted in anew for every message
    # (sam2_ros/ros/malloc.py; process-wide, set at configure, not undone).
    tune_malloc: bool = knob(True, kind='bool', tuning=True, doc=(
        "raise glibc's mmap/trim thresholds at configure so multi-megabyte message buffers are "
        'reused (process-wide, not undone)'))
    # Exempt everything alive at the end of configure (model, graphs, imports) from Python's
    # garbage collections, so a full collection no longer walks ~200,000 objects on the frame
    # path (sam2_ros/ros/gc_policy.py; undone at cleanup).
    gc_freeze: bool = knob(True, kind='bool', tuning=True, doc=(
        'after configure, gc.freeze(): the objects configure leaves (imports, model, graphs) are '
        "skipped by Python's garbage collector; unfrozen at cleanup (diagnostics: "
        'gc_full_collections, gc_max_pause_ms; a full collection of 5 ms or more is logged as '
        'a warning, on or off)'))
    # Raw images taken as serialized messages and read in place (sam2_ros/ros/image_cdr.py):
    # rclpy's conversion copies a 720p frame twice under the GIL (tools/dds_probe.py compares
    # the two receipts).
    take_serialized_images: bool = knob(True, kind='bool', tuning=True, doc=(
        'raw images taken as serialized messages and read in place (one copy, less time holding '
        "Python's GIL); false: rclpy's message conversion"))
    # The raw mask and overlay images published as serialized bytes (image_cdr.image_to_cdr):
    # rclpy's publish() of a message copies the pixels twice more under the GIL (the C
    # struct, the serialization), on the mask's way out.
    publish_serialized_images: bool = knob(True, kind='bool', tuning=True, doc=(
        'the raw mask and overlay images are published as serialized messages written in one '
        "copy (less time holding Python's GIL); false: rclpy's message conversion"))
    # The overlay rendered on the tracker's GPU (sam2_ros/overlay_device.py: the same pixels as
    # the host's OpenCV rendering): two 720p overlays at 60 Hz rendered on the host showed in
    # the p99 of one node serving two cameras (docs/performance.md). A CPU tracker renders on
    # the host either way; a failure on the GPU falls back to the host, logged once.
    overlay_on_gpu: bool = knob(True, kind='bool', tuning=True, doc=(
        "the overlay is rendered on the tracker's GPU (the same pixels; false, or a CPU "
        'tracker: on the host with OpenCV)'))
    # OpenCV's worker threads (sam2_ros/ros/process_tuning.py): the overlay's whole-image
    # calls otherwise burst over every core, beside the tracking worker.
    opencv_threads: int = knob(0, kind='int', tuning=True, doc=(
        "OpenCV's worker threads in the node's process (the overlay, host decoding); 0: "
        "OpenCV's default, a thread per core"))
    # Python's GIL switch interval (sam2_ros/ros/process_tuning.py): a thread that wants the
    # GIL (the tracking worker after a GPU wait) takes it from a thread running Python code
    # after at most this long.
    gil_switch_interval_ms: float = knob(0.0, kind='float', tuning=True, doc=(
        "Python's GIL switch interval in the node's process (sys.setswitchinterval), ms; 0: "
        "Python's default (5 ms)"))
    # Serialized images (mask, overlay) published through rcl with the GIL released
    # (sam2_ros/ros/rcl_publish.py): the other threads, another camera's publisher too, run on.
    publish_without_gil: bool = knob(False, kind='bool', tuning=True, doc=(
        'with publish_serialized_images: the mask and overlay are published through rcl with '
        "Python's GIL released (the same bytes; false: rclpy's publish, which holds it)"))
    # After each frame one GPU thread spins this long behind the frame's work, so the GPU does
    # not lower its clocks before the camera's next frame (sam2_ros/engine/clock_keeper.py).
    gpu_clock_keeper_us: float = knob(0.0, kind='float', tuning=True, doc=(
        "after each frame, one thread of the tracker's GPU spins this many us so the GPU "
        'keeps its clocks up until the next frame: about 3/4 of the frame period (12000 at '
        '60 Hz); locking the clocks with nvidia-smi is the better fix where allowed; 0: off'))
    # Raw images received by a process of their own per camera (sam2_ros/ros/receiver.py),
    # handed over in shared memory: the tracker's process spends no GIL time on a frame's
    # receipt, which on a rig with two 60 Hz cameras competes with tracking and publishing.
    image_receiver_process: bool = knob(False, kind='bool', tuning=True, doc=(
        'raw images received by a process of their own per camera and read from shared memory '
        "(the node's interpreter spends no time on their receipt), the same frames as a "
        'subscription takes (a message over twice the largest frame the tracker takes is a '
        "frame error); a receiver that cannot start falls back to a subscription in the node's "
        'process'))
    # Off unless asked for: a debugging aid for rigs whose p99 is one-off slow frames
    # (sam2_ros/ros/stall_trace.py); on, a thread samples every thread's stack each ms while a
    # tracking call runs past this many ms.
    stall_trace_ms: float = knob(0.0, kind='float', tuning=True, doc=(
        'a tracking call longer than this (ms) is logged with what every thread of the node was '
        "doing during it (Python stacks sampled each ms: another thread holding the GIL, a "
        'first-use load, an allocation); 0: off'))
    stale_timeout_s: float = knob(2.0, kind='float', doc=(
        'no frame for this long -> diagnostics WARN'))
    # the /diagnostics timer runs in every lifecycle state, so it is made when the node starts
    diagnostics_period_s: float = knob(1.0, kind='float', startup=True, doc=(
        'period of /diagnostics (wall clock), read when the node starts'))
    # A correction (a click or prompt for a tracked object) stamped with the last processed
    # frame (or older, or a Point click): true: CameraTracker.defer_prompt, computed with the
    # next frame before it is encoded, that frame's result the first to show it (a correction
    # costs no second read-back and no re-publish); false: add_prompt at once and that frame's
    # result published again (a paused camera shows the change). A new object's prompt and
    # detections on the last frame are applied at once either way, so the frame a prompt names
    # shows its object however the prompt and the frame interleave.
    corrections_on_next_frame: bool = knob(True, kind='bool', doc=(
        'a correction (prompt or click for a tracked object) on the last processed frame is '
        'computed with the next frame (its result shows it; without a frame for '
        'deferred_wait_ms, applied then and the last frame re-published); false: applied at '
        'once and the last frame re-published. New objects are applied at once either way'))
    # A camera that stopped sends no next frame: a deferred click would wait unseen
    # (sam2_ros/ros/deferred_wait.py says why this bound).
    deferred_wait_ms: float = knob(100.0, kind='float', doc=(
        'with corrections_on_next_frame: a deferred correction waits at most this long for the '
        'next frame, then it is applied to the last frame and that frame published again (a '
        'paused camera shows the click); 0: it waits for the next frame'))
    # Object that a click (geometry_msgs/PointStamped on ~/click, or Point from rqt_image_view)
    # is for. Changeable at run time (`ros2 param set`), like click_mode.
    click_object_id: int = knob(1, kind='int', runtime=True, doc=(
        'object a click is for (~/click PointStamped, rqt_image_view Point), see docs/ros.md '
        'Clicks'))
    # 'positive': a positive point on click_object_id (starts it, or corrects it if tracked);
    # 'negative': a negative point on click_object_id (removes the clicked area from it);
    # 'new': starts a new object with the next unused id, which becomes click_object_id.
    click_mode: str = knob('positive', kind='str', runtime=True, doc=(
        "what a click does: 'positive' point on click_object_id, 'negative' point on it, 'new' "
        'object (the next unused id, then the click target)'))
    # Compressed images declaring more pixels than this are refused BEFORE decoding (a 425 KB
    # PNG can declare 20000x20000 and take 1.2 GB decoded). Default: 8K UHD. Not raw frames:
    # their bytes are received already, and their size is the tracker's to refuse.
    max_image_pixels: int = knob(MAX_IMAGE_PIXELS, kind='int', doc=(
        'compressed images declaring more pixels (header) are refused before decoding (default '
        '8K UHD; raw images are not bounded by it)'))
    # input_type compressed: JPEG decoded by nvJPEG on the tracker's CUDA device into a CUDA
    # frame the engine copies device to device (sam2_ros/engine/decode.py); PNG, other JPEG
    # kinds and CPU machines are decoded on the host, with the same checks. False: the host
    # decoder for every frame (the reference; its pixels differ slightly from nvJPEG's).
    decode_on_gpu: bool = knob(True, kind='bool', tuning=True, doc=(
        'input_type compressed: JPEG decoded on the GPU (nvJPEG) straight into the engine; PNG '
        'and machines without CUDA decode on the host; false: always on the host '
        '(diagnostics: gpu_decode)'))
    autostart: bool = knob(False, kind='bool', startup=True,
                           doc='configure and activate on start-up')
    # The executor that runs the node's callbacks, chosen at start-up (node_cli.py). They only
    # hand messages to the worker, so the executor's own time between a frame's receipt and
    # the worker's wake-up is part of every frame's latency: 'single' (rclpy's
    # SingleThreadedExecutor) rebuilds its wait set in Python, holding the GIL, after each
    # callback; 'events' (rclpy.experimental.EventsExecutor, C++) dispatches without one, so
    # it is the default (docs/performance.md, "Host-side options"). Where rclpy has no
    # EventsExecutor (before Kilted) the node runs 'single' and says so once.
    executor: str = knob('events', kind='str', tuning=True, startup=True, doc=(
        "the executor of the node's callbacks, read at start-up: 'events' "
        "(rclpy.experimental.EventsExecutor: less time holding Python's GIL between a "
        "frame's receipt and the worker) or 'single' (rclpy's SingleThreadedExecutor); "
        "where this rclpy lacks the EventsExecutor: 'single', logged"))
    # One JSON line of time.monotonic() stamps per published frame (sam2_ros/ros/timing_log.py),
    # so a benchmark on the same host can split image -> mask into its stages.
    timing_log: str = knob('', kind='str', doc=(
        'a file that gets one JSON line per published frame: its stamp and when it was '
        'received, decoded, tracked and its mask and state sent (time.monotonic(), one clock '
        "for the host's processes); for benchmarks; '' = off"))
    # Detections (vision_msgs/Detection2DArray on ~/detections) as box prompts; all settable at
    # run time. See sam2_ros/ros/detections.py and docs/ros.md "Detector in, objects out".
    detection_min_score: float = knob(0.5, kind='float', runtime=True, doc=(
        '~/detections scored lower are ignored'))
    detection_class_ids: List[str] = knob(default_factory=list, kind='str_array', runtime=True,
                                          doc='only detections of these classes; unset = all')
    detection_match_iou: float = knob(0.3, kind='float', runtime=True, doc=(
        'box IoU with an object (same class) for a detection to be that object; unmatched '
        'detections start objects'))
    detection_drift_iou: float = knob(0.5, kind='float', runtime=True, doc=(
        'a matched object a detection started, below this IoU (or occluded/lost), is '
        "re-prompted with the detection's box"))
    detection_max_age_frames: int = knob(15, kind='int', runtime=True, doc=(
        'detections stamped more processed frames back are rejected'))

    @property
    def positions_limits(self) -> Limits:
        """When a position of ~/positions is valid (ValueError naming a bad bound)."""
        return Limits(self.positions_min_disparity_px, self.positions_max_row_error_px,
                      self.positions_max_reprojection_px, self.positions_min_depth,
                      self.positions_max_depth)

    def camera_info_topic(self, c: int) -> str:
        """Camera ``c``'s CameraInfo topic: its entry of camera_info_topics, or beside its
        images."""
        given = self.camera_info_topics[c] if c < len(self.camera_info_topics) else ''
        return given or f'{self.cameras[c]}/camera_info'

    def validate(self) -> 'NodeOptions':
        """Raise ValueError naming the first bad option; return self for chaining."""
        if self.input_type not in INPUT_TYPES:
            raise ValueError(f'input_type must be one of {INPUT_TYPES}, got {self.input_type!r}')
        if self.qos_reliability not in RELIABILITIES:
            raise ValueError(f'qos_reliability must be one of {RELIABILITIES}, '
                             f'got {self.qos_reliability!r}')
        for name in ('qos_depth', 'fifo_size', 'prompt_queue_size'):
            if not 1 <= int(getattr(self, name)) <= MAX_QUEUE:
                raise ValueError(f'{name} must be in 1..{MAX_QUEUE}, got {getattr(self, name)!r}')
        if not 1 <= int(self.click_object_id) <= 255:
            raise ValueError(f'click_object_id must be in 1..255, got {self.click_object_id!r}')
        if self.executor not in EXECUTORS:
            raise ValueError(f'executor must be one of {EXECUTORS}, got {self.executor!r}')
        if self.click_mode not in CLICK_MODES:
            raise ValueError(f'click_mode must be one of {CLICK_MODES}, got {self.click_mode!r}')
        if int(self.max_image_pixels) < 1:
            raise ValueError(f'max_image_pixels must be >= 1, got {self.max_image_pixels!r}')
        if self.stale_timeout_s <= 0 or self.diagnostics_period_s <= 0:
            raise ValueError('stale_timeout_s and diagnostics_period_s must be > 0')
        for name, lo, hi, why in RANGES:
            if not lo <= float(getattr(self, name)) <= hi:     # NaN too
                raise ValueError(f'{name} must be within [{lo:g}, {hi:g}] ({why}), got '
                                 f'{getattr(self, name)!r}')
        if int(self.opencv_threads) < 0:
            raise ValueError(f'opencv_threads must be >= 0 (0: OpenCV\'s default), got '
                             f'{self.opencv_threads!r}')
        check_topic(self.image_topic, 'image_topic')
        check_cameras(list(self.cameras), self.camera_image, self.camera_period_ms,
                      self.pair_tolerance_ms)
        for c in self.cameras:
            check_topic(f'{c}/{self.camera_image}', 'camera_image under each camera')
        check_camera_infos(self)
        try:
            self.positions_limits
        except ValueError as exc:       # Limits names the field; the parameter has a prefix
            raise ValueError(f'positions_{exc}') from None
        if self.timing_log and not _writable_file(self.timing_log):
            raise ValueError(f'timing_log must be a file we can write in an existing folder, '
                             f'got {self.timing_log!r}')
        from sam2_ros.ros.detections import check_rules

        check_rules(self.detection_min_score, self.detection_match_iou,
                    self.detection_drift_iou)
        if int(self.detection_max_age_frames) < 0:
            raise ValueError(f'detection_max_age_frames must be >= 0, got '
                             f'{self.detection_max_age_frames!r}')
        return self


def _writable_file(path: str) -> bool:
    """A file that can be appended to: an existing writable file, or a new one in an existing
    writable folder (not a folder itself)."""
    path = os.path.abspath(path)
    if os.path.exists(path):
        return os.path.isfile(path) and os.access(path, os.W_OK)
    folder = os.path.dirname(path)
    return os.path.isdir(folder) and os.access(folder, os.W_OK)


def check_topic(name: str, what: str) -> None:
    """ValueError unless ``name`` is a ROS topic name a node can subscribe to (relative, ~ or
    absolute): the subscription of activate would raise, after configure built the tracker."""
    from rclpy.expand_topic_name import expand_topic_name
    from rclpy.validate_full_topic_name import validate_full_topic_name

    try:
        validate_full_topic_name(expand_topic_name(name, 'node', '/'))
    except Exception as exc:  # noqa: BLE001 - rclpy raises ValueError or its own exception
        reason = (str(exc).splitlines() or [type(exc).__name__])[0].split(', at /')[0]
        raise ValueError(f'{what} must be a valid ROS topic name, got {name!r} ({reason})') \
            from exc


def check_camera_infos(o: NodeOptions) -> None:
    """ValueError unless camera_info_topics is empty or one valid topic per camera, and every
    camera's CameraInfo topic is its own (one message would calibrate two cameras)."""
    if o.camera_info_topics and len(o.camera_info_topics) != len(o.cameras):
        raise ValueError(f'camera_info_topics must name one topic per camera of cameras '
                         f'({len(o.cameras)}; an empty entry: <ns>/camera_info), got '
                         f'{list(o.camera_info_topics)!r}')
    topics = [o.camera_info_topic(c) for c in range(len(o.cameras))]
    for topic in topics:
        check_topic(topic, 'camera_info_topics')
    if len(set(topics)) != len(topics):
        raise ValueError(f'camera_info_topics must be a different topic for each camera (one '
                         f'CameraInfo per camera), got {topics!r}')


def check_cameras(cameras: List[str], image: str, period_ms: float, tolerance_ms: float) -> None:
    """ValueError for camera namespaces that are not distinct relative names, or a pairing
    the pairer refuses."""
    if len(set(cameras)) != len(cameras) or any(
            not c or c.startswith(('/', '~')) or not all(ch.isalnum() or ch in '_/' for ch in c)
            for c in cameras):
        raise ValueError(f'cameras must be distinct relative namespaces (letters, digits, _ '
                         f'and /), got {cameras!r}')
    if cameras and (not image or image.startswith(('/', '~'))):
        raise ValueError(f'camera_image must be a relative topic name, got {image!r}')
    if not period_ms > 0 or not 0 <= tolerance_ms <= period_ms / 2:
        raise ValueError(f'camera_period_ms must be > 0 and pair_tolerance_ms in '
                         f'0..camera_period_ms/2, got {period_ms!r} and {tolerance_ms!r}')
