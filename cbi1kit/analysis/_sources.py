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
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._schema import I64, U64, Bool, _Scanned
from cbi1kit.capture._file import (
    FILE_HEADER_LEN,
    FILE_MAGIC,
    HEADER_DTYPE,
    RECORD_HEADER_LEN,
    RECORD_MAGIC,
    CaptureDamage,
    CaptureReader,
    IndexBlock,
    RecordType,
    read_index,
    release_pages,
)
from cbi1kit.capture._readers import FrameRecord
from cbi1kit.capture._streams import FrameStreams
from cbi1kit.errors import CaptureError, Cbi1kitError

__all__: list[str] = []

# ------------------------------------------------------------------------------------ sources


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


def _is_capture(source: Any) -> bool:
    if not isinstance(source, (str, os.PathLike)):
        return False
    with open(source, "rb") as f:
        return f.read(len(FILE_MAGIC)) == FILE_MAGIC


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
        cols = [np.concatenate(c) for c in zip(*(p[0] for p in self.parts), strict=True)]
        scans = [p[1] for p in self.parts]
        scanned = (
            [np.concatenate(c) for c in zip(*scans, strict=True)]
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
        )


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
        reader = CaptureReader(self.path)
        try:
            yield from self._items(reader, batch_records)
        finally:
            try:
                reader.close()
            except BufferError:  # a caller still holds a batch view; the map goes with it
                reader._map = None
                reader._file.close()

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


_GROUP_BYTES: Final = 32 << 20
_CHECKERS: Final = 1  # threads checking and scanning groups of blocks
_AHEAD_GROUPS: Final = 2  # groups in flight


def _checked_groups(
    arr: npt.NDArray[np.uint8], blocks: Sequence[IndexBlock]
) -> Iterator[tuple[list[IndexBlock], bool, _Scanned | None]]:
    """Consecutive groups of index blocks (about ``_GROUP_BYTES`` each), checked and scanned
    ``_AHEAD_GROUPS`` ahead on a worker thread (``_verified_and_scanned``; the kernel runs
    without the GIL, beside this thread's columns). Yields each group's verified leading blocks,
    whether that was all of them, and the kernel's rows for their records; stops after the first
    group that was not whole."""
    groups: list[list[IndexBlock]] = []
    size = _GROUP_BYTES
    for block in blocks:
        if size >= _GROUP_BYTES:
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
