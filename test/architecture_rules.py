"""Checkers of the project's architecture rules. They parse the files (``ast``) and import
nothing, so they need neither torch nor ROS. Each takes the repository root and returns the
violations it finds: test_architecture.py runs them on the real tree, and on small trees with a
planted violation to prove that each one can fail.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

import architecture_classes

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ('sam2_ros', 'tools', 'test', 'launch', 'examples')   # folders of the project's code
PACKAGES = ('sam2_ros', 'tools')                               # importable by those names
MAX_LINE = 99
MAX_FILE_LINES = 400        # a file has fewer
# The ROS-free parts: sam2_ros's top-level modules and engine/ and cli/ (sam2_ros/ros/ is the ROS
# side), and the benchmarks' command line.
ROS_FREE_FOLDERS = ('sam2_ros/engine', 'sam2_ros/cli')
ROS_FREE_EXTRA = ('tools/bench/cli.py',)
ROS_PACKAGES = frozenset({'rclpy', 'cv_bridge', 'message_filters', 'rosbag2_py',
                          'image_geometry', 'tf2_ros', 'camera_calibration'})
ROS_PREFIXES = ('rosidl', 'launch', 'ament', 'rcl', 'rmw', 'ros2')
ROS_SUFFIXES = ('_msgs', '_srvs', '_interfaces')
OWN_ROS = ('sam2_ros.ros', 'sam2_ros.msg', 'sam2_ros.srv')
# The CUDA graph machinery lives in one folder; the rest of the package goes through its classes.
CUDA_GRAPH_HOME = 'sam2_ros/engine/cuda/'
CUDA_GRAPH_API = frozenset({'CUDAGraph', 'graph', 'graph_pool_handle', 'make_graphed_callables',
                            'graphs'})


@dataclass(frozen=True)
class Violation:
    path: str       # relative to the root
    line: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f'{self.path}:{self.line}: {self.rule}: {self.detail}'


def python_files(root: Path, folders: Iterable[str]) -> List[Path]:
    out: List[Path] = []
    for folder in folders:
        out += sorted(p for p in (root / folder).rglob('*.py') if '__pycache__' not in p.parts)
    return out


def rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` in ``module`` names, a relative one resolved."""
    base = node.module or ''
    if node.level:
        parts = module.split('.')
        anchor = parts[:len(parts) - node.level + is_package]
        base = '.'.join(anchor + ([base] if base else []))
    return base


def imports(tree: ast.Module, module: str, is_package: bool) -> Iterator[Tuple[str, int]]:
    """(dotted name, line) of every import anywhere in ``tree``: at top level, in functions,
    under ``TYPE_CHECKING``; ``from a import b`` gives ``a.b``; ``importlib.import_module`` and
    ``__import__`` of a literal name count too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = absolute(module, is_package, node)
            for alias in node.names:
                yield (f'{base}.{alias.name}' if base else alias.name), node.lineno
        elif isinstance(node, ast.Call) and node.args and \
                isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str) \
                and not node.args[0].value.startswith('.') and \
                ((isinstance(node.func, ast.Name) and node.func.id == '__import__') or
                 (isinstance(node.func, ast.Attribute) and node.func.attr == 'import_module')):
            yield node.args[0].value, node.lineno


def long_lines(root: Path, folders: Sequence[str], limit: int = MAX_LINE) -> List[Violation]:
    out = []
    for path in python_files(root, folders):
        for number, line in enumerate(path.read_text().split('\n'), 1):
            if len(line) > limit:
                out.append(Violation(rel(root, path), number, f'line over {limit} characters',
                                     f'{len(line)} characters'))
    return out


def long_files(root: Path, folders: Sequence[str],
               limit: int = MAX_FILE_LINES) -> List[Violation]:
    out = []
    for path in python_files(root, folders):
        count = len(path.read_text().splitlines())
        if count >= limit:
            out.append(Violation(rel(root, path), limit, f'file of {limit} lines or more',
                                 f'{count} lines: split it by concern'))
    return out


def is_ros(name: str) -> bool:
    """Whether the dotted module name is ROS: rclpy, generated messages, launch, ament, ...,
    or the package's own ROS side (sam2_ros.ros, its messages and services)."""
    top = name.split('.')[0]
    return (top in ROS_PACKAGES or top.startswith(ROS_PREFIXES) or top.endswith(ROS_SUFFIXES)
            or any(name == own or name.startswith(own + '.') for own in OWN_ROS))


def ros_free_files(root: Path) -> List[Path]:
    """The files that must run without ROS, found by folder so that new modules count."""
    top = sorted((root / 'sam2_ros').glob('*.py'))
    extra = [root / p for p in ROS_FREE_EXTRA if (root / p).is_file()]
    return top + python_files(root, ROS_FREE_FOLDERS) + extra


def ros_imports(root: Path) -> List[Violation]:
    """ROS imports in the ROS-free files, anywhere in their body (functions included), and the
    imports there of other project modules that reach ROS, however deep (reported at the import
    that leaves the ROS-free parts, with the ROS import it leads to)."""
    files = {module_name(root, p): p for p in python_files(root, PACKAGES)}
    roots = [module_name(root, p) for p in ros_free_files(root)]
    edges: Dict[str, List[Tuple[str, int, str]]] = {}

    def owner(name: str) -> str:
        while name and name not in files:
            name = name.rpartition('.')[0]
        return name

    def imports_of(module: str) -> List[Tuple[str, int, str]]:
        """(imported name, line, project module it runs); line 1 for the module's packages."""
        if module not in edges:
            path, parts = files[module], module.split('.')
            edges[module] = [('.'.join(parts[:i]), 1, '.'.join(parts[:i]))
                             for i in range(1, len(parts))]
            edges[module] += [(name, line, owner(name)) for name, line in
                              imports(parse(path), module, path.name == '__init__.py')]
        return edges[module]

    found: Dict[Tuple[str, int], str] = {}
    for start in roots:
        where = rel(root, files[start])
        stack: List[Tuple[str, Optional[Tuple[int, str]]]] = [(start, None)]
        seen = {start}
        while stack:
            module, hop = stack.pop()     # hop: (line, module) of start's import that led here
            for name, line, target in imports_of(module):
                if is_ros(name) and hop is None:
                    found[(where, line)] = f'imports {name}'
                elif is_ros(name):
                    found.setdefault((where, hop[0]), f'imports {hop[1]}, which reaches ROS: '
                                     f'{rel(root, files[module])}:{line} imports {name}')
                elif target in files and target not in roots and target not in seen:
                    seen.add(target)
                    stack.append((target, hop or (line, target)))
    return [Violation(path, line, 'ROS import in the ROS-free parts', detail)
            for (path, line), detail in sorted(found.items())]


def is_private(name: str) -> bool:
    return name.startswith('_') and not (name.startswith('__') and name.endswith('__'))


def defined_names(tree: ast.Module) -> Set[str]:
    """The private names a module gives to something reachable as ``obj._x``: module- and
    class-level names (def, class, assignment), ``self._x`` / ``cls._x`` stores, and
    ``setattr`` / ``__setattr__`` with a literal name. Function locals do not count."""
    out: Set[str] = set()

    def visit(node: ast.AST, names_count: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if names_count:
                    out.add(child.name)
                visit(child, isinstance(child, ast.ClassDef))
                continue
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store) and names_count:
                out.add(child.id)
            elif isinstance(child, ast.Attribute) and isinstance(child.ctx, ast.Store) and \
                    isinstance(child.value, ast.Name) and child.value.id in ('self', 'cls'):
                out.add(child.attr)
            elif isinstance(child, ast.Call):
                out.update(set_names(child))
            visit(child, names_count and not isinstance(child, ast.Lambda))
    visit(tree, True)
    return {name for name in out if is_private(name)}


def set_names(node: ast.Call) -> Set[str]:
    """The literal name ``setattr(obj, 'x', v)``, ``object.__setattr__(obj, 'x', v)`` or
    ``super().__setattr__('x', v)`` sets, if the call is one of those."""
    func = node.func
    if isinstance(func, ast.Name) and func.id == 'setattr' or \
            isinstance(func, ast.Attribute) and func.attr == '__setattr__':
        return {a.value for a in node.args[:2]
                if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return set()


def literal_attribute(node: ast.Call) -> Optional[Tuple[ast.expr, str]]:
    """(obj, 'x') of ``getattr(obj, 'x')``, ``setattr``, ``hasattr``, ``delattr``; else None."""
    if isinstance(node.func, ast.Name) and \
            node.func.id in ('getattr', 'setattr', 'hasattr', 'delattr') and \
            len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and \
            isinstance(node.args[1].value, str):
        return node.args[0], node.args[1].value
    return None


def upstream_private_names() -> Set[str]:
    """Private names that sam2 and torch's ``nn.Module`` define, read from their installed
    source (not imported): the project may reach into those."""
    sources: List[Path] = []
    sam2 = importlib.util.find_spec('sam2')
    for location in (sam2.submodule_search_locations or []) if sam2 else []:
        sources += sorted(Path(location).rglob('*.py'))
    torch = importlib.util.find_spec('torch')
    if torch is not None and torch.origin:
        sources.append(Path(torch.origin).parent / 'nn' / 'modules' / 'module.py')
    names: Set[str] = set()
    for path in sources:
        names |= set(re.findall(r'(?:def |self\.|[\'"])(_[A-Za-z]\w*)', path.read_text()))
    return names


def private_uses(root: Path, folders: Sequence[str], upstream: Set[str]) -> List[Violation]:
    """Uses of another project module's private name in ``folders``: ``from m import _x``, and
    ``obj._x`` / ``getattr(obj, '_x')`` (obj not self or cls) where ``_x`` is defined only in
    other project modules and is not one of ``upstream``'s (torch, sam2)."""
    owners: Dict[str, Set[str]] = defaultdict(set)
    for path in python_files(root, PROJECT):
        for name in defined_names(parse(path)):
            owners[name].add(module_name(root, path))
    rule = "another module's private name"

    def foreign(module: str, obj: ast.expr, name: str) -> bool:
        return is_private(name) and not (isinstance(obj, ast.Name) and obj.id in ('self', 'cls')) \
            and bool(owners.get(name)) and module not in owners[name] and name not in upstream

    out = []
    for path in python_files(root, folders):
        module, where = module_name(root, path), rel(root, path)
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ImportFrom):
                base = absolute(module, path.name == '__init__.py', node)
                if base.split('.')[0] in PACKAGES and base != module:
                    out += [Violation(where, node.lineno, rule, f'from {base} import {a.name}')
                            for a in node.names if is_private(a.name)]
            elif isinstance(node, ast.Import):
                out += [Violation(where, node.lineno, rule, f'import {a.name}')
                        for a in node.names if a.name.split('.')[0] in PACKAGES and
                        any(is_private(part) for part in a.name.split('.'))]
            elif isinstance(node, ast.Attribute) and foreign(module, node.value, node.attr):
                out.append(Violation(where, node.lineno, rule,
                                     f'{ast.unparse(node.value)}.{node.attr} (defined in '
                                     f'{", ".join(sorted(owners[node.attr]))})'))
            elif isinstance(node, ast.Call) and literal_attribute(node) is not None:
                obj, name = literal_attribute(node)
                if foreign(module, obj, name):
                    out.append(Violation(where, node.lineno, rule,
                                         f'{ast.unparse(node)} (defined in '
                                         f'{", ".join(sorted(owners[name]))})'))
    return out


def late_attributes(root: Path, folders: Sequence[str]) -> List[Violation]:
    """Instance attributes first assigned outside ``__init__`` (architecture_classes)."""
    files = python_files(root, folders)
    trees = {rel(root, p): parse(p) for p in files}
    return [Violation(path, line, 'attribute first assigned outside __init__', detail)
            for path, line, detail in architecture_classes.late_attributes(trees)]


def dotted(node: ast.expr) -> Optional[List[str]]:
    """``a.b.c`` as ['a', 'b', 'c'], or None for anything but names and attributes."""
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id] + parts[::-1] if isinstance(node, ast.Name) else None


def cuda_graph_uses(root: Path, folder: str = 'sam2_ros',
                    home: str = CUDA_GRAPH_HOME) -> List[Violation]:
    """Uses of torch's CUDA graph API (``torch.cuda.CUDAGraph``, ``torch.cuda.graph``, graph
    pools, ``make_graphed_callables``) in ``folder`` outside ``home``, imports and aliases of
    torch and torch.cuda followed."""
    def is_api(name: str) -> bool:
        parts = name.split('.')
        return parts[:2] == ['torch', 'cuda'] and len(parts) > 2 and parts[2] in CUDA_GRAPH_API

    rule = f'CUDA graph API outside {home}'
    out = []
    for path in python_files(root, [folder]):
        where = rel(root, path)
        if where.startswith(home):
            continue
        tree = parse(path)
        aliases: Dict[str, str] = {}
        found: Set[Tuple[int, str]] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name.split('.')[0]] = a.name if a.asname \
                        else a.name.split('.')[0]
                    if is_api(a.name):
                        found.add((node.lineno, a.name))
            elif isinstance(node, ast.ImportFrom):
                base = absolute(module_name(root, path), path.name == '__init__.py', node)
                for a in node.names:
                    aliases[a.asname or a.name] = f'{base}.{a.name}'
                    if is_api(f'{base}.{a.name}'):
                        found.add((node.lineno, f'{base}.{a.name}'))
        for node in ast.walk(tree):
            parts = dotted(node) if isinstance(node, ast.Attribute) else None
            if parts and parts[0] in aliases:
                name = '.'.join([aliases[parts[0]]] + parts[1:])
                if is_api(name) and len(name.split('.')) == 3:     # not torch.cuda.graph.x
                    found.add((node.lineno, name))
        out += [Violation(where, line, rule, f'uses {name}') for line, name in sorted(found)]
    return out
