"""Where classes first assign their instance attributes, by parsing: the checker behind the rule
that every attribute is set in ``__init__`` (architecture_rules.late_attributes runs it).

Declared are: ``self.x`` stores in ``__init__``, class-level names (dataclass fields, class
attributes, annotations), ``__slots__``, properties, and the same of the class's bases that are
defined in the parsed files (by name). A store to ``self.x`` (or ``setattr(self, 'x', ...)``) in
any other method of an undeclared ``x`` is a violation; in a dataclass's ``__post_init__`` too
(make it a field, ``field(init=False)``). Static methods, class methods and ``__new__`` have no
instance to store on.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Set, Tuple

PROPERTIES = ('property', 'cached_property', 'functools.cached_property')
NO_INSTANCE = ('staticmethod', 'classmethod')
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def first_arg(fn: ast.AST) -> Optional[str]:
    args = fn.args.posonlyargs + fn.args.args
    return args[0].arg if args else None


def self_stores(fn: ast.AST) -> List[Tuple[str, int]]:
    """(name, line) of the stores on the method's first argument, in line order (nested
    functions included, nested classes not)."""
    me = first_arg(fn)
    out: List[Tuple[str, int]] = []
    stack = list(fn.body)
    while me is not None and stack:
        node = stack.pop()
        if isinstance(node, ast.ClassDef):
            continue
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                isinstance(node.value, ast.Name) and node.value.id == me:
            out.append((node.attr, node.lineno))
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and \
                isinstance(node.args[0], ast.Name) and node.args[0].id == me and \
                isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) \
                and ((isinstance(node.func, ast.Name) and node.func.id == 'setattr') or
                     (isinstance(node.func, ast.Attribute) and node.func.attr == '__setattr__')):
            out.append((node.args[1].value, node.lineno))
        stack.extend(ast.iter_child_nodes(node))
    return sorted(out, key=lambda store: store[1])


def decorators(fn: ast.AST) -> List[str]:
    return [ast.unparse(d) for d in fn.decorator_list]


def is_dataclass(cls: ast.ClassDef) -> bool:
    return any('dataclass' in d for d in decorators(cls))


def own_declared(cls: ast.ClassDef) -> Set[str]:
    out: Set[str] = set()
    for statement in cls.body:
        if isinstance(statement, ast.Assign):
            for target in statement.targets:
                out |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
                if isinstance(target, ast.Name) and target.id == '__slots__':
                    out |= {c.value for c in ast.walk(statement.value)
                            if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            out.add(statement.target.id)
        elif isinstance(statement, FUNCTIONS):
            if any(d in PROPERTIES or d.endswith('.setter') for d in decorators(statement)):
                out.add(statement.name)
            if statement.name == '__init__':
                out |= {name for name, _ in self_stores(statement)}
    return out


def declared(cls: ast.ClassDef, classes: Dict[str, List[ast.ClassDef]],
             seen: Sequence[str] = ()) -> Set[str]:
    out = own_declared(cls)
    for base in cls.bases:
        name = ast.unparse(base).split('[')[0].split('.')[-1]
        if name not in seen:
            for base_cls in classes.get(name, ()):
                out |= declared(base_cls, classes, (*seen, cls.name))
    return out


def late_attributes(trees: Dict[str, ast.Module]) -> List[Tuple[str, int, str]]:
    """(path, line, what) for each attribute a class first assigns outside ``__init__``, at its
    first such store; ``trees`` maps paths to parsed files."""
    classes: Dict[str, List[ast.ClassDef]] = defaultdict(list)
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name].append(node)
    out = []
    for path, tree in trees.items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            known = declared(cls, classes)
            for method in (s for s in cls.body if isinstance(s, FUNCTIONS)):
                if method.name in ('__init__', '__new__') or \
                        any(d in NO_INSTANCE for d in decorators(method)):
                    continue
                for name, line in self_stores(method):
                    if name in known:
                        continue
                    known.add(name)            # report an attribute once, at its first store
                    where = f'{cls.name}.{name} first assigned in {method.name}()'
                    if method.name == '__post_init__' and is_dataclass(cls):
                        where += ': make it a field (field(init=False))'
                    else:
                        where += ': assign it in __init__'
                    out.append((path, line, where))
    return out
