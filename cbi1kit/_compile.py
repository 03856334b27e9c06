"""Compiled kernels' common ground: the decorators, byte loads and the keyed disk cache.

numba stamps a cached kernel with a hash of the file that defines it, but the kernels also
compile what they import (XXH3, the CBI1 layout, the rulebook, the relay constants, the
generated protobuf): ``keyed_cache`` stamps every kernel with a hash of all of
:data:`INLINED_SOURCES` and the numba and numpy versions, so an edit or an upgrade recompiles,
and names it by its place in the package, so every venv of a user shares one cache. Caching is
an optimisation, never a failure (docs/kernels.md says where the cache goes).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import stat
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Final, TypeVar, cast

import numba
import numpy as np
import platformdirs
from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    InTreeCacheLocator,
    UserProvidedCacheLocator,
    UserWideCacheLocator,
    _CacheLocator as CacheLocator,
)

_PACKAGE: Final = Path(__file__).resolve().parent
#: Every file whose code or constants the kernels compile, relative to the package.
INLINED_SOURCES: Final = (
    "_compile.py",
    "capture/_layout.py",
    "capture/_walk.py",
    "capture/_walk_kernel.py",
    "analysis/_kernels.py",
    "ckf/_kick.py",
    "analysis/_replay_kernels.py",
    "hashing/_c_xxh3.py",
    "wire/_format.py",
    "wire/_rules.py",
    "wire/_layout.py",
    "relay/_messages.py",
    "_proto/kvrelay_v1_pb2.py",
    "sim/_arrays.py",
    "sim/_caches.py",
    "sim/_kernel.py",
)

_F = TypeVar("_F")


@functools.cache
def sources_digest() -> str:
    """sha256 over the numba and numpy versions and the bytes of :data:`INLINED_SOURCES`."""
    h = hashlib.sha256(f"{numba.__version__} {np.__version__}".encode())
    for rel in INLINED_SOURCES:
        h.update(rel.encode() + b"\0" + (_PACKAGE / rel).read_bytes())
    return h.hexdigest()


def _keyed(base: type[CacheLocator]) -> type[CacheLocator]:
    class Keyed(base):  # type: ignore[misc]
        def get_source_stamp(self) -> Any:
            """The digest alone (it covers the defining file's bytes): no mtime, which differs
            between two installs of the same code."""
            return sources_digest()

        @classmethod
        def get_suitable_cache_subpath(cls, py_file: str) -> str:
            """A package module's place in the package (``cbi1kit-analysis``), the same in
            every venv; any other file numba's way (its folder's name and path hash)."""
            folder = Path(py_file).resolve().parent
            if folder.is_relative_to(_PACKAGE):
                return "-".join(("cbi1kit", *folder.relative_to(_PACKAGE).parts))
            return str(super().get_suitable_cache_subpath(py_file))

    Keyed.__name__ = f"Keyed{base.__name__}"
    return Keyed


def _user_id() -> int:
    return int(getattr(os, "getuid", lambda: 0)())


def _system_install(py_file: str) -> bool:
    """Root running a package root owns (a system-wide install, a container, CI): its kernels
    go beside the package, where every user then reads them (``_ReadOnlyInTreeLocator``)."""
    return _user_id() == 0 and Path(py_file).stat().st_uid == 0


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK)


class _SystemInTreeLocator(InTreeCacheLocator):  # type: ignore[misc]
    """The package's ``__pycache__``, written only in a system-wide install by root."""

    def ensure_cache_path(self) -> None:
        if not _system_install(self._py_file):
            raise PermissionError("kernels go beside the package only in a system install")
        super().ensure_cache_path()


class _UserCacheLocator(UserWideCacheLocator):  # type: ignore[misc]
    """The user's cache directory (platformdirs: ``~/.cache/cbi1kit/kernels`` on Linux),
    shared by every venv of this user, since an entry is named by its place in the package
    and stamped by the code's digest."""

    def __init__(self, py_func: Any, py_file: str) -> None:
        super().__init__(py_func, py_file)
        root = platformdirs.user_cache_dir("cbi1kit", appauthor=False)
        self._cache_path = os.path.join(root, "kernels", self.get_suitable_cache_subpath(py_file))


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
            or _writable(path)  # ours to write: not another user's kernels
            or not any(path.glob(ours))
        ):
            raise PermissionError(f"{path} holds no kernels this user may load")


class _KeyedImpl(CompileResultCacheImpl):  # type: ignore[misc]
    _locator_classes: ClassVar[list[type[CacheLocator]]] = [
        _keyed(cls)
        for cls in (
            UserProvidedCacheLocator,
            _SystemInTreeLocator,
            _ReadOnlyInTreeLocator,
            _UserCacheLocator,
            _TempDirLocator,
        )
    ]


class _KeyedCache(FunctionCache):  # type: ignore[misc]
    _impl_class = _KeyedImpl

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        """A cached kernel that cannot be read back (a damaged or unreadable entry) is a miss:
        numba compiles it again, and the first miss of a process says so."""
        try:
            loaded = super().load_overload(sig, target_context)
        except Exception:
            loaded = None
        if loaded is None:
            _announce(self._cache_path)
        return loaded

    def save_overload(self, sig: Any, data: Any) -> None:
        """A kernel that cannot be saved (the directory went away, a full disk) stays compiled
        in memory for this run."""
        with contextlib.suppress(Exception):
            super().save_overload(sig, data)


_announced: list[str] = []


def _announce(where: str) -> None:
    """Say once a process, on stderr (a notebook shows it under the cell), that the kernels
    are being compiled and where they are kept: the first run's pause explained."""
    if not _announced:
        _announced.append(where)
        print(
            f"cbi1kit: compiling its kernels for this machine, once (10-20 s); kept in {where}",
            file=sys.stderr,
            flush=True,
        )


def keyed_cache(dispatcher: _F) -> _F:
    """Give a numba dispatcher (``njit`` without ``cache=``) the keyed disk cache; without a
    usable cache directory it stays uncached."""
    # no writable directory (RuntimeError), or numba moved its internals: stay uncached
    with contextlib.suppress(Exception):
        dispatcher._cache = _KeyedCache(dispatcher.py_func)  # type: ignore[attr-defined]
    return dispatcher


_K = TypeVar("_K", bound=Callable[..., Any])


def kernel(f: _K) -> _K:
    """nopython, GIL released, no bounds checks (every index is checked in the code), cached
    under the key of :func:`keyed_cache`."""
    return cast(_K, keyed_cache(numba.njit(nogil=True, boundscheck=False)(f)))


def inline(f: _K) -> _K:
    """A helper of the kernels, compiled with its caller (LLVM inlines it where it pays; numba's
    IR-level inlining made the walk five times slower), with no reference counting: a helper
    allocates nothing, and counting each array it is passed cost more than its work."""
    return cast(_K, numba.njit(nogil=True, boundscheck=False, _nrt=False)(f))


def helper(f: _K) -> _K:
    """A helper of the kernels that counts references: one that takes a ``StructRef`` (whose
    fields are read with a reference each), compiled with its caller as ``inline``'s are."""
    return cast(_K, numba.njit(nogil=True, boundscheck=False)(f))


@inline
def le_u64(b: Any, i: Any) -> Any:
    """The little-endian u64 at ``b[i : i + 8]``, any alignment, on any host. An unsigned index
    (no wraparound code) lets LLVM merge the eight loads into one."""
    j = np.uint64(i)
    return (
        np.uint64(b[j])
        | np.uint64(b[j + np.uint64(1)]) << np.uint64(8)
        | np.uint64(b[j + np.uint64(2)]) << np.uint64(16)
        | np.uint64(b[j + np.uint64(3)]) << np.uint64(24)
        | np.uint64(b[j + np.uint64(4)]) << np.uint64(32)
        | np.uint64(b[j + np.uint64(5)]) << np.uint64(40)
        | np.uint64(b[j + np.uint64(6)]) << np.uint64(48)
        | np.uint64(b[j + np.uint64(7)]) << np.uint64(56)
    )


@inline
def le_u32(b: Any, i: Any) -> Any:
    """The little-endian u32 at ``b[i : i + 4]`` as a u64 (unsigned index, as ``le_u64``)."""
    j = np.uint64(i)
    return (
        np.uint64(b[j])
        | np.uint64(b[j + np.uint64(1)]) << np.uint64(8)
        | np.uint64(b[j + np.uint64(2)]) << np.uint64(16)
        | np.uint64(b[j + np.uint64(3)]) << np.uint64(24)
    )
