"""``kvrcap`` capture files: a recorded relay session, byte-exact, append-only, crash-tolerant.

Every gRPC response message is stored as the serialized bytes exactly as received (never a
re-encoding), so unknown fields and the exact CBI1 payload survive, next to wall-clock and
monotonic receive times. Stream open/close records say what was asked (target, method, raw
request) and how it ended (status, reason, message count); a schema record pins the
``.proto`` used. Each record is self-delimiting with two checksums (header, body), so a torn or
corrupted tail is detected at a known byte offset and record index while every intact record
before it is still read, and a reader can follow a file that is still being written.
The layout is documented in ``docs/capture-format.md``.
"""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, Literal

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

__all__ = [
    "CAPTURE_SIGNATURE",
    "FILE_HEADER_LEN",
    "FILE_MAGIC",
    "FORMAT_VERSION",
    "HEADER_DTYPE",
    "INDEX_FLAG_BLOCK_CHECK",
    "RECORD_HEADER_LEN",
    "RECORD_MAGIC",
    "CaptureDamage",
    "CaptureIndex",
    "CaptureReader",
    "CaptureRecord",
    "CaptureWriter",
    "IndexBlock",
    "RecordType",
    "StreamClose",
    "StreamOpen",
    "at_record",
    "check_file_header",
    "decode_stream_close",
    "decode_stream_open",
    "is_capture_file",
    "read_index",
    "schema_bytes",
]

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


@dataclass(frozen=True, slots=True)
class CaptureDamage:
    """A damaged stretch of a capture, reported inline by :meth:`CaptureReader.items`.

    ``error`` says what and where (``offset`` of the first damaged byte's record, the
    ``record_index`` expected there, ``reason``); reading resumed at ``end_offset`` (the next
    intact record, or the end of the file). ``skipped`` are the record numbers lost, from the
    ``record_index`` fields around the gap (empty for a repeated record; open-ended damage at
    the end of the file counts one). ``record_type`` / ``stream_id`` are known when the record's
    header was intact (a body checksum mismatch): then exactly that record is lost.
    """

    error: CaptureError
    end_offset: int
    skipped: range
    record_type: RecordType | None = None
    stream_id: int | None = None

    @property
    def offset(self) -> int:
        return self.error.at

    @property
    def record_index(self) -> int:
        return self.error.record_index

    @property
    def reason(self) -> str:
        return self.error.reason

    @property
    def truncated(self) -> bool:
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


def _file_header(created_unix_ns: int) -> bytes:
    head = _FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, FILE_HEADER_LEN, 0, created_unix_ns, 0, 0)
    return head[:-4] + _U32.pack(_check(head[:-4]))


class CaptureWriter:
    """Appends records to a capture file; use as a context manager.

    Flush policy: the buffer is handed to the OS every ``flush_records`` records and whenever
    ``flush_seconds`` have passed since the last flush (checked on each write); ``fsync=True``
    also forces each flush to disk. The default (flush every record, no fsync) is what a
    follower in another process needs to see records promptly; each record is one ``write`` so
    a crash leaves at most one torn record at the end.

    ``mode="x"`` creates a new file (error if it exists); ``mode="a"`` appends to an existing
    capture, continuing its record numbering after cutting off a torn tail (recorded in
    ``recovered``); a corrupted (not merely torn) file is refused.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: Literal["x", "a"] = "x",
        flush_records: int = 1,
        flush_seconds: float | None = None,
        fsync: bool = False,
        write_schema: bool = True,
        clock: Callable[[], tuple[int, int]] | None = None,
        index_every: int = DEFAULT_INDEX_EVERY,
        next_stream: int = 1,
    ) -> None:
        if flush_records < 1:
            raise ValueError("flush_records must be >= 1")
        self.path = Path(path)
        self.flush_records = flush_records
        self.flush_seconds = flush_seconds
        self.fsync = fsync
        self._clock = clock or (lambda: (time.time_ns(), time.monotonic_ns()))
        self.recovered: CaptureError | None = None
        self._open_streams: dict[int, int] = {}
        self._next_stream = max(1, next_stream)
        self._unflushed = 0
        self._last_flush = time.monotonic()
        self._closed = False
        self.index_every = max(0, index_every)
        self._pending: list[int] = []  # offsets of the records since the last INDEX
        self._last_index_offset = 0
        self._block = xxhash.xxh3_64()  # the bytes of those records, for the block check
        self._file: IO[bytes]
        if mode == "a" and self.path.is_file() and self.path.stat().st_size == 0:
            # appending to an empty file starts it, as ``>>`` does
            self._file = open(self.path, "r+b")  # noqa: SIM115 - closed by close()
            self._start(write_schema)
        elif mode == "x":
            self._file = open(self.path, "xb")  # noqa: SIM115 - closed by close()
            self._start(write_schema)
        elif mode == "a":
            with open(self.path, "rb") as f:
                head = f.read(FILE_HEADER_LEN)
            if len(head) < FILE_HEADER_LEN or not head.startswith(FILE_MAGIC):
                # an empty or foreign file has no header to continue: appending would write
                # records behind a zeroed one that no reader accepts
                raise CaptureError(
                    CaptureVariant.Unreadable,
                    f"not a kvrcap capture ({len(head)} header bytes): nothing to append to",
                    offset=0,
                    record_index=-1,
                    source=str(self.path),
                )
            with CaptureReader(self.path) as reader:
                count = 0
                end = FILE_HEADER_LEN
                max_stream = 0
                try:
                    for rec in reader.records(structural=True):
                        count, end = rec.index + 1, rec.end_offset
                        max_stream = max(max_stream, rec.stream_id)
                        if rec.type is RecordType.INDEX:
                            self._last_index_offset = rec.offset
                            self._pending.clear()
                        else:
                            self._pending.append(rec.offset)
                except CaptureError as err:
                    if err.variant is not CaptureVariant.Truncated:
                        raise
                    self.recovered = err
            if self._pending:  # the block so far, for the next INDEX's block check
                with open(self.path, "rb") as f:
                    f.seek(self._pending[0])
                    self._block.update(f.read(end - self._pending[0]))
            self._file = open(self.path, "r+b")  # noqa: SIM115 - closed by close()
            self._file.truncate(end)
            self._file.seek(end)
            self._offset = end
            self._next_index = count
            self._next_stream = max(self._next_stream, max_stream + 1)
        else:
            raise ValueError(f"mode must be 'x' or 'a', got {mode!r}")

    def _start(self, write_schema: bool) -> None:
        """A new capture: the file header, then the schema record."""
        self._file.write(_file_header(self._clock()[0]))
        self._offset = FILE_HEADER_LEN
        self._next_index = 0
        if write_schema:
            self.write(RecordType.SCHEMA, schema_bytes())
        else:
            self.flush()

    # -- context manager
    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def record_count(self) -> int:
        """Records in the file so far, structural ones (INDEX, TRAILER) included."""
        return self._next_index

    @property
    def size(self) -> int:
        """Bytes in the file so far (header and every record written)."""
        return self._offset

    @property
    def open_streams(self) -> dict[int, int]:
        """Every open stream's id and the messages it has received."""
        return dict(self._open_streams)

    @property
    def next_stream(self) -> int:
        """The id the next :meth:`open_stream` gives a stream."""
        return self._next_stream

    def write(
        self,
        record_type: RecordType,
        body: bytes | bytearray | memoryview,
        *,
        stream_id: int = 0,
        recv_unix_ns: int | None = None,
        recv_mono_ns: int | None = None,
        flags: int = 0,
    ) -> int:
        """Append one record; returns its index. Times default to now (wall, monotonic)."""
        if self._closed:
            raise ValueError("capture writer is closed")
        if len(body) > MAX_BODY_LEN:
            raise ValueError(f"record body of {len(body)} bytes exceeds {MAX_BODY_LEN}")
        if recv_unix_ns is None or recv_mono_ns is None:
            wall, mono = self._clock()
            recv_unix_ns = wall if recv_unix_ns is None else recv_unix_ns
            recv_mono_ns = mono if recv_mono_ns is None else recv_mono_ns
        index = self._next_index
        head = _RECORD_HEADER.pack(
            RECORD_MAGIC,
            int(record_type),
            flags,
            0,
            len(body),
            stream_id,
            index,
            recv_unix_ns,
            recv_mono_ns,
            _check(body),
            0,
        )
        head = head[:-4] + _U32.pack(_check(head[:-4]))
        data = head + bytes(body)
        self._file.write(data)
        if record_type is RecordType.INDEX:
            self._pending.clear()
            self._block.reset()
            self._last_index_offset = self._offset
        else:
            self._pending.append(self._offset)
            self._block.update(data)
        self._offset += RECORD_HEADER_LEN + len(body)
        self._next_index += 1
        self._unflushed += 1
        if (
            self.index_every
            and record_type not in STRUCTURAL
            and len(self._pending) >= self.index_every
        ):
            self._write_index()
        if self._unflushed >= self.flush_records or (
            self.flush_seconds is not None
            and time.monotonic() - self._last_flush >= self.flush_seconds
        ):
            self.flush()
        return index

    def _write_index(self) -> int:
        """An INDEX record of the offsets of every record since the previous INDEX."""
        first = self._next_index - len(self._pending)
        block_check = self._block.intdigest() & _CHECK_MASK
        body = _INDEX_HEAD.pack(first, self._last_index_offset, len(self._pending), block_check)
        body += np.asarray(self._pending, dtype="<u8").tobytes()
        return self.write(
            RecordType.INDEX,
            body,
            recv_unix_ns=0,
            recv_mono_ns=0,
            flags=INDEX_FLAG_BLOCK_CHECK,
        )

    def flush(self) -> None:
        """Hand the buffer to the OS (and to disk with ``fsync=True``)."""
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        self._unflushed = 0
        self._last_flush = time.monotonic()

    def open_stream(
        self,
        target: str,
        method: str,
        request: bytes,
        *,
        metadata: Sequence[tuple[str, str]] = (),
        info: Mapping[str, Any] | None = None,
        recv_unix_ns: int | None = None,
        recv_mono_ns: int | None = None,
        stream_id: int | None = None,
        messages: int = 0,
    ) -> int:
        """Start a stream (e.g. ``/dynamo.kvrelay.v1.KvEventRelay/SubscribeKvPool``); its id.

        ``stream_id`` and ``messages`` are for a stream that goes on from an earlier file (a
        rotated recording's next segment): its id, and the messages it had already received
        (its close counts them all)."""
        if stream_id is None:
            stream_id = self._next_stream
        elif stream_id < 1 or stream_id in self._open_streams:
            raise ValueError(f"stream {stream_id} is open or not a stream id")
        self._next_stream = max(self._next_stream, stream_id + 1)
        body = _encode_stream_open(
            StreamOpen(target, method, bytes(request), tuple(metadata), dict(info or {}))
        )
        self.write(
            RecordType.STREAM_OPEN,
            body,
            stream_id=stream_id,
            recv_unix_ns=recv_unix_ns,
            recv_mono_ns=recv_mono_ns,
        )
        self._open_streams[stream_id] = messages
        return stream_id

    def message(
        self,
        stream_id: int,
        data: bytes | bytearray | memoryview,
        *,
        recv_unix_ns: int | None = None,
        recv_mono_ns: int | None = None,
    ) -> int:
        """Record one response message's serialized bytes exactly as received."""
        if stream_id not in self._open_streams:
            raise ValueError(f"stream {stream_id} is not open")
        self._open_streams[stream_id] += 1
        return self.write(
            RecordType.MESSAGE,
            data,
            stream_id=stream_id,
            recv_unix_ns=recv_unix_ns,
            recv_mono_ns=recv_mono_ns,
        )

    def close_stream(
        self,
        stream_id: int,
        *,
        status_code: int = 0,
        status_name: str = "OK",
        details: str = "",
        error_reason: str | None = None,
        local_reason: str | None = None,
        trailing_metadata: Sequence[tuple[str, str]] = (),
        recv_unix_ns: int | None = None,
        recv_mono_ns: int | None = None,
    ) -> int:
        """End a stream with its gRPC status; the message count is filled in from the writer."""
        count = self._open_streams.pop(stream_id)
        body = _encode_stream_close(
            StreamClose(
                status_code,
                status_name,
                details,
                count,
                error_reason,
                local_reason,
                tuple(trailing_metadata),
            )
        )
        return self.write(
            RecordType.STREAM_CLOSE,
            body,
            stream_id=stream_id,
            recv_unix_ns=recv_unix_ns,
            recv_mono_ns=recv_mono_ns,
        )

    def mark(self, text: str) -> int:
        """A free-form annotation (test phase, operator note)."""
        return self.write(RecordType.MARK, text.encode())

    def close(self) -> None:
        """Flush and close; with indexing on, end the file with a final INDEX and a TRAILER."""
        if self._closed:
            return
        if self.index_every:
            self._write_index()
            body = _TRAILER_BODY.pack(self._last_index_offset, TRAILER_MAGIC)
            self.write(RecordType.TRAILER, body, recv_unix_ns=0, recv_mono_ns=0)
        self.flush()
        self._file.close()
        self._closed = True


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


class CaptureReader:
    """A capture's records, read by the format's one scanner
    (:class:`cbi1kit.capture._scan.FileScan`).

    ``items()`` is every intact record in order with each damaged stretch reported inline as a
    :class:`CaptureDamage` where it is, reading going on after it; ``records()`` the intact
    records only: by default it raises the first damage (``strict=False``: stops there, the
    error in ``damage``; ``resync=True``: reads past every damage, all in ``damages``).
    Structural records (INDEX, TRAILER) are skipped unless ``structural=True``. ``follow()``
    keeps reading a file that is still being written. ``verify=False`` skips the body checksum
    (headers are always checked).
    """

    def __init__(self, path: str | os.PathLike[str], *, verify: bool = True) -> None:
        from cbi1kit.capture._scan import FileScan

        self.path = Path(path)
        self.verify = verify
        self.damage: CaptureError | None = None
        self.damages: list[CaptureDamage] = []
        self._scan = FileScan(self.path, verify=verify)  # OSError here if it cannot be read

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; safe to call twice."""
        self._scan.close()

    @property
    def created_unix_ns(self) -> int:
        """The file header's creation time (0 until read, or where it does not verify)."""
        return self._scan.created_unix_ns

    def _fresh(self) -> Any:
        from cbi1kit.capture._scan import FileScan

        self._scan.close()
        self._scan = FileScan(self.path, verify=self.verify)
        return self._scan

    def items(self, *, structural: bool = False) -> Iterator[CaptureRecord | CaptureDamage]:
        """Every intact record in order and every damaged stretch where it is (never raises
        for damage); the damage reports are also collected in ``damages``."""
        self.damage = None
        self.damages = []
        for item in self._fresh().scan():
            if isinstance(item, CaptureDamage):
                self.damages.append(item)
                if self.damage is None:
                    self.damage = item.error
                yield item
            else:
                yield from _stretch_records(item, structural)

    def records(
        self, *, strict: bool = True, resync: bool = False, structural: bool = False
    ) -> Iterator[CaptureRecord]:
        """Every intact record in order.

        Without ``resync`` reading ends at the first damage, which is raised (``strict``) or
        kept in ``damage``; with ``resync`` it goes on past every damage (all reports in
        ``damages``, the first in ``damage``) and never raises for damage.
        """
        for item in self.items(structural=structural):
            if isinstance(item, CaptureDamage):
                if resync:
                    continue
                if strict:
                    raise item.error
                return
            yield item

    def follow(
        self,
        *,
        poll_seconds: float = 0.05,
        idle_timeout: float | None = 5.0,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[CaptureRecord]:
        """Yield records as a writer appends them.

        An incomplete record at the end is waited for, not reported. Ends when ``stop()`` is
        true and nothing new has arrived, or after ``idle_timeout`` seconds without new bytes;
        a still-incomplete record at that point is then reported as a torn tail. Corruption is
        raised at once.
        """
        scan = self._fresh()
        idle_since = time.monotonic()
        while True:
            grew = False
            for item in scan.scan(final=False):
                grew = True
                yield from self._followed(item)
            if grew:
                idle_since = time.monotonic()
                continue
            if (stop is not None and stop()) or (
                idle_timeout is not None and time.monotonic() - idle_since >= idle_timeout
            ):
                for item in scan.scan(final=True):
                    grew = True
                    yield from self._followed(item)
                if not grew:
                    return
                continue
            time.sleep(poll_seconds)

    def _followed(self, item: Any) -> Iterator[CaptureRecord]:
        if isinstance(item, CaptureDamage):
            self.damage = item.error
            raise item.error
        yield from _stretch_records(item, False)


_TYPES: Final = {int(t): t for t in RecordType}


def _stretch_records(stretch: Any, structural: bool) -> Iterator[CaptureRecord]:
    """The records of a :class:`cbi1kit.capture._scan.Stretch`, bodies copied."""
    offsets, types, streams, lengths, numbers, walls, monos = (c.tolist() for c in stretch.cols)
    buf, base = stretch.buf, stretch.base
    for off, t, sid, n, number, wall, mono in zip(
        offsets, types, streams, lengths, numbers, walls, monos, strict=True
    ):
        kind = _TYPES[t]
        if kind in STRUCTURAL and not structural:
            continue
        at = off - base + RECORD_HEADER_LEN
        body = bytes(buf[at : at + n])
        yield CaptureRecord(number, off, kind, sid, wall, mono, off + RECORD_HEADER_LEN, body)


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
    end = len(buf)
    if offset < FILE_HEADER_LEN or end - offset < RECORD_HEADER_LEN:
        return None
    fields = _RECORD_HEADER.unpack_from(buf, offset)
    if fields[0] != RECORD_MAGIC or fields[1] != rtype:
        return None
    if fields[-1] != _check(memoryview(buf)[offset : offset + RECORD_HEADER_LEN - 4]):
        return None
    body_start = offset + RECORD_HEADER_LEN
    body_end = body_start + fields[4]
    if body_end > end:
        return None
    body = bytes(buf[body_start:body_end])
    if fields[9] != _check(body):
        return None
    return fields, body


def read_index(buf: Any) -> CaptureIndex | None:
    """The index of a closed capture (``buf``: the whole file), from its TRAILER through the
    chain of INDEX records, each verified (header and body checksums, type, numbering, offsets
    inside the file and increasing); None if the file has no TRAILER or anything in the chain
    does not verify (then the file is walked record by record).

    What it does not check is that the listed records are really where the INDEX says (their
    headers, lengths and numbers): a reader gathers those headers and checks them against it.
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
        if not FILE_HEADER_LEN <= offset < limit:
            return None
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
        blocks.append(
            IndexBlock(
                first,
                start,
                offset,
                offset + RECORD_HEADER_LEN + len(body),
                listed,
                check if has_check else None,
            )
        )
        if prev == 0:
            break
        limit, offset = start, prev
    blocks.reverse()
    at, number = FILE_HEADER_LEN, 0
    for b in blocks:
        if b.start != at or b.first_index != number:
            return None
        at, number = b.index_end, b.first_index + len(b.offsets) + 1
    if at != trailer_offset or tfields[6] != number:
        return None
    return CaptureIndex(tuple(blocks), trailer_offset, number)
