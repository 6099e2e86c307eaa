"""config/tracker.yaml and the parameter tables of docs/ros.md, written from the knobs of
TrackerConfig and NodeOptions (:mod:`sam2_ros.knobs`, :mod:`sam2_ros.ros.params`), and
positions_node's table from PositionsOptions (:mod:`sam2_ros.ros.positions_options`).

    python -m tools.knobs           # rewrite both
    python -m tools.knobs --check   # exit 1 when either differs (test_ros_params checks too)
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any, List, Tuple

import yaml

from sam2_ros.ros import params, positions_options

ROOT = Path(__file__).resolve().parents[1]
YAML_PATH = ROOT / 'config' / 'tracker.yaml'
DOCS_PATH = ROOT / 'docs' / 'ros.md'
BEGIN, END = '<!-- knobs: begin (python -m tools.knobs) -->', '<!-- knobs: end -->'
# positions_node's table (docs/ros.md, "3D positions with a tracker node per camera")
POSITIONS_BEGIN = '<!-- positions_node knobs: begin (python -m tools.knobs) -->'
POSITIONS_END = '<!-- positions_node knobs: end -->'
TYPES = {'str': 'str', 'int': 'int', 'float': 'float', 'bool': 'bool', 'int_array': 'int[]',
         'str_array': 'str[]'}
WIDTH = 99


def sections() -> List[Tuple[str, List[params.ParamSpec]]]:
    """The parameters in the order and groups of config/tracker.yaml."""
    groups = [
        ('model (TrackerConfig)', lambda s: s.target == params.T and not s.tuning),
        ('node (NodeOptions)', lambda s: s.target == params.N and not s.tuning
         and not s.runtime),
        ('run time: take effect at once when set (ros2 param set)', lambda s: s.runtime),
        ('tuning: the defaults are the measured best; a user sets none of them',
         lambda s: s.tuning),
    ]
    out = [(title, [s for s in params.PARAMS if keep(s)]) for title, keep in groups]
    assert sum(len(g) for _, g in out) == len(params.PARAMS)
    return out


def yaml_value(v: Any) -> str:
    """A ROS parameter value as tracker.yaml writes it (None: [], i.e. unset)."""
    if v is None:
        return '[]'
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, (list, tuple)):
        return '[' + ', '.join(yaml_value(x) for x in v) + ']'
    if isinstance(v, str):
        return v if v and yaml.safe_load(v) == v else json.dumps(v)
    return str(v)


def render_yaml() -> str:
    out = ['# Parameters of the sam2_tracker node, every one with its default. Written by',
           '# `python -m tools.knobs` from the knobs of TrackerConfig (sam2_ros/engine/config.py)',
           '# and NodeOptions (sam2_ros/ros/options.py); test/ros/test_ros_params.py checks it.',
           '#   python -m sam2_ros.ros.node --ros-args --params-file config/tracker.yaml '
           '-p autostart:=true',
           '/**:', '  ros__parameters:']
    for title, specs in sections():
        out.append(f'    # --- {title} ---')
        for s in specs:
            line = f'    {s.name}: {yaml_value(params.default_value(s))}'
            inline = f'{line:<32}  # {s.description}'
            if len(inline) <= WIDTH:
                out.append(inline)
                continue
            out += textwrap.wrap(s.description, WIDTH, break_on_hyphens=False,
                                 initial_indent='    # ',
                                 subsequent_indent='    #   ')
            out.append(line)
    return '\n'.join(out) + '\n'


def docs_default(s: params.ParamSpec) -> str:
    v = params.default_value(s)
    return 'unset' if v is None else f'`{yaml_value(v)}`'


def render_tables() -> str:
    """The docs/ros.md tables: the parameters a user sets, then the tuning ones."""
    head = ['| parameter | type | default | maps to | description |', '|---|---|---|---|---|']

    def row(s: params.ParamSpec) -> str:
        target = 'TrackerConfig' if s.target == params.T else 'node'
        runtime = '; **run time**' if s.runtime else ''
        return (f'| `{s.name}` | {TYPES[s.kind]} | {docs_default(s)} | {target} | '
                f'{s.description}{runtime} |')
    user = [row(s) for s in params.PARAMS if not s.tuning]
    tuning = [row(s) for s in params.PARAMS if s.tuning]
    return '\n'.join([BEGIN, *head, *user, '', '**Tuning** (CUDA graphs, kernels and the '
                      "process's allocator and garbage collector; the defaults are the "
                      'measured best, so a user sets none of them):', '', *head, *tuning, END])


def render_positions_table() -> str:
    """docs/ros.md's table of positions_node's parameters."""
    def row(s: params.ParamSpec) -> str:
        default = yaml_value(getattr(positions_options.DEFAULTS, s.field))
        return f'| `{s.name}` | {TYPES[s.kind]} | `{default}` | {s.description} |'
    return '\n'.join([POSITIONS_BEGIN, '| parameter | type | default | description |',
                      '|---|---|---|---|', *[row(s) for s in positions_options.SPECS],
                      POSITIONS_END])


def replace_between(text: str, begin: str, end: str, block: str) -> str:
    """``text`` with the block from ``begin`` to ``end`` (markers included) replaced."""
    i, j = text.index(begin), text.index(end) + len(end)
    return text[:i] + block + text[j:]


def docs_with_tables(text: str) -> str:
    """docs/ros.md with its generated tables replaced by :func:`render_tables` (the tracker's)
    and :func:`render_positions_table`."""
    text = replace_between(text, BEGIN, END, render_tables())
    return replace_between(text, POSITIONS_BEGIN, POSITIONS_END, render_positions_table())


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--check', action='store_true', help='only report files that differ')
    args = ap.parse_args(argv)
    docs = DOCS_PATH.read_text()
    wanted = {YAML_PATH: render_yaml(), DOCS_PATH: docs_with_tables(docs)}
    stale = [p for p, text in wanted.items() if p.read_text() != text]
    if args.check:
        for p in stale:
            print(f'{p.relative_to(ROOT)} differs from the knobs: run python -m tools.knobs')
        return 1 if stale else 0
    for p in stale:
        p.write_text(wanted[p])
        print(f'wrote {p.relative_to(ROOT)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
