"""The cuckoo insert as one compiled kernel: both candidate buckets, then the kick walk.

The walk is sequential and runs up to ``max_kicks`` steps per failed insert, so an undersized
filter spends nearly all its time here (about 1.4 µs a kick in Python). :func:`insert_kernel`
compiles on first call, cached beside this file (the only source it compiles) or in memory.
:func:`insert_walk_reference` is its Python reference. Imported on the first insert, so
``import cbi1kit`` does not load numba.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Final

import numba
import numpy as np
import numpy.typing as npt

_SPLITMIX_INCREMENT: Final = 0x9E3779B97F4A7C15
_MIX1: Final = 0xBF58476D1CE4E5B9
_MIX2: Final = 0x94D049BB133111EB
_U64: Final = 0xFFFF_FFFF_FFFF_FFFF
_SLOT: Final = 0xFFFF

#: (n, state): n writes recorded (bucket, word before) in the scratch arrays, or -1 when the
#: walk failed and every write was rolled back; ``state`` is the RNG state after the insert.
InsertWalk = Callable[..., tuple[int, int]]


def insert_walk_reference(
    words: Any,
    delta: Any,
    fp: int,
    a: int,
    b: int,
    state: int,
    max_kicks: int,
    t_bucket: Any,
    t_before: Any,
) -> tuple[int, int]:
    """Upstream ``mutator.rs``'s insert over Python ints (see the module docstring)."""
    for bk in (a, b):
        w = int(words[bk])
        for i in range(4):
            if (w >> (16 * i)) & _SLOT == 0:
                t_bucket[0], t_before[0] = bk, w
                words[bk] = w | (fp << (16 * i))
                return 1, state
    state = (state + _SPLITMIX_INCREMENT) & _U64
    bk = a if _splitmix_out(state) & 1 == 0 else b
    f, n = fp, 0
    for _ in range(max_kicks):
        before = int(words[bk])
        state = (state + _SPLITMIX_INCREMENT) & _U64
        shift = 16 * (_splitmix_out(state) & 3)
        t_bucket[n], t_before[n] = bk, before
        n += 1
        words[bk] = (before & ~(_SLOT << shift) & _U64) | (f << shift)
        f = (before >> shift) & _SLOT
        bk ^= int(delta[f])
        w = int(words[bk])
        for i in range(4):
            if (w >> (16 * i)) & _SLOT == 0:
                t_bucket[n], t_before[n] = bk, w
                words[bk] = w | (f << (16 * i))
                return n + 1, state
    for k in range(n - 1, -1, -1):
        words[t_bucket[k]] = t_before[k]
    return -1, state


def _splitmix_out(z: int) -> int:
    z = ((z ^ (z >> 30)) * _MIX1) & _U64
    z = ((z ^ (z >> 27)) * _MIX2) & _U64
    return z ^ (z >> 31)


# -- the kernel: every operand a uint64, so nothing widens to float

_u64 = np.uint64
_INC, _M1, _M2 = _u64(_SPLITMIX_INCREMENT), _u64(_MIX1), _u64(_MIX2)
_SLOT64, _ZERO, _ONE, _THREE = _u64(_SLOT), _u64(0), _u64(1), _u64(3)
_S16, _S27, _S30, _S31 = _u64(16), _u64(27), _u64(30), _u64(31)


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _out(z: np.uint64) -> np.uint64:
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@numba.njit(nogil=True, inline="always")  # type: ignore[untyped-decorator]
def _free(w: np.uint64) -> int:
    for i in range(4):
        if (w >> (_S16 * _u64(i))) & _SLOT64 == _ZERO:
            return i
    return -1


def _walk(
    words: npt.NDArray[np.uint64],
    delta: npt.NDArray[np.uint64],
    fp: np.uint64,
    a: np.int64,
    b: np.int64,
    state: np.uint64,
    max_kicks: np.int64,
    t_bucket: npt.NDArray[np.int64],
    t_before: npt.NDArray[np.uint64],
) -> tuple[int, np.uint64]:
    for bk in (a, b):
        w = words[bk]
        i = _free(w)
        if i >= 0:
            t_bucket[0] = bk
            t_before[0] = w
            words[bk] = w | (fp << (_S16 * _u64(i)))
            return 1, state
    state = state + _INC
    bk = a if _out(state) & _ONE == _ZERO else b
    f = fp
    n = 0
    for _ in range(max_kicks):
        before = words[bk]
        state = state + _INC
        shift = _S16 * (_out(state) & _THREE)
        t_bucket[n] = bk
        t_before[n] = before
        n += 1
        words[bk] = (before & ~(_SLOT64 << shift)) | (f << shift)
        f = (before >> shift) & _SLOT64
        bk = bk ^ np.int64(delta[f])
        w = words[bk]
        i = _free(w)
        if i >= 0:
            t_bucket[n] = bk
            t_before[n] = w
            words[bk] = w | (f << (_S16 * _u64(i)))
            return n + 1, state
    for k in range(n - 1, -1, -1):
        words[t_bucket[k]] = t_before[k]
    return -1, state


_KERNEL = numba.njit(nogil=True, boundscheck=False)(_walk)


def _walk_many(
    words: npt.NDArray[np.uint64],
    delta: npt.NDArray[np.uint64],
    fps: npt.NDArray[np.uint64],
    a_s: npt.NDArray[np.int64],
    b_s: npt.NDArray[np.int64],
    state: np.uint64,
    max_kicks: np.int64,
    t_bucket: npt.NDArray[np.int64],
    t_before: npt.NDArray[np.uint64],
) -> tuple[int, np.uint64]:
    for k in range(fps.shape[0]):
        n, state = _KERNEL(
            words, delta, fps[k], a_s[k], b_s[k], state, max_kicks, t_bucket, t_before
        )
        if n < 0:
            return k, state
    return fps.shape[0], state


_MANY = numba.njit(nogil=True, boundscheck=False)(_walk_many)
# a disk cache where one can be written (keyed on this file); otherwise compile in memory
for _kernel in (_KERNEL, _MANY):
    with contextlib.suppress(Exception):
        _kernel.enable_caching()


def insert_kernel() -> InsertWalk:
    """The compiled insert (compiled on its first call)."""
    return _KERNEL  # type: ignore[no-any-return]


def insert_many_kernel() -> InsertWalk:
    """The compiled insert of many items in order, up to the first that fails: ``(k, state)``
    where ``k`` items went in (item ``k`` failed and was rolled back when ``k`` is short)."""
    return _MANY  # type: ignore[no-any-return]
