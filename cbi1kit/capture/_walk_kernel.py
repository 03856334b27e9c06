"""The compiled record walk: :func:`cbi1kit.capture._walk.walk_python`, statement for
statement, as a numba kernel (the Python twin is its reference, ``tests/test_scan.py``)."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt

from cbi1kit._compile import inline, kernel, le_u32, le_u64
from cbi1kit.capture._walk import (
    AT_BODY_CHECK,
    AT_HEADER_CHECK,
    AT_LENGTH,
    AT_MONO,
    AT_NUMBER,
    AT_STREAM,
    AT_TYPE,
    AT_WALL,
    HEADER,
    INDEX,
    INDEX_COUNT,
    INDEX_HEAD,
    LAST_TYPE,
    MAGIC,
    STOP_BODY,
    STOP_CHECK,
    STOP_END,
    STOP_FULL,
    STOP_HEADER,
    STOP_INDEX,
    STOP_NUMBER,
    STOP_TYPE,
    Walked,
)
from cbi1kit.hashing._c_xxh3 import c_xxh3 as _xxh3

_LO32: Final = np.uint64(0xFFFFFFFF)


@kernel
def walk_kernel(
    b: npt.NDArray[np.uint8],
    pos: int,
    end: int,
    base: int,
    number: int,
    verify: bool,
    chain: npt.NDArray[np.int64],
    state: npt.NDArray[np.int64],
    out: Walked,
    n0: int,
) -> tuple[int, int, int]:
    """:func:`cbi1kit.capture._walk.walk_python`, compiled: the same arguments and result."""
    offset, rtype, stream, length, numbers, wall, mono = out
    n = n0
    at = np.uint64(number)  # record numbers run to 2**64 - 1
    addr = np.uint64(b.ctypes.data)
    while True:
        if end - pos < HEADER:
            return n, pos, STOP_END
        if n >= len(offset) or state[0] >= len(chain):
            return n, pos, STOP_FULL
        if le_u32(b, pos) != MAGIC or _xxh3(addr + np.uint64(pos), AT_HEADER_CHECK) & _LO32 != (
            le_u32(b, pos + AT_HEADER_CHECK)
        ):
            return n, pos, STOP_HEADER
        if le_u64(b, pos + AT_NUMBER) != at:
            return n, pos, STOP_NUMBER
        size = np.int64(le_u32(b, pos + AT_LENGTH))
        body = pos + HEADER
        if body + size > end:
            return n, pos, STOP_BODY
        kind = b[pos + AT_TYPE]
        if verify and _xxh3(addr + np.uint64(body), size) & _LO32 != le_u32(b, pos + AT_BODY_CHECK):
            return n, pos, STOP_CHECK
        if kind < 1 or kind > LAST_TYPE:
            return n, pos, STOP_TYPE
        if kind == INDEX:
            if not _index_agrees(b, body, size, chain, state[0]):
                return n, pos, STOP_INDEX
            state[0] = 0
        elif state[0] >= 0:
            chain[state[0]] = base + pos
            state[0] += 1
        offset[n], rtype[n], length[n] = base + pos, kind, size
        stream[n], numbers[n] = le_u32(b, pos + AT_STREAM), at
        wall[n], mono[n] = le_u64(b, pos + AT_WALL), le_u64(b, pos + AT_MONO)
        n += 1
        at += np.uint64(1)
        pos = int(body + size)


@inline
def _index_agrees(b: Any, body: Any, size: Any, chain: Any, known: Any) -> Any:
    if size < INDEX_HEAD:
        return False
    count = np.int64(le_u32(b, body + INDEX_COUNT))
    if size != INDEX_HEAD + 8 * count:
        return False
    if known < 0:
        return True
    if count != known:
        return False
    for k in range(count):  # noqa: SIM110 - a loop numba compiles, not a generator
        if np.int64(le_u64(b, body + INDEX_HEAD + 8 * k)) != chain[k]:
            return False
    return True
