"""numba's disk cache for the frames-table kernels, keyed on every source they compile.

numba stamps a cached kernel with a hash of the file that defines it. The kernels of
:mod:`cbi1kit.analysis._kernels` also compile what they import: XXH3's constants and functions
(``hashing/_xxh3.py``), the CBI1 constants (``wire/_format.py``) and the rule numbering
(``wire/_rules.py``); numba freezes those into the machine code. ``keyed_cache`` gives a kernel a
cache whose stamp hashes all of :data:`INLINED_SOURCES` (and the numba version), so that editing
any of them, or upgrading numba, recompiles instead of loading stale code.

Caching is an optimisation: when no cache directory can be used, the kernel compiles in memory
on every run rather than failing.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Any, ClassVar, Final, TypeVar

import numba
from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    InTreeCacheLocator,
    UserProvidedCacheLocator,
    UserWideCacheLocator,
)
from numba.core.caching import _CacheLocator as CacheLocator

__all__ = ["INLINED_SOURCES", "keyed_cache", "sources_digest"]

_PACKAGE: Final = Path(__file__).resolve().parent.parent
#: Every file whose code or constants the kernels compile, relative to the package.
INLINED_SOURCES: Final = (
    "analysis/_kernels.py",
    "hashing/_xxh3.py",
    "wire/_format.py",
    "wire/_rules.py",
)

_F = TypeVar("_F")


def sources_digest() -> str:
    """sha256 over the numba version and the bytes of :data:`INLINED_SOURCES`."""
    h = hashlib.sha256(numba.__version__.encode())
    for rel in INLINED_SOURCES:
        h.update(rel.encode() + b"\0" + (_PACKAGE / rel).read_bytes())
    return h.hexdigest()


def _keyed(base: type[CacheLocator]) -> type[CacheLocator]:
    class Keyed(base):  # type: ignore[misc]
        def get_source_stamp(self) -> Any:
            return (super().get_source_stamp(), sources_digest())

    Keyed.__name__ = f"Keyed{base.__name__}"
    return Keyed


class _KeyedImpl(CompileResultCacheImpl):  # type: ignore[misc]
    _locator_classes: ClassVar[list[type[CacheLocator]]] = [
        _keyed(cls) for cls in (UserProvidedCacheLocator, InTreeCacheLocator, UserWideCacheLocator)
    ]


class _KeyedCache(FunctionCache):  # type: ignore[misc]
    _impl_class = _KeyedImpl


def keyed_cache(dispatcher: _F) -> _F:
    """Give a numba dispatcher (``njit`` without ``cache=``) the keyed disk cache; without a
    usable cache directory it stays uncached."""
    # no writable directory (RuntimeError), or numba moved its internals: stay uncached
    with contextlib.suppress(Exception):
        dispatcher._cache = _KeyedCache(dispatcher.py_func)  # type: ignore[attr-defined]
    return dispatcher
