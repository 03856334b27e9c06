"""numba's disk cache for the frames-table and replay kernels, keyed on every source they compile.

numba stamps a cached kernel with a hash of the file that defines it. The kernels of
:mod:`cbi1kit.analysis._kernels` and :mod:`cbi1kit.analysis._replay_kernels` also compile what
they import: XXH3's constants and functions (``hashing/_xxh3.py``), the CBI1 constants
(``wire/_format.py``) and byte layout (``wire/_layout.py``), the rule numbering
(``wire/_rules.py``), the relay contract's constants (``relay/_messages.py``) and the protobuf
field numbers and enum values (``_proto/kvrelay_v1_pb2.py``); numba freezes those into the
machine code. ``keyed_cache`` gives a kernel a
cache whose stamp hashes all of :data:`INLINED_SOURCES` (and the numba version), so that editing
any of them, or upgrading numba, recompiles instead of loading stale code.

Caching is an optimisation, and never a failure. The cache goes where numba would put it
(``NUMBA_CACHE_DIR``, the package's ``__pycache__``, the user's cache directory; a package's
``__pycache__`` that this user cannot write but that holds its kernels is read) or, when none of
those is writable (a service account with a read-only package and home), in a directory of the
user's own under the temporary directory; with none at all the kernels compile in memory on
every run. An entry that cannot be read (damaged, half written, not ours) is a miss, and one that
cannot be written leaves the kernel compiled for this run only.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
import tempfile
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
    "analysis/_replay_kernels.py",
    "hashing/_xxh3.py",
    "hashing/_c_xxh3.py",
    "wire/_format.py",
    "wire/_rules.py",
    "wire/_layout.py",
    "relay/_messages.py",
    "_proto/kvrelay_v1_pb2.py",
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


def _user_id() -> int:
    return int(getattr(os, "getuid", lambda: 0)())


class _TempDirLocator(UserWideCacheLocator):  # type: ignore[misc]
    """``<temp dir>/cbi1kit-kernels-<uid>``: the last resort before compiling every run. The
    directory is made ``0700`` and used only while it is this user's and no one else can write
    to it, since a cache entry is unpickled: it must be ours."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        super().__init__(py_func, py_file)
        self._root = os.path.join(tempfile.gettempdir(), f"cbi1kit-kernels-{_user_id()}")
        self._cache_path = os.path.join(self._root, self.get_suitable_cache_subpath(py_file))

    def ensure_cache_path(self) -> None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(self._root, 0o700)
        st = os.lstat(self._root)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != _user_id() or st.st_mode & 0o022:
            raise PermissionError(f"{self._root} is not a private directory of this user")
        super().ensure_cache_path()


class _ReadOnlyInTreeLocator(InTreeCacheLocator):  # type: ignore[misc]
    """The package's ``__pycache__`` where this user cannot write it but it holds the kernels
    ``make`` compiled for this Python (a package installed by another user, such as root):
    read, never written. Only a real directory that root or the package's owner owns and no
    one else can write: a cache entry is unpickled (as trusted as the ``.pyc`` files beside
    it). A kernel missing there, or stale, is compiled for the run (without this, every other
    user compiled every kernel once, 33 s, before a first answer)."""

    def ensure_cache_path(self) -> None:
        path = Path(self.get_cache_path())
        st = path.lstat()  # OSError (none there): the next locator
        owners = {0, Path(self._py_file).stat().st_uid}  # root, or who installed the package
        ours = f"{Path(self._py_file).stem}.*.py{sys.version_info[0]}{sys.version_info[1]}.nbi"
        if (
            not stat.S_ISDIR(st.st_mode)  # not a link elsewhere
            or st.st_uid not in owners
            or st.st_mode & 0o022
            or not any(path.glob(ours))
        ):
            raise PermissionError(f"{path} holds no kernels this user may load")


class _KeyedImpl(CompileResultCacheImpl):  # type: ignore[misc]
    _locator_classes: ClassVar[list[type[CacheLocator]]] = [
        _keyed(cls)
        for cls in (
            UserProvidedCacheLocator,
            InTreeCacheLocator,
            _ReadOnlyInTreeLocator,
            UserWideCacheLocator,
            _TempDirLocator,
        )
    ]


class _KeyedCache(FunctionCache):  # type: ignore[misc]
    _impl_class = _KeyedImpl

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        """A cached kernel that cannot be read back (a damaged or unreadable entry) is a miss:
        numba compiles it again."""
        try:
            return super().load_overload(sig, target_context)
        except Exception:
            return None

    def save_overload(self, sig: Any, data: Any) -> None:
        """A kernel that cannot be saved (the directory went away, a full disk) stays compiled
        in memory for this run."""
        with contextlib.suppress(Exception):
            super().save_overload(sig, data)


def keyed_cache(dispatcher: _F) -> _F:
    """Give a numba dispatcher (``njit`` without ``cache=``) the keyed disk cache; without a
    usable cache directory it stays uncached."""
    # no writable directory (RuntimeError), or numba moved its internals: stay uncached
    with contextlib.suppress(Exception):
        dispatcher._cache = _KeyedCache(dispatcher.py_func)  # type: ignore[attr-defined]
    return dispatcher
