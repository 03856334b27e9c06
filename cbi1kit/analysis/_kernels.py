"""Compiled per-message kernels behind the ``frames`` table: capture block checks, the
``FilterUpdate`` field walk, XXH3 of each CBI1 body, runs of identical producer and relay bytes,
and the consumer's rules.

Why compiled: a row of the table is worth about as much as the bytes it describes only if each
message is visited once, in a loop that never returns to Python. A protobuf walk is sequential
per message (every field's position depends on the lengths before it), so numpy can only take
it one field position at a time across a batch, and the body checksum was one Python call per
row. These kernels are numba ``nopython`` functions: compiled on first use, cached on disk, and
run without the GIL, so the block-check thread and the thread building columns overlap. Polars
and pyarrow build the columns from their arrays.

XXH3's secret, primes, 128-bit fold and avalanches come from :mod:`cbi1kit.hashing._xxh3`, whose
numpy short paths use the same functions on arrays; inputs over 240 bytes go to the xxHash C
library python-xxhash ships. The disk cache is keyed on every source the
kernels compile (this file, ``_xxh3``, ``_format``, the rulebook ``_rules``) and on the numba
version (:mod:`cbi1kit.analysis._cache`), so an edit or an upgrade recompiles. The kernels are
plain numba code (no LLVM intrinsics) plus that one C function: what numba supports stays all
they need. When they cannot
be loaded the frames table computes the same columns without them
(:mod:`cbi1kit.analysis._reference`).

The walk follows protobuf's wire rules: varints of at most 10 bytes, lengths within the message,
field number 0 and group wire types malformed, the last occurrence of a repeated scalar wins.
A known field with a foreign wire type is reported as malformed (the relay contract is
strict); unknown fields are skipped and flagged.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

from cbi1kit.analysis._cache import keyed_cache
from cbi1kit.hashing._c_xxh3 import STATE_BYTES, c_digest, c_reset, c_update, c_xxh3
from cbi1kit.hashing._xxh3 import (
    PRIME64_1,
    PRIME_MX2,
    SECRET,
    mul128_fold64,
    xxh3_avalanche,
    xxh64_avalanche,
)
from cbi1kit.wire._format import IMAGES_MAX_FRAME_BYTES, SNAPSHOT_CHUNK_BUCKETS, max_delta_images
from cbi1kit.wire._rules import RULE_INDEX, RULES

__all__ = [
    "FIELD_SLOTS",
    "HEADER_COLUMNS",
    "MALFORMED",
    "PRODUCER_RULE",
    "REPEATED",
    "RULE_COUNT",
    "UNKNOWN_FIELDS",
    "frame_rules",
    "scan_filter_updates",
    "verify_and_scan",
    "xxh3_64_at",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def _kernel(f: _F) -> _F:
    """nopython, GIL released, no bounds checks (every index is checked in the code), cached
    under a key that covers every source the kernels inline (``_cache.keyed_cache``)."""
    return cast(_F, keyed_cache(numba.njit(nogil=True, boundscheck=False)(f)))


def _inline(f: _F) -> _F:
    """Inlined into the calling kernel (at numba's IR level); cached with its caller."""
    return cast(_F, numba.njit(inline="always")(f))


# --------------------------------------------------------------------------------- byte loads


@_inline
def _u64(b: Any, i: Any) -> Any:
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


@_inline
def _u32u(b: Any, j: Any) -> Any:
    """The little-endian u32 at ``b[j : j + 4]`` for an unsigned ``j``, which lets LLVM merge
    the four loads into one (as in ``_u64``)."""
    return (
        np.uint64(b[j])
        | np.uint64(b[j + np.uint64(1)]) << np.uint64(8)
        | np.uint64(b[j + np.uint64(2)]) << np.uint64(16)
        | np.uint64(b[j + np.uint64(3)]) << np.uint64(24)
    )


@_inline
def _u32(b: Any, i: int) -> Any:
    return (
        np.uint64(b[i])
        | np.uint64(b[i + 1]) << np.uint64(8)
        | np.uint64(b[i + 2]) << np.uint64(16)
        | np.uint64(b[i + 3]) << np.uint64(24)
    )


# ------------------------------------------------------------------------------------- XXH3-64

_SECRET: Final = np.frombuffer(SECRET, dtype=np.uint8)  # as an array, for the kernels
_LO32: Final = np.uint64(0xFFFFFFFF)


# the vectorised short paths' own functions, compiled for scalars
_mul_fold: Callable[..., Any] = _inline(mul128_fold64)
_avalanche: Callable[..., Any] = _inline(xxh3_avalanche)
_xxh64_avalanche: Callable[..., Any] = _inline(xxh64_avalanche)


@_inline
def _rrmxmx(h: Any, n: Any) -> Any:
    h ^= ((h << np.uint64(49)) | (h >> np.uint64(15))) ^ (
        (h << np.uint64(24)) | (h >> np.uint64(40))
    )
    h *= PRIME_MX2
    h ^= (h >> np.uint64(35)) + np.uint64(n)
    h *= PRIME_MX2
    return h ^ (h >> np.uint64(28))


@_inline
def _bswap64(x: Any) -> Any:
    r = np.uint64(0)
    for k in range(8):
        r = (r << np.uint64(8)) | ((x >> np.uint64(8 * k)) & np.uint64(0xFF))
    return r


@_inline
def _mix16(b: Any, p: int, s: Any, k: int) -> Any:
    return _mul_fold(_u64(b, p) ^ _u64(s, k), _u64(b, p + 8) ^ _u64(s, k + 8))


# Inputs over 240 bytes (CBI1 bodies of more than 19 images, capture blocks) go to the xxHash C
# library that python-xxhash ships (:mod:`cbi1kit.hashing._c_xxh3`).
_STEP: Final = 64 << 10  # bytes of a block hashed before the walk reads them: stays in L2


@_inline
def _address(b: Any, p: Any) -> Any:
    return np.uint64(b.ctypes.data) + np.uint64(p)


@_kernel
def xxh3_64_at(b: npt.NDArray[np.uint8], p: int, n: int) -> Any:
    """XXH3-64 (seed 0, default secret) of ``b[p : p + n]``: the same value as
    ``xxhash.xxh3_64_intdigest``, without a Python call per message."""
    s = _SECRET
    if n > 240:
        return c_xxh3(_address(b, p), n)
    if n > 128:
        h = np.uint64(n) * PRIME64_1
        for i in range(8):
            h += _mix16(b, p + 16 * i, s, 16 * i)
        h = _avalanche(h)
        for i in range(8, n // 16):
            h += _mix16(b, p + 16 * i, s, 16 * (i - 8) + 3)
        h += _mix16(b, p + n - 16, s, 119)  # 136 - 17
        return _avalanche(h)
    if n > 16:
        h = np.uint64(n) * PRIME64_1
        if n > 32:
            if n > 64:
                if n > 96:
                    h += _mix16(b, p + 48, s, 96)
                    h += _mix16(b, p + n - 64, s, 112)
                h += _mix16(b, p + 32, s, 64)
                h += _mix16(b, p + n - 48, s, 80)
            h += _mix16(b, p + 16, s, 32)
            h += _mix16(b, p + n - 32, s, 48)
        h += _mix16(b, p, s, 0)
        h += _mix16(b, p + n - 16, s, 16)
        return _avalanche(h)
    if n > 8:
        lo = _u64(b, p) ^ (_u64(s, 24) ^ _u64(s, 32))
        hi = _u64(b, p + n - 8) ^ (_u64(s, 40) ^ _u64(s, 48))
        return _avalanche(np.uint64(n) + _bswap64(lo) + hi + _mul_fold(lo, hi))
    if n >= 4:
        x = _u32(b, p + n - 4) + (_u32(b, p) << np.uint64(32))
        return _rrmxmx(x ^ (_u64(s, 8) ^ _u64(s, 16)), n)
    if n > 0:
        c = (
            (np.uint64(b[p]) << np.uint64(16))
            | (np.uint64(b[p + (n >> 1)]) << np.uint64(24))
            | np.uint64(b[p + n - 1])
            | (np.uint64(n) << np.uint64(8))
        )
        return _xxh64_avalanche(c ^ (_u32(s, 0) ^ _u32(s, 4)))
    return _xxh64_avalanche(_u64(s, 56) ^ _u64(s, 64))


# ------------------------------------------------------------------------- FilterUpdate walk

# rows of the output arrays, by field: varints (1, 4, 5, 6, 7), lengths (2, 3, 8), fixed32 (127)
FIELD_SLOTS: Final = {1: 0, 4: 1, 5: 2, 6: 3, 7: 4, 2: 5, 3: 6, 8: 7, 127: 8}
_SLOT_OF: Final = np.full(128, -1, dtype=np.int64)  # field number -> slot (-1: unknown)
for _field, _slot in FIELD_SLOTS.items():
    _SLOT_OF[_field] = _slot
_WIRE_OF: Final = np.array([0, 0, 0, 0, 0, 2, 2, 2, 5], dtype=np.int64)  # slot -> wire type
UNKNOWN_FIELDS: Final = 1
MALFORMED: Final = 2
REPEATED: Final = 4


@_inline
def _body_check(b: Any, p: Any, n: Any) -> Any:
    """The CBI1 body checksum of the frame ``b[p : p + n]`` (0 if shorter than its header)."""
    if n < 48:
        return np.uint64(0)
    return xxh3_64_at(b, p + 48, n - 48) & _LO32


_RUN_SLOTS: Final = (5, 6)  # relay, producer
_LITTLE: Final = sys.byteorder == "little"


@_inline
def _copy_head(b: Any, p: Any, n: Any, head: Any, i: Any) -> None:
    """The first 64 bytes of a CBI1 frame (header and body prefix), zeros past its end.
    ``head`` is ``(rows, 8)`` u64 in native order: a whole frame's head is eight word copies
    (on little-endian hosts; others copy bytes into the same memory image)."""
    if n >= 64 and _LITTLE:
        for k in range(8):
            head[i, k] = _u64(b, p + 8 * k)
        return
    row = head[i].view(np.uint8)
    for k in range(64):
        row[k] = b[p + k] if k < n else 0


@_inline
def _payload(b: Any, p: Any, n: Any, checksum: Any, head: Any, top: Any, i: Any) -> None:
    """What the rules need of the CBI1 frame ``b[p : p + n]``, read while it is in cache: its
    body checksum, its head, and for a delta whose length matches its image count the largest
    image bucket (upstream ``decode_delta`` rejects a bucket >= bucket_count)."""
    checksum[i] = _body_check(b, p, n)
    _copy_head(b, p, n, head, i)
    top[i] = 0
    if n >= 60 and b[p + 6] == 2 and b[p + 7] == 0:
        count = np.int64(_u32(b, p + 56))
        if n == 60 + 12 * count:
            m = np.uint64(0)
            q = np.uint64(p + 60)
            for k in range(count):
                m = max(m, _u32u(b, q + np.uint64(12 * k)))
            top[i] = m


@_inline
def _scan_outputs(n: int) -> Any:
    return (
        np.zeros((n, 9), dtype=np.uint64),
        np.zeros((n, 9), dtype=np.bool_),
        np.zeros((n, 9), dtype=np.int64),
        np.zeros(n, dtype=np.uint8),
        np.zeros(n, dtype=np.uint64),
        np.zeros(n, dtype=np.int64),
        np.zeros((n, 8), dtype=np.uint64),
        np.zeros(n, dtype=np.uint64),
    )


@_inline
def _scan_result(out: Any) -> Any:
    value, present, offset, flags, checksum, run, head, top = out
    return value, present, offset, flags, checksum, run, head.view(np.uint8), top


@_inline
def _scan_rows(
    b: Any, start: Any, end: Any, is_pb: Any, lo: Any, hi: Any, runs: Any, out: Any
) -> Any:
    """Rows ``lo`` to ``hi`` into ``out`` (``_scan_outputs``); run ids go on from ``runs``,
    compared with the row before ``lo`` when there is one. Returns the last run id."""
    value, present, offset, flags, checksum, run, head, top = out
    for i in range(lo, hi):
        p, e = start[i], end[i]
        if not is_pb[i]:
            _payload(b, p, e - p, checksum, head, top, i)
            p = e
        # The varint loops are written out here, not called: as a helper returning a tuple
        # the same loop made the walk six times slower (numba 0.68; measured in cache).
        while p < e:
            tag, shift, ok = np.uint64(0), 0, False
            while p < e and shift < 70:  # the tag: at most 10 bytes, all before the end
                c = b[p]
                p += 1
                tag |= np.uint64(c & 0x7F) << np.uint64(shift)
                shift += 7
                if c < 0x80:
                    ok = True
                    break
            if not ok:
                flags[i] |= MALFORMED
                break
            field, wt = np.int64(tag >> np.uint64(3)), np.int64(tag & np.uint64(7))
            slot = _SLOT_OF[field] if field < 128 else -1
            if field == 0 or (slot >= 0 and wt != _WIRE_OF[slot]):
                flags[i] |= MALFORMED
                break
            v = np.uint64(0)
            if wt == 0 or wt == 2:  # noqa: PLR1714 - a varint, or a length (no sets in numba)
                shift, ok = 0, False
                while p < e and shift < 70:
                    c = b[p]
                    p += 1
                    v |= np.uint64(c & 0x7F) << np.uint64(shift)
                    shift += 7
                    if c < 0x80:
                        ok = True
                        break
                if not ok:
                    flags[i] |= MALFORMED
                    break
                if wt == 2:
                    if v > np.uint64(e - p):
                        flags[i] |= MALFORMED
                        break
                    if slot >= 0:
                        offset[i, slot] = p
                    if slot == 7:
                        _payload(b, p, np.int64(v), checksum, head, top, i)
                    p += np.int64(v)
            elif wt == 5:
                if p + 4 > e:
                    flags[i] |= MALFORMED
                    break
                v = _u32(b, p)
                p += 4
            elif wt == 1:
                if p + 8 > e:
                    flags[i] |= MALFORMED
                    break
                v = _u64(b, p)
                p += 8
            else:  # groups (3, 4) and the invalid wire types 6, 7
                flags[i] |= MALFORMED
                break
            if slot < 0:
                flags[i] |= UNKNOWN_FIELDS
            else:
                if present[i, slot]:  # a field given twice (protobuf merges a message's)
                    flags[i] |= REPEATED
                value[i, slot] = v
                present[i, slot] = True
        if i > 0:  # a new run where the relay's or producer's bytes differ from the row before
            same = True
            for k in _RUN_SLOTS:
                n = np.int64(value[i, k])
                if present[i, k] != present[i - 1, k] or n != np.int64(value[i - 1, k]):
                    same = False
                    break
                x, y, j = offset[i, k], offset[i - 1, k], 0
                while same and j + 8 <= n:
                    same = _u64(b, x + j) == _u64(b, y + j)
                    j += 8
                while same and j < n:
                    same = b[x + j] == b[y + j]
                    j += 1
                if not same:
                    break
            if not same:
                runs += 1
        run[i] = runs
    return runs


@_kernel
def scan_filter_updates(
    b: npt.NDArray[np.uint8],
    start: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
    is_pb: npt.NDArray[np.bool_],
) -> tuple[npt.NDArray[Any], ...]:
    """One pass over the messages ``b[start : end]``: the envelope fields, the CBI1 body
    checksum, and runs of identical sub-messages.

    Returns ``(value, present, offset, flags, checksum, run, head, top)``, a row per message. The
    first three have shape ``(n, 9)``, columns in ``FIELD_SLOTS`` order: a varint's value, a
    length-delimited field's length (its bytes begin at ``offset``), the fixed32 marker's
    value. ``flags`` holds ``UNKNOWN_FIELDS``, ``MALFORMED`` (a malformed message keeps the
    fields before the damage) and ``REPEATED`` (a known field given more than once: its last
    occurrence is kept, where protobuf merges a repeated message field). ``checksum`` is the
    payload's CBI1 body checksum, computed while the walk is on the payload's bytes; rows
    without ``is_pb`` are bare CBI1 frames and hash as a whole. ``run`` numbers runs of rows
    whose relay and producer bytes equal the previous row's, so that each sub-message is parsed
    once per run. ``head`` holds each payload's first 64 bytes (the CBI1 header and body
    prefix; zeros past the payload's end). ``top`` is a delta payload's largest image bucket (0
    unless its length fits its count).
    """
    out = _scan_outputs(len(start))
    _scan_rows(b, start, end, is_pb, 0, len(start), 0, out)
    result: tuple[npt.NDArray[Any], ...] = _scan_result(out)
    return result


@_kernel
def verify_and_scan(
    b: npt.NDArray[np.uint8],
    block_start: npt.NDArray[np.int64],
    block_end: npt.NDArray[np.int64],
    block_check: npt.NDArray[np.int64],
    first_record: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
) -> tuple[Any, ...]:
    """Capture blocks checked and scanned in one call: block ``k`` (bytes ``block_start[k]``
    to ``block_end[k]``, its records ``first_record[k]`` to ``first_record[k + 1]``) must hash
    to ``block_check[k]`` (low 32 bits of xxh3; -1: none recorded, which fails); its records go
    through the field walk as the streaming hash passes them, while they are in cache.

    Returns ``(good, value, present, offset, flags, checksum, run, head, top)``: how many leading
    blocks hold, and ``scan_filter_updates``' arrays for their records.
    """
    n = len(start)
    out = _scan_outputs(n)
    is_pb = np.ones(n, dtype=np.bool_)
    memory = np.empty(STATE_BYTES + 64, dtype=np.uint8)
    state = (_address(memory, 0) + np.uint64(63)) & ~np.uint64(63)
    good, runs = 0, 0
    for k in range(len(block_start)):
        # the block is hashed a step at a time, and its records walked right after their bytes
        # went through the hash, so they come from memory once; a block whose check fails is
        # dropped whole (its rows are past ``good``)
        c_reset(state)
        pos, i, last = block_start[k], first_record[k], first_record[k + 1]
        while pos < block_end[k]:
            step = min(_STEP, block_end[k] - pos)
            c_update(state, _address(b, pos), step)
            pos += step
            j = i
            while j < last and end[j] <= pos:
                j += 1
            if j > i:
                runs = _scan_rows(b, start, end, is_pb, i, j, runs, out)
                i = j
        if i < last:
            runs = _scan_rows(b, start, end, is_pb, i, last, runs, out)
        digest = c_digest(state) & _LO32
        if block_check[k] < 0 or digest != np.uint64(block_check[k]):
            break
        good += 1
    rows = first_record[good]
    value, present, offset, flags, checksum, run, head, top = _scan_result(out)
    return (
        good,
        value[:rows],
        present[:rows],
        offset[:rows],
        flags[:rows],
        checksum[:rows],
        run[:rows],
        head[:rows],
        top[:rows],
    )


# ------------------------------------------------------------------------- the consumer's rules

_MARKER: Final = np.uint64(0x4B565231)
_U64_MAX: Final = np.uint64(2**64 - 1)
_MAX_WORDS: Final = np.int64(SNAPSHOT_CHUNK_BUCKETS)
_MAX_FRAME: Final = IMAGES_MAX_FRAME_BYTES
_MAX_IMAGES: Final = np.uint64(max_delta_images())
_CBI1_MAGIC: Final = np.uint64(int.from_bytes(b"CBI1", "little"))
_CKF1_MAGIC: Final = np.uint64(int.from_bytes(b"CKF1", "little"))
HEADER_COLUMNS: Final = (
    ("cbi1_fingerprint_bits", "cbi1_slots"),
    ("cbi1_wire_version", "cbi1_flags", "cbi1_format_version"),
    ("cbi1_checksum", "chunk_index", "chunk_count", "image_count"),
    ("cbi1_seed", "cbi1_bucket_count", "cbi1_dc_id", "cbi1_epoch", "bucket_offset", "base_epoch"),
)
# ``frame_rules`` returns indices into the rulebook (cbi1kit.wire.RULES); each constant is looked
# up by id, so a reordered rulebook renumbers the kernel (and, through the keyed cache, recompiles)
RULE_COUNT: Final = len(RULES)
PRODUCER_RULE: Final = RULE_INDEX["relay-producer-identity"]
_PROTOBUF: Final = RULE_INDEX["relay-protobuf-decode"]
_CONTRACT_MARKER: Final = RULE_INDEX["relay-contract-marker"]
_PROTOCOL_VERSION: Final = RULE_INDEX["relay-protocol-version"]
_PRODUCER_PRESENT: Final = RULE_INDEX["relay-producer-present"]
_RELAY_PRESENT: Final = RULE_INDEX["relay-identity-present"]
_UPDATE_KIND: Final = RULE_INDEX["relay-update-kind"]
_BASE_EQUALS_SEQUENCE: Final = RULE_INDEX["relay-base-equals-sequence"]
_PAYLOAD: Final = RULE_INDEX["relay-payload"]
_TRUNCATED: Final = RULE_INDEX["cbi1-truncated"]
_FRAME_TOO_LARGE: Final = RULE_INDEX["cbi1-frame-too-large"]
_LEGACY_CKF1: Final = RULE_INDEX["cbi1-legacy-ckf1"]
_MAGIC: Final = RULE_INDEX["cbi1-magic"]
_WIRE_VERSION: Final = RULE_INDEX["cbi1-wire-version"]
_CHECKSUM: Final = RULE_INDEX["cbi1-checksum"]
_FORMAT_SHAPE: Final = RULE_INDEX["cbi1-format-shape"]
_FORMAT_MISMATCH: Final = RULE_INDEX["cbi1-format-mismatch"]
_FLAGS: Final = RULE_INDEX["cbi1-flags"]
_DELTA_LENGTH: Final = RULE_INDEX["cbi1-delta-length"]
_DELTA_BUCKET_RANGE: Final = RULE_INDEX["cbi1-delta-bucket-range"]
_CHUNK_LAYOUT: Final = RULE_INDEX["cbi1-chunk-layout"]
_KIND_MISMATCH: Final = RULE_INDEX["cbi1-kind-mismatch"]
_DC_ID: Final = RULE_INDEX["cbi1-dc-id"]
_EPOCH: Final = RULE_INDEX["cbi1-epoch"]
_DELTA_BASE_EPOCH: Final = RULE_INDEX["cbi1-delta-base-epoch"]
_DELTA_CONTIGUOUS: Final = RULE_INDEX["relay-delta-contiguous"]
#: Rule ids in kernel order: every rule of the rulebook has exactly one constant above.
KERNEL_RULES: Final = (
    "relay-protobuf-decode",
    "relay-contract-marker",
    "relay-protocol-version",
    "relay-producer-present",
    "relay-producer-identity",
    "relay-identity-present",
    "relay-update-kind",
    "relay-base-equals-sequence",
    "relay-payload",
    "cbi1-truncated",
    "cbi1-frame-too-large",
    "cbi1-legacy-ckf1",
    "cbi1-magic",
    "cbi1-wire-version",
    "cbi1-checksum",
    "cbi1-format-shape",
    "cbi1-format-mismatch",
    "cbi1-flags",
    "cbi1-delta-length",
    "cbi1-delta-bucket-range",
    "cbi1-chunk-layout",
    "cbi1-kind-mismatch",
    "cbi1-dc-id",
    "cbi1-epoch",
    "cbi1-delta-base-epoch",
    "relay-delta-contiguous",
)


@_inline
def _le(row: Any, at: int, width: int) -> Any:
    v = np.uint64(0)
    for k in range(width):
        v |= np.uint64(row[at + k]) << np.uint64(8 * k)
    return v


@_kernel
def frame_rules(
    value: npt.NDArray[np.uint64],
    present: npt.NDArray[np.bool_],
    flags: npt.NDArray[np.uint8],
    checksum: npt.NDArray[np.uint64],
    head: npt.NDArray[np.uint8],
    top: npt.NDArray[np.uint64],
    is_pb: npt.NDArray[np.bool_],
    length: npt.NDArray[np.int64],
    run: npt.NDArray[np.int64],
    run_seed: npt.NDArray[np.uint64],
    run_buckets: npt.NDArray[np.uint64],
    run_dc: npt.NDArray[np.uint64],
    run_error: npt.NDArray[np.bool_],
    run_malformed: npt.NDArray[np.bool_],
) -> tuple[npt.NDArray[Any], ...]:
    """The derived columns and the first failing rule of every row, from the scan's arrays and
    the per-run producer values (``run_error``: the producer is invalid; ``run_malformed``: the
    relay or producer sub-message does not parse): one pass instead of some sixty array
    operations.

    Returns ``(rule, kind_code, kind_raw, base, sequence, payload_len, checksum_ok,
    chunk_frame, delta_frame, word_count, u8, u16, u32, u64)``; ``rule`` is -1 for a valid row,
    else the index of the first failing rule of the rulebook (``cbi1kit.wire.RULES``). The last
    four are the CBI1 header fields as contiguous columns, in ``HEADER_COLUMNS`` order. Rows without
    ``is_pb`` are bare CBI1 frames: their kind, base and sequence come from the CBI1 header.
    """
    n = len(is_pb)
    rule = np.full(n, -1, dtype=np.int64)
    kind_code = np.zeros(n, dtype=np.int64)
    kind_raw = np.zeros(n, dtype=np.int32)
    base = np.zeros(n, dtype=np.uint64)
    seq = np.zeros(n, dtype=np.uint64)
    p_len = np.zeros(n, dtype=np.int64)
    checksum_ok = np.zeros(n, dtype=np.bool_)
    chunk_frame = np.zeros(n, dtype=np.bool_)
    delta_frame = np.zeros(n, dtype=np.bool_)
    word_count = np.zeros(n, dtype=np.int64)
    u8 = np.zeros((2, n), dtype=np.uint8)  # fingerprint_bits, slots
    u16 = np.zeros((3, n), dtype=np.uint16)  # wire_version, flags, format_version
    u32 = np.zeros((4, n), dtype=np.uint32)  # checksum, chunk_index, chunk_count, image_count
    u64 = np.zeros((6, n), dtype=np.uint64)  # seed, bucket_count, dc_id, epoch, offset, base
    for i in range(n):
        h = head[i]
        pb = is_pb[i]
        plen = np.int64(value[i, 7]) if pb else length[i]
        p_len[i] = plen
        has_head = plen >= 48
        magic = _le(h, 0, 4)
        wire_version, hflags = _le(h, 4, 2), _le(h, 6, 2)
        fp_bits, slots, format_version = np.uint64(h[8]), np.uint64(h[9]), _le(h, 10, 2)
        seed, buckets, dc_id, epoch = _le(h, 12, 8), _le(h, 20, 8), _le(h, 28, 8), _le(h, 36, 8)
        body_check = _le(h, 44, 4)
        chunk_index, chunk_count, bucket_offset = _le(h, 48, 4), _le(h, 52, 4), _le(h, 56, 8)
        base_epoch, image_count = _le(h, 48, 8), _le(h, 56, 4)
        u8[0, i], u8[1, i] = fp_bits, slots
        u16[0, i], u16[1, i], u16[2, i] = wire_version, hflags, format_version
        u32[0, i], u32[1, i], u32[2, i], u32[3, i] = (
            body_check,
            chunk_index,
            chunk_count,
            image_count,
        )
        u64[0, i], u64[1, i], u64[2, i], u64[3, i] = seed, buckets, dc_id, epoch
        u64[4, i], u64[5, i] = bucket_offset, base_epoch
        ok_sum = has_head and checksum[i] == body_check
        checksum_ok[i] = ok_sum
        is_chunk = has_head and hflags == 1 and plen >= 64
        is_delta = has_head and hflags == 2 and plen >= 60
        chunk_frame[i], delta_frame[i] = is_chunk, is_delta
        words = (plen - 64) // 8 if is_chunk else 0
        word_count[i] = words
        if pb:
            raw = np.int32(np.int64(value[i, 4]) & 0xFFFFFFFF)  # an int32 enum, as sent
            code = 0 if raw == 1 else 1 if raw == 2 else 2 if raw == 3 else 3 if raw == 0 else 4
            b, s = value[i, 1], value[i, 2]
        else:
            code = 0 if hflags == 1 else 1 if hflags == 2 else 4
            raw = np.int32(1 if hflags == 1 else 2 if hflags == 2 else 0)
            b = base_epoch if is_delta else epoch
            s = epoch
        kind_raw[i], kind_code[i], base[i], seq[i] = raw, code, b, s
        chunk, delta, heartbeat = code == 0, code == 1, code == 2
        # a bare frame is a payload whatever its flags say; a message's only for these kinds
        carries = (chunk or delta) if pb else True
        r = run[i]
        nwords = plen - 64
        if flags[i] & MALFORMED or (pb and run_malformed[r]):
            rule[i] = _PROTOBUF
        elif pb and np.uint32(value[i, 8]) != _MARKER:
            rule[i] = _CONTRACT_MARKER
        elif pb and np.uint32(value[i, 0]) != 1:  # uint32: prost keeps the low 32 bits
            rule[i] = _PROTOCOL_VERSION
        elif pb and not present[i, 6]:
            rule[i] = _PRODUCER_PRESENT
        elif pb and run_error[r]:
            rule[i] = PRODUCER_RULE
        elif pb and not present[i, 5]:
            rule[i] = _RELAY_PRESENT
        elif pb and code >= 3:
            rule[i] = _UPDATE_KIND
        elif pb and (chunk or heartbeat) and b != s:
            rule[i] = _BASE_EQUALS_SEQUENCE
        elif pb and heartbeat and plen > 0:  # empty chunk/delta payloads: decode's Truncated
            rule[i] = _PAYLOAD
        elif not carries:
            pass  # a valid heartbeat
        elif not has_head:
            rule[i] = _TRUNCATED
        elif plen > _MAX_FRAME:
            rule[i] = _FRAME_TOO_LARGE
        elif magic == _CKF1_MAGIC:
            rule[i] = _LEGACY_CKF1
        elif magic != _CBI1_MAGIC:
            rule[i] = _MAGIC
        elif wire_version != 1:
            rule[i] = _WIRE_VERSION
        elif not ok_sum:
            rule[i] = _CHECKSUM
        elif format_version != 1 or fp_bits != 16 or slots != 4:
            rule[i] = _FORMAT_SHAPE
        elif pb and (seed != run_seed[r] or buckets != run_buckets[r]):
            rule[i] = _FORMAT_MISMATCH
        elif hflags != 1 and hflags != 2:  # noqa: PLR1714 - no sets in numba
            rule[i] = _FLAGS
        elif hflags == 2 and (
            plen < 60 or image_count > _MAX_IMAGES or plen != 60 + 12 * np.int64(image_count)
        ):
            rule[i] = _DELTA_LENGTH
        elif hflags == 2 and image_count > 0 and top[i] >= buckets:
            rule[i] = _DELTA_BUCKET_RANGE
        elif hflags == 1 and (
            plen < 64
            or chunk_count == 0
            or chunk_index >= chunk_count
            or nwords % 8 != 0
            or nwords // 8 > _MAX_WORDS
            or bucket_offset > buckets
            or np.uint64(nwords // 8) > buckets - bucket_offset
        ):
            rule[i] = _CHUNK_LAYOUT
        elif pb and (hflags == 1) != chunk:
            rule[i] = _KIND_MISMATCH
        elif pb and dc_id != run_dc[r]:
            rule[i] = _DC_ID
        elif pb and epoch != s:
            rule[i] = _EPOCH
        elif pb and delta and base_epoch != b:
            rule[i] = _DELTA_BASE_EPOCH
        elif pb and delta and (b == _U64_MAX or s != b + np.uint64(1)):
            rule[i] = _DELTA_CONTIGUOUS
    return (
        rule,
        kind_code,
        kind_raw,
        base,
        seq,
        p_len,
        checksum_ok,
        chunk_frame,
        delta_frame,
        word_count,
        u8,
        u16,
        u32,
        u64,
    )
