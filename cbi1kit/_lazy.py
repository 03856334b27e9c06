"""Lazily loaded names for a stage's ``__init__``: modules that import altair or grpc load on
first use, so ``import cbi1kit`` and every CLI call do not pay a second for them."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_names(module: str, names: Iterable[str]) -> dict[str, str]:
    """``{name: module}`` for each of ``names``, to merge into a package's lazy table."""
    return dict.fromkeys(names, module)


def lazy_getattr(package: str, lazy: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``package.<lazy[name]>`` on first
    use of ``name`` and keeps the value, so the next lookup is a plain attribute."""

    def __getattr__(name: str) -> Any:
        module = lazy.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
