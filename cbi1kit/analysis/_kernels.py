"""The compiled kernels of the frames table and replay: the ``FilterUpdate`` walk, the CBI1
body checksum (python-xxhash's C XXH3, called from the kernel), and the consumer's rules.

A protobuf walk is sequential per message (each field's position depends on the lengths before
it), so it is a numba ``nopython`` loop, compiled on first use and cached on disk under a key
of every source it compiles (:mod:`cbi1kit._compile`). The walk follows protobuf's wire rules,
as strict as prost: varints of at most 10 bytes, lengths within the message, field number 0
and groups malformed, a known field with a foreign wire type malformed, unknown fields skipped
and flagged, the last occurrence of a field kept. Its reference is ``_reference``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

from cbi1kit._compile import keyed_cache, le_u32, le_u64
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.hashing._c_xxh3 import c_xxh3
from cbi1kit.wire._format import (
    FINGERPRINT_BITS,
    FORMAT_VERSION,
    FRAME_HEAD_BYTES,
    HEADER_LEN,
    IMAGES_MAX_FRAME_BYTES,
    LEGACY_MAGIC,
    MAGIC,
    SLOTS_PER_BUCKET,
    SNAPSHOT_CHUNK_BUCKETS,
    WIRE_VERSION,
    WORD_BYTES,
    FrameKind,
    max_delta_images,
)
from cbi1kit.wire._layout import DELTA_IMAGE, DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX
from cbi1kit.wire._rules import RULE_INDEX

_F = TypeVar("_F", bound=Callable[..., Any])


def _kernel(f: _F) -> _F:
    """nopython, GIL released, no bounds checks (every index is checked in the code), cached
    under a key that covers every source the kernels inline (``_cache.keyed_cache``)."""
    return cast(_F, keyed_cache(numba.njit(nogil=True, boundscheck=False)(f)))


def _inline(f: _F) -> _F:
    """A helper of the kernels, compiled with its caller (LLVM inlines it where it pays;
    numba's IR-level inlining made the walk five times slower). No reference counting
    (``_nrt=False``): a helper allocates nothing, and counting each array it is passed cost
    more than the work (190 ns of a frame row's 500)."""
    return cast(_F, numba.njit(nogil=True, boundscheck=False, _nrt=False)(f))


# --------------------------------------------------------------------------------- byte loads

_u64 = le_u64  # the little-endian u64 and u32 at ``b[i:]`` (any alignment, one load each)
_u32 = le_u32
_u32u = le_u32

# where _read_head finds each CBI1 field it loads into ``h`` (in this order: the header, the
# chunk's prefix, the delta's), and how wide it is: the layout's, stated there once
_HEAD_FIELDS: Final = (*HEADER.fields, *SNAPSHOT_PREFIX.fields, *DELTA_PREFIX.fields)
_AT: Final = tuple(f.offset for f in _HEAD_FIELDS)
_W: Final = tuple(f.size for f in _HEAD_FIELDS)
_FLAGS_AT: Final = HEADER.field("flags").offset
_COUNT_AT: Final = DELTA_PREFIX.field("image_count").offset
_BUCKET_AT: Final = DELTA_IMAGE.field("bucket").offset
_DELTA_HEAD: Final = DELTA_PREFIX.end  # a delta's images start here
_CHUNK_HEAD: Final = SNAPSHOT_PREFIX.end  # a chunk's words start here
_IMAGE: Final = DELTA_IMAGE.size
_CHUNK: Final = int(FrameKind.SNAPSHOT_CHUNK)  # the header's flags
_DELTA: Final = int(FrameKind.DELTA)


# ------------------------------------------------------------------------------------- XXH3-64

_LO32: Final = np.uint64(0xFFFFFFFF)


@_inline
def _address(b: Any, p: Any) -> Any:
    return np.uint64(b.ctypes.data) + np.uint64(p)


@_inline
def xxh3_64_at(b: npt.NDArray[np.uint8], p: int, n: int) -> Any:
    """XXH3-64 (seed 0, default secret) of ``b[p : p + n]``: python-xxhash's C function, called
    from the kernel (faster than a numba XXH3 at every length a frame has)."""
    return c_xxh3(_address(b, p), n)


# ------------------------------------------------------------------------- FilterUpdate walk

UNKNOWN_FIELDS: Final = 1
MALFORMED: Final = 2
REPEATED: Final = 4
#: the fields the walk knows, by number (any other is skipped and flagged)
_KNOWN: Final = np.zeros(128, dtype=np.bool_)
_KNOWN[[f.number for f in pb.FilterUpdate.DESCRIPTOR.fields]] = True


@_inline
def _varint(b: Any, p: Any, e: Any) -> Any:
    """The varint at ``b[p:e]`` (at most 10 bytes, all before ``e``) and where it ends; -1
    where it does not end in time."""
    c = b[p]
    if c < 0x80:
        return np.uint64(c), p + 1
    v, shift = np.uint64(c & 0x7F), 7
    p += 1
    while p < e and shift < 70:
        c = b[p]
        p += 1
        v |= np.uint64(c & 0x7F) << np.uint64(shift)
        shift += 7
        if c < 0x80:
            return v, p
    return v, -1


#: what ``walk_update`` returns, by position: flags, the fields present (``HAS_*`` bits), the
#: varints (protocol version, base sequence, sequence, send time, kind), the contract marker,
#: then where the relay, producer and payload bytes are and how long they are
(W_FLAGS, W_HAS, W_VERSION, W_BASE, W_SEQ, W_SEND, W_KIND, W_MARKER) = range(8)
(W_RELAY_AT, W_RELAY_LEN, W_PRODUCER_AT, W_PRODUCER_LEN, W_PAYLOAD_AT, W_PAYLOAD_LEN) = range(8, 14)
HAS_VERSION, HAS_BASE, HAS_SEQ, HAS_SEND, HAS_KIND = 1, 2, 4, 8, 16
HAS_RELAY, HAS_PRODUCER, HAS_PAYLOAD, HAS_MARKER = 32, 64, 128, 256
_FN = pb.FilterUpdate  # its field numbers, as the walk matches them
_F_VERSION, _F_BASE, _F_SEQ = (
    _FN.PROTOCOL_VERSION_FIELD_NUMBER,
    _FN.BASE_SEQUENCE_FIELD_NUMBER,
    _FN.SEQUENCE_FIELD_NUMBER,
)
_F_SEND, _F_KIND, _F_RELAY = (
    _FN.SEND_TS_US_FIELD_NUMBER,
    _FN.KIND_FIELD_NUMBER,
    _FN.RELAY_FIELD_NUMBER,
)
_F_PRODUCER, _F_PAYLOAD, _F_MARKER = (
    _FN.PRODUCER_FIELD_NUMBER,
    _FN.PAYLOAD_FIELD_NUMBER,
    _FN.CONTRACT_MARKER_FIELD_NUMBER,
)


@_inline
def _known(field: Any) -> Any:
    return _KNOWN[field] if field < 128 else False


# Locals, not scratch arrays: what was written to memory made the walk four times slower; so it
# stays one loop with a branch per ``FilterUpdate`` field, the one function over ruff's limits.
@_inline
def walk_update(b: Any, p: Any, e: Any) -> Any:  # noqa: C901, PLR0915 - a branch per field, inlined (hot path)
    """The ``FilterUpdate`` at ``b[p:e]``, as the tuple ``W_*`` describes, as strict as prost:
    a known field with a foreign wire type, field 0 or a group is ``MALFORMED`` (the fields
    before it kept), an unknown field skipped and flagged, a known field given twice
    ``REPEATED`` (its last occurrence kept)."""
    flags, has = 0, 0
    version = base = seq = send = kind = marker = np.uint64(0)
    r_at = r_len = p_at = p_len = y_at = y_len = np.int64(0)
    while p < e:
        tag, p = _varint(b, p, e)
        field, wt = np.int64(tag >> np.uint64(3)), np.int64(tag & np.uint64(7))
        if p < 0 or field == 0:
            flags |= MALFORMED
            break
        bit = 0
        if wt == 0 or wt == 2:  # noqa: PLR1714 - a varint, or a length (no sets in numba)
            v, p = _varint(b, p, e) if p < e else (np.uint64(0), -1)  # -1: no byte left
            if p < 0 or (wt == 2 and v > np.uint64(e - p)):
                flags |= MALFORMED
                break
            at, n = p, np.int64(v)
            if wt == 2:
                p += n
            if wt == 0 and field == _F_VERSION:
                version, bit = v, HAS_VERSION
            elif wt == 0 and field == _F_BASE:
                base, bit = v, HAS_BASE
            elif wt == 0 and field == _F_SEQ:
                seq, bit = v, HAS_SEQ
            elif wt == 0 and field == _F_SEND:
                send, bit = v, HAS_SEND
            elif wt == 0 and field == _F_KIND:
                kind, bit = v, HAS_KIND
            elif wt == 2 and field == _F_RELAY:
                r_at, r_len, bit = at, n, HAS_RELAY
            elif wt == 2 and field == _F_PRODUCER:
                p_at, p_len, bit = at, n, HAS_PRODUCER
            elif wt == 2 and field == _F_PAYLOAD:
                y_at, y_len, bit = at, n, HAS_PAYLOAD
        elif wt == 5 or wt == 1:  # noqa: PLR1714
            width = 4 if wt == 5 else 8
            if p + width > e:
                flags |= MALFORMED
                break
            if wt == 5 and field == _F_MARKER:
                marker, bit = _u32(b, p), HAS_MARKER
            p += width
        else:  # groups (3, 4) and the invalid wire types 6, 7
            flags |= MALFORMED
            break
        if bit == 0 and _known(field):  # a known field with a foreign wire type
            flags |= MALFORMED
            break
        if bit == 0:
            flags |= UNKNOWN_FIELDS
        elif has & bit:
            flags |= REPEATED
        has |= bit
    return flags, has, version, base, seq, send, kind, marker, r_at, r_len, p_at, p_len, y_at, y_len


@_inline
def _le_part(b: Any, p: Any, n: Any, at: Any, width: Any) -> Any:
    """The little-endian field ``b[p + at : p + at + width]`` of a frame of ``n`` bytes, zeros
    past its end (a short frame's header reads as the zero-padded bytes it has)."""
    v = np.uint64(0)
    for k in range(width):
        if at + k < n:
            v |= np.uint64(b[p + at + k]) << np.uint64(8 * k)
    return v


@_inline
def _le_at(b: Any, p: Any, n: Any, at: Any, width: Any) -> Any:
    if n >= FRAME_HEAD_BYTES:  # the whole head is there: plain loads
        if width == 8:
            return _u64(b, p + at)
        if width == 4:
            return _u32(b, p + at)
        if width == 2:
            return np.uint64(b[p + at]) | np.uint64(b[p + at + 1]) << np.uint64(8)
        return np.uint64(b[p + at])
    return _le_part(b, p, n, at, width)


@_inline
def _top_bucket(b: Any, p: Any, n: Any) -> Any:
    """A delta payload's largest image bucket (0 unless its length fits its count: upstream
    ``decode_delta`` rejects a bucket >= bucket_count)."""
    if n >= _DELTA_HEAD and b[p + _FLAGS_AT] == _DELTA and b[p + _FLAGS_AT + 1] == 0:
        count = np.int64(_u32(b, p + _COUNT_AT))
        if n == _DELTA_HEAD + _IMAGE * count:
            m = np.uint64(0)
            q = np.uint64(p + _DELTA_HEAD + _BUCKET_AT)
            for k in range(count):
                m = max(m, _u32u(b, q + np.uint64(_IMAGE * k)))
            return m
    return np.uint64(0)


@_inline
def _same_bytes(b: Any, at: Any, n: Any, pool: Any, p_at: Any, p_n: Any) -> Any:
    """Whether ``b[at : at + n]`` equals ``pool[p_at : p_at + p_n]`` (eight bytes a load)."""
    if n != p_n:
        return False
    k = 0
    while k + 8 <= n:
        if _u64(b, at + k) != _u64(pool, p_at + k):
            return False
        k += 8
    while k < n:
        if b[at + k] != pool[p_at + k]:
            return False
        k += 1
    return True


@_inline
def _dim_of(
    b: Any, at: Any, n: Any, pool: Any, p_at: Any, p_len: Any, count: Any, last: Any, k: Any
) -> Any:
    """The index of the sub-message bytes ``b[at : at + n]`` among the ``count`` known ones
    (``pool`` holds them back to back; the last match, ``last[k]``, is tried first and set to
    the match), -1 if none is."""
    d = last[k]
    if d >= 0 and d < count and _same_bytes(b, at, n, pool, p_at[d], p_len[d]):
        return d
    for d in range(count):
        if _same_bytes(b, at, n, pool, p_at[d], p_len[d]):
            last[k] = d
            return d
    return -1


@_inline
def _body_check(b: Any, p: Any, n: Any) -> Any:
    """The CBI1 body checksum of the frame ``b[p : p + n]`` (0 if shorter than its header)."""
    if n < HEADER_LEN:
        return np.uint64(0)
    return xxh3_64_at(b, p + HEADER_LEN, n - HEADER_LEN) & _LO32


# ------------------------------------------------------------------------- the consumer's rules

_MARKER: Final = np.uint64(0x4B565231)
_U64_MAX: Final = np.uint64(2**64 - 1)
_MAX_WORDS: Final = np.int64(SNAPSHOT_CHUNK_BUCKETS)
_MAX_FRAME: Final = IMAGES_MAX_FRAME_BYTES
_MAX_IMAGES: Final = np.uint64(max_delta_images())
_CBI1_MAGIC: Final = np.uint64(int.from_bytes(MAGIC, "little"))
_CKF1_MAGIC: Final = np.uint64(int.from_bytes(LEGACY_MAGIC, "little"))
# ``frame_rules`` returns indices into the rulebook (cbi1kit.wire.RULES); each constant is looked
# up by id, so a reordered rulebook renumbers the kernel (and, through the keyed cache, recompiles)
PRODUCER_RULE: Final = RULE_INDEX["relay-producer-identity"]
UNSUPPORTED_RULE: Final = RULE_INDEX["relay-producer-unsupported"]
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


# where each column of ``frame_columns``' output blocks is (``analysis._frames`` names them)
C64: Final = (
    "send_ts_us",
    "base_sequence",
    "sequence",
    "cbi1_seed",
    "cbi1_bucket_count",
    "cbi1_dc_id",
    "cbi1_epoch",
    "bucket_offset",
    "base_epoch",
    "frame_index",
    "source_offset",
    "recv_time",
    "recv_mono_ns",
    "dc_id",
    "producer_incarnation",
    "layout_generation",
    "ckf_seed",
    "ckf_bucket_count",
    "relay_drt_instance_id",
    "relay_incarnation",
)
#: the producer's and relay's numeric columns, in ``C64`` and ``C32`` order (``dims``' arrays)
PRODUCER_U64: Final = (
    "dc_id",
    "producer_incarnation",
    "layout_generation",
    "ckf_seed",
    "ckf_bucket_count",
)
RELAY_U64: Final = ("relay_drt_instance_id", "relay_incarnation")
PRODUCER_U32: Final = (
    "pool_identity_version",
    "ckf_format_version",
    "ckf_fingerprint_bits",
    "ckf_slots_per_bucket",
)
C32: Final = (
    "protocol_version",
    "contract_marker",
    "payload_len",
    "cbi1_checksum",
    "chunk_index",
    "chunk_count",
    "word_count",
    "image_count",
    "kind_raw",
    "_producer",
    "_relay",
    "stream_id",
    "raw_len",
    *PRODUCER_U32,
)
C16: Final = ("cbi1_wire_version", "cbi1_flags", "cbi1_format_version")
C8: Final = (
    "cbi1_fingerprint_bits",
    "cbi1_slots",
    "_kind",
    "has_unknown_fields",
    "cbi1_checksum_ok",
    "_rule",
    "_pb",
    "_timed",
)
(_SEND, _BASE, _SEQ, _SEED, _BUCKETS, _DC, _EPOCH_C, _OFFSET, _BASE_EPOCH) = range(9)
(_REC, _SRC_OFF, _WALL, _MONO) = range(9, 13)
_P64, _R64 = 13, 13 + len(PRODUCER_U64)  # where the producer's and relay's columns begin
(_PROT, _MARK, _PLEN, _CHECK, _CIDX, _CCOUNT, _WORDS, _ICOUNT, _KRAW, _PDIM, _RDIM) = range(11)
_STREAM_C, _RAW_LEN, _P32 = 11, 12, 13
_WIRE_C, _FLAGS_C, _FORMAT_C = range(len(C16))
_FP_C, _SLOTS_C, _KIND_C, _UNKNOWN_C, _SUM_OK, _RULE_C, _PB_C, _TIMED_C = range(len(C8))
#: a row without the sub-message (no producer or relay dimension)
NO_DIM: Final = 0xFFFFFFFF
#: ``frame_columns`` stopped at a row whose producer (or relay) bytes are not known yet
NEED_PRODUCER: Final = 1
NEED_RELAY: Final = 2
#: a dimension's flags: the producer identity is invalid, the sub-message does not parse, the
#: invalid identity is unsupported semantics (the pool is quarantined)
DIM_INVALID: Final = 1
DIM_MALFORMED: Final = 2
DIM_UNSUPPORTED: Final = 4


_GO_ON: Final = -2  # a group of rules passed: the next group decides


@_inline
def _verdict(
    pb: Any,
    w: Any,
    code: Any,
    plen: Any,
    h: Any,
    checksum: Any,
    top: Any,
    bad: Any,
    seed_ok: Any,
    dc: Any,
    b: Any,
    s: Any,
) -> Any:
    """The first failing rule of one row (``RULES`` index; -1: valid), in the rulebook's order:
    the envelope's, the frame's, then the session's. ``w``: the walk's envelope; ``h``: the
    CBI1 fields (``_read_head``); ``bad``: the sub-messages' ``DIM_*`` flags; ``seed_ok``: the
    header's seed and bucket count are the producer's; ``dc``: its DC; ``b`` and ``s``: the
    row's base sequence and sequence (``_kind``)."""
    rule = _envelope_rule(pb, w, code, plen, bad, b, s)
    if rule == _GO_ON:
        rule = _frame_rule(pb, plen, h, checksum, top, seed_ok)
    if rule == _GO_ON:
        rule = _session_rule(pb, code, h, dc, b, s)
    return rule


@_inline
def _envelope_rule(pb: Any, w: Any, code: Any, plen: Any, bad: Any, b: Any, s: Any) -> Any:
    """The envelope's rules (a heartbeat is decided here); ``_GO_ON`` when they pass."""
    flags, has = w[W_FLAGS], w[W_HAS]
    chunk, delta, heartbeat = code == 0, code == 1, code == 2
    if flags & MALFORMED or (pb and bad & DIM_MALFORMED):
        return _PROTOBUF
    if not pb:
        return _GO_ON
    if np.uint32(w[W_MARKER]) != _MARKER:
        return _CONTRACT_MARKER
    if np.uint32(w[W_VERSION]) != 1:  # uint32: prost keeps the low 32 bits
        return _PROTOCOL_VERSION
    if not has & HAS_PRODUCER:
        return _PRODUCER_PRESENT
    if bad & DIM_UNSUPPORTED:  # an invalid identity, of unsupported semantics
        return UNSUPPORTED_RULE
    if bad & DIM_INVALID:
        return PRODUCER_RULE
    if not has & HAS_RELAY:
        return _RELAY_PRESENT
    if code >= 3:
        return _UPDATE_KIND
    if (chunk or heartbeat) and b != s:
        return _BASE_EQUALS_SEQUENCE
    if heartbeat and plen > 0:  # empty chunk/delta payloads: decode's Truncated
        return _PAYLOAD
    return _GO_ON if chunk or delta else -1  # -1: a valid heartbeat


@_inline
def _frame_rule(pb: Any, plen: Any, h: Any, checksum: Any, top: Any, seed_ok: Any) -> Any:
    """The CBI1 frame's own rules (decode's); ``_GO_ON`` when they pass."""
    magic, wire_version, hflags, fp_bits, slots, format_version = h[0], h[1], h[2], h[3], h[4], h[5]
    if plen < HEADER_LEN:
        return _TRUNCATED
    if plen > _MAX_FRAME:
        return _FRAME_TOO_LARGE
    if magic == _CKF1_MAGIC:
        return _LEGACY_CKF1
    if magic != _CBI1_MAGIC:
        return _MAGIC
    if wire_version != WIRE_VERSION:
        return _WIRE_VERSION
    if checksum != h[10]:
        return _CHECKSUM
    if format_version != FORMAT_VERSION or fp_bits != FINGERPRINT_BITS or slots != SLOTS_PER_BUCKET:
        return _FORMAT_SHAPE
    if pb and not seed_ok:
        return _FORMAT_MISMATCH
    if hflags != _CHUNK and hflags != _DELTA:  # noqa: PLR1714 - no sets in numba
        return _FLAGS
    return _body_rule(plen, h, top)


@_inline
def _body_rule(plen: Any, h: Any, top: Any) -> Any:
    """A delta's or a snapshot chunk's layout rules; ``_GO_ON`` when they pass."""
    hflags, buckets = h[2], h[7]
    chunk_index, chunk_count, bucket_offset, image_count = h[11], h[12], h[13], h[15]
    body = plen - _CHUNK_HEAD
    if hflags == _DELTA and (
        plen < _DELTA_HEAD
        or image_count > _MAX_IMAGES
        or plen != _DELTA_HEAD + _IMAGE * np.int64(image_count)
    ):
        return _DELTA_LENGTH
    if hflags == _DELTA and image_count > 0 and top >= buckets:
        return _DELTA_BUCKET_RANGE
    if hflags == _CHUNK and (
        plen < _CHUNK_HEAD
        or chunk_count == 0
        or chunk_index >= chunk_count
        or body % WORD_BYTES != 0
        or body // WORD_BYTES > _MAX_WORDS
        or bucket_offset > buckets
        or np.uint64(body // WORD_BYTES) > buckets - bucket_offset
    ):
        return _CHUNK_LAYOUT
    return _GO_ON


@_inline
def _session_rule(pb: Any, code: Any, h: Any, dc: Any, b: Any, s: Any) -> Any:
    """The rules between the envelope and the frame (their kinds, DC and sequences)."""
    hflags, dc_id, epoch, base_epoch = h[2], h[8], h[9], h[14]
    chunk, delta = code == 0, code == 1
    if not pb:
        return -1
    if (hflags == _CHUNK) != chunk:
        return _KIND_MISMATCH
    if dc_id != dc:
        return _DC_ID
    if epoch != s:
        return _EPOCH
    if delta and base_epoch != b:
        return _DELTA_BASE_EPOCH
    if delta and (b == _U64_MAX or s != b + np.uint64(1)):
        return _DELTA_CONTIGUOUS
    return -1


@_inline
def _kind(pb: Any, w: Any, h: Any, plen: Any) -> Any:
    """A row's kind as sent (an int32 enum's bits; a bare frame's from its CBI1 flags) and as
    its ``KINDS`` code, and its base sequence and sequence: the envelope's, or a bare frame's
    epochs (``h``: its CBI1 fields)."""
    if pb:
        kraw = np.int64(w[W_KIND]) & 0xFFFFFFFF
        code = 0 if kraw == 1 else 1 if kraw == 2 else 2 if kraw == 3 else 3 if kraw == 0 else 4
        return kraw, code, w[W_BASE], w[W_SEQ]
    hflags = h[2]
    code = 0 if hflags == _CHUNK else 1 if hflags == _DELTA else 4
    kraw = np.int64(1 if hflags == _CHUNK else 2 if hflags == _DELTA else 0)
    return kraw, code, h[14] if (plen >= _DELTA_HEAD and hflags == _DELTA) else h[9], h[9]


@_inline
def _read_head(b: Any, pp: Any, plen: Any, h: Any) -> None:
    """The CBI1 header and body-prefix fields of the payload ``b[pp : pp + plen]`` into ``h``:
    magic, wire version, flags, fingerprint bits, slots, format version, seed, bucket count,
    DC, epoch, body checksum, chunk index, chunk count, bucket offset, base epoch, image count;
    zeros past the payload's end."""
    h[0] = _le_at(b, pp, plen, _AT[0], _W[0])
    h[1] = _le_at(b, pp, plen, _AT[1], _W[1])
    h[2] = _le_at(b, pp, plen, _AT[2], _W[2])
    h[3] = _le_at(b, pp, plen, _AT[3], _W[3])
    h[4] = _le_at(b, pp, plen, _AT[4], _W[4])
    h[5] = _le_at(b, pp, plen, _AT[5], _W[5])
    h[6] = _le_at(b, pp, plen, _AT[6], _W[6])
    h[7] = _le_at(b, pp, plen, _AT[7], _W[7])
    h[8] = _le_at(b, pp, plen, _AT[8], _W[8])
    h[9] = _le_at(b, pp, plen, _AT[9], _W[9])
    h[10] = _le_at(b, pp, plen, _AT[10], _W[10])
    h[11] = _le_at(b, pp, plen, _AT[11], _W[11])
    h[12] = _le_at(b, pp, plen, _AT[12], _W[12])
    h[13] = _le_at(b, pp, plen, _AT[13], _W[13])
    h[14] = _le_at(b, pp, plen, _AT[14], _W[14])
    h[15] = _le_at(b, pp, plen, _AT[15], _W[15])


@_inline
def _write_row(
    o64: Any,
    o32: Any,
    o16: Any,
    o8: Any,
    r: Any,
    w: Any,
    h: Any,
    x: Any,
    pv64: Any,
    pv32: Any,
    rv64: Any,
) -> None:
    """Row ``r`` of the column blocks: ``w`` the envelope, ``h`` the CBI1 fields, ``x`` the
    row's own (payload length, checksum, kind raw and code, flags, dims, rule, base, sequence)."""
    plen, checksum, kraw, code, flags, pdim, rdim, rule = (
        x[0],
        x[1],
        x[2],
        x[3],
        x[4],
        x[5],
        x[6],
        x[7],
    )
    o64[r, _SEND], o64[r, _BASE], o64[r, _SEQ] = w[W_SEND], x[8], x[9]
    o64[r, _SEED], o64[r, _BUCKETS], o64[r, _DC], o64[r, _EPOCH_C] = h[6], h[7], h[8], h[9]
    o64[r, _OFFSET], o64[r, _BASE_EPOCH] = h[13], h[14]
    o32[r, _PROT], o32[r, _MARK] = w[W_VERSION] & _LO32, w[W_MARKER] & _LO32
    o32[r, _PLEN], o32[r, _CHECK], o32[r, _CIDX], o32[r, _CCOUNT] = plen, h[10], h[11], h[12]
    is_chunk = plen >= _CHUNK_HEAD and h[2] == _CHUNK
    o32[r, _WORDS] = (plen - _CHUNK_HEAD) // WORD_BYTES if is_chunk else 0
    o32[r, _ICOUNT], o32[r, _KRAW] = h[15], kraw
    o32[r, _PDIM], o32[r, _RDIM] = pdim, rdim
    if pdim != NO_DIM:
        for k in range(len(PRODUCER_U64)):
            o64[r, _P64 + k] = pv64[k, pdim]
        for k in range(len(PRODUCER_U32)):
            o32[r, _P32 + k] = pv32[k, pdim]
    if rdim != NO_DIM:
        for k in range(len(RELAY_U64)):
            o64[r, _R64 + k] = rv64[k, rdim]
    o16[r, _WIRE_C], o16[r, _FLAGS_C], o16[r, _FORMAT_C] = h[1], h[2], h[5]
    o8[r, _FP_C], o8[r, _SLOTS_C], o8[r, _KIND_C] = h[3], h[4], code
    o8[r, _UNKNOWN_C] = (flags & UNKNOWN_FIELDS) != 0
    o8[r, _SUM_OK] = plen >= HEADER_LEN and checksum == h[10]
    o8[r, _RULE_C] = rule  # the rule's index + 1; 0: valid


@_inline
def _write_own(
    o64: Any, o32: Any, o8: Any, r: Any, own: Any, i: Any, index0: Any, n: Any, pb: Any
) -> None:
    """Row ``r``'s columns of its place in the span, the span's row ``i``: ``own`` = the span's
    (stream, offset, receive times, whether timed), ``index0`` its first frame number, ``n``
    the message's length, ``pb`` whether it is a protobuf envelope."""
    stream, offset, wall, mono, timed = own
    o64[r, _REC], o64[r, _SRC_OFF] = index0 + i, offset[i]
    o64[r, _WALL], o64[r, _MONO] = wall[i], mono[i]
    o32[r, _STREAM_C], o32[r, _RAW_LEN] = stream[i], n
    o8[r, _PB_C], o8[r, _TIMED_C] = pb, timed[i]


@_kernel
def frame_columns(
    b: npt.NDArray[np.uint8],
    start: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    is_pb: npt.NDArray[np.bool_],
    lo: int,
    hi: int,
    row0: int,
    own: tuple[npt.NDArray[Any], ...],
    index0: int,
    out: tuple[npt.NDArray[Any], ...],
    dims: tuple[npt.NDArray[Any], ...],
    last: npt.NDArray[np.int64],
) -> tuple[int, int]:
    """Rows ``lo`` to ``hi`` of a span (``b[start : start + length]``; bare CBI1 frames where not
    ``is_pb``) into the columns ``out`` = (``C64``, ``C32``, ``C16``, ``C8``) from row ``row0``.
    ``dims`` = (pool; each producer's offset, length, ``DIM_*`` flags, seed, bucket count, DC; each
    relay's offset, length, flags): the sub-messages so far, back to back in ``pool``; ``last`` the
    last match of each; ``own``, ``index0`` as :func:`_write_own`. Stops at a row with new bytes,
    for the caller to parse once. Returns ``(the first row not written, NEED_* or 0)``."""
    o64, o32, o16, o8 = out
    pool, p_at, p_len, p_bad, p_seed, p_buckets, p_dc, r_at, r_len, r_bad, pv64, pv32, rv64 = dims
    h = np.zeros(16, dtype=np.uint64)
    x = np.zeros(10, dtype=np.uint64)
    u, p_n, r_n = np.uint64(0), len(p_at), len(r_at)  # the dims known (none added in a call)
    for i in range(lo, hi):
        p, n = start[i], length[i]
        pb = is_pb[i]
        # the envelope; a bare frame's bytes are its payload
        w = walk_update(b, p, p + n) if pb else (0, HAS_PAYLOAD, u, u, u, u, u, u, 0, 0, 0, 0, p, n)
        pp, plen, has = w[W_PAYLOAD_AT], w[W_PAYLOAD_LEN], w[W_HAS]
        pdim = rdim = -1
        if has & HAS_PRODUCER:
            pdim = _dim_of(b, w[W_PRODUCER_AT], w[W_PRODUCER_LEN], pool, p_at, p_len, p_n, last, 0)
            if pdim < 0:
                return i, NEED_PRODUCER
        if has & HAS_RELAY:
            rdim = _dim_of(b, w[W_RELAY_AT], w[W_RELAY_LEN], pool, r_at, r_len, r_n, last, 1)
            if rdim < 0:
                return i, NEED_RELAY
        _read_head(b, pp, plen, h)
        checksum = _body_check(b, pp, plen)
        kraw, code, base, seq = _kind(pb, w, h, plen)
        bad = np.uint8(0) if pdim < 0 else p_bad[pdim]
        if rdim >= 0:
            bad |= r_bad[rdim] & DIM_MALFORMED
        seed_ok = pdim >= 0 and h[6] == p_seed[pdim] and h[7] == p_buckets[pdim]
        dc = np.uint64(0) if pdim < 0 else p_dc[pdim]
        top = _top_bucket(b, pp, plen)
        rule = _verdict(pb, w, code, plen, h, checksum, top, bad, seed_ok, dc, base, seq)
        x[0], x[1], x[2], x[3], x[4] = plen, checksum, kraw, code, w[W_FLAGS]
        x[5], x[6] = (NO_DIM if pdim < 0 else pdim), (NO_DIM if rdim < 0 else rdim)
        x[7], x[8], x[9] = rule + 1, base, seq
        r = row0 + i - lo
        _write_row(o64, o32, o16, o8, r, w, h, x, pv64, pv32, rv64)
        _write_own(o64, o32, o8, r, own, i, index0, n, pb)
    return hi, 0
