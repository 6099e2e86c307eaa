"""Modules imported while a node streams: each one ran module code holding Python's GIL.

Why: an import on a live node (a library's lazy import on a first call, a first diagnostics
tick, a first click) runs its module's code, and compiles it when no bytecode cache exists,
holding the GIL meanwhile: every thread waits, frames in flight are late. A benchmark traced
a one-off wait of both cameras' frames to numpy importing ``numpy.ma`` on the node's first
diagnostics tick (docs/performance.md, the stall tracer). The node imports what it needs at
configure; this watch names what still slips through: :meth:`LateImports.arm` at activation,
:meth:`LateImports.take` on each diagnostics tick (logged by name, and counted in the
diagnostics' ``late_imports``).
"""

from __future__ import annotations

import sys
from typing import List, Optional, Set


class LateImports:
    """Names of the modules imported since :meth:`arm` (each reported once)."""

    def __init__(self) -> None:
        self.known: Optional[Set[str]] = None     # None: not armed
        self.count = 0      # modules imported since arm (the diagnostics' late_imports)

    def arm(self) -> None:
        self.known = set(sys.modules)

    def take(self) -> List[str]:
        """The modules imported since the last call (or arm), sorted; [] when not armed."""
        if self.known is None:
            return []
        new = sorted(set(sys.modules) - self.known)
        self.known.update(new)
        self.count += len(new)
        return new

    @staticmethod
    def describe(names: List[str]) -> str:
        shown = ', '.join(names[:12]) + (f' and {len(names) - 12} more' if len(names) > 12 else '')
        return (f'{len(names)} module(s) imported while streaming (each held the GIL while its '
                f'code ran: frames in flight may have been late): {shown}')
