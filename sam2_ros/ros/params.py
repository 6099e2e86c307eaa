"""ROS parameters of the tracker node: ONE table mapping each parameter onto a
:class:`~sam2_ros.engine.config.TrackerConfig` field or a :class:`NodeOptions` field.

Defaults are read from the two dataclasses, never restated here, so a default changes in
exactly one place (``sam2_ros/engine/config.py`` for the core, :class:`NodeOptions` for the node).
ROS parameters cannot be ``None`` or an untyped empty list, hence the few conversions below:
an empty ``checkpoint`` string means ``None``; unset array parameters mean ``None`` / ``[]``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, NamedTuple, Tuple

from sam2_ros.engine.config import TrackerConfig
from sam2_ros.ros.options import NodeOptions

# Parameters that take effect at once when set at run time (`ros2 param set`); all others are
# read at configure.
RUNTIME_PARAMS = ('click_mode', 'click_object_id', 'detection_min_score', 'detection_class_ids',
                  'detection_match_iou', 'detection_drift_iou', 'detection_max_age_frames')


class ParamSpec(NamedTuple):
    name: str          # ROS parameter name
    target: str        # 'tracker' (TrackerConfig field) or 'node' (NodeOptions field)
    field: str         # dataclass field name
    kind: str          # 'str' | 'int' | 'float' | 'bool' | 'int_array' | 'str_array'
    description: str


T, N = 'tracker', 'node'
OPTIONAL_STR = ('checkpoint', 'compile_mode', 'precompile_dir')     # '' means None
PARAMS: Tuple[ParamSpec, ...] = (
    ParamSpec('model_size', T, 'model_size', 'str', 'SAM 2.1 size: tiny, small, base_plus, large'),
    ParamSpec('image_size', T, 'image_size', 'int',
              'square model input side in px, multiple of 32 (smaller: faster, coarser masks)'),
    ParamSpec('checkpoint', T, 'checkpoint', 'str',
              'path of an official SAM 2/2.1 .pt file; empty = none (needs random_weights)'),
    ParamSpec('random_weights', T, 'random_weights', 'bool',
              'random model weights: tests and demo only, masks are meaningless'),
    ParamSpec('seed', T, 'seed', 'int', 'seed of random weights (same seed, same model)'),
    ParamSpec('device', T, 'device', 'str', 'torch device, e.g. cuda, cuda:1, cpu'),
    ParamSpec('precision', T, 'precision', 'str', 'bf16 or fp32'),
    ParamSpec('max_objects', T, 'max_objects', 'int',
              'capacity of the preallocated object table; more objects are rejected'),
    ParamSpec('max_cond_frames', T, 'max_cond_frames', 'int',
              'prompted frames kept per object (first one always kept)'),
    ParamSpec('corrections_as_cond', T, 'corrections_as_cond', 'bool',
              'a correction on a tracked frame becomes a conditioning frame'),
    ParamSpec('lost_after_frames', T, 'lost_after_frames', 'int',
              'frames with score <= 0 before an object is reported LOST (not OCCLUDED)'),
    ParamSpec('fill_hole_area', T, 'fill_hole_area', 'int',
              "sam2's hole filling: background specks of at most this many low-res pixels "
              'become mask (0: off)'),
    ParamSpec('use_cuda_graphs', T, 'use_cuda_graphs', 'bool',
              'capture CUDA graphs of the per-frame step (CUDA only)'),
    ParamSpec('graph_mode', T, 'graph_mode', 'str', "'swap' or 'batched' multi-object graphs"),
    ParamSpec('batch_buckets', T, 'batch_buckets', 'int_array',
              "object batch sizes captured for graph_mode 'batched'; unset = powers of two "
              'up to max_objects, and max_objects'),
    ParamSpec('graph_cond_buckets', T, 'graph_cond_buckets', 'int_array',
              'conditioning-frame counts captured as graph buckets; unset = 1..max_cond_frames'),
    ParamSpec('batch_major_memory', T, 'batch_major_memory', 'bool',
              "batched graphs hand sam2's memory attention batch-major views (same values)"),
    ParamSpec('padded_graphs', T, 'padded_graphs', 'bool',
              'graphs also run the frames after a prompt (padded memory, masked attention)'),
    ParamSpec('steady_attention', T, 'steady_attention', 'str',
              "steady-state attention kernel: 'auto' (timed at configure), 'sam2', 'flash', "
              "'split'"),
    ParamSpec('prompt_graphs', T, 'prompt_graphs', 'bool',
              'prompted steps (new object, correction, mask) as CUDA graphs too'),
    ParamSpec('prompt_point_buckets', T, 'prompt_point_buckets', 'int_array',
              'point counts captured as prompt graphs (a click 1, a box 2, box + click 3)'),
    ParamSpec('image_graphs', T, 'image_graphs', 'bool',
              'image mode (the image encoder and batched prompt decoding) as CUDA graphs too'),
    ParamSpec('image_prompt_buckets', T, 'image_prompt_buckets', 'int_array',
              'prompt counts captured as image-mode decoder graphs (padded up to a bucket)'),
    ParamSpec('graph_io', T, 'graph_io', 'bool',
              'frame preprocessing and mask postprocessing as CUDA graphs too'),
    ParamSpec('io_resolution', T, 'io_resolution', 'int_array',
              '[width, height] of the camera: frame-in and mask-out graphs captured at '
              'configure instead of on the first frame; unset = on first use'),
    ParamSpec('compile_mode', T, 'compile_mode', 'str',
              "torch.compile the modules inside the graphs: '' (off), 'default' or "
              "'max-autotune-no-cudagraphs' (start-up takes minutes)"),
    ParamSpec('precompile', T, 'precompile', 'str_array',
              "parts run as inductor-fused kernels compiled once and loaded from disk: "
              "'encoder', 'heads' (the first start compiles them)"),
    ParamSpec('precompile_dir', T, 'precompile_dir', 'str',
              'folder of the precompiled files; empty = ~/.cache/sam2_ros/precompiled'),
    ParamSpec('precast_weights', T, 'precast_weights', 'bool',
              'bf16: Linear/Conv weights cast to bf16 once, not by autocast on every call '
              '(bit-identical)'),
    ParamSpec('extra_hydra_overrides', T, 'extra_hydra_overrides', 'str_array',
              'extra hydra overrides for the sam2 model config (expert use)'),
    ParamSpec('image_topic', N, 'image_topic', 'str', 'input image topic (remappable too)'),
    ParamSpec('input_type', N, 'input_type', 'str',
              "'raw' (sensor_msgs/Image) or 'compressed' (sensor_msgs/CompressedImage)"),
    ParamSpec('qos_reliability', N, 'qos_reliability', 'str',
              "image QoS 'reliable' or 'best_effort' (best_effort loses large frames)"),
    ParamSpec('qos_depth', N, 'qos_depth', 'int', 'image subscription history depth'),
    ParamSpec('process_every_frame', N, 'process_every_frame', 'bool',
              'true: bounded blocking FIFO, no frame dropped (bag replay); '
              'false: only the newest frame is processed (live)'),
    ParamSpec('fifo_size', N, 'fifo_size', 'int',
              'frames held by the FIFO of process_every_frame before the callback blocks'),
    ParamSpec('prompt_queue_size', N, 'prompt_queue_size', 'int',
              'pending prompts; when full the newest is rejected with an error'),
    ParamSpec('publish_overlay', N, 'publish_overlay', 'bool', 'publish ~/overlay (rgb8)'),
    ParamSpec('pipeline', N, 'pipeline', 'bool',
              'publish on threads of their own while the next frame is tracked (false: serial)'),
    ParamSpec('tune_malloc', N, 'tune_malloc', 'bool',
              'reuse large message buffers (glibc mmap/trim thresholds; process-wide, set at '
              'configure, not undone)'),
    ParamSpec('gc_freeze', N, 'gc_freeze', 'bool',
              "exempt what configure built from Python's garbage collections (a full one "
              'took 128-142 ms on a 2-core VM); undone at cleanup'),
    ParamSpec('stale_timeout_s', N, 'stale_timeout_s', 'float',
              'no frame for this long -> diagnostics WARN'),
    ParamSpec('diagnostics_period_s', N, 'diagnostics_period_s', 'float',
              'period of /diagnostics (wall clock)'),
    ParamSpec('click_object_id', N, 'click_object_id', 'int',
              'object a click is for (~/click PointStamped, rqt_image_view Point); run time'),
    ParamSpec('click_mode', N, 'click_mode', 'str',
              "what a click does: 'positive' point on click_object_id, 'negative' point on it, "
              "'new' object (next unused id, then the click target); settable at run time"),
    ParamSpec('max_image_pixels', N, 'max_image_pixels', 'int',
              'compressed images declaring more pixels are refused before decoding'),
    ParamSpec('autostart', N, 'autostart', 'bool', 'configure and activate on start-up'),
    ParamSpec('detection_min_score', N, 'detection_min_score', 'float',
              '~/detections with a lower score are ignored; run time'),
    ParamSpec('detection_class_ids', N, 'detection_class_ids', 'str_array',
              '~/detections of these classes only; unset = all; run time'),
    ParamSpec('detection_match_iou', N, 'detection_match_iou', 'float',
              'box IoU with an object (same class) for a detection to be that object; '
              'unmatched detections start objects; run time'),
    ParamSpec('detection_drift_iou', N, 'detection_drift_iou', 'float',
              'a matched object with a lower IoU (or occluded/lost) is re-prompted with the '
              'detection; run time'),
    ParamSpec('detection_max_age_frames', N, 'detection_max_age_frames', 'int',
              'detections stamped more frames back than this are rejected; run time'),
)


def _field_default(spec: ParamSpec) -> Any:
    """The dataclass default of the parameter's field (the one place defaults live)."""
    return getattr(TrackerConfig() if spec.target == T else NodeOptions(), spec.field)


def default_value(spec: ParamSpec) -> Any:
    """The default of a parameter, as a ROS value (None = declared typed but unset)."""
    value = _field_default(spec)
    if spec.kind == 'str':
        return '' if value is None else str(value)
    if spec.kind in ('int_array', 'str_array'):
        return None if not value else list(value)
    return value


def to_field_value(spec: ParamSpec, value: Any) -> Any:
    """A ROS parameter value converted to the dataclass field's Python value; ValueError that
    names the parameter for a value of the wrong type (no silent splitting or truncation)."""
    def bad(what: str) -> ValueError:
        return ValueError(f'parameter {spec.name} must be {what}, got {value!r}')

    if spec.kind == 'str':
        if not isinstance(value, str):
            raise bad('a string')
        return None if (spec.field in OPTIONAL_STR and value == '') else value
    if spec.kind in ('int_array', 'str_array'):
        if value is None or (isinstance(value, (list, tuple)) and not value):
            # unset or empty: None where the field's default is None (the core chooses, e.g.
            # batch_buckets), else an empty list
            if _field_default(spec) is None:
                return None
            return () if spec.kind == 'int_array' else []
        if not isinstance(value, (list, tuple)):
            raise bad('a list')
        if spec.kind == 'str_array':
            if not all(isinstance(v, str) for v in value):
                raise bad('a list of strings')
            return list(value)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
            raise bad('a list of positive integers')   # no 1.0: ROS types arrays strictly
        return tuple(int(v) for v in value)
    if spec.kind == 'float':
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value):
            raise bad('a finite number')
        return float(value)
    if spec.kind == 'int':
        if not _is_int(value):
            raise bad('an integer')
        return int(value)
    if spec.kind == 'bool' and not isinstance(value, bool):
        raise bad('a bool')
    return value


def _is_int(v: Any) -> bool:
    """An int, or a float with an integral finite value (YAML may say 512.0); not a bool."""
    if isinstance(v, bool):
        return False
    return isinstance(v, int) or (isinstance(v, float) and math.isfinite(v) and v.is_integer())


def build(values: Dict[str, Any]) -> Tuple[TrackerConfig, NodeOptions]:
    """Parameter values (name -> ROS value; missing names keep defaults) -> validated configs.

    Raises ValueError (unknown name, wrong type, invalid value) so configure can fail cleanly.
    """
    unknown = set(values) - {s.name for s in PARAMS}
    if unknown:
        raise ValueError(f'unknown parameters: {sorted(unknown)}')
    tracker_kw: Dict[str, Any] = {}
    node_kw: Dict[str, Any] = {}
    for spec in PARAMS:
        if spec.name not in values:
            continue
        (tracker_kw if spec.target == T else node_kw)[spec.field] = to_field_value(
            spec, values[spec.name])
    cfg = dataclasses.replace(TrackerConfig(), **tracker_kw).validate()
    opts = dataclasses.replace(NodeOptions(), **node_kw).validate()
    return cfg, opts


def declare(node: Any) -> None:
    """Declare every parameter on an rclpy node, with its description and default.

    Declared with dynamic typing so that a wrongly typed value in a params file fails the
    configure transition with a clear message (via :func:`build`) instead of crashing the
    process in the constructor.
    """
    from rcl_interfaces.msg import ParameterDescriptor

    for spec in PARAMS:
        desc = ParameterDescriptor(name=spec.name, description=f'[{spec.kind}] {spec.description}',
                                   dynamic_typing=True)
        node.declare_parameter(spec.name, default_value(spec), desc)


def read(node: Any) -> Tuple[TrackerConfig, NodeOptions]:
    """Read the declared parameters of ``node`` and build validated configs (ValueError)."""
    values = {}
    for spec in PARAMS:
        value = node.get_parameter(spec.name).value
        if value is not None:
            values[spec.name] = value
    return build(values)


def names() -> List[str]:
    return [s.name for s in PARAMS]


def unknown(given: List[str], declared: List[str]) -> List[Tuple[str, str]]:
    """Parameters given (params file, ``-p``) that the node does not declare, each with the
    closest declared name ('' if none is close). ROS silently ignores such overrides, so a typo
    (``image_sise``) would run with the default; the node reports them instead."""
    import difflib

    out = []
    for name in sorted(set(given) - set(declared)):
        if name.startswith('qos_overrides.'):   # declared by rclpy per topic, when used
            continue
        close = difflib.get_close_matches(name, declared, n=1, cutoff=0.8)
        out.append((name, close[0] if close else ''))
    return out
