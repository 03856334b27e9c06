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

import enum
import json
import mmap
import os
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, Literal

import xxhash

from cbi1kit.errors import Cbi1kitError

__all__ = [
    "FILE_HEADER_LEN",
    "FILE_MAGIC",
    "FORMAT_VERSION",
    "RECORD_HEADER_LEN",
    "RECORD_MAGIC",
    "CaptureCorruptError",
    "CaptureError",
    "CaptureReader",
    "CaptureRecord",
    "CaptureTruncatedError",
    "CaptureWriter",
    "RecordType",
    "StreamClose",
    "StreamOpen",
    "decode_stream_close",
    "decode_stream_open",
    "schema_bytes",
]

FILE_MAGIC: Final = b"KVRCAP\r\n"
FORMAT_VERSION: Final = 1
FILE_HEADER_LEN: Final = 32
RECORD_MAGIC: Final = b"KRec"
RECORD_HEADER_LEN: Final = 48
MAX_BODY_LEN: Final = (1 << 31) - 1

# magic 8s | format_version u16 | header_len u16 | flags u32 | created_unix_ns u64 |
# reserved u32 | header_check u32
_FILE_HEADER: Final = struct.Struct("<8sHHIQII")
# magic 4s | type u8 | flags u8 | reserved u16 | body_len u32 | stream_id u32 | record_index u64
# | recv_unix_ns u64 | recv_mono_ns u64 | body_check u32 | header_check u32
_RECORD_HEADER: Final = struct.Struct("<4sBBHIIQQQII")
assert _FILE_HEADER.size == FILE_HEADER_LEN
assert _RECORD_HEADER.size == RECORD_HEADER_LEN
_xxh3: Final = xxhash.xxh3_64_intdigest
_CHECK_MASK: Final = 0xFFFFFFFF


def _check(data: Any) -> int:
    """Low 32 bits of xxh3_64 (seed 0): the same checksum CBI1 uses, fast on large bodies."""
    return _xxh3(data) & _CHECK_MASK


class RecordType(enum.IntEnum):
    SCHEMA = 1
    STREAM_OPEN = 2
    MESSAGE = 3
    STREAM_CLOSE = 4
    MARK = 5


class CaptureError(Cbi1kitError, ValueError):
    """A capture file is damaged at ``offset`` (record ``record_index``, 0-based)."""

    def __init__(self, reason: str, *, offset: int, record_index: int, path: str | None) -> None:
        self.reason = reason
        self.offset = offset
        self.record_index = record_index
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(f"{where}record {record_index} at byte offset {offset}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (type(self), self.reason, self.offset, self.record_index, self.path),
        )


def _rebuild(
    cls: type[CaptureError], reason: str, offset: int, record_index: int, path: str | None
) -> CaptureError:
    return cls(reason, offset=offset, record_index=record_index, path=path)


class CaptureTruncatedError(CaptureError, EOFError):
    """The file ends inside a record: a torn tail (the writer stopped mid-record)."""


class CaptureCorruptError(CaptureError):
    """Bytes that are not a valid record: bad magic, checksum, index or type."""


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


def decode_stream_open(body: bytes) -> StreamOpen:
    """Body layout: u32 JSON length, UTF-8 JSON metadata, then the raw request message bytes."""
    (n,) = _U32.unpack_from(body, 0)
    meta = json.loads(body[4 : 4 + n])
    return StreamOpen(
        target=meta["target"],
        method=meta["method"],
        request=bytes(body[4 + n :]),
        metadata=tuple((str(k), str(v)) for k, v in meta.get("metadata", [])),
        info=meta.get("info") or {},
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
    """Body layout: UTF-8 JSON object (status_code, status_name, details, message_count, ...)."""
    meta = json.loads(body)
    return StreamClose(
        status_code=int(meta["status_code"]),
        status_name=str(meta["status_name"]),
        details=str(meta["details"]),
        message_count=int(meta["message_count"]),
        error_reason=meta.get("error_reason"),
        local_reason=meta.get("local_reason"),
        trailing_metadata=tuple((str(k), str(v)) for k, v in meta.get("trailing_metadata", [])),
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
        self._next_stream = 1
        self._unflushed = 0
        self._last_flush = time.monotonic()
        self._closed = False
        self._file: IO[bytes]
        if mode == "x":
            self._file = open(self.path, "xb")  # noqa: SIM115 - closed by close()
            self._file.write(_file_header(self._clock()[0]))
            self._next_index = 0
            if write_schema:
                self.write(RecordType.SCHEMA, schema_bytes())
            else:
                self.flush()
        elif mode == "a":
            with CaptureReader(self.path) as reader:
                count = 0
                end = FILE_HEADER_LEN
                max_stream = 0
                try:
                    for rec in reader.records():
                        count, end = rec.index + 1, rec.end_offset
                        max_stream = max(max_stream, rec.stream_id)
                except CaptureTruncatedError as err:
                    self.recovered = err
                except CaptureCorruptError:
                    raise
            self._file = open(self.path, "r+b")  # noqa: SIM115 - closed by close()
            self._file.truncate(end)
            self._file.seek(end)
            self._next_index = count
            self._next_stream = max_stream + 1
        else:
            raise ValueError(f"mode must be 'x' or 'a', got {mode!r}")

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
        return self._next_index

    def write(
        self,
        record_type: RecordType,
        body: bytes | bytearray | memoryview,
        *,
        stream_id: int = 0,
        recv_unix_ns: int | None = None,
        recv_mono_ns: int | None = None,
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
            0,
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
        self._file.write(head + bytes(body))
        self._next_index += 1
        self._unflushed += 1
        if self._unflushed >= self.flush_records or (
            self.flush_seconds is not None
            and time.monotonic() - self._last_flush >= self.flush_seconds
        ):
            self.flush()
        return index

    def flush(self) -> None:
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
    ) -> int:
        """Start a stream (e.g. ``/dynamo.kvrelay.v1.KvEventRelay/SubscribeKvPool``); its id."""
        stream_id = self._next_stream
        self._next_stream += 1
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
        self._open_streams[stream_id] = 0
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
        if self._closed:
            return
        self.flush()
        self._file.close()
        self._closed = True


class CaptureReader:
    """Reads a capture lazily through a memory map, record by record, with byte offsets.

    ``records()`` yields every intact record and then raises :class:`CaptureTruncatedError`
    (torn tail) or :class:`CaptureCorruptError` naming the offset and record index of the first
    damage; with ``strict=False`` it stops there instead and leaves the error in ``damage``.
    ``follow()`` keeps polling a file that is still being written. ``verify=False`` skips the
    body checksum (headers are always checked), for scans that only need offsets.
    """

    def __init__(self, path: str | os.PathLike[str], *, verify: bool = True) -> None:
        self.path = Path(path)
        self.verify = verify
        self._file = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        self._map: mmap.mmap | None = None
        self._mapped = 0
        self.damage: CaptureError | None = None
        self.created_unix_ns = 0
        self._remap()
        self._header_checked = False

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
        if self._map is not None:
            self._map.close()
            self._map = None
        self._file.close()

    @property
    def buffer(self) -> mmap.mmap | bytes:
        """The mapped file (as far as mapped); slice it with a record's ``body_offset``."""
        return self._map if self._map is not None else b""

    def _remap(self) -> bool:
        """Map the file again if it grew; True if there are new bytes."""
        size = os.fstat(self._file.fileno()).st_size
        if size <= self._mapped:
            return False
        if self._map is not None:
            self._map.close()
        self._map = mmap.mmap(self._file.fileno(), size, access=mmap.ACCESS_READ)
        self._mapped = size
        return True

    def _err(self, cls: type[CaptureError], reason: str, offset: int, index: int) -> CaptureError:
        return cls(reason, offset=offset, record_index=index, path=str(self.path))

    def _check_file_header(self) -> CaptureError | None:
        buf = self.buffer
        if len(buf) < FILE_HEADER_LEN:
            if FILE_MAGIC.startswith(bytes(buf[: len(FILE_MAGIC)])):
                return self._err(CaptureTruncatedError, "file header is incomplete", 0, -1)
            return self._err(CaptureCorruptError, "not a kvrcap capture (bad magic)", 0, -1)
        magic, version, header_len, _flags, created, _res, check = _FILE_HEADER.unpack_from(buf)
        if magic != FILE_MAGIC:
            return self._err(CaptureCorruptError, "not a kvrcap capture (bad magic)", 0, -1)
        if check != _check(buf[: FILE_HEADER_LEN - 4]):
            return self._err(CaptureCorruptError, "file header checksum mismatch", 0, -1)
        if version != FORMAT_VERSION or header_len != FILE_HEADER_LEN:
            return self._err(
                CaptureCorruptError,
                f"unsupported capture version {version} (header length {header_len})",
                0,
                -1,
            )
        self.created_unix_ns = created
        self._header_checked = True
        return None

    def _scan(self, offset: int, index: int) -> Iterator[CaptureRecord | CaptureError]:
        """Yield records from ``offset`` until the mapped end; a final error if damaged.

        A record that runs past the end of the mapped bytes is reported as truncated; the
        follower treats that as "not written yet" and retries after remapping.
        """
        buf = self.buffer
        end = len(buf)
        unpack = _RECORD_HEADER.unpack_from
        verify = self.verify
        while offset < end:
            if end - offset < RECORD_HEADER_LEN:
                if RECORD_MAGIC.startswith(bytes(buf[offset : offset + 4])):
                    yield self._err(
                        CaptureTruncatedError,
                        f"file ends {end - offset} bytes into a {RECORD_HEADER_LEN}-byte "
                        "record header",
                        offset,
                        index,
                    )
                else:
                    yield self._err(CaptureCorruptError, "bad record magic", offset, index)
                return
            (
                magic,
                rtype,
                _flags,
                _res,
                body_len,
                stream_id,
                rindex,
                wall,
                mono,
                bcheck,
                hcheck,
            ) = unpack(buf, offset)
            if magic != RECORD_MAGIC:
                yield self._err(CaptureCorruptError, "bad record magic", offset, index)
                return
            if hcheck != _check(buf[offset : offset + RECORD_HEADER_LEN - 4]):
                yield self._err(
                    CaptureCorruptError, "record header checksum mismatch", offset, index
                )
                return
            if rindex != index:
                yield self._err(
                    CaptureCorruptError,
                    f"record says it is number {rindex}, expected {index} "
                    "(a record is missing or repeated)",
                    offset,
                    index,
                )
                return
            body_start = offset + RECORD_HEADER_LEN
            body_end = body_start + body_len
            if body_end > end:
                yield self._err(
                    CaptureTruncatedError,
                    f"file ends {end - body_start} bytes into a {body_len}-byte record body",
                    offset,
                    index,
                )
                return
            body = buf[body_start:body_end]
            if verify and bcheck != _check(body):
                yield self._err(CaptureCorruptError, "record body checksum mismatch", offset, index)
                return
            try:
                kind = RecordType(rtype)
            except ValueError:
                yield self._err(CaptureCorruptError, f"unknown record type {rtype}", offset, index)
                return
            yield CaptureRecord(index, offset, kind, stream_id, wall, mono, body_start, bytes(body))
            offset = body_end
            index += 1

    def records(self, *, strict: bool = True) -> Iterator[CaptureRecord]:
        """Every intact record in order; then the damage, raised (``strict``) or kept."""
        self._remap()
        self.damage = None
        err = self._check_file_header()
        if err is None:
            for item in self._scan(FILE_HEADER_LEN, 0):
                if isinstance(item, CaptureError):
                    err = item
                    break
                yield item
        if err is not None:
            self.damage = err
            if strict:
                raise err

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
        offset, index = FILE_HEADER_LEN, 0
        idle_since = time.monotonic()
        pending: CaptureError | None = None
        while True:
            grew = self._remap()
            if not self._header_checked:
                err = self._check_file_header()
                if isinstance(err, CaptureCorruptError):
                    self.damage = err
                    raise err
                pending = err
            if self._header_checked:
                pending = None
                for item in self._scan(offset, index):
                    if isinstance(item, CaptureTruncatedError):
                        pending = item
                        break
                    if isinstance(item, CaptureError):
                        self.damage = item
                        raise item
                    grew = True
                    yield item
                    offset, index = item.end_offset, item.index + 1
            if grew:
                idle_since = time.monotonic()
                continue
            if (stop is not None and stop()) or (
                idle_timeout is not None and time.monotonic() - idle_since >= idle_timeout
            ):
                if self._remap():
                    continue
                if pending is not None:
                    self.damage = pending
                    raise pending
                return
            time.sleep(poll_seconds)
