"""Module surgery for the fused model copy: shallow copies with some submodules replaced."""

from __future__ import annotations

import copy

import torch


def with_children(module: torch.nn.Module, **children: torch.nn.Module) -> torch.nn.Module:
    """A shallow copy of ``module`` (shares every parameter) with the named submodules
    replaced; ``module`` is unchanged."""
    twin = copy.copy(module)
    twin._modules = dict(module._modules)    # a shallow copy shares the dict: give it its own
    for name, child in children.items():
        twin._modules[name] = child
    return twin
