"""Writing a ``kvrcap`` capture: records appended whole, an INDEX every few thousand and a
TRAILER at a clean close; ``mode="a"`` appends to a capture after cutting a torn tail
(``docs/capture-format.md``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Literal

import numpy as np
import xxhash

from cbi1kit.capture._file import (
    _CHECK_MASK,
    _FILE_HEADER,
    _INDEX_HEAD,
    _RECORD_HEADER,
    _TRAILER_BODY,
    _U32,
    DEFAULT_INDEX_EVERY,
    FILE_HEADER_LEN,
    FORMAT_VERSION,
    INDEX_FLAG_BLOCK_CHECK,
    MAX_BODY_LEN,
    RECORD_HEADER_LEN,
    STRUCTURAL,
    StreamClose,
    StreamOpen,
    _check,
    _ClosesOnExit,
    _encode_stream_close,
    _encode_stream_open,
    schema_bytes,
)
from cbi1kit.capture._layout import FILE_MAGIC, RECORD_MAGIC, TRAILER_MAGIC, RecordType
from cbi1kit.capture._reader import CaptureReader
from cbi1kit.errors import CaptureError, CaptureVariant


def _usage(detail: str, field: str | None = None) -> CaptureError:
    """``CaptureError`` ``Usage``: a call given an argument (``field``) it cannot take."""
    return CaptureError(CaptureVariant.Usage, detail, field=field)


def _file_header(created_unix_ns: int) -> bytes:
    head = _FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, FILE_HEADER_LEN, 0, created_unix_ns, 0, 0)
    return head[:-4] + _U32.pack(_check(head[:-4]))


class CaptureWriter(_ClosesOnExit):
    """Appends records to a capture file; use as a context manager.

    Flushes to the OS every ``flush_records`` records or ``flush_seconds`` (``fsync=True``: to
    disk too); one ``write`` per record, so a crash tears at most the last. ``mode="x"`` creates;
    ``mode="a"`` continues numbering after cutting a torn tail (``recovered``), refusing corruption.
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
            raise _usage("flush_records must be >= 1", "flush_records")
        if mode not in ("x", "a"):
            raise _usage(f"mode must be 'x' or 'a', got {mode!r}", "mode")
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
        if mode == "a" and not (self.path.is_file() and self.path.stat().st_size == 0):
            self._resume()
        else:  # a new capture; appending to an empty file starts it, as ``>>`` does
            how = "xb" if mode == "x" else "r+b"
            self._file = open(self.path, how)  # noqa: SIM115 - closed by close()
            self._start(write_schema)

    def _resume(self) -> None:
        """Go on with the capture at ``path``: its records read back (a torn tail is cut off,
        said in ``recovered``), their numbering and stream ids continued, and the bytes since
        its last INDEX hashed again for the next one's block check."""
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

    def _start(self, write_schema: bool) -> None:
        """A new capture: the file header, then the schema record."""
        self._file.write(_file_header(self._clock()[0]))
        self._offset = FILE_HEADER_LEN
        self._next_index = 0
        if write_schema:
            self.write(RecordType.SCHEMA, schema_bytes())
        else:
            self.flush()

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
            raise _usage("capture writer is closed")
        if len(body) > MAX_BODY_LEN:
            raise _usage(f"record body of {len(body)} bytes exceeds {MAX_BODY_LEN}", "body")
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
            RecordType.INDEX, body, recv_unix_ns=0, recv_mono_ns=0, flags=INDEX_FLAG_BLOCK_CHECK
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
            raise _usage(f"stream {stream_id} is open or not a stream id", "stream_id")
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
            raise _usage(f"stream {stream_id} is not open", "stream_id")
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
