"""Where the frames table's rows come from: a capture read through its memory map and index
(a worker thread checks each group of blocks and runs the envelope kernel over its records while
they are in cache), a damaged or index-less capture walked record by record, or any other frame
source, all as batches of message spans.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._file import (
    FILE_HEADER_LEN,
    HEADER_DTYPE,
    RECORD_HEADER_LEN,
    RECORD_MAGIC,
    CaptureDamage,
    CaptureReader,
    CaptureRecord,
    IndexBlock,
    RecordType,
    StreamClose,
    StreamOpen,
    is_capture_file,
    read_index,
    release_pages,
)
from cbi1kit.capture._readers import (
    CaptureItem,
    CatalogRecord,
    FrameDamage,
    FrameRecord,
    ReadCursor,
    StreamEvent,
    _unreadable_message,
)
from cbi1kit.capture._segments import CONTINUED
from cbi1kit.capture._streams import (
    SUBSCRIBE_KV_POOL_METHOD,
    WATCH_KV_POOL_CATALOG_METHOD,
    FrameStreams,
)
from cbi1kit.errors import CaptureError, Cbi1kitError
from cbi1kit.wire._format import U64_MAX

if TYPE_CHECKING:  # the tables' type names; replay's fast engine reads captures without polars
    from cbi1kit.analysis._schema import I64, U64, Bool, _Scanned

__all__: list[str] = []

# ------------------------------------------------------------------------------------ sources


@contextmanager
def _held_reader(path: str) -> Iterator[CaptureReader]:
    """A capture reader for one scan, closed after it even while a caller still holds a batch's
    view of its map (the map then goes with that view)."""
    reader = CaptureReader(path)
    try:
        yield reader
    finally:
        try:
            reader.close()
        except BufferError:
            reader._map = None
            reader._file.close()


@dataclass(slots=True)
class _Batch:
    """Message records sharing one buffer: ``buf[start : start + length]`` is each record."""

    buf: npt.NDArray[np.uint8]
    index: I64
    stream_id: I64
    offset: I64
    start: I64
    length: I64
    wall: I64
    mono: U64
    is_pb: Bool
    has_time: Bool
    scanned: _Scanned | None = None  # the envelope kernel's rows, if it has run
    number: U64 | None = None  # each message's capture record number, where read from one


def _is_capture(source: Any) -> bool:
    return isinstance(source, (str, os.PathLike)) and is_capture_file(source)


class _Rows:
    """Row arrays of message records, cut into batches of at most ``size`` rows. Parts may
    carry the envelope kernel's rows (from the block-check thread); a batch keeps them only if
    all of its parts have them, otherwise the kernel runs again on the whole batch."""

    def __init__(self, buf: npt.NDArray[np.uint8], size: int) -> None:
        self.buf = buf
        self.size = size
        self.parts: list[tuple[tuple[npt.NDArray[Any], ...], _Scanned | None]] = []
        self.count = 0
        self.frame_index = 0  # the next frame's index

    def add(self, cols: tuple[npt.NDArray[Any], ...], scanned: _Scanned | None) -> None:
        if len(cols[0]):
            self.parts.append((cols, scanned))
            self.count += len(cols[0])

    def batches(self, final: bool = False) -> Iterator[_Batch]:
        """Full batches (and with ``final`` the rest)."""
        if not self.parts or (self.count < self.size and not final):
            return
        scanned: list[npt.NDArray[Any]] | None
        if len(self.parts) == 1:  # one part: its arrays as they are
            cols = list(self.parts[0][0])
            one = self.parts[0][1]
            scanned = None if one is None else list(one)
        else:
            cols = [np.concatenate(c) for c in zip(*(p[0] for p in self.parts), strict=True)]
            scans = [p[1] for p in self.parts]
            scanned = (
                [np.concatenate(c) for c in zip(*_apart(scans), strict=True)]  # type: ignore[arg-type]
                if all(x is not None for x in scans)
                else None
            )
        self.parts.clear()
        n, self.count = len(cols[0]), 0
        cut = n if final else n - n % self.size
        for lo in range(0, cut, self.size):
            hi = min(cut, lo + self.size)
            part = None if scanned is None else tuple(c[lo:hi] for c in scanned)
            yield self._batch(*(c[lo:hi] for c in cols), scanned=part)
        if cut < n:
            self.add(
                tuple(c[cut:] for c in cols),
                None if scanned is None else tuple(c[cut:] for c in scanned),
            )

    def _batch(
        self,
        stream: I64,
        offset: I64,
        length: I64,
        wall: I64,
        mono: U64,
        number: U64 | None = None,
        *,
        scanned: _Scanned | None,
    ) -> _Batch:
        n = len(stream)
        index = np.arange(self.frame_index, self.frame_index + n, dtype=np.int64)
        self.frame_index += n
        ones = np.ones(n, dtype=bool)
        return _Batch(
            self.buf,
            index,
            stream,
            offset,
            offset + RECORD_HEADER_LEN,
            length,
            wall,
            mono,
            ones,
            ones,
            scanned,
            number,
        )


def _apart(scans: list[_Scanned]) -> list[_Scanned]:
    """The parts' scans with run ids that no two parts share: each part's scan numbered its
    runs from 0 (a run never continues across parts: the kernel compared nothing before it)."""
    out: list[_Scanned] = []
    base = 0
    for scan in scans:
        run = scan[_RUN] + base
        out.append((*scan[:_RUN], run, *scan[_RUN + 1 :]))
        if len(run):
            base = int(run.max()) + 1
    return out


_RUN: Final = 5  # the run column of a scan (``scan_filter_updates``)
_NOT_OPEN: Final = 1 << 62
_NO_ROWS: Final = np.zeros(0, dtype=np.int64)


class _CaptureScan:
    """A capture's message records as batches, with its damage inline (``CaptureReader.items``
    order and resynchronisation; frame numbering as ``read_capture(..., damage="report")``).

    A closed capture with block checks is read through its index (``read_index``): one xxh3
    call verifies a block of records, whose headers are then gathered and checked against the
    index with numpy (magic, numbering, lengths back to back, types). From the first block that
    does not verify (or in a file without a usable index) the capture reader walks the rest
    record by record, which locates and reports the damage exactly and reads on past it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        methods: Iterable[str],
        *,
        indexed: bool = True,
        first_frame: int = 0,
    ) -> None:
        self.path = str(path)
        #: the first frame's index (a segment of a rotated recording numbers on from the last),
        #: and once read, the index after the last frame
        self.first_frame = self.frame_end = first_frame
        self.indexed = indexed  # read verified blocks through the index (the compiled kernel)
        self.streams = FrameStreams(methods, self.path)  # the rule read_capture follows
        self.blocks_verified = 0
        self.records_walked = 0
        self.control_damage: list[CaptureError] = []  # unreadable STREAM_OPENs, not yet yielded

    def items(self, batch_records: int) -> Generator[_Batch | tuple[CaptureError, int], None, None]:
        """Batches of message rows, and ``(error, frame index)`` where damage is."""
        with _held_reader(self.path) as reader:
            yield from self._items(reader, batch_records)

    def _items(
        self, reader: CaptureReader, batch_records: int
    ) -> Iterator[_Batch | tuple[CaptureError, int]]:
        err, fatal = reader._check_file_header()
        if err is not None:
            yield err, 0
            if fatal:
                return
        mm = reader.buffer
        arr = np.frombuffer(mm, dtype=np.uint8)
        rows = _Rows(arr, batch_records)
        rows.frame_index = self.first_frame
        offset, number = FILE_HEADER_LEN, 0
        index = read_index(mm) if err is None and self.indexed else None
        if index is not None:
            released = 0
            for group, whole, scanned in _checked_groups(arr, index.blocks):
                good = self._blocks_rows(mm, arr, group, rows, scanned)
                self.blocks_verified += good
                if good:
                    offset = group[good - 1].index_end
                    number = group[good - 1].first_index + len(group[good - 1].offsets) + 1
                # the group's records are rows now, and their bytes the kernel's rows already
                released = release_pages(mm, released, offset)
                if good < len(group) or not whole:
                    break
                if rows.count >= batch_records:
                    yield from rows.batches()
            else:
                offset, number = len(mm), index.trailer_index + 1
        if offset < len(mm):
            yield from self._walk(reader, rows, offset, number)
        yield from rows.batches(final=True)
        for damage in self.control_damage:  # after the rows: they are not in frame order
            yield damage, rows.frame_index
        self.frame_end = rows.frame_index

    def _blocks_rows(
        self,
        mm: Any,
        arr: npt.NDArray[np.uint8],
        blocks: list[IndexBlock],
        rows: _Rows,
        scanned: _Scanned | None = None,
    ) -> int:
        """Rows of consecutive verified blocks, checked together; the number of leading blocks
        whose record headers agree with the index (the rest is left to the walk). ``scanned``:
        the envelope kernel's rows for every record of these blocks, in order."""
        if not blocks:
            return 0
        offs, follow = _block_records(blocks)
        sizes = [len(b.offsets) for b in blocks]
        numbers = np.concatenate(
            [np.arange(b.first_index, b.first_index + len(b.offsets)) for b in blocks]
        )
        window = np.ndarray(
            (len(arr) - RECORD_HEADER_LEN + 1,),
            dtype=f"V{RECORD_HEADER_LEN}",
            buffer=arr,
            strides=(1,),
        )
        h = window[offs].view(HEADER_DTYPE)
        rtype = h["type"]
        length = h["body_len"].astype(np.int64)
        ok = (
            (h["magic"] == RECORD_MAGIC)
            & (h["record_index"] == numbers)
            & (offs + RECORD_HEADER_LEN + length == follow)
            & (rtype >= 1)
            & (rtype <= 7)
            & (rtype != RecordType.INDEX)
        )
        if not ok.all():
            bad_block = int(np.searchsorted(np.cumsum(sizes), np.argmin(ok), side="right"))
            return self._blocks_rows(mm, arr, blocks[:bad_block], rows, scanned)
        sid = h["stream_id"].astype(np.int64)
        ends = offs + RECORD_HEADER_LEN + length
        for k in np.flatnonzero(
            (rtype == RecordType.STREAM_OPEN) | (rtype == RecordType.STREAM_CLOSE)
        ).tolist():
            self._control(
                int(rtype[k]),
                int(sid[k]),
                int(numbers[k]),
                int(offs[k]),
                bytes(mm[int(offs[k]) + RECORD_HEADER_LEN : int(ends[k])]),
            )
        msg = np.flatnonzero(rtype == RecordType.MESSAGE)
        if msg.size:
            ms = sid[msg]
            first = self.streams.first
            lo, hi = int(ms.min()), int(ms.max())
            if lo == hi and lo in first:  # one known stream: the usual capture
                msg = msg[first[lo] <= numbers[msg]]
            else:
                u, at, inv = np.unique(ms, return_index=True, return_inverse=True)
                for x, k in zip(u.tolist(), at.tolist(), strict=True):
                    if self.streams.undecided(x):  # its open was lost: its first message says
                        m = int(msg[k])
                        end = int(ends[m])
                        body = bytes(mm[end - int(length[m]) : end])
                        self.streams.is_frame(x, int(numbers[m]), body)
                starts = np.array([first.get(int(x), _NOT_OPEN) for x in u.tolist()])
                msg = msg[starts[inv] <= numbers[msg]]
            whole = len(msg) == len(offs)  # every record a frame: the arrays as they are

            def pick(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
                return a if whole else a[msg]

            rows.add(
                (
                    pick(sid),
                    pick(offs),
                    pick(length),
                    pick(h["recv_unix_ns"]).view(np.int64),
                    pick(h["recv_mono_ns"]),
                ),
                None if scanned is None else tuple(pick(a) for a in scanned),
            )
        return len(blocks)

    def _control(self, rtype: int, sid: int, number: int, offset: int, body: bytes) -> None:
        """A stream open or close; an open that does not decode is damage at its record."""
        err = self.streams.control(rtype, sid, number, offset, body)
        if err is not None:
            self.control_damage.append(err)

    def _walk(
        self, reader: CaptureReader, rows: _Rows, offset: int, number: int
    ) -> Iterator[_Batch | tuple[CaptureError, int]]:
        """The rest of the file record by record, damage inline (the reader's own scan)."""
        cols: list[list[int]] = [[] for _ in range(5)]
        stream_a, offset_a, len_a, wall_a, mono_a = cols

        def flush() -> None:
            if stream_a:
                rows.add(
                    (
                        np.array(stream_a, dtype=np.int64),
                        np.array(offset_a, dtype=np.int64),
                        np.array(len_a, dtype=np.int64),
                        np.array(wall_a, dtype=np.uint64).view(np.int64),
                        np.array(mono_a, dtype=np.uint64),
                    ),
                    None,
                )
                for c in cols:
                    c.clear()

        # ``offset`` is the first record or follows a verified INDEX: no records since one
        released = behind = offset
        for item in reader._scan(offset, number, structural=True, since_index=[]):
            if isinstance(item, CaptureDamage):
                flush()
                yield from rows.batches(final=True)
                if item.record_type is not None:
                    frames = int(
                        item.record_type is RecordType.MESSAGE
                        and item.stream_id in self.streams.open
                    )
                else:
                    frames = len(item.skipped) if self.streams.open and not item.truncated else 0
                yield item.error, rows.frame_index
                rows.frame_index += frames
                continue
            self.records_walked += 1
            rtype = item.type
            if rtype is RecordType.MESSAGE:
                if self.streams.is_frame(item.stream_id, item.index, item.body):
                    stream_a.append(item.stream_id)
                    offset_a.append(item.offset)
                    len_a.append(len(item.body))
                    wall_a.append(item.recv_unix_ns)
                    mono_a.append(item.recv_mono_ns)
                    if len(stream_a) >= rows.size:
                        flush()
                        yield from rows.batches()
                        # a batch late: the envelope kernel may still be reading the last one
                        released = release_pages(reader.buffer, released, behind)
                        behind = item.offset
            elif rtype is RecordType.STREAM_OPEN or rtype is RecordType.STREAM_CLOSE:
                self._control(int(rtype), item.stream_id, item.index, item.offset, item.body)
        flush()


class _ItemScan:
    """Everything :func:`cbi1kit.capture.read_capture_items` yields with ``damage="report"``, in
    its order and numbering, but each run of frames as batches of message rows (``_Batch``, with
    the capture record numbers, and for blocks read through the index the envelope kernel's rows)
    rather than parsed messages: stream opens and closes, catalog updates and damage are the
    reader's own items. Replay's fast engine reads captures through it.

    Blocks that verify are read through the index, as :class:`_CaptureScan` reads them, a
    stretch between two stream opens or closes at a time (a stream's method and first frame
    change only there); from the first block that does not the file is walked record by record.
    One file of a rotated recording reads on from ``cursor`` (``read_capture_items``' rule).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        group_bytes: int | None = None,
        cursor: ReadCursor | None = None,
    ) -> None:
        self.path = str(path)
        self.group_bytes = group_bytes
        #: where a rotated recording's reading stands: this file numbers frames and catalog
        #: updates on from it, and streams it left open go on (``read_capture_items``' cursor)
        self.cursor = ReadCursor() if cursor is None else cursor
        self.streams = FrameStreams((SUBSCRIBE_KV_POOL_METHOD,), self.path)
        self.catalog_index = self.cursor.catalog
        self._released = 0

    def items(self, batch_records: int) -> Generator[_Batch | CaptureItem, None, None]:
        with _held_reader(self.path) as reader:
            yield from self._items(reader, batch_records)

    def _items(
        self, reader: CaptureReader, batch_records: int
    ) -> Generator[_Batch | CaptureItem, None, None]:
        err, fatal = reader._check_file_header()
        mm = reader.buffer
        arr = np.frombuffer(mm, dtype=np.uint8)
        rows = _Rows(arr, batch_records)
        rows.frame_index = self.cursor.frames
        try:
            yield from self._file_items(reader, mm, arr, rows, err, fatal)
        finally:
            self.cursor.frames, self.cursor.catalog = rows.frame_index, self.catalog_index

    def _file_items(
        self,
        reader: CaptureReader,
        mm: Any,
        arr: npt.NDArray[np.uint8],
        rows: _Rows,
        err: CaptureError | None,
        fatal: bool,
    ) -> Generator[_Batch | CaptureItem, None, None]:
        """The file's items: verified blocks through the index, the rest walked."""
        if err is not None:
            end = len(mm) if fatal else FILE_HEADER_LEN
            yield FrameDamage(rows.frame_index, 0, err, CaptureDamage(err, end, range(0)))
            if fatal:
                return
        offset, number = FILE_HEADER_LEN, 0
        index = read_index(mm) if err is None else None
        if index is not None:
            # the INDEX records it read are spread over the file: their pages go until the
            # scan comes to them
            release_pages(mm, 0, len(mm))
            for group, whole, scanned in _checked_groups(arr, index.blocks, self.group_bytes):
                good = yield from self._blocks(mm, arr, rows, group, scanned)
                if good:
                    offset = group[good - 1].index_end
                    number = group[good - 1].first_index + len(group[good - 1].offsets) + 1
                if good < len(group) or not whole:
                    break
            else:
                offset, number = len(mm), index.trailer_index + 1
        if offset < len(mm):
            yield from self._walk(reader, rows, offset, number)
        yield from self._flush(mm, rows)

    def _flush(self, mm: Any, rows: _Rows, final: bool = True) -> Iterator[_Batch]:
        """The rows gathered so far as batches (all of them, or only full ones); once each is
        replayed, the mapped pages behind it are given back."""
        for batch in rows.batches(final=final):
            yield batch
            last = int(batch.start[-1] + batch.length[-1])
            self._released = release_pages(mm, self._released, last)

    def _blocks(
        self,
        mm: Any,
        arr: npt.NDArray[np.uint8],
        rows: _Rows,
        blocks: list[IndexBlock],
        scanned: _Scanned | None,
    ) -> Generator[_Batch | CaptureItem, None, int]:
        """The items of consecutive verified blocks; returns how many leading blocks' record
        headers agree with the index (the rest is left to the walk)."""
        if not blocks:
            return 0
        offs, follow = _block_records(blocks)
        sizes = [len(b.offsets) for b in blocks]
        numbers = np.concatenate(
            [np.arange(b.first_index, b.first_index + len(b.offsets)) for b in blocks]
        ).astype(np.int64)
        window = np.ndarray(
            (len(arr) - RECORD_HEADER_LEN + 1,),
            dtype=f"V{RECORD_HEADER_LEN}",
            buffer=arr,
            strides=(1,),
        )
        h = window[offs].view(HEADER_DTYPE)
        rtype = h["type"].astype(np.int64)
        length = h["body_len"].astype(np.int64)
        ok = (
            (h["magic"] == RECORD_MAGIC)
            & (h["record_index"] == numbers)
            & (offs + RECORD_HEADER_LEN + length == follow)
            & (rtype >= 1)
            & (rtype <= 7)
            & (rtype != RecordType.INDEX)
        )
        if not ok.all():
            bad = int(np.searchsorted(np.cumsum(sizes), np.argmin(ok), side="right"))
            kept = None if scanned is None else tuple(a[: sum(sizes[:bad])] for a in scanned)
            return (yield from self._blocks(mm, arr, rows, blocks[:bad], kept))
        cols = (
            h["stream_id"].astype(np.int64),
            offs,
            length,
            h["recv_unix_ns"].view(np.int64),
            h["recv_mono_ns"],
            numbers.astype(np.uint64),
        )
        control = np.flatnonzero(
            (rtype == RecordType.STREAM_OPEN) | (rtype == RecordType.STREAM_CLOSE)
        )
        at = 0
        for k in [*control.tolist(), len(offs)]:
            if k > at:
                yield from self._stretch(mm, rows, cols, scanned, rtype, at, k)
            if k < len(offs):
                yield from self._flush(mm, rows)
                yield from self._control(mm, rows, RecordType(int(rtype[k])), *_row(cols, k))
            at = k + 1
        return len(blocks)

    def _stretch(
        self,
        mm: Any,
        rows: _Rows,
        cols: tuple[npt.NDArray[Any], ...],
        scanned: _Scanned | None,
        rtype: npt.NDArray[np.int64],
        lo: int,
        hi: int,
    ) -> Iterator[_Batch | CaptureItem]:
        """Records ``lo`` to ``hi`` of a group, none of them a stream open or close: the frames
        as rows, the catalog updates as items, the rest skipped."""
        sid, offs, length, _wall, _mono, numbers = cols
        msg = lo + np.flatnonzero(rtype[lo:hi] == RecordType.MESSAGE)
        if not msg.size:
            return
        ms = sid[msg]
        u, at, inv = np.unique(ms, return_index=True, return_inverse=True)
        for x, k in zip(u.tolist(), at.tolist(), strict=True):
            if self.streams.undecided(x):  # its open was lost: its first message says
                m = int(msg[k])
                start = int(offs[m]) + RECORD_HEADER_LEN
                body = bytes(mm[start : start + int(length[m])])
                self.streams.is_frame(x, int(numbers[m]), body)
        first = self.streams.first
        starts = np.array([first.get(x, _NOT_OPEN) for x in u.tolist()], dtype=np.uint64)
        frame = starts[inv.reshape(-1)] <= numbers[msg]
        catalogs = [
            x for x in u.tolist() if self.streams.method.get(x) == WATCH_KV_POOL_CATALOG_METHOD
        ]
        cat = np.flatnonzero(~frame & np.isin(ms, catalogs)).tolist() if catalogs else []
        done = 0
        for c in [*cat, len(msg)]:
            picked: Any = msg[done:c][frame[done:c]]
            if picked.size:
                if int(picked[-1]) - int(picked[0]) + 1 == picked.size:  # no copy: views
                    picked = slice(int(picked[0]), int(picked[-1]) + 1)
                rows.add(
                    tuple(a[picked] for a in cols),
                    None if scanned is None else tuple(a[picked] for a in scanned),
                )
                # batches end with the stretch: the rows of a group are not copied again
                yield from self._flush(mm, rows)
            if c < len(msg):
                yield from self._flush(mm, rows)
                yield self._catalog(mm, rows, *_row(cols, int(msg[c])))
            done = c + 1

    def _control(
        self,
        mm: Any,
        rows: _Rows,
        rtype: RecordType,
        sid: int,
        offset: int,
        length: int,
        wall: int,
        mono: int,
        number: int,
    ) -> Iterator[CaptureItem]:
        """A stream open or close as ``read_capture_items`` yields it (undecodable: damage; a
        stream re-opened at a rotation goes on: no item)."""
        body = bytes(mm[offset + RECORD_HEADER_LEN : offset + RECORD_HEADER_LEN + length])
        decoded, err = self.streams.read_control(rtype, sid, number, offset, body)
        if err is not None:
            end = offset + RECORD_HEADER_LEN + length
            yield FrameDamage(
                rows.frame_index, 0, err, CaptureDamage(err, end, range(0), rtype, sid)
            )
            return
        going_on = False
        if isinstance(decoded, StreamClose):
            self.cursor.open_streams.discard(sid)
        elif isinstance(decoded, StreamOpen):
            continued = bool((decoded.info or {}).get(CONTINUED))
            going_on = continued and sid in self.cursor.open_streams
            self.cursor.open_streams.add(sid)
        if going_on:
            return
        yield StreamEvent(
            sid,
            number,
            offset,
            wall,
            mono,
            decoded if isinstance(decoded, StreamOpen) else None,
            decoded if isinstance(decoded, StreamClose) else None,
        )

    def _catalog(
        self,
        mm: Any,
        rows: _Rows,
        sid: int,
        offset: int,
        length: int,
        wall: int,
        mono: int,
        number: int,
    ) -> CaptureItem:
        """A catalog stream's message as ``read_capture_items`` yields it."""
        start = offset + RECORD_HEADER_LEN
        body = bytes(mm[start : start + length])
        rec = CaptureRecord(number, offset, RecordType.MESSAGE, sid, wall, mono, start, body)
        try:
            listing = pb.KvPoolCatalogUpdate.FromString(body)
        except DecodeError as exc:
            err = _unreadable_message(self.path, rec, "KvPoolCatalogUpdate", exc)
            gone = CaptureDamage(err, rec.end_offset, range(0), rec.type, sid)
            return FrameDamage(rows.frame_index, 0, err, gone)
        item = CatalogRecord(
            self.catalog_index, number, offset, wall, mono, sid, listing, body, self.path
        )
        self.catalog_index += 1
        return item

    def _walk(
        self, reader: CaptureReader, rows: _Rows, offset: int, number: int
    ) -> Iterator[_Batch | CaptureItem]:
        """The rest of the file record by record, as ``read_capture_items`` reads it."""
        mm = reader.buffer
        pending: list[tuple[int, int, int, int, int, int]] = []

        def gather() -> None:
            if pending:
                sid, offs, length, wall, mono, numbers = zip(*pending, strict=True)
                rows.add(
                    (
                        np.array(sid, dtype=np.int64),
                        np.array(offs, dtype=np.int64),
                        np.array(length, dtype=np.int64),
                        np.array(wall, dtype=np.uint64).view(np.int64),
                        np.array(mono, dtype=np.uint64),
                        np.array(numbers, dtype=np.uint64),  # any u64: damage says
                    ),
                    None,
                )
                pending.clear()

        # ``offset`` is the first record or follows a verified INDEX: no records since one
        for item in reader._scan(offset, number, structural=True, since_index=[]):
            if isinstance(item, CaptureDamage):
                if item.record_type is not None:
                    lost = int(
                        item.record_type is RecordType.MESSAGE
                        and item.stream_id in self.streams.open
                    )
                else:
                    lost = len(item.skipped) if self.streams.open and not item.truncated else 0
                gather()
                yield from self._flush(mm, rows)
                yield FrameDamage(rows.frame_index, lost, item.error, item)
                rows.frame_index += lost
                continue
            rtype, sid = item.type, item.stream_id
            row = (sid, item.offset, len(item.body), item.recv_unix_ns, item.recv_mono_ns)
            if rtype is RecordType.STREAM_OPEN or rtype is RecordType.STREAM_CLOSE:
                gather()
                yield from self._flush(mm, rows)
                yield from self._control(mm, rows, rtype, *row, item.index)
            elif rtype is not RecordType.MESSAGE:
                continue
            elif self.streams.is_frame(sid, item.index, item.body):
                pending.append((*row, item.index))
                if len(pending) >= rows.size:
                    gather()
                    yield from self._flush(mm, rows, final=False)
            elif self.streams.method.get(sid) == WATCH_KV_POOL_CATALOG_METHOD:
                gather()
                yield from self._flush(mm, rows)
                yield self._catalog(mm, rows, *row, item.index)
        gather()


def _row(cols: tuple[npt.NDArray[Any], ...], k: int) -> tuple[int, int, int, int, int, int]:
    """Record ``k``'s (stream, offset, body length, receive time, monotonic time, number)."""
    sid, offs, length, wall, mono, numbers = cols
    return (
        int(sid[k]),
        int(offs[k]),
        int(length[k]),
        int(wall[k]) & U64_MAX,
        int(mono[k]),
        int(numbers[k]),
    )


_GROUP_BYTES: Final = 32 << 20
_CHECKERS: Final = 1  # threads checking and scanning groups of blocks
_AHEAD_GROUPS: Final = 2  # groups in flight


def _checked_groups(
    arr: npt.NDArray[np.uint8], blocks: Sequence[IndexBlock], group_bytes: int | None = None
) -> Iterator[tuple[list[IndexBlock], bool, _Scanned | None]]:
    """Consecutive groups of index blocks (about ``group_bytes`` each, by default
    ``_GROUP_BYTES``), checked and scanned
    ``_AHEAD_GROUPS`` ahead on a worker thread (``_verified_and_scanned``; the kernel runs
    without the GIL, beside this thread's columns). Yields each group's verified leading blocks,
    whether that was all of them, and the kernel's rows for their records; stops after the first
    group that was not whole."""
    groups: list[list[IndexBlock]] = []
    group_bytes = _GROUP_BYTES if group_bytes is None else group_bytes
    size = group_bytes
    for block in blocks:
        if size >= group_bytes:
            groups.append([])
            size = 0
        groups[-1].append(block)
        size += block.index_end - block.start
    with ThreadPoolExecutor(_CHECKERS, thread_name_prefix="cbi1kit-block-check") as pool:
        pending = deque(
            (g, pool.submit(_verified_and_scanned, arr, g)) for g in groups[:_AHEAD_GROUPS]
        )
        later = iter(groups[_AHEAD_GROUPS:])
        try:
            while pending:
                group, future = pending.popleft()
                good, scanned = future.result()
                if (nxt := next(later, None)) is not None:
                    pending.append((nxt, pool.submit(_verified_and_scanned, arr, nxt)))
                yield group[:good], good == len(group), scanned
                if good < len(group):
                    return
        finally:
            for _, future in pending:
                future.cancel()


def _block_records(blocks: Sequence[IndexBlock]) -> tuple[I64, I64]:
    """Where the blocks' records start, and where each must end: at the next record, or at its
    block's INDEX (records are back to back)."""
    if not blocks:
        return _NO_ROWS, _NO_ROWS
    offs = np.concatenate([b.offsets for b in blocks])
    follow = np.concatenate(
        [np.append(b.offsets[1:], b.index_offset) if len(b.offsets) else _NO_ROWS for b in blocks]
    ).astype(np.int64)
    return offs, follow


def _verified_and_scanned(
    arr: npt.NDArray[np.uint8], blocks: list[IndexBlock]
) -> tuple[int, _Scanned | None]:
    """How many leading blocks carry a block check that holds, and the envelope kernel's rows
    for all their records: one compiled call (``verify_and_scan``) hashes each block and walks
    its records while they are in cache. Each record's body runs to where the next begins;
    records that are not messages are dropped by the caller."""
    from cbi1kit.analysis._kernels import verify_and_scan

    first = np.zeros(len(blocks) + 1, dtype=np.int64)
    np.cumsum([len(b.offsets) for b in blocks], out=first[1:])
    offs, follow = _block_records(blocks)
    good, *scanned = verify_and_scan(
        arr,
        np.array([b.start for b in blocks], dtype=np.int64),
        np.array([b.index_offset for b in blocks], dtype=np.int64),
        np.array([-1 if b.block_check is None else b.block_check for b in blocks], np.int64),
        first,
        offs + RECORD_HEADER_LEN,
        follow,
    )
    return int(good), tuple(scanned) if good else None


def _record_batches(
    records: Iterable[FrameRecord | pb.FilterUpdate], batch_records: int, damage: list[Any]
) -> Iterator[_Batch]:
    """Batches from any record iterator (grpcurl, bare CBI1, messages); damage is kept. A batch
    ends at ``batch_records`` records or ``_GROUP_BYTES`` of them, so that a file of large frames
    is not held whole."""
    it = iter(records)
    pending: list[FrameRecord] = []
    count = size = 0

    def flush() -> _Batch:
        raws = [r.raw for r in pending]
        lengths = np.array([len(r) for r in raws], dtype=np.int64)
        starts = np.zeros(len(raws), dtype=np.int64)
        if len(raws) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        buf = np.frombuffer(b"".join(raws), dtype=np.uint8)
        has_time = np.array([r.recv_unix_ns is not None for r in pending], dtype=bool)
        return _Batch(
            buf,
            np.array([r.index for r in pending], dtype=np.int64),
            np.array([r.stream_id for r in pending], dtype=np.int64),
            np.array([r.source_offset for r in pending], dtype=np.int64),
            starts,
            lengths,
            np.array([r.recv_unix_ns or 0 for r in pending], dtype=np.uint64).view(np.int64),
            np.array([r.recv_mono_ns or 0 for r in pending], dtype=np.uint64),
            np.array([r.update is not None for r in pending], dtype=bool),
            has_time,
        )

    while True:
        try:
            rec = next(it)
        except StopIteration:
            break
        except (Cbi1kitError, OSError, ValueError) as exc:
            damage.append((exc, count))
            break
        if isinstance(rec, pb.FilterUpdate):
            rec = FrameRecord(count, 0, None, None, rec, rec.SerializeToString())
        pending.append(rec)
        count += 1
        size += len(rec.raw)
        if len(pending) >= batch_records or size >= _GROUP_BYTES:
            yield flush()
            pending.clear()
            size = 0
    damage.append((None, count))
    if pending:
        yield flush()
