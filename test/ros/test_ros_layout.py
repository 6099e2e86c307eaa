"""The layout of sam2_ros/ros: no import circle (imports inside functions and under
TYPE_CHECKING count), and docs/ros.md's file table lists exactly the folder's files (file sizes:
test/test_architecture.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Set

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / 'sam2_ros'
ROS = PACKAGE / 'ros'


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def import_graph() -> Dict[str, Set[str]]:
    """Module -> the sam2_ros modules it imports anywhere in its text (``from a import b`` is
    an edge to ``a.b`` where that is a module, else to ``a``)."""
    mods = {module_name(p): p for p in PACKAGE.rglob('*.py')}

    def owner(name: str) -> str:
        while name and name not in mods:
            name = name.rpartition('.')[0]
        return name

    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {owner(a.name) for a in node.names if a.name.startswith('sam2_ros')}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and \
                    (node.module or '').startswith('sam2_ros'):
                deps |= {f'{node.module}.{a.name}' if f'{node.module}.{a.name}' in mods
                         else owner(node.module) for a in node.names}
        graph[name] = deps - {name, ''}
    return graph


def cycle_through(graph: Dict[str, Set[str]], start: str) -> List[str]:
    """An import path from ``start`` back to itself, or [] (depth-first search)."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for dep in sorted(graph.get(node, ())):
            if dep == start:
                return path + [start]
            if dep not in seen:
                seen.add(dep)
                stack.append((dep, path + [dep]))
    return []


def test_no_import_circle_in_sam2_ros_ros():
    graph = import_graph()
    assert 'sam2_ros.ros.worker_detections' in graph['sam2_ros.ros.worker']   # the graph works
    assert 'sam2_ros.engine.tracker' in graph['sam2_ros.ros.node']   # imported in a function
    circles = [c for c in (cycle_through(graph, m) for m in sorted(graph)
                           if m.startswith('sam2_ros.ros')) if c]
    assert not circles, circles


def test_docs_file_table_matches_the_folder():
    text = (ROOT / 'docs' / 'ros.md').read_text()
    listed = set(re.findall(r'^\| `sam2_ros/ros/(\w+\.py)` \|', text, flags=re.M))
    assert listed == {p.name for p in ROS.glob('*.py')}
