"""ROS parameters of the tracker node: one per knob of
:class:`~sam2_ros.engine.config.TrackerConfig` and :class:`~sam2_ros.ros.options.NodeOptions`.

Names, types, descriptions, run-time flags and defaults are read from the two dataclasses
(:mod:`sam2_ros.knobs` metadata), never restated here, so a knob changes in exactly one place.
ROS parameters cannot be ``None`` or an untyped empty list, hence the few conversions below:
an empty ``checkpoint`` string means ``None``; unset array parameters mean ``None`` / ``[]``;
an empty ``precision`` (its ROS default) means the device's, ``config.default_precision``.
"""

from __future__ import annotations

import array
import dataclasses
import math
from typing import Any, Dict, List, NamedTuple, Tuple

from sam2_ros.engine.config import TrackerConfig, default_precision
from sam2_ros.knobs import knobs
from sam2_ros.ros.options import NodeOptions

class ParamSpec(NamedTuple):
    name: str          # ROS parameter name
    target: str        # 'tracker' (TrackerConfig field) or 'node' (NodeOptions field)
    field: str         # dataclass field name
    kind: str          # one of sam2_ros.knobs.KINDS
    description: str
    runtime: bool      # takes effect at once when set at run time (`ros2 param set`)
    tuning: bool       # a performance choice (docs and config/tracker.yaml: the tuning section)
    startup: bool      # read when the node's process starts (node_cli), not at configure


T, N = 'tracker', 'node'
CONFIGS = ((T, TrackerConfig), (N, NodeOptions))
# Every knob of the two dataclasses, a parameter of the same name.
PARAMS: Tuple[ParamSpec, ...] = tuple(
    ParamSpec(f.name, target, f.name, k.kind, k.doc, k.runtime, k.tuning, k.startup)
    for target, cls in CONFIGS for f, k in knobs(cls))
# Parameters that take effect at once when set at run time; those read when the process
# starts; all others are read at configure.
RUNTIME_PARAMS = tuple(s.name for s in PARAMS if s.runtime)
STARTUP_PARAMS = tuple(s.name for s in PARAMS if s.startup)
# '' (the ROS default) means the device's precision: config.default_precision
BY_DEVICE = ('precision',)
INT_TYPECODES = frozenset('bBhHiIlLqQ')      # array.array typecodes of integers


def _field_default(spec: ParamSpec, defaults: Any = None) -> Any:
    """The dataclass default of the parameter's field (the one place defaults live): from
    ``defaults`` (an instance of another node's options) or the tracker's and node's; None
    for a field chosen by device (BY_DEVICE)."""
    if defaults is not None:
        return getattr(defaults, spec.field)
    if spec.field in BY_DEVICE:
        return None
    return getattr(TrackerConfig() if spec.target == T else NodeOptions(), spec.field)


def default_value(spec: ParamSpec) -> Any:
    """The default of a parameter, as a ROS value (None = declared typed but unset)."""
    value = _field_default(spec)
    if spec.kind == 'str':
        return '' if value is None else str(value)
    if spec.kind in ('int_array', 'str_array'):
        return None if not value else list(value)
    return value


def to_field_value(spec: ParamSpec, value: Any, defaults: Any = None) -> Any:
    """A ROS parameter value converted to the dataclass field's Python value; ValueError that
    names the parameter for a value of the wrong type (no silent splitting or truncation).
    ``defaults``: an instance of the field's dataclass where it is not the tracker's or the
    node's (positions_node's options)."""
    def bad(what: str) -> ValueError:
        return ValueError(f'parameter {spec.name} must be {what}, got {value!r}')

    if spec.kind == 'str':
        if not isinstance(value, str):
            raise bad('a string')
        # '' means None where the field's default is None (checkpoint, compile_mode...)
        return None if (value == '' and _field_default(spec, defaults) is None) else value
    if spec.kind in ('int_array', 'str_array'):
        if isinstance(value, array.array) and value.typecode in INT_TYPECODES:
            value = value.tolist()      # how rclpy hands over an integer array set at run time
        if value is None or (isinstance(value, (list, tuple)) and not value):
            # unset or empty: None where the field's default is None (the core chooses, e.g.
            # batch_buckets), else an empty list
            if _field_default(spec, defaults) is None:
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
    tracker_kw, node_kw = _fields(values)
    return (dataclasses.replace(TrackerConfig(), **tracker_kw).validate(),
            dataclasses.replace(NodeOptions(), **node_kw).validate())


def _fields(values: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Parameter values -> (TrackerConfig fields, NodeOptions fields), converted; ValueError
    for an unknown name or a wrong type."""
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
    if tracker_kw.get('precision') is None:   # not given, or '': the device's
        tracker_kw['precision'] = default_precision(tracker_kw.get('device',
                                                                   TrackerConfig.device))
    return tracker_kw, node_kw


def declare(node: Any) -> None:
    """Declare every parameter on an rclpy node, with its description and default.

    Declared with dynamic typing so that a wrongly typed value in a params file fails the
    configure transition with a clear message (via :func:`build`) instead of crashing the
    process in the constructor.
    """
    from rcl_interfaces.msg import ParameterDescriptor

    for spec in PARAMS:
        tags = [spec.kind] + ['run time'] * spec.runtime + ['tuning'] * spec.tuning
        desc = ParameterDescriptor(name=spec.name, dynamic_typing=True,
                                   description=f'[{", ".join(tags)}] {spec.description}')
        node.declare_parameter(spec.name, default_value(spec), desc)


def read(node: Any) -> Tuple[TrackerConfig, NodeOptions]:
    """Read the declared parameters of ``node`` and build validated configs (ValueError)."""
    values = {}
    for spec in PARAMS:
        value = node.get_parameter(spec.name).value
        if value is not None:
            values[spec.name] = value
    return build(values)


def refusal(current: Dict[str, Any], changes: Dict[str, Any]) -> str:
    """Why setting ``changes`` over ``current`` (name -> ROS value; None = unset) at run time
    makes the configuration invalid, or ''. A configure-time parameter is only read at the
    next configure; checked now, `ros2 param set` refuses a bad value with the reason instead
    of the next configure failing. A problem that ``current`` already has (say, no checkpoint
    yet) is not this change's: it does not refuse it. The tracker's and the node's options
    are judged apart: a bad node option is not hidden behind the tracker's missing
    checkpoint (it would be refused later, blaming the checkpoint's setting)."""
    def errors(values: Dict[str, Any]) -> Tuple[str, str]:
        try:
            tracker_kw, node_kw = _fields({k: v for k, v in values.items() if v is not None})
        except ValueError as exc:
            return str(exc), str(exc)
        out = []
        for cls, kw in ((TrackerConfig, tracker_kw), (NodeOptions, node_kw)):
            try:
                dataclasses.replace(cls(), **kw).validate()
                out.append('')
            except ValueError as exc:
                out.append(str(exc))
        return out[0], out[1]

    after, before = errors({**current, **changes}), errors(current)
    return next((a for a, b in zip(after, before) if a and a != b), '')


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
