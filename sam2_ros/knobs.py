"""Knobs: the settings of a config dataclass a user can set, each described once, as metadata
of its dataclass field (no ROS here).

``TrackerConfig`` (``sam2_ros/engine/config.py``) and the node's ``NodeOptions``
(``sam2_ros/ros/options.py``) declare their fields with :func:`knob`; the ROS parameter
declarations (``sam2_ros/ros/params.py``), ``--help``, the parameter tables of docs/ros.md and
``config/tracker.yaml`` are derived from it (``python -m tools.knobs`` writes the last two; a
test fails when they disagree).
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, dataclass
from typing import Any, List, Optional, Tuple

# The value types a knob can have; the ROS parameter of each has the same type.
KINDS = ('str', 'int', 'float', 'bool', 'int_array', 'str_array')
KEY = 'sam2_ros.knob'   # the metadata key of a dataclass field


@dataclass(frozen=True)
class Knob:
    """What a user needs to know of one setting."""

    kind: str               # one of KINDS
    doc: str                # one line for users: what it does, its values
    runtime: bool = False   # takes effect when changed at run time (`ros2 param set`)
    tuning: bool = False    # a performance choice: the default is the measured best
    startup: bool = False   # read once when the node's process starts, not at configure


def knob(default: Any = MISSING, *, kind: str, doc: str, runtime: bool = False,
         tuning: bool = False, startup: bool = False, default_factory: Any = MISSING) -> Any:
    """A dataclass field carrying its :class:`Knob`."""
    if kind not in KINDS:
        raise ValueError(f'knob kind must be one of {KINDS}, got {kind!r}')
    if runtime and startup:
        raise ValueError('a knob is read at run time or at start-up, not both')
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={KEY: Knob(kind, doc, runtime, tuning, startup)})


def knob_of(f: dataclasses.Field) -> Optional[Knob]:
    return f.metadata.get(KEY)


def knobs(cls: type) -> List[Tuple[dataclasses.Field, Knob]]:
    """The fields of dataclass ``cls`` that are knobs, in declaration order."""
    return [(f, knob_of(f)) for f in dataclasses.fields(cls) if knob_of(f) is not None]
