"""The record walk under every capture read, in Python: the reference of the compiled walk
(:mod:`cbi1kit.capture._walk_kernel`), and what runs where numba cannot load.

Both walk ``b[pos:end]`` record by record and stop at the first record that is not clean: a
header whose magic or checksum fails, a record number out of sequence, a body past ``end``, a
body checksum that fails (with ``verify``), an unknown type, an INDEX that is malformed or
disagrees with the records before it. The scanner (:mod:`cbi1kit.capture._scan`) reads what
made them stop and reports it. The layout is ``docs/capture-format.md``'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import xxhash

from cbi1kit._lazy import compiled
from cbi1kit.capture._layout import INDEX_BODY, RECORD_HEADER, RECORD_MAGIC, RecordType

# why a walk stopped at ``pos``
STOP_END: Final = 0  # fewer than a record header's bytes left before ``end``
STOP_HEADER: Final = 1  # bad magic or header checksum
STOP_NUMBER: Final = 2  # the record's number is not the next one
STOP_BODY: Final = 3  # the body runs past ``end``
STOP_CHECK: Final = 4  # body checksum mismatch
STOP_TYPE: Final = 5  # unknown record type
STOP_INDEX: Final = 6  # INDEX body malformed, or disagreeing with the chain
STOP_FULL: Final = 7  # the output arrays (or the chain) are full

HEADER: Final = RECORD_HEADER.size
MAGIC: Final = np.uint64(int.from_bytes(RECORD_MAGIC, "little"))
INDEX: Final = int(RecordType.INDEX)
INDEX_HEAD: Final = INDEX_BODY.size
INDEX_COUNT: Final = INDEX_BODY.field("count").offset
LAST_TYPE: Final = int(max(RecordType))
# where the walk reads each header field (the layout's offsets)
AT_TYPE: Final = RECORD_HEADER.field("record_type").offset
AT_LENGTH: Final = RECORD_HEADER.field("body_len").offset
AT_STREAM: Final = RECORD_HEADER.field("stream_id").offset
AT_NUMBER: Final = RECORD_HEADER.field("record_index").offset
AT_WALL: Final = RECORD_HEADER.field("recv_unix_ns").offset
AT_MONO: Final = RECORD_HEADER.field("recv_mono_ns").offset
AT_BODY_CHECK: Final = RECORD_HEADER.field("body_check").offset
AT_HEADER_CHECK: Final = RECORD_HEADER.field("header_check").offset  # covers the bytes before

#: the walk's output columns, a row per clean record (``walked_arrays`` makes them)
Walked = tuple[
    npt.NDArray[np.int64],  # offset (in the file)
    npt.NDArray[np.uint8],  # type
    npt.NDArray[np.uint32],  # stream id
    npt.NDArray[np.uint32],  # body length
    npt.NDArray[np.uint64],  # record number
    npt.NDArray[np.uint64],  # receive time, unix ns
    npt.NDArray[np.uint64],  # receive time, monotonic ns
]


def walked_arrays(n: int) -> Walked:
    """Empty output columns for ``n`` records."""
    return (
        np.empty(n, np.int64),
        np.empty(n, np.uint8),
        np.empty(n, np.uint32),
        np.empty(n, np.uint32),
        np.empty(n, np.uint64),
        np.empty(n, np.uint64),
        np.empty(n, np.uint64),
    )


def _check(data: Any) -> int:
    return xxhash.xxh3_64_intdigest(data) & 0xFFFFFFFF


def _u32(b: Any, at: int) -> int:
    return int.from_bytes(b[at : at + 4], "little")


def _u64(b: Any, at: int) -> int:
    return int.from_bytes(b[at : at + 8], "little")


def walk_python(
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
    """Clean records from ``b[pos:end]`` into ``out`` from row ``n0``; ``base`` is the file
    offset of ``b[0]``, ``number`` the next record's number. ``state[0]`` counts the chain (the
    records since the last INDEX, their offsets in ``chain``; -1: unknown). Returns the rows
    written, where it stopped and why (``STOP_*``). The kernel does the same, statement for
    statement."""
    offset, rtype, stream, length, numbers, wall, mono = out
    n, raw, number = n0, b.data, int(number)
    while True:
        if end - pos < HEADER:
            return n, pos, STOP_END
        if n >= len(offset) or state[0] >= len(chain):
            return n, pos, STOP_FULL
        if bytes(raw[pos : pos + 4]) != RECORD_MAGIC or _check(
            raw[pos : pos + AT_HEADER_CHECK]
        ) != _u32(raw, pos + AT_HEADER_CHECK):
            return n, pos, STOP_HEADER
        if _u64(raw, pos + AT_NUMBER) != number:
            return n, pos, STOP_NUMBER
        size, body = _u32(raw, pos + AT_LENGTH), pos + HEADER
        if body + size > end:
            return n, pos, STOP_BODY
        kind = raw[pos + AT_TYPE]
        if verify and _check(raw[body : body + size]) != _u32(raw, pos + AT_BODY_CHECK):
            return n, pos, STOP_CHECK
        if not 1 <= kind <= LAST_TYPE:
            return n, pos, STOP_TYPE
        if kind == INDEX:
            if not _index_agrees(raw, body, size, chain, int(state[0])):
                return n, pos, STOP_INDEX
            state[0] = 0
        elif state[0] >= 0:
            chain[state[0]] = base + pos
            state[0] += 1
        offset[n], rtype[n], length[n] = base + pos, kind, size
        stream[n], numbers[n] = _u32(raw, pos + AT_STREAM), number
        wall[n], mono[n] = _u64(raw, pos + AT_WALL), _u64(raw, pos + AT_MONO)
        n, number, pos = n + 1, number + 1, body + size


def _index_agrees(raw: Any, body: int, size: int, chain: Any, known: int) -> bool:
    """An INDEX body that is well formed and, where the chain is known, lists it exactly."""
    if size < INDEX_HEAD:
        return False
    count = _u32(raw, body + INDEX_COUNT)
    if size != INDEX_HEAD + 8 * count:
        return False
    if known < 0:
        return True
    listed = np.frombuffer(raw[body + INDEX_HEAD : body + size], dtype="<u8")
    return count == known and bool((listed.astype(np.int64) == chain[:count]).all())


Walk = Callable[..., tuple[int, int, int]]


WALK_KERNELS: Final = "cbi1kit.capture._walk_kernel"


def load_walk() -> Walk:
    """The compiled walk, or this module's where the kernels cannot load."""
    kernels = compiled(WALK_KERNELS)
    return walk_python if kernels is None else kernels.walk_kernel
