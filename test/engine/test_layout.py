"""The package's shape: no import circle between its modules (the other layout rules, file
and line sizes among them, are in test/test_architecture.py).

A circle counts however it is hidden: imports inside functions and under ``TYPE_CHECKING``
are edges too (they couple the modules as much as top-level ones, and an import inside a
function is the usual way to paper over a circle). Modules are parsed, not imported, so the
test needs neither torch nor ROS.
"""

import ast
from pathlib import Path
from typing import Dict, FrozenSet, List, Set

PACKAGE = Path(__file__).resolve().parents[2] / 'sam2_ros'
# Circles that exist and are to be cut, each with the change that cuts it. The test fails on
# any other circle, and on one of these once it is gone (then delete its line).
KNOWN_CIRCLES: Set[FrozenSet[str]] = set()


def module_name(path: Path) -> str:
    parts = ('sam2_ros', *path.relative_to(PACKAGE).with_suffix('').parts)
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def modules() -> Dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob('*.py'))}


def imported(path: Path, name: str, known: Set[str]) -> Set[str]:
    """The modules of ``known`` that ``path`` (module ``name``) imports anywhere in its body:
    at top level, inside functions, under ``if TYPE_CHECKING``, relative or absolute.
    ``from pkg import x`` is an edge to pkg.x when that is a module, else to pkg."""
    is_pkg = path.name == '__init__.py'
    out: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = name.split('.')[:len(name.split('.')) - node.level + is_pkg]
                base = '.'.join(anchor + ([base] if base else []))
            targets = [f'{base}.{a.name}' if f'{base}.{a.name}' in known else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:        # 'sam2_ros.engine.step.Memory' -> the module
                t = t.rpartition('.')[0]
            if t and t != name:
                out.add(t)
    return out


def circles(graph: Dict[str, Set[str]]) -> Set[FrozenSet[str]]:
    """The groups of modules that import each other through a circle (the strongly connected
    components of more than one module; Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    found: Set[FrozenSet[str]] = set()

    def visit(n: str) -> None:
        index[n] = low[n] = len(index)
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in stack:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            group = []
            while not group or group[-1] != n:
                group.append(stack.pop())
            if len(group) > 1:
                found.add(frozenset(group))
    for n in sorted(graph):
        if n not in index:
            visit(n)
    return found


def import_graph() -> Dict[str, Set[str]]:
    mods = modules()
    return {n: imported(p, n, set(mods)) for n, p in mods.items()}


def test_no_import_circle():
    graph = import_graph()
    assert 'sam2_ros.engine.cuda.runner' in graph['sam2_ros.engine.runners']   # in a function
    found = circles(graph)
    assert not found - KNOWN_CIRCLES, f'new import circles: {found - KNOWN_CIRCLES}'
    assert not KNOWN_CIRCLES - found, f'cut, delete from KNOWN_CIRCLES: {KNOWN_CIRCLES - found}'


def test_circle_finder_sees_hidden_edges(tmp_path):
    """The parser counts function-level and TYPE_CHECKING imports, relative ones too, and the
    finder reports a circle through them."""
    pkg = tmp_path / 'p'
    pkg.mkdir()
    (pkg / '__init__.py').write_text('')
    (pkg / 'a.py').write_text('from typing import TYPE_CHECKING\n'
                              'if TYPE_CHECKING:\n    from p.b import B\n')
    (pkg / 'b.py').write_text('def f():\n    from . import c\n')
    (pkg / 'c.py').write_text('import p.a\n')
    (pkg / 'd.py').write_text('from p import a\n')
    mods = {f'p.{m}': pkg / f'{m}.py' for m in 'abcd'}
    graph = {n: imported(path, n, set(mods)) for n, path in mods.items()}
    assert graph == {'p.a': {'p.b'}, 'p.b': {'p.c'}, 'p.c': {'p.a'}, 'p.d': {'p.a'}}
    assert circles(graph) == {frozenset({'p.a', 'p.b', 'p.c'})}
    assert circles({'p.a': {'p.b'}, 'p.b': set()}) == set()
