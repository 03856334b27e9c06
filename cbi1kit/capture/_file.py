"""``kvrcap`` capture files: a recorded relay session, byte-exact, append-only, crash-tolerant.

Each gRPC response is stored as the bytes received (never re-encoded), with wall-clock and
monotonic receive times, between stream open/close records; a schema record pins the ``.proto``.
Records are self-delimiting with header and body checksums, so damage is found at a known offset
and record index and a growing file can be followed. See ``docs/capture-format.md``.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Self

import numpy as np
import numpy.typing as npt
import xxhash

from cbi1kit.capture._layout import (
    FILE_HEADER,
    FILE_MAGIC,
    INDEX_BODY,
    RECORD_HEADER,
    RECORD_MAGIC,
    TRAILER_BODY,
    TRAILER_MAGIC,
    RecordType,
)
from cbi1kit.errors import CaptureError, CaptureVariant
from cbi1kit.hashing._dc_names import learn_dc_names

#: what tells a capture from the other sources: the magic's name. Its line ending is the file
#: header check's, so that a copy made in text mode is a damaged capture, not a foreign file.
CAPTURE_SIGNATURE: Final = FILE_MAGIC[:6]


def is_capture_file(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` is a capture, whole or damaged (``CAPTURE_SIGNATURE``;
    ``OSError`` if unreadable): how every reader tells a capture from its other sources."""
    with open(path, "rb") as f:
        return f.read(len(CAPTURE_SIGNATURE)) == CAPTURE_SIGNATURE


FORMAT_VERSION: Final = 1
FILE_HEADER_LEN: Final = FILE_HEADER.size
RECORD_HEADER_LEN: Final = RECORD_HEADER.size
MAX_BODY_LEN: Final = (1 << 31) - 1

_FILE_HEADER: Final = FILE_HEADER.codec
_RECORD_HEADER: Final = RECORD_HEADER.codec
_xxh3: Final = xxhash.xxh3_64_intdigest
_CHECK_MASK: Final = 0xFFFFFFFF


def _check(data: Any) -> int:
    """Low 32 bits of xxh3_64 (seed 0): the same checksum CBI1 uses, fast on large bodies."""
    return _xxh3(data) & _CHECK_MASK


#: where each record header field stands in :func:`record_header`'s tuple
RECORD_FIELD: Final = {spec.name: i for i, spec in enumerate(RECORD_HEADER)}
_TYPE, _BODY_LEN, _BODY_CHECK = (RECORD_FIELD[n] for n in ("record_type", "body_len", "body_check"))


def record_header(head: Any) -> tuple[Any, ...] | None:
    """The fields of a record header (``head``: its bytes) when its magic and its own checksum
    verify, else None: the one check every reader makes of a header (the compiled walk's is
    its twin, held to it by ``tests/test_scan.py``)."""
    if len(head) < RECORD_HEADER_LEN or bytes(head[:4]) != RECORD_MAGIC:
        return None
    fields = _RECORD_HEADER.unpack_from(head)
    return fields if fields[-1] == _check(memoryview(head)[: RECORD_HEADER_LEN - 4]) else None


def body_verifies(fields: tuple[Any, ...], body: Any) -> bool:
    """Whether ``body`` is the one the header ``fields`` describe: its length and checksum."""
    return bool(len(body) == fields[_BODY_LEN] and fields[_BODY_CHECK] == _check(body))


#: Record types that only give the file its structure; ``records()`` skips them by default.
STRUCTURAL: Final = frozenset({RecordType.INDEX, RecordType.TRAILER})
_INDEX_HEAD: Final = INDEX_BODY.codec
#: INDEX record header flag: ``block_check`` holds the low 32 bits of xxh3_64 of the block, the
#: bytes from the first listed record's header to the INDEX record (the covered records, back
#: to back). Without the flag (older writers) the field is 0 and means nothing.
INDEX_FLAG_BLOCK_CHECK: Final = 0x01
_TRAILER_BODY: Final = TRAILER_BODY.codec
TRAILER_LEN: Final = RECORD_HEADER_LEN + _TRAILER_BODY.size
DEFAULT_INDEX_EVERY: Final = 4096


class _ClosesOnExit:
    """``with x:`` closes ``x`` at the end (the readers' and writers' context manager):
    ``__enter__`` gives it, ``__exit__`` calls its ``close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class CaptureDamage:
    """A damaged stretch of a capture, reported inline by :meth:`CaptureReader.items`.

    ``error`` says what and where; reading resumed at ``end_offset``. ``skipped`` are the record
    numbers lost (empty for a repeated record; open-ended damage at the end counts one).
    ``record_type`` / ``stream_id`` are known when only the body was damaged: that record is lost.
    """

    error: CaptureError
    end_offset: int
    skipped: range
    record_type: RecordType | None = None
    stream_id: int | None = None

    @property
    def offset(self) -> int:
        """The byte of the file where the damage starts."""
        return self.error.at

    @property
    def record_index(self) -> int:
        """The record the damage is at (-1: before the first record)."""
        return self.error.record_index

    @property
    def reason(self) -> str:
        """Why the record is damaged, in words."""
        return self.error.reason

    @property
    def truncated(self) -> bool:
        """Whether the file ends inside a record (a cut, not corruption)."""
        return self.error.variant is CaptureVariant.Truncated


@dataclass(frozen=True, slots=True)
class CaptureRecord:
    """One record. ``body`` is a copy; ``body_offset`` lets a caller slice the map zero-copy."""

    index: int
    offset: int
    type: RecordType
    stream_id: int
    recv_unix_ns: int
    recv_mono_ns: int
    body_offset: int
    body: bytes

    @property
    def end_offset(self) -> int:
        """Byte offset just past the record's body (where the next record starts)."""
        return self.body_offset + len(self.body)


@dataclass(frozen=True, slots=True)
class StreamOpen:
    """What a stream asked for: the RPC, the target and the request bytes as sent."""

    target: str
    method: str
    request: bytes
    metadata: tuple[tuple[str, str], ...] = ()
    info: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StreamClose:
    """How a stream ended: gRPC status, trailers (incl. ``kv-relay-error-reason``), counts."""

    status_code: int
    status_name: str
    details: str
    message_count: int
    error_reason: str | None = None
    local_reason: str | None = None
    trailing_metadata: tuple[tuple[str, str], ...] = ()


_U32: Final = struct.Struct("<I")


def _encode_stream_open(open_: StreamOpen) -> bytes:
    meta = {
        "target": open_.target,
        "method": open_.method,
        "metadata": [list(kv) for kv in open_.metadata],
        "info": dict(open_.info or {}),
    }
    text = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    return _U32.pack(len(text)) + text + open_.request


def _malformed(what: str, reason: str, field: str) -> CaptureError:
    """A control record whose body does not decode; the reader adds where it sits."""
    return CaptureError(CaptureVariant.Malformed, f"{what} body: {reason}", field=field)


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    """A control record's JSON object: any parse failure (bad UTF-8, syntax, nesting past the
    parser's depth, an integer of thousands of digits) is a typed error, never a crash."""
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        raise _malformed(what, f"not JSON ({type(exc).__name__}: {exc})", what) from None
    if not isinstance(meta, dict):
        raise _malformed(what, f"expected a JSON object, got {type(meta).__name__}", what)
    return meta


def _field(meta: dict[str, Any], key: str, kind: type, what: str) -> Any:
    value = meta.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        got = "missing" if key not in meta else type(value).__name__
        raise _malformed(what, f"{key} must be {kind.__name__}, got {got}", f"{what}.{key}")
    return value


def _pairs(meta: dict[str, Any], key: str, what: str) -> tuple[tuple[str, str], ...]:
    items = meta.get(key, [])
    if not isinstance(items, list) or not all(
        isinstance(kv, list) and len(kv) == 2 and all(isinstance(x, str) for x in kv)
        for kv in items
    ):
        raise _malformed(what, f"{key} must be a list of [str, str] pairs", f"{what}.{key}")
    return tuple((k, v) for k, v in items)


def at_record(error: CaptureError, source: str, offset: int, record_index: int) -> CaptureError:
    """``error`` (from decoding a record's body) placed at the record: offset and index."""
    return CaptureError(
        error.variant,
        error.detail,
        source=source,
        offset=offset,
        record_index=record_index,
        field=error.field,
    )


def decode_stream_open(body: bytes) -> StreamOpen:
    """Body layout: u32 JSON length, UTF-8 JSON metadata, then the raw request message bytes.
    A body that does not decode is ``CaptureError`` ``Malformed`` (field path included)."""
    what = "STREAM_OPEN"
    if len(body) < 4:
        raise _malformed(what, f"{len(body)} bytes, shorter than its u32 JSON length", what)
    (n,) = _U32.unpack_from(body, 0)
    if 4 + n > len(body):
        raise _malformed(what, f"JSON length {n} runs past the {len(body)}-byte body", what)
    meta = _json_object(body[4 : 4 + n], what)
    info = meta.get("info") or {}
    if not isinstance(info, dict):
        raise _malformed(what, "info must be a JSON object", f"{what}.info")
    names = info.get("dc_names")
    if isinstance(names, list):
        learn_dc_names(n for n in names if isinstance(n, str))  # what the recorder was told
    return StreamOpen(
        target=_field(meta, "target", str, what),
        method=_field(meta, "method", str, what),
        request=bytes(body[4 + n :]),
        metadata=_pairs(meta, "metadata", what),
        info=info,
    )


def _encode_stream_close(close: StreamClose) -> bytes:
    meta = {
        "status_code": close.status_code,
        "status_name": close.status_name,
        "details": close.details,
        "message_count": close.message_count,
        "error_reason": close.error_reason,
        "local_reason": close.local_reason,
        "trailing_metadata": [list(kv) for kv in close.trailing_metadata],
    }
    return json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()


def decode_stream_close(body: bytes) -> StreamClose:
    """Body layout: UTF-8 JSON object (status_code, status_name, details, message_count, ...).
    A body that does not decode is ``CaptureError`` ``Malformed`` (field path included)."""
    what = "STREAM_CLOSE"
    meta = _json_object(body, what)
    optional = {}
    for key in ("error_reason", "local_reason"):
        value = meta.get(key)
        if value is not None and not isinstance(value, str):
            raise _malformed(what, f"{key} must be str or null", f"{what}.{key}")
        optional[key] = value
    return StreamClose(
        status_code=_field(meta, "status_code", int, what),
        status_name=_field(meta, "status_name", str, what),
        details=_field(meta, "details", str, what),
        message_count=_field(meta, "message_count", int, what),
        trailing_metadata=_pairs(meta, "trailing_metadata", what),
        **optional,
    )


def schema_bytes() -> bytes:
    """A serialized ``FileDescriptorSet`` of the ``dynamo.kvrelay.v1`` schema cbi1kit uses."""
    from google.protobuf import descriptor_pb2

    from cbi1kit._proto import kvrelay_v1_pb2

    fds = descriptor_pb2.FileDescriptorSet()
    kvrelay_v1_pb2.DESCRIPTOR.CopyToProto(fds.file.add())
    return fds.SerializeToString(deterministic=True)


def check_file_header(head: bytes, source: str) -> tuple[CaptureError | None, bool, int]:
    """A file's first bytes judged: (error, fatal, created_unix_ns). A checksum mismatch under
    an intact magic is not fatal: the records after it may still be read."""

    def err(variant: CaptureVariant, reason: str) -> CaptureError:
        return CaptureError(variant, reason, offset=0, record_index=-1, source=source)

    if len(head) < FILE_HEADER_LEN:
        if FILE_MAGIC.startswith(head[: len(FILE_MAGIC)]):
            return err(CaptureVariant.Truncated, "file header is incomplete"), True, 0
        return err(CaptureVariant.Corrupt, "not a kvrcap capture (bad magic)"), True, 0
    magic, version, header_len, _flags, created, _res, check = _FILE_HEADER.unpack_from(head)
    if magic != FILE_MAGIC:
        return err(CaptureVariant.Corrupt, "not a kvrcap capture (bad magic)"), True, 0
    if check != _check(head[: FILE_HEADER_LEN - 4]):
        return err(CaptureVariant.Corrupt, "file header checksum mismatch"), False, 0
    if version != FORMAT_VERSION or header_len != FILE_HEADER_LEN:
        why = f"unsupported capture version {version} (header length {header_len})"
        return err(CaptureVariant.Corrupt, why), True, 0
    return None, False, created


def _index_offsets(body: Any) -> list[int] | None:
    """The record offsets an INDEX body lists (None if the body is malformed)."""
    if len(body) < _INDEX_HEAD.size:
        return None
    _first, _prev, count, _res = _INDEX_HEAD.unpack_from(body, 0)
    if len(body) != _INDEX_HEAD.size + 8 * count:
        return None
    out: list[int] = np.frombuffer(body, dtype="<u8", offset=_INDEX_HEAD.size).tolist()
    return out


_NUMPY: Final = {"magic": "S4", "u8": "u1", "u16": "<u2", "u32": "<u4", "u64": "<u8"}
#: A record header as numpy reads it (``np.ndarray`` of these gathered at record offsets).
HEADER_DTYPE: Final = np.dtype([(f.name, _NUMPY[f.kind]) for f in RECORD_HEADER])
assert HEADER_DTYPE.itemsize == RECORD_HEADER_LEN


@dataclass(frozen=True, slots=True)
class IndexBlock:
    """The records one INDEX covers: ``offsets`` (their headers, back to back from ``start`` to
    ``index_offset``), numbered from ``first_index``; the INDEX itself is record
    ``first_index + len(offsets)`` and ends at ``index_end``. ``block_check`` is the low 32 bits
    of xxh3_64 of ``buf[start:index_offset]`` (None: an INDEX written without one)."""

    first_index: int
    start: int
    index_offset: int
    index_end: int
    offsets: npt.NDArray[np.int64]
    block_check: int | None


@dataclass(frozen=True, slots=True)
class CaptureIndex:
    """A closed capture's index: its blocks in file order and the TRAILER that ends the file."""

    blocks: tuple[IndexBlock, ...]
    trailer_offset: int
    trailer_index: int


def _verified_record(buf: Any, offset: int, rtype: RecordType) -> tuple[Any, ...] | None:
    """The header fields and body of the record at ``offset`` if it is an intact ``rtype``."""
    if offset < FILE_HEADER_LEN:
        return None
    fields = record_header(memoryview(buf)[offset : offset + RECORD_HEADER_LEN])
    if fields is None or fields[_TYPE] != rtype:
        return None
    body_start = offset + RECORD_HEADER_LEN
    body = bytes(buf[body_start : body_start + fields[_BODY_LEN]])
    return (fields, body) if body_verifies(fields, body) else None


def _index_block(buf: Any, offset: int) -> tuple[IndexBlock, int] | None:
    """The block the INDEX at ``offset`` covers and the offset of the INDEX before it (0: none),
    if it verifies: header and body checksums, type, numbering, and the offsets it lists
    increasing inside the file before it."""
    found = _verified_record(buf, offset, RecordType.INDEX)
    if found is None or len(found[1]) < _INDEX_HEAD.size:
        return None
    fields, body = found
    first, prev, count, check = _INDEX_HEAD.unpack_from(body, 0)
    if len(body) != _INDEX_HEAD.size + 8 * count or fields[6] != first + count:
        return None
    listed = np.frombuffer(body, dtype="<u8", offset=_INDEX_HEAD.size).astype(np.int64)
    start = int(listed[0]) if count else offset
    if count and (
        start < FILE_HEADER_LEN
        or int(listed[-1]) >= offset
        or (count > 1 and bool((np.diff(listed) <= 0).any()))
    ):
        return None
    has_check = bool(fields[2] & INDEX_FLAG_BLOCK_CHECK)
    end = offset + RECORD_HEADER_LEN + len(body)
    return IndexBlock(first, start, offset, end, listed, check if has_check else None), prev


def read_index(buf: Any) -> CaptureIndex | None:
    """The index of a closed capture (``buf``: the whole file), from its TRAILER and INDEX chain.

    Each INDEX is verified (:func:`_index_block`); None without a TRAILER or if the chain does not
    verify (then the file is walked). The listed records' headers are not checked here: a reader
    checks them against it.
    """
    size = len(buf)
    if size < FILE_HEADER_LEN + TRAILER_LEN:
        return None
    trailer_offset = size - TRAILER_LEN
    found = _verified_record(buf, trailer_offset, RecordType.TRAILER)
    if found is None or len(found[1]) != _TRAILER_BODY.size:
        return None
    tfields, tbody = found
    offset, magic = _TRAILER_BODY.unpack(tbody)
    if magic != TRAILER_MAGIC:
        return None
    blocks: list[IndexBlock] = []
    limit = trailer_offset
    while True:
        got = _index_block(buf, offset) if FILE_HEADER_LEN <= offset < limit else None
        if got is None:
            return None
        block, prev = got
        blocks.append(block)
        if prev == 0:
            break
        limit, offset = block.start, prev
    blocks.reverse()
    at, number = FILE_HEADER_LEN, 0
    for b in blocks:
        if b.start != at or b.first_index != number:
            return None
        at, number = b.index_end, b.first_index + len(b.offsets) + 1
    if at != trailer_offset or tfields[6] != number:
        return None
    return CaptureIndex(tuple(blocks), trailer_offset, number)
