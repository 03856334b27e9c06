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
numpy short paths use the same functions on arrays. numba keys its disk cache on this file
only: after editing what the kernels take from ``_xxh3`` or ``_format``, delete
``cbi1kit/__pycache__/*.nbi`` and ``*.nbc``.

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
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from cbi1kit.hashing._xxh3 import (
    PRIME32_1,
    PRIME32_2,
    PRIME32_3,
    PRIME64_1,
    PRIME64_2,
    PRIME64_3,
    PRIME64_4,
    PRIME64_5,
    PRIME_MX2,
    SECRET,
    mul128_fold64,
    xxh3_avalanche,
    xxh64_avalanche,
)
from cbi1kit.wire._format import IMAGES_MAX_FRAME_BYTES, SNAPSHOT_CHUNK_BUCKETS

__all__ = [
    "FIELD_SLOTS",
    "HEADER_COLUMNS",
    "MALFORMED",
    "PRODUCER_RULE",
    "RULE_COUNT",
    "UNKNOWN_FIELDS",
    "frame_rules",
    "scan_filter_updates",
    "verify_and_scan",
    "xxh3_64_at",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def _kernel(f: _F) -> _F:
    """nopython, GIL released, no bounds checks (every index is checked in the code), cached."""
    return cast(_F, numba.njit(cache=True, nogil=True, boundscheck=False)(f))


def _inline(f: _F) -> _F:
    """Inlined into the calling kernel (at numba's IR level)."""
    return cast(_F, numba.njit(inline="always", cache=True)(f))


def _intrinsic(f: Callable[..., Any]) -> Callable[..., Any]:
    """An LLVM-level helper; called from kernels without the ``typingctx`` argument."""
    return cast(Callable[..., Any], intrinsic(f))


# --------------------------------------------------------------------------------- byte loads

_LITTLE: Final = sys.byteorder == "little"

if sys.byteorder == "little":

    @_intrinsic
    def _native_u64(typingctx: Any, arr: Any, idx: Any) -> Any:
        """One unaligned 8-byte load at ``arr.data + idx`` (the hash's inner loop lives on it)."""
        sig = types.uint64(arr, idx)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            ptr = builder.gep(ary.data, [args[1]])
            return builder.load(builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=1)

        return sig, codegen

    @_inline
    def _u64(b: Any, i: int) -> Any:
        return _native_u64(b, i)

else:  # pragma: no cover - big-endian hosts assemble little-endian words byte by byte

    @_inline
    def _u64(b: Any, i: int) -> Any:
        v = np.uint64(0)
        for k in range(8):
            v |= np.uint64(b[i + k]) << np.uint64(8 * k)
        return v


@_intrinsic
def _prefetch(typingctx: Any, arr: Any, idx: Any) -> Any:
    """Ask for the cache line at ``arr.data + idx`` ahead of use (no fault, no result)."""
    sig = types.void(arr, idx)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0"
        )
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])  # read, keep in all levels, data
        return context.get_dummy_value()

    return sig, codegen


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


if sys.byteorder == "little":

    @_intrinsic
    def _stripe(typingctx: Any, acc: Any, b: Any, p: Any, s: Any, k: Any) -> Any:
        """Accumulate one 64-byte stripe into ``acc`` as one 8 x u64 vector: load, xor the
        secret, 32x32 products, swapped lanes added. Written as LLVM vector code because the
        scalar loop was vectorised with gathers (16 GB/s; this runs at xxhash's own speed)."""
        sig = types.void(acc, b, p, s, k)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            arrays = [
                context.make_array(signature.args[j])(context, builder, args[j]) for j in (0, 1, 3)
            ]
            v8 = ir.VectorType(ir.IntType(64), 8)
            accp = builder.bitcast(arrays[0].data, v8.as_pointer())
            a = builder.load(accp, align=8)
            d = builder.load(
                builder.bitcast(builder.gep(arrays[1].data, [args[2]]), v8.as_pointer()), align=1
            )
            key = builder.load(
                builder.bitcast(builder.gep(arrays[2].data, [args[4]]), v8.as_pointer()), align=1
            )
            dk = builder.xor(d, key)
            prod = builder.mul(
                builder.and_(dk, ir.Constant(v8, [0xFFFFFFFF] * 8)),
                builder.lshr(dk, ir.Constant(v8, [32] * 8)),
            )
            swap = ir.Constant(ir.VectorType(ir.IntType(32), 8), [1, 0, 3, 2, 5, 4, 7, 6])
            swapped = builder.shuffle_vector(d, d, swap)
            builder.store(builder.add(builder.add(a, swapped), prod), accp, align=8)
            return context.get_dummy_value()

        return sig, codegen

else:  # pragma: no cover - big-endian hosts take the scalar stripe

    @_inline
    def _stripe(acc: Any, b: Any, p: int, s: Any, k: int) -> None:
        for i in range(8):
            dv = _u64(b, p + 8 * i)
            dk = dv ^ _u64(s, k + 8 * i)
            acc[i ^ 1] += dv
            acc[i] += (dk & _LO32) * (dk >> np.uint64(32))


@_inline
def _xxh3_long(b: Any, p: int, n: int, s: Any) -> Any:
    acc = np.empty(8, dtype=np.uint64)
    acc[0], acc[1], acc[2], acc[3] = PRIME32_3, PRIME64_1, PRIME64_2, PRIME64_3
    acc[4], acc[5], acc[6], acc[7] = PRIME64_4, PRIME32_2, PRIME64_5, PRIME32_1
    blocks = (n - 1) // 1024  # 16 stripes of 64 bytes per block with the 192-byte secret
    for blk in range(blocks):
        for st in range(16):
            _stripe(acc, b, p + blk * 1024 + st * 64, s, st * 8)
        for i in range(8):
            a = acc[i]
            a ^= a >> np.uint64(47)
            a ^= _u64(s, 128 + 8 * i)
            acc[i] = a * PRIME32_1
    tail = p + blocks * 1024
    for st in range(((n - 1) - blocks * 1024) // 64):
        _stripe(acc, b, tail + st * 64, s, st * 8)
    _stripe(acc, b, p + n - 64, s, 121)  # the last stripe, secret offset 192 - 64 - 7
    h = np.uint64(n) * PRIME64_1
    for i in range(4):
        h += _mul_fold(acc[2 * i] ^ _u64(s, 11 + 16 * i), acc[2 * i + 1] ^ _u64(s, 19 + 16 * i))
    return _avalanche(h)


@_kernel
def xxh3_64_at(b: npt.NDArray[np.uint8], p: int, n: int) -> Any:
    """XXH3-64 (seed 0, default secret) of ``b[p : p + n]``: the same value as
    ``xxhash.xxh3_64_intdigest``, without a Python call per message."""
    s = _SECRET
    if n > 240:
        return _xxh3_long(b, p, n, s)
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


@_inline
def _body_check(b: Any, p: Any, n: Any) -> Any:
    """The CBI1 body checksum of the frame ``b[p : p + n]`` (0 if shorter than its header)."""
    if n < 48:
        return np.uint64(0)
    return xxh3_64_at(b, p + 48, n - 48) & _LO32


_RUN_SLOTS: Final = (5, 6)  # relay, producer
_AHEAD: Final = 6  # rows prefetched ahead of the walk


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
def _scan_outputs(n: int) -> Any:
    return (
        np.zeros((n, 9), dtype=np.uint64),
        np.zeros((n, 9), dtype=np.bool_),
        np.zeros((n, 9), dtype=np.int64),
        np.zeros(n, dtype=np.uint8),
        np.zeros(n, dtype=np.uint64),
        np.zeros(n, dtype=np.int64),
        np.zeros((n, 8), dtype=np.uint64),
    )


@_inline
def _scan_result(out: Any) -> Any:
    value, present, offset, flags, checksum, run, head = out
    return value, present, offset, flags, checksum, run, head.view(np.uint8)


@_inline
def _scan_rows(
    b: Any, start: Any, end: Any, is_pb: Any, lo: Any, hi: Any, runs: Any, out: Any
) -> Any:
    """Rows ``lo`` to ``hi`` into ``out`` (``_scan_outputs``); run ids go on from ``runs``,
    compared with the row before ``lo`` when there is one. Returns the last run id."""
    value, present, offset, flags, checksum, run, head = out
    for i in range(lo, hi):
        if i + _AHEAD < hi:  # the walk jumps over payloads: fetch where it lands next
            _prefetch(b, start[i + _AHEAD])
            _prefetch(b, start[i + _AHEAD] + 64)
            _prefetch(b, end[i + _AHEAD] - 1)
        p, e = start[i], end[i]
        if not is_pb[i]:
            checksum[i] = _body_check(b, p, e - p)
            _copy_head(b, p, e - p, head, i)
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
                        checksum[i] = _body_check(b, p, np.int64(v))
                        _copy_head(b, p, np.int64(v), head, i)
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

    Returns ``(value, present, offset, flags, checksum, run, head)``, a row per message. The
    first three have shape ``(n, 9)``, columns in ``FIELD_SLOTS`` order: a varint's value, a
    length-delimited field's length (its bytes begin at ``offset``), the fixed32 marker's
    value. ``flags`` holds ``UNKNOWN_FIELDS`` and ``MALFORMED`` (a malformed message keeps the
    fields before the damage). ``checksum`` is the payload's CBI1 body checksum, computed
    while the walk is on the payload's bytes; rows without ``is_pb`` are bare CBI1 frames and
    hash as a whole. ``run`` numbers runs of rows whose relay and producer bytes equal the
    previous row's, so that each sub-message is parsed once per run. ``head`` holds each
    payload's first 64 bytes (the CBI1 header and body prefix; zeros past the payload's end).
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
    to ``block_check[k]`` (low 32 bits of xxh3; -1: none recorded, which fails); its records
    then go through the field walk while the hash has them in cache.

    Returns ``(good, value, present, offset, flags, checksum, run, head)``: how many leading
    blocks hold, and ``scan_filter_updates``' arrays for their records.
    """
    n = len(start)
    out = _scan_outputs(n)
    is_pb = np.ones(n, dtype=np.bool_)
    good, runs = 0, 0
    for k in range(len(block_start)):
        digest = xxh3_64_at(b, block_start[k], block_end[k] - block_start[k]) & _LO32
        if block_check[k] < 0 or digest != np.uint64(block_check[k]):
            break
        runs = _scan_rows(b, start, end, is_pb, first_record[k], first_record[k + 1], runs, out)
        good += 1
    rows = first_record[good]
    value, present, offset, flags, checksum, run, head = _scan_result(out)
    return (
        good,
        value[:rows],
        present[:rows],
        offset[:rows],
        flags[:rows],
        checksum[:rows],
        run[:rows],
        head[:rows],
    )


# ------------------------------------------------------------------------- the consumer's rules

_MARKER: Final = np.uint64(0x4B565231)
_U64_MAX: Final = np.uint64(2**64 - 1)
_CHUNK_BUCKETS: Final = np.uint64(SNAPSHOT_CHUNK_BUCKETS)
_MAX_FRAME: Final = IMAGES_MAX_FRAME_BYTES
_CBI1_MAGIC: Final = np.uint64(int.from_bytes(b"CBI1", "little"))
_CKF1_MAGIC: Final = np.uint64(int.from_bytes(b"CKF1", "little"))
HEADER_COLUMNS: Final = (
    ("cbi1_fingerprint_bits", "cbi1_slots"),
    ("cbi1_wire_version", "cbi1_flags", "cbi1_format_version"),
    ("cbi1_checksum", "chunk_index", "chunk_count", "image_count"),
    ("cbi1_seed", "cbi1_bucket_count", "cbi1_dc_id", "cbi1_epoch", "bucket_offset", "base_epoch"),
)
RULE_COUNT: Final = 25  # the rules below, in the order a consumer checks them
PRODUCER_RULE: Final = 5


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
    is_pb: npt.NDArray[np.bool_],
    length: npt.NDArray[np.int64],
    run: npt.NDArray[np.int64],
    run_seed: npt.NDArray[np.uint64],
    run_buckets: npt.NDArray[np.uint64],
    run_dc: npt.NDArray[np.uint64],
    run_error: npt.NDArray[np.bool_],
) -> tuple[npt.NDArray[Any], ...]:
    """The derived columns and the first failing rule of every row, from the scan's arrays and
    the per-run producer values: one pass instead of some sixty array operations.

    Returns ``(rule, kind_code, kind_raw, base, sequence, payload_len, checksum_ok,
    chunk_frame, delta_frame, word_count, u8, u16, u32, u64)``; ``rule`` is -1 for a valid row,
    else the index of the first rule (``_tables._RULES``) that fails. The last four are the
    CBI1 header fields as contiguous columns, in ``HEADER_COLUMNS`` order. Rows without
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
        carries = chunk or delta
        r = run[i]
        chunk_bad = is_chunk and (
            chunk_count == 0
            or chunk_index >= chunk_count
            or (plen - 64) % 8 != 0
            or bucket_offset + np.uint64(words) > buckets
            or bucket_offset != chunk_index * _CHUNK_BUCKETS
        )
        if flags[i] & MALFORMED:
            rule[i] = 0
        elif pb and value[i, 8] != _MARKER:
            rule[i] = 1
        elif pb and value[i, 0] != 1:
            rule[i] = 2
        elif pb and not present[i, 5]:
            rule[i] = 3
        elif pb and not present[i, 6]:
            rule[i] = 4
        elif pb and run_error[r]:
            rule[i] = PRODUCER_RULE
        elif pb and code >= 3:
            rule[i] = 6
        elif pb and (chunk or heartbeat) and b != s:
            rule[i] = 7
        elif pb and delta and (b == _U64_MAX or s != b + np.uint64(1)):
            rule[i] = 8
        elif pb and carries and plen == 0:
            rule[i] = 9
        elif pb and heartbeat and plen > 0:
            rule[i] = 10
        elif carries and not has_head:
            rule[i] = 11
        elif carries and plen > _MAX_FRAME:
            rule[i] = 12
        elif carries and magic == _CKF1_MAGIC:
            rule[i] = 13
        elif carries and magic != _CBI1_MAGIC:
            rule[i] = 14
        elif carries and wire_version != 1:
            rule[i] = 15
        elif carries and not ok_sum:
            rule[i] = 16
        elif carries and (format_version != 1 or fp_bits != 16 or slots != 4):
            rule[i] = 17
        elif pb and carries and (seed != run_seed[r] or buckets != run_buckets[r]):
            rule[i] = 18
        elif carries and not (chunk and is_chunk) and not (delta and is_delta):
            rule[i] = 19
        elif pb and carries and dc_id != run_dc[r]:
            rule[i] = 20
        elif pb and carries and epoch != s:
            rule[i] = 21
        elif pb and delta and base_epoch != b:
            rule[i] = 22
        elif is_delta and delta and plen != 60 + 12 * np.int64(image_count):
            rule[i] = 23
        elif chunk_bad and chunk:
            rule[i] = 24
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
