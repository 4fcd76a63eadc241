"""Module attributes imported on first use (PEP 562), so that importing a package never pulls torch or Ray."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_getattr(namespace: dict[str, Any], table: dict[str, str], owner: str) -> Callable[[str], object]:
    """A module ``__getattr__`` resolving ``name`` from the module ``table[name]`` once, then caching it."""

    def __getattr__(name: str) -> object:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {owner!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
