"""Memory a benchmarked variant holds, counted from its objects (no allocator needed).

Why: the allocator's peak (``torch.cuda.max_memory_allocated``) says how much, not whose. This
walks what a variant keeps alive (modules, dataclasses, dicts, lists, closures) and adds up the
distinct tensor storages on one device, so a second copy of the weights or of sam2's
positional-encoding caches shows up, on the CPU as on the GPU. ``held_bytes(a, b) ==
held_bytes(a)`` says ``b`` holds nothing ``a`` does not.
"""

from __future__ import annotations

import types
from typing import Any, Dict, Optional, Tuple

# Objects never walked into: code, classes and modules hold no tensors of a variant.
_SKIP = (type, types.ModuleType, types.BuiltinFunctionType, types.CodeType, str, bytes,
         int, float, bool, complex, type(None))
MAX_DEPTH = 64


def storages(*roots: Any, device: Optional[str] = None) -> Dict[Tuple[str, int], int]:
    """{(device, storage address): bytes} of every tensor reachable from ``roots`` (on
    ``device``'s type when given: 'cuda' or 'cpu')."""
    import torch
    seen, out = set(), {}
    stack = [(r, 0) for r in roots]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, _SKIP) or id(obj) in seen or depth > MAX_DEPTH:
            continue
        seen.add(id(obj))
        if torch.is_tensor(obj):
            if obj.device.type == 'meta' or (device and obj.device.type != device):
                continue
            st = obj.untyped_storage()
            out[(str(obj.device), st.data_ptr())] = st.nbytes()
            continue
        stack.extend((c, depth + 1) for c in _children(obj))
    return out


def held_bytes(*roots: Any, device: Optional[str] = None) -> int:
    """Bytes of the distinct tensor storages reachable from ``roots``."""
    return sum(storages(*roots, device=device).values())


def _children(obj: Any):
    if isinstance(obj, dict):
        return list(obj.keys()) + list(obj.values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    if isinstance(obj, types.FunctionType):
        return [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
    if isinstance(obj, types.MethodType):
        return [obj.__self__]
    d = getattr(obj, '__dict__', None)
    names = getattr(type(obj), '__slots__', ())
    names = (names,) if isinstance(names, str) else names
    slots = [getattr(obj, s) for s in names if hasattr(obj, s)]
    return (list(d.values()) if isinstance(d, dict) else []) + slots


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:        # an empty cell
        return False
    return True
