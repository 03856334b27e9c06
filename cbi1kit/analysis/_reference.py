"""The frames table without numba: the same columns, per message, in Python.

Each message is walked field by field (protobuf's wire rules, as strict as prost: a known field with
a foreign wire type is malformed; the last occurrence wins), its relay and producer checked by
:func:`cbi1kit.relay._messages.check_filter_update`, its payload decoded by
:func:`cbi1kit.wire.decode` and compared with its envelope. Each reports its first failure; the
verdict is the earliest of them in the rulebook (:data:`cbi1kit.wire.RULES`). It is the compiled
kernels' oracle (``tests/test_rulebook.py``) and the fallback when they cannot be loaded.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Final

import polars as pl
import xxhash
from google.protobuf.message import DecodeError

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._schema import _SOURCES, KINDS
from cbi1kit.errors import Cbi1Error, RelayWireError
from cbi1kit.relay._messages import check_filter_update, validate_producer_identity
from cbi1kit.wire._codec import decode
from cbi1kit.wire._format import FilterFormat
from cbi1kit.wire._frames import Delta, Frame, SnapshotChunk
from cbi1kit.wire._rules import RULE_INDEX, RULES, rule_for

if TYPE_CHECKING:
    from cbi1kit.capture._items import FrameSpan

_PRODUCER_COLS: Final = (
    "pool_identity_version",
    "cache_semantics",
    "cache_semantics_source",
    "routing_scope",
    "routing_scope_source",
    "dc_id",
    "producer_incarnation",
    "layout_generation",
    "ckf_format_version",
    "ckf_seed",
    "ckf_bucket_count",
    "ckf_fingerprint_bits",
    "ckf_slots_per_bucket",
    "producer_key",
    "_producer_error",
    "_malformed",
    "_unsupported",
)
_RELAY_COLS: Final = ("relay_drt_instance_id", "relay_incarnation", "_malformed")
_NO_PRODUCER: Final = (None,) * len(_PRODUCER_COLS)
_ERROR, _MALFORMED, _UNSUPPORTED = (
    _PRODUCER_COLS.index(c) for c in ("_producer_error", "_malformed", "_unsupported")
)


def _producer_summary(raw: bytes) -> tuple[Any, ...]:
    """A producer sub-message's columns, its validator's error, and whether it parses."""
    try:
        p = pb.ProducerIdentity.FromString(raw)
    except DecodeError:  # the whole message is malformed, as prost decodes it at once
        return (None,) * _MALFORMED + (True, None)
    error, unsupported = None, None
    try:
        validate_producer_identity(p, path="FilterUpdate.producer")
    except RelayWireError as exc:
        error = str(exc)
        unsupported = rule_for(exc) == "relay-producer-unsupported" or None
    d = p.pool_id.indexer_domain
    cs, rs = d.cache_semantics.digest.hex(), d.routing_scope.digest.hex()
    f = p.ckf_format
    key = f"{cs}:{rs}/{p.pool_id.dc_id:016x}#{p.producer_incarnation:016x}.{p.layout_generation}"
    return (
        p.pool_id.identity_version,
        cs,
        _SOURCES.get(d.cache_semantics.source, str(d.cache_semantics.source)),
        rs,
        _SOURCES.get(d.routing_scope.source, str(d.routing_scope.source)),
        p.pool_id.dc_id,
        p.producer_incarnation,
        p.layout_generation,
        f.format_version,
        f.seed,
        f.bucket_count,
        f.fingerprint_bits,
        f.slots_per_bucket,
        key,
        error,
        None,
        unsupported,
    )


def _relay_summary(raw: bytes) -> tuple[int | None, int | None, bool | None]:
    try:
        r = pb.RelayIdentity.FromString(raw)
    except DecodeError:  # the whole message is malformed
        return None, None, True
    return r.drt_instance_id, r.relay_incarnation, None


_U64: Final = (1 << 64) - 1
_KNOWN: Final = {1: 0, 4: 0, 5: 0, 6: 0, 7: 0, 2: 2, 3: 2, 8: 2, 127: 5}  # field -> wire type
_HEAD: Final = struct.Struct("<4xHHBBHQQQQI")  # the CBI1 header after its magic: its columns
HEADER_COLUMNS: Final = (
    "cbi1_wire_version",
    "cbi1_flags",
    "cbi1_fingerprint_bits",
    "cbi1_slots",
    "cbi1_format_version",
    "cbi1_seed",
    "cbi1_bucket_count",
    "cbi1_dc_id",
    "cbi1_epoch",
    "cbi1_checksum",
)
_CHUNK_COLS: Final = ("chunk_index", "chunk_count", "bucket_offset")  # a chunk's body prefix
_DELTA_COLS: Final = ("base_epoch", "image_count")  # a delta's
_KINDS: Final = {1: 0, 2: 1, 3: 2, 0: 3}  # kind -> index in KINDS (else 4, UNKNOWN)


def _varint(raw: bytes, p: int, e: int) -> tuple[int, int] | None:
    v = shift = 0
    while p < e and shift < 70:
        c = raw[p]
        p += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v & _U64, p
    return None


def _field(raw: bytes, p: int, e: int, wt: int) -> tuple[int, int] | None:
    """The value of the field of wire type ``wt`` at ``raw[p:e]`` (a length-delimited field's
    length) and where the field ends; None where it does not end in time, and for a group or
    an invalid wire type."""
    if wt in (0, 2):
        got = _varint(raw, p, e)
        if got is None or wt == 0:
            return got
        v, p = got
        return (v, p + v) if v <= e - p else None
    width = {5: 4, 1: 8}.get(wt)
    if width is None or p + width > e:
        return None
    return int.from_bytes(raw[p : p + width], "little"), p + width


def walk_filter_update(raw: bytes) -> tuple[dict[int, int], dict[int, bytes], bool, bool]:
    """``(values, spans, malformed, unknown)``: the last value of each known scalar field (a
    length for length-delimited fields), the last bytes of fields 2, 3 and 8, whether the walk
    hit damage (fields before it are kept) and whether it skipped unknown fields."""
    values: dict[int, int] = {}
    spans: dict[int, bytes] = {}
    unknown = False
    p, e = 0, len(raw)
    while p < e:
        got = _varint(raw, p, e)
        if got is None:
            return values, spans, True, unknown
        tag, p = got
        field, wt = tag >> 3, tag & 7
        known = _KNOWN.get(field)
        if field == 0 or (known is not None and wt != known):
            return values, spans, True, unknown
        got = _field(raw, p, e, wt)
        if got is None:
            return values, spans, True, unknown
        v, p = got
        if known is None:
            unknown = True
        else:
            values[field] = v
            if wt == 2:
                spans[field] = raw[p - v : p]
    return values, spans, False, unknown


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _earliest(*errors: BaseException | None) -> tuple[int, BaseException | None] | None:
    found = [(RULE_INDEX[rule_for(e)], e) for e in errors if e is not None]
    return min(found, key=lambda x: x[0]) if found else None


def _decoded(payload: bytes, seed: int, buckets: int) -> tuple[Frame | None, Cbi1Error | None]:
    """The CBI1 frame ``payload`` decoded against the format ``(seed, buckets)``, or the error
    its decode reports."""
    try:
        return decode(FilterFormat.unchecked(seed=seed, bucket_count=buckets), payload), None
    except Cbi1Error as exc:
        return None, exc


def frame_verdict(update: pb.FilterUpdate | None, payload: bytes) -> tuple[int, str] | None:
    """``(rule index, message)`` of the first rule that a message (``update``; ``None`` for a
    bare CBI1 frame ``payload``) breaks, ``None`` if valid."""
    relay_error = decode_error = None
    consumer: int | None = None
    frame = None
    if update is None:
        seed, buckets = struct.unpack_from("<QQ", payload, 12) if len(payload) >= 28 else (0, 0)
        decode_error = _decoded(payload, seed, buckets)[1]
    else:
        relay_error = check_filter_update(update)
        kind = update.kind
        if update.HasField("producer") and kind in (1, 2):
            fmt = update.producer.ckf_format
            frame, decode_error = _decoded(payload, fmt.seed, fmt.bucket_count)
        if frame is not None:  # stream.rs: the kind, check_header, then the base epoch
            if isinstance(frame, SnapshotChunk) != (kind == 1):
                consumer = RULE_INDEX["cbi1-kind-mismatch"]
            elif frame.header.dc_id != update.producer.pool_id.dc_id:
                consumer = RULE_INDEX["cbi1-dc-id"]
            elif frame.header.epoch != update.sequence:
                consumer = RULE_INDEX["cbi1-epoch"]
            elif isinstance(frame, Delta) and frame.base_epoch != update.base_sequence:
                consumer = RULE_INDEX["cbi1-delta-base-epoch"]
    first = _earliest(relay_error, decode_error)
    if consumer is not None and (first is None or consumer < first[0]):
        return consumer, RULES[consumer].message
    if first is None:
        return None
    index, error = first
    if index in (RULE_INDEX["relay-producer-identity"], RULE_INDEX["relay-producer-unsupported"]):
        return index, str(error)  # the validator's own words, as the compiled table shows
    return index, RULES[index].message


def _message(values: dict[int, int], spans: dict[int, bytes]) -> pb.FilterUpdate:
    """The message as the walk read it (sub-messages: their last occurrence, parsed alone)."""
    m = pb.FilterUpdate(
        protocol_version=values.get(1, 0) & 0xFFFFFFFF,
        base_sequence=values.get(4, 0),
        sequence=values.get(5, 0),
        send_ts_us=values.get(6, 0),
        kind=_int32(values.get(7, 0)),  # type: ignore[arg-type]
        payload=spans.get(8, b""),
        contract_marker=values.get(127, 0),
    )
    if 2 in spans:
        m.relay.MergeFromString(spans[2])
        m.relay.SetInParent()
    if 3 in spans:
        m.producer.MergeFromString(spans[3])
        m.producer.SetInParent()
    return m


def _cbi1_columns(payload: bytes) -> tuple[dict[str, Any], int]:
    """The CBI1 columns of a payload (its header's where it has one; a chunk's or a delta's
    body prefix where it is one, long enough; None elsewhere), and its flags as read from its
    first bytes padded with zeros."""
    n, head = len(payload), payload[:64].ljust(64, b"\0")
    h = dict(zip(HEADER_COLUMNS, _HEAD.unpack_from(head), strict=True))
    h.update(zip(_CHUNK_COLS, struct.unpack_from("<IIQ", head, 48), strict=True))
    h.update(zip(_DELTA_COLS, struct.unpack_from("<QI", head, 48), strict=True))
    has_head = n >= 48
    is_chunk = has_head and h["cbi1_flags"] == 1 and n >= 64
    is_delta = has_head and h["cbi1_flags"] == 2 and n >= 60
    body = xxhash.xxh3_64_intdigest(payload[48:]) & 0xFFFFFFFF if has_head else 0
    columns: dict[str, Any] = {k: h[k] if has_head else None for k in HEADER_COLUMNS}
    columns.update({k: h[k] if is_chunk else None for k in _CHUNK_COLS})
    columns.update({k: h[k] if is_delta else None for k in _DELTA_COLS})
    columns.update(
        payload_len=n,
        cbi1_checksum_ok=(body == h["cbi1_checksum"]) if has_head else None,
        word_count=(n - 64) // 8 if is_chunk else None,
    )
    return columns, h["cbi1_flags"]


def _envelope_columns(values: dict[int, int]) -> dict[str, Any]:
    """A message's envelope columns, from its walk's ``values``."""
    kind_raw = _int32(values.get(7, 0))
    send = values.get(6, 0)
    return {
        "send_ts_us": send,
        "send_time": send if send < 2**62 else None,
        "kind": KINDS[_KINDS.get(kind_raw, 4)],
        "kind_raw": kind_raw,
        "base_sequence": values.get(4, 0),
        "sequence": values.get(5, 0),
        "protocol_version": values.get(1, 0) & 0xFFFFFFFF,
        "contract_marker": values.get(127, 0) & 0xFFFFFFFF,
    }


def _bare_columns(cbi1: dict[str, Any], flags: int) -> dict[str, Any]:
    """A bare CBI1 frame's kind and sequences, from its header (``cbi1``: its columns)."""
    epoch, base_epoch = cbi1["cbi1_epoch"], cbi1["base_epoch"]
    return {
        "send_ts_us": None,
        "send_time": None,
        "kind": KINDS[0 if flags == 1 else 1 if flags == 2 else 4],
        "kind_raw": 1 if flags == 1 else 2 if flags == 2 else 0,
        "base_sequence": epoch if base_epoch is None else base_epoch,
        "sequence": epoch,
        "protocol_version": None,
        "contract_marker": None,
    }


def _row(raw: bytes, is_pb: bool) -> dict[str, Any]:
    """Every column of one message's row but the batch's own (index, offsets, times)."""
    values: dict[int, int] = {}
    spans: dict[int, bytes] = {}
    malformed = unknown = False
    if is_pb:
        values, spans, malformed, unknown = walk_filter_update(raw)
        payload = spans.get(8, b"")
    else:
        payload = raw
    relay = _relay_summary(spans[2]) if 2 in spans else (None, None, None)
    producer = _producer_summary(spans[3]) if 3 in spans else _NO_PRODUCER
    row: dict[str, Any] = dict(zip(_RELAY_COLS[:-1], relay, strict=False))
    row.update(zip(_PRODUCER_COLS[:-3], producer, strict=False))
    cbi1, flags = _cbi1_columns(payload)
    row.update(cbi1)
    row.update(_envelope_columns(values) if is_pb else _bare_columns(cbi1, flags))
    if malformed or (is_pb and (relay[2] or producer[_MALFORMED])):
        verdict: tuple[int, str] | None = (0, RULES[0].message)
    else:
        verdict = frame_verdict(_message(values, spans) if is_pb else None, payload)
    row.update(
        has_unknown_fields=unknown,
        validation_error=None if verdict is None else verdict[1],
        validation_rule=None if verdict is None else RULES[verdict[0]].id,
    )
    return row


def reference_frames(span: FrameSpan) -> pl.DataFrame:
    """The frames table rows of one span, computed message by message without numba."""
    from cbi1kit.analysis._schema import FRAMES_SCHEMA

    rows = []
    for i in range(len(span)):
        row = _row(span.raw(i), bool(span.is_pb[i]))
        timed = bool(span.has_time[i])
        row.update(
            frame_index=span.index + i,
            stream_id=int(span.stream[i]) & 0xFFFFFFFF,
            source_offset=int(span.offset[i]),
            raw_len=int(span.length[i]) & 0xFFFFFFFF,
            recv_time=int(span.wall[i]) if timed else None,
            recv_mono_ns=int(span.mono[i]) if timed else None,
        )
        rows.append(row)
    times = {"recv_time": pl.Int64, "send_time": pl.Int64}
    df = pl.DataFrame(rows, schema={**FRAMES_SCHEMA, **times})
    return df.with_columns(
        pl.col("recv_time").cast(FRAMES_SCHEMA["recv_time"]),
        pl.col("send_time").cast(FRAMES_SCHEMA["send_time"]),
    ).select(list(FRAMES_SCHEMA))
