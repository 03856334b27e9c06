"""Names loaded on first use, for the front door and every stage's ``__init__``: ``import
cbi1kit`` and ``cbi1kit --help`` load no numpy, polars, pyarrow, grpc or altair until a name
needs them (a cold start within 0.15 s)."""

from __future__ import annotations

import functools
import importlib
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any


def lazy_getattr(
    package: str, lazy: Mapping[str, str], *, modules: Iterable[str] = ()
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``package.<lazy[name]>`` on first
    use of ``name`` (``module:attribute`` where the module spells it differently), or the
    submodule ``package.<name>`` for a name in ``modules``, and keeps the value, so the next
    lookup is a plain attribute."""
    submodules = frozenset(modules)

    def __getattr__(name: str) -> Any:
        if name in submodules:
            value: Any = importlib.import_module(f"{package}.{name}")
        else:
            where = lazy.get(name)
            if where is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            module, _, attribute = where.partition(":")
            value = getattr(importlib.import_module(f"{package}.{module}"), attribute or name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def lazy_stage(
    package: str, modules: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for a stage whose public surface is the ``__all__`` of
    its ``modules`` (in that order), none of them imported until a name is asked for.

    A name is looked for module by module, importing each in turn, so the stage's ``__init__``
    never restates a module's names; ``__all__`` itself is built on first use the same way.
    ``import cbi1kit.wire._format`` (what the CLI's parser needs) then costs that module alone.
    """
    pkg = sys.modules[package]

    def surface() -> list[str]:
        names: list[str] = []
        for module in modules:
            names += importlib.import_module(f"{package}.{module}").__all__
        return names

    def __getattr__(name: str) -> Any:
        if name == "__all__":
            value: Any = surface()
        elif name.startswith("_"):  # `from stage import _module` asks first: import nothing
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        else:
            for module in modules:
                loaded = importlib.import_module(f"{package}.{module}")
                if name in loaded.__all__:
                    value = getattr(loaded, name)
                    break
            else:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(pkg, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(__getattr__("__all__")) | set(vars(pkg)))

    return __getattr__, __dir__


@functools.cache
def compiled(module: str) -> ModuleType | None:
    """The compiled kernels' ``module``, or None where numba (or the xxHash library it calls)
    cannot load: then the reference engines run, and one warning says why. Anything else that
    goes wrong in a kernel module is a bug, and raised."""
    try:
        import numba  # noqa: F401

        return importlib.import_module(module)
    except ImportError as exc:  # numba, llvmlite, or python-xxhash's C library (_c_xxh3)
        warnings.warn(
            f"cbi1kit runs without its compiled kernels ({exc}): the reference engines, slower",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
