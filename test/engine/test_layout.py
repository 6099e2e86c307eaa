"""The package's shape: no import circle between its modules and no file over 400 lines.

A circle counts however it is hidden: imports inside functions and under ``TYPE_CHECKING``
are edges too (they couple the modules as much as top-level ones, and an import inside a
function is the usual way to paper over a circle). Modules are parsed, not imported, so the
test needs neither torch nor ROS.
"""

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[2] / 'sam2_ros'
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = ('sam2_ros', *path.relative_to(PACKAGE).with_suffix('').parts)
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def modules() -> Dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob('*.py'))}


def imported(path: Path, name: str, known: Set[str]) -> Set[str]:
    """The sam2_ros modules ``path`` (module ``name``) imports anywhere in its body: at top
    level, inside functions, under ``if TYPE_CHECKING``, relative or absolute. ``from pkg
    import x`` is an edge to pkg.x when that is a module, else to pkg."""
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


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import circle as [a, b, ..., a], or [] when the graph is acyclic."""
    state: Dict[str, int] = {}          # 1: on the current path, 2: done
    path: List[str] = []

    def visit(n: str) -> List[str]:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = 2
        path.pop()
        return []
    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return []


def import_graph() -> Dict[str, Set[str]]:
    mods = modules()
    known = set(mods)
    return {n: imported(p, n, known) for n, p in mods.items()}


def test_no_import_circle():
    graph = import_graph()
    assert 'sam2_ros.engine.cuda.runner' in graph['sam2_ros.engine.tracker']   # in a function
    assert find_cycle(graph) == [], ' -> '.join(find_cycle(graph))


def test_cycle_finder_sees_hidden_edges(tmp_path):
    """The parser counts function-level and TYPE_CHECKING imports, relative ones too, and the
    finder reports a circle through them."""
    pkg = tmp_path / 'p'
    pkg.mkdir()
    (pkg / '__init__.py').write_text('')
    (pkg / 'a.py').write_text('from typing import TYPE_CHECKING\n'
                              'if TYPE_CHECKING:\n    from p.b import B\n')
    (pkg / 'b.py').write_text('def f():\n    from . import c\n')
    (pkg / 'c.py').write_text('import p.a\n')
    mods = {f'p.{m}': pkg / f'{m}.py' for m in 'abc'}
    graph = {n: imported(path, n, set(mods)) for n, path in mods.items()}
    assert graph == {'p.a': {'p.b'}, 'p.b': {'p.c'}, 'p.c': {'p.a'}}
    assert find_cycle(graph) == ['p.a', 'p.b', 'p.c', 'p.a']
    assert find_cycle({'p.a': {'p.b'}, 'p.b': set()}) == []


def test_no_file_over_400_lines():
    long = {p.relative_to(PACKAGE).as_posix(): n for p in PACKAGE.rglob('*.py')
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long
