"""Names loaded on first use, for the front door and every stage's ``__init__``: ``import
cbi1kit`` and ``cbi1kit --help`` load no numpy, polars, pyarrow, grpc or altair until a name
needs them (a cold start within 0.15 s)."""

from __future__ import annotations

import ast
import functools
import importlib
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Final


def attach(
    package: str, init_file: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package``: its public names are the
    imports of the ``if TYPE_CHECKING:`` block of its ``__init__`` (``init_file``), each loaded on
    first use, so a name is stated once. Unlike lazy_loader's ``attach_stub``, keeps ``as`` names
    (``open_capture as open``). See docs/api.md."""
    where = _type_checking_imports(package, Path(init_file).read_text())

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = where[name]
        loaded = importlib.import_module(module)
        value = loaded if attribute is None else getattr(loaded, attribute)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:  # the public names and the dunders, not the helpers
        return sorted({*where, *(n for n in vars(sys.modules[package]) if n.startswith("__"))})

    return __getattr__, __dir__, list(where)


def _type_checking_imports(package: str, source: str) -> dict[str, tuple[str, str | None]]:
    """Each name the ``if TYPE_CHECKING:`` block imports: the module it comes from and its
    attribute there (None for a subpackage of ``package`` itself)."""
    where: dict[str, tuple[str, str | None]] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"):
            continue
        for stmt in node.body:
            if not isinstance(stmt, ast.ImportFrom) or stmt.module is None:
                raise TypeError(f"{package}: only `from X import a as b` lists a public name")
            for alias in stmt.names:
                public = alias.asname or alias.name
                if stmt.module == package:  # `from cbi1kit import wire as wire`: a subpackage
                    where[public] = (f"{package}.{alias.name}", None)
                else:
                    where[public] = (stmt.module, alias.name)
    return where


#: below this many bytes of input the reference engines finish before the kernels would even
#: load in a new process (~0.5 s from the cache; 5-15 s to compile into an empty one), so an
#: ``auto`` engine runs them there (docs/kernels.md); ``CBI1KIT_SMALL_INPUT=0``: always compile
_SMALL: Final = os.environ.get("CBI1KIT_SMALL_INPUT", "").strip()
SMALL_INPUT: Final = int(_SMALL) if _SMALL.isdigit() else 4 << 20
_LOADED: set[str] = set()  # the kernel modules ``compiled`` has handed out in this process


def worth_compiling(module: str, size: int | None) -> bool:
    """Whether ``size`` bytes of input (None: unknown, or still growing) pay for ``module``'s
    kernels: this process runs them already, or the input is not small."""
    return module in _LOADED or size is None or size >= SMALL_INPUT


def kernels_for(module: str, engine: str, size: int | None) -> ModuleType | None:
    """``module``'s kernels where ``engine`` runs them (``compiled``; ``auto`` where ``size``
    bytes pay for them) and they load; None where the reference engine runs."""
    if engine == "reference" or (engine == "auto" and not worth_compiling(module, size)):
        return None
    return compiled(module)


@functools.cache
def compiled(module: str) -> ModuleType | None:
    """The compiled kernels' ``module``, or None where numba (or the xxHash library it calls)
    cannot load: then the reference engines run, and one warning says why. Anything else that
    goes wrong in a kernel module is a bug, and raised."""
    try:
        import numba  # noqa: F401

        kernels = importlib.import_module(module)
    except ImportError as exc:  # numba, llvmlite, or python-xxhash's C library (_c_xxh3)
        warnings.warn(
            f"cbi1kit runs without its compiled kernels ({exc}): the reference engines, slower",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    _LOADED.add(module)
    return kernels
