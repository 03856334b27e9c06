"""polars tables over a recorded stream: frames, delta images, snapshots, occupancy; Parquet.

The ``frames`` table (one row per message) is built batch by batch and column-wise. A capture
is read through its memory map and index: a worker thread checks each group of blocks and runs
the compiled envelope kernel of :mod:`cbi1kit.analysis._kernels` over its records while they are
in cache (protobuf field walk, CBI1 body checksum, payload head); this thread checks the record
headers against the index with numpy, applies the consumer's rules (a second compiled pass),
parses relay and producer sub-messages once per run of identical bytes and builds the columns.
Memory stays at about one batch; ``frames_table`` returns a ``LazyFrame`` whose batches are
produced as polars pulls them, so ``sink_parquet`` and streaming ``collect`` work on captures
larger than memory.

``images`` and ``snapshots`` need the lane, so they come from :mod:`cbi1kit.analysis._replay` (only
applied deltas and installed snapshots appear). Every 64-bit value is ``pl.UInt64``; digests
are hex strings. Schemas are documented in ``docs/tables.md``.
"""

from __future__ import annotations

import mmap
import os
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._replay import Replayer
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
    decode_stream_open,
    read_index,
)
from cbi1kit.capture._readers import SUBSCRIBE_KV_POOL_METHOD, FrameDamage, FrameRecord, read_frames
from cbi1kit.errors import CaptureError, Cbi1kitError, RelayWireError, error_name
from cbi1kit.relay._messages import validate_producer_identity
from cbi1kit.wire._assembly import AssembledSnapshot
from cbi1kit.wire._rules import RULES

__all__ = [
    "FRAMES_SCHEMA",
    "IMAGES_SCHEMA",
    "KINDS",
    "OCCUPANCY_SCHEMA",
    "SNAPSHOTS_SCHEMA",
    "export_parquet",
    "frames_batches",
    "frames_table",
    "images_table",
    "occupancy_table",
    "snapshots_table",
]

KINDS: Final = ("SNAPSHOT_CHUNK", "DELTA", "HEARTBEAT", "UNSPECIFIED", "UNKNOWN", "SOURCE_ERROR")
_KIND_ENUM: Final = pl.Enum(list(KINDS))
_U64, _U32, _U16, _U8 = pl.UInt64, pl.UInt32, pl.UInt16, pl.UInt8

FRAMES_SCHEMA: Final[dict[str, Any]] = {
    "record_index": _U64,
    "stream_id": _U32,
    "source_offset": _U64,
    "raw_len": _U32,
    "recv_time": pl.Datetime("ns", "UTC"),
    "recv_mono_ns": _U64,
    "send_ts_us": _U64,
    "send_time": pl.Datetime("us", "UTC"),
    "kind": _KIND_ENUM,
    "kind_raw": pl.Int32,
    "base_sequence": _U64,
    "sequence": _U64,
    "protocol_version": _U32,
    "contract_marker": _U32,
    "relay_drt_instance_id": _U64,
    "relay_incarnation": _U64,
    "pool_identity_version": _U32,
    "cache_semantics": pl.Utf8,
    "cache_semantics_source": pl.Utf8,
    "routing_scope": pl.Utf8,
    "routing_scope_source": pl.Utf8,
    "dc_id": _U64,
    "producer_incarnation": _U64,
    "layout_generation": _U64,
    "ckf_format_version": _U32,
    "ckf_seed": _U64,
    "ckf_bucket_count": _U64,
    "ckf_fingerprint_bits": _U32,
    "ckf_slots_per_bucket": _U32,
    "producer_key": pl.Utf8,
    "payload_len": _U32,
    "has_unknown_fields": pl.Boolean,
    "cbi1_wire_version": _U16,
    "cbi1_flags": _U16,
    "cbi1_fingerprint_bits": _U8,
    "cbi1_slots": _U8,
    "cbi1_format_version": _U16,
    "cbi1_seed": _U64,
    "cbi1_bucket_count": _U64,
    "cbi1_dc_id": _U64,
    "cbi1_epoch": _U64,
    "cbi1_checksum": _U32,
    "cbi1_checksum_ok": pl.Boolean,
    "chunk_index": _U32,
    "chunk_count": _U32,
    "bucket_offset": _U64,
    "word_count": _U32,
    "base_epoch": _U64,
    "image_count": _U32,
    "validation_error": pl.Utf8,
    "validation_rule": pl.Utf8,
}

IMAGES_SCHEMA: Final[dict[str, Any]] = {
    "record_index": _U64,
    "sequence": _U64,
    "bucket": _U32,
    "new_word": _U64,
    "previous_word": _U64,
    "occupied_before": _U8,
    "occupied_after": _U8,
}

SNAPSHOTS_SCHEMA: Final[dict[str, Any]] = {
    "record_index": _U64,
    "stream_id": _U32,
    "sequence": _U64,
    "bucket_count": _U64,
    "chunk_count": _U32,
    "nonzero_buckets": _U64,
    "occupied_slots": _U64,
    "load_factor": pl.Float64,
}

OCCUPANCY_SCHEMA: Final[dict[str, Any]] = {
    "bin": _U32,
    "bucket_start": _U64,
    "bucket_end": _U64,
    "buckets": _U64,
    "nonzero_buckets": _U64,
    "full_buckets": _U64,
    "occupied_slots": _U64,
    "load_factor": pl.Float64,
}

_PA: Final[dict[Any, pa.DataType]] = {
    _U64: pa.uint64(),
    _U32: pa.uint32(),
    _U16: pa.uint16(),
    _U8: pa.uint8(),
    pl.Int32: pa.int32(),
    pl.Boolean: pa.bool_(),
    pl.Float64: pa.float64(),
    pl.Utf8: pa.string(),
}
_SOURCES: Final = {0: "UNSPECIFIED", 1: "DEFAULT_DERIVED", 2: "EXPLICIT"}
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
Bool = npt.NDArray[np.bool_]
_Scanned = tuple[npt.NDArray[Any], ...]  # the envelope kernel's arrays, a row per message


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
        self, path: str | os.PathLike[str], methods: Iterable[str], *, indexed: bool = True
    ) -> None:
        self.path = str(path)
        self.indexed = indexed  # read verified blocks through the index (the compiled kernel)
        self.methods = set(methods)
        self.frame_streams: dict[int, int] = {}  # stream id -> record number of its open
        self.open_streams: set[int] = set()
        self.blocks_verified = 0
        self.records_walked = 0

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
                released = _release(mm, released, offset)
                if good < len(group) or not whole:
                    break
                if rows.count >= batch_records:
                    yield from rows.batches()
            else:
                offset, number = len(mm), index.trailer_index + 1
        if offset < len(mm):
            yield from self._walk(reader, rows, offset, number)
        yield from rows.batches(final=True)

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
                bytes(mm[int(offs[k]) + RECORD_HEADER_LEN : int(ends[k])]),
            )
        msg = np.flatnonzero(rtype == RecordType.MESSAGE)
        if msg.size and self.frame_streams:
            ms = sid[msg]
            lo, hi = int(ms.min()), int(ms.max())
            if lo == hi:  # one stream: the usual capture
                msg = msg[self.frame_streams.get(lo, _NOT_OPEN) < numbers[msg]]
            else:
                u, inv = np.unique(ms, return_inverse=True)
                first = np.array([self.frame_streams.get(int(x), _NOT_OPEN) for x in u.tolist()])
                msg = msg[first[inv] < numbers[msg]]
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

    def _control(self, rtype: int, sid: int, number: int, body: bytes) -> None:
        """A stream open or close, as ``read_capture`` tracks them."""
        if rtype == RecordType.STREAM_CLOSE:
            self.open_streams.discard(sid)
        elif decode_stream_open(body).method in self.methods:
            self.frame_streams.setdefault(sid, number)
            self.open_streams.add(sid)

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
                        and item.stream_id in self.open_streams
                    )
                else:
                    frames = len(item.skipped) if self.open_streams and not item.truncated else 0
                yield item.error, rows.frame_index
                rows.frame_index += frames
                continue
            self.records_walked += 1
            rtype = item.type
            if rtype is RecordType.MESSAGE:
                if item.stream_id in self.frame_streams:
                    stream_a.append(item.stream_id)
                    offset_a.append(item.offset)
                    len_a.append(len(item.body))
                    wall_a.append(item.recv_unix_ns)
                    mono_a.append(item.recv_mono_ns)
                    if len(stream_a) >= rows.size:
                        flush()
                        yield from rows.batches()
                        released = _release(reader.buffer, released, behind)
                        behind = item.offset
            elif rtype is RecordType.STREAM_OPEN or rtype is RecordType.STREAM_CLOSE:
                self._control(int(rtype), item.stream_id, item.index, item.body)
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


def _release(mm: Any, start: int, end: int) -> int:
    """Drop the mapped pages of records already turned into rows, so that resident memory
    stays near a batch, not the whole file (the pages stay in the page cache; reading them
    again maps them again). The walk releases a batch late: the envelope kernel may still be
    reading the last one."""
    page = mmap.PAGESIZE
    lo, hi = start - start % page, end - end % page
    if hi > lo and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        return hi
    return start


def _record_batches(
    records: Iterable[FrameRecord | pb.FilterUpdate], batch_records: int, damage: list[Any]
) -> Iterator[_Batch]:
    """Batches from any record iterator (grpcurl, bare CBI1, messages); damage is kept."""
    it = iter(records)
    pending: list[FrameRecord] = []
    count = 0

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
        if len(pending) >= batch_records:
            yield flush()
            pending.clear()
    damage.append((None, count))
    if pending:
        yield flush()


# ------------------------------------------------------------------------------ frames table


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
)
_RELAY_COLS: Final = ("relay_drt_instance_id", "relay_incarnation", "_malformed")
_NO_PRODUCER: Final = (None,) * len(_PRODUCER_COLS)


def _producer_summary(raw: bytes) -> tuple[Any, ...]:
    try:
        p = pb.ProducerIdentity.FromString(raw)
    except Exception:  # DecodeError: the whole message is malformed, as prost decodes it at once
        return (None,) * 15 + (True,)
    error = None
    try:
        validate_producer_identity(p, path="FilterUpdate.producer")
    except RelayWireError as exc:
        error = str(exc)
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
    )


def _relay_summary(raw: bytes) -> tuple[int | None, int | None, bool | None]:
    try:
        r = pb.RelayIdentity.FromString(raw)
    except Exception:  # DecodeError: the whole message is malformed
        return None, None, True
    return r.drt_instance_id, r.relay_incarnation, None


class _Envelopes:
    """The ``relay`` and ``producer`` sub-message columns, parsed once per run of rows whose
    bytes are identical (``run`` from ``scan_filter_updates``) and spread to the rows by it."""

    def __init__(
        self, buf: npt.NDArray[np.uint8], run: I64, has: Bool, off: I64, length: I64
    ) -> None:
        self.run = run
        firsts = np.flatnonzero(np.diff(run, prepend=-1)).tolist()

        def part(k: int, i: int) -> bytes:
            return bytes(buf[off[k, i] : off[k, i] + length[k, i]])

        self.per_run: dict[str, list[Any]] = {}
        runs = [
            (
                _relay_summary(part(0, i)) if has[0, i] else (None, None, None),
                _producer_summary(part(1, i)) if has[1, i] else _NO_PRODUCER,
            )
            for i in firsts
        ]
        for j, name in enumerate(_RELAY_COLS[:-1]):
            self.per_run[name] = [r[0][j] for r in runs]
        for j, name in enumerate(_PRODUCER_COLS[:-1]):
            self.per_run[name] = [r[1][j] for r in runs]
        # a relay or producer sub-message that does not parse
        self.per_run["_malformed"] = [r[0][-1] or r[1][-1] for r in runs]

    def per_run_numbers(self, name: str) -> npt.NDArray[Any]:
        """One value per run (0 where missing)."""
        dtype = _np_of(FRAMES_SCHEMA[name])
        return np.array([0 if x is None else x for x in self.per_run[name]], dtype=dtype)

    def per_run_present(self, name: str) -> Bool:
        """Per run, whether the value is there."""
        return np.array([x is not None for x in self.per_run[name]], dtype=bool)

    def numbers(self, name: str) -> tuple[npt.NDArray[Any], Bool]:
        """Per-row values (0 where missing) and where they are present."""
        per, valid = self.per_run_numbers(name), self.per_run_present(name)
        if len(per) == 1:  # one run: constant columns, no gather
            n = len(self.run)
            return np.full(n, per[0]), np.full(n, valid[0])
        return per[self.run], valid[self.run]

    def strings(self, name: str) -> pl.Series:
        values = self.per_run[name]
        if len(values) == 1:  # one run: a constant column
            return pl.repeat(values[0], len(self.run), dtype=pl.Utf8, eager=True).alias(name)
        return pl.Series(name, values, dtype=pl.Utf8).gather(self.run)


def _scan_batch(batch: _Batch) -> _Scanned:
    """The compiled pass over a batch's messages (``scan_filter_updates``; releases the GIL)."""
    from cbi1kit.analysis._kernels import scan_filter_updates

    return scan_filter_updates(batch.buf, batch.start, batch.start + batch.length, batch.is_pb)


def _frames_df(batch: _Batch, engine: str = "compiled") -> pl.DataFrame:
    if engine == "reference":
        from cbi1kit.analysis._reference import reference_frames

        return reference_frames(batch)
    return _frames_columns(batch, _scan_batch(batch))


_MESSAGES: Final = pl.Series("validation_error", [r.message for r in RULES], dtype=pl.Utf8)
_RULE_IDS: Final = pl.Series("validation_rule", [*(r.id for r in RULES), None], dtype=pl.Utf8)


def _frames_columns(batch: _Batch, scanned: _Scanned) -> pl.DataFrame:
    """The batch's rows from the kernel's arrays: header fields, validation, columns."""
    from cbi1kit.analysis._kernels import (
        FIELD_SLOTS,
        HEADER_COLUMNS,
        PRODUCER_RULE,
        UNKNOWN_FIELDS,
        frame_rules,
    )

    pbm = batch.is_pb
    value, present, offset, flags, checksum, run, head, top = scanned
    run = np.cumsum(np.diff(run, prepend=-1) != 0) - 1  # dense ids: rows may have been dropped
    v = {f: np.ascontiguousarray(value[:, FIELD_SLOTS[f]]) for f in (1, 6, 127)}
    unknown = (flags & UNKNOWN_FIELDS) != 0
    subs = [FIELD_SLOTS[2], FIELD_SLOTS[3]]
    env = _Envelopes(
        batch.buf, run, present[:, subs].T, offset[:, subs].T, value[:, subs].T.astype(np.int64)
    )
    perr = env.per_run["_producer_error"]
    rules = frame_rules(
        value,
        present,
        flags,
        checksum,
        head,
        top,
        pbm,
        batch.length,
        run,
        env.per_run_numbers("ckf_seed"),
        env.per_run_numbers("ckf_bucket_count"),
        env.per_run_numbers("dc_id"),
        env.per_run_present("_producer_error"),
        env.per_run_present("_malformed"),
    )
    code, kind_code, kind_raw, base, seq, p_len = rules[:6]
    checksum_ok, is_chunk_frame, is_delta_frame, word_count = rules[6:10]
    header = {
        name: column
        for names, columns in zip(HEADER_COLUMNS, rules[10:], strict=True)
        for name, column in zip(names, columns, strict=True)
    }
    has_head = p_len >= 48
    # the rule id (null: valid), and its message; the producer rule shows the run's own error
    rule_ids = _RULE_IDS.gather(np.where(code < 0, len(RULES), code))
    message = np.where(code < 0, len(RULES), code)
    message = np.where(code == PRODUCER_RULE, len(RULES) + 1 + env.run, message)
    messages = pl.concat([_MESSAGES, pl.Series([None, *perr], dtype=pl.Utf8)])

    def col(values: Any, dtype: Any, valid: Bool | None = None) -> pa.Array:
        return pa.array(
            np.asarray(values).astype(_np_of(dtype), copy=False),
            type=_PA[dtype],
            mask=None if valid is None else ~valid,
        )

    send = v[6]
    cols: dict[str, pa.Array] = {
        "record_index": col(batch.index, _U64),
        "stream_id": col(batch.stream_id, _U32),
        "source_offset": col(batch.offset, _U64),
        "raw_len": col(batch.length, _U32),
        "recv_time": pa.array(batch.wall, type=pa.timestamp("ns", "UTC"), mask=~batch.has_time),
        "recv_mono_ns": col(batch.mono, _U64, batch.has_time),
        "send_ts_us": col(send, _U64, pbm),
        "send_time": pa.array(
            send.view(np.int64), type=pa.timestamp("us", "UTC"), mask=~pbm | (send >= 2**62)
        ),
        "kind_raw": col(kind_raw, pl.Int32),
        "base_sequence": col(base, _U64, pbm | has_head),
        "sequence": col(seq, _U64, pbm | has_head),
        "protocol_version": col(v[1], _U32, pbm),
        "contract_marker": col(v[127], _U32, pbm),
        "payload_len": col(p_len, _U32),
        "has_unknown_fields": col(unknown, pl.Boolean),
        "cbi1_checksum_ok": col(checksum_ok, pl.Boolean, has_head),
        "word_count": col(word_count, _U32, is_chunk_frame),
    }
    chunk_fields = ("chunk_index", "chunk_count", "bucket_offset")
    for name, column in header.items():
        valid = (
            is_chunk_frame
            if name in chunk_fields
            else is_delta_frame
            if name in ("base_epoch", "image_count")
            else has_head
        )
        cols[name] = col(column, FRAMES_SCHEMA[name], valid)
    strings = [
        pl.Series("kind", KINDS, dtype=_KIND_ENUM).gather(kind_code),
        messages.gather(message).alias("validation_error"),
        rule_ids,
    ]
    for name in (*_RELAY_COLS[:-1], *_PRODUCER_COLS[:-2]):
        if FRAMES_SCHEMA[name] == pl.Utf8:
            strings.append(env.strings(name))
        else:
            values, valid = env.numbers(name)
            cols[name] = col(values, FRAMES_SCHEMA[name], valid)
    df = pl.from_arrow(pa.table(cols))
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(strings).select(list(FRAMES_SCHEMA))


def _np_of(dtype: Any) -> Any:
    return {
        _U64: np.uint64,
        _U32: np.uint32,
        _U16: np.uint16,
        _U8: np.uint8,
        pl.Int32: np.int32,
        pl.Boolean: np.bool_,
        pl.Float64: np.float64,
    }[dtype]


def _damage_df(error: BaseException, index: int) -> pl.DataFrame:
    row: dict[str, Any] = dict.fromkeys(FRAMES_SCHEMA)
    row["record_index"] = index
    row["source_offset"] = getattr(error, "offset", None)
    row["kind"] = "SOURCE_ERROR"
    row["validation_error"] = f"{error_name(error)}: {error}"
    return pl.DataFrame([row], schema=FRAMES_SCHEMA)


def _pipelined(
    items: Iterator[_Batch | tuple[CaptureError, int]], engine: str
) -> Iterator[pl.DataFrame]:
    """Frames of a capture, two stages deep: while the envelope kernel (no GIL) scans a batch
    on a worker thread, this thread reads the next one and turns the last into columns. The
    reference engine builds each batch's rows in Python, in order."""
    if engine == "reference":
        from cbi1kit.analysis._reference import reference_frames

        for item in items:
            yield reference_frames(item) if isinstance(item, _Batch) else _damage_df(*item)
        return
    with ThreadPoolExecutor(1, thread_name_prefix="cbi1kit-envelopes") as pool:
        pending: tuple[_Batch, Future[_Scanned]] | None = None
        for item in items:
            if pending is not None:
                yield _frames_columns(pending[0], pending[1].result())
                pending = None
            if isinstance(item, _Batch) and item.scanned is not None:
                yield _frames_columns(item, item.scanned)
            elif isinstance(item, _Batch):
                pending = item, pool.submit(_scan_batch, item)
            else:
                yield _damage_df(*item)
        if pending is not None:
            yield _frames_columns(pending[0], pending[1].result())


ENGINES: Final = ("auto", "compiled", "reference")


def _engine(engine: str) -> str:
    """``compiled`` or ``reference``: ``auto`` is the compiled kernels when they load (numba
    importable, a kernel compiled or loaded from the cache), else the reference."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "auto":
        from cbi1kit.analysis._reference import kernels_available

        return "compiled" if kernels_available() else "reference"
    return engine


def frames_batches(
    source: Any, *, batch_records: int = 65536, engine: str = "auto"
) -> Iterator[pl.DataFrame]:
    """The ``frames`` table as a sequence of DataFrames of at most ``batch_records`` rows.

    ``source``: a capture / grpcurl JSON / CBI1 file path, or an iterable of ``FrameRecord`` or
    ``FilterUpdate`` values. Source damage becomes a ``SOURCE_ERROR`` row: a capture's damage
    where it is, reading going on past it (as ``CaptureReader.items``; frame numbers as
    ``read_capture(..., damage="report")``), other sources' as the last row.

    ``engine``: ``compiled`` (the numba kernels), ``reference`` (protobuf, relay validation,
    ``decode`` and the rulebook per message, in Python: the same table, slower) or ``auto``
    (compiled, falling back to reference when the kernels cannot be loaded).
    """
    engine = _engine(engine)
    if _is_capture(source):
        scan = _CaptureScan(source, (SUBSCRIBE_KV_POOL_METHOD,), indexed=engine == "compiled")
        items = scan.items(batch_records)
        try:
            yield from _pipelined(items, engine)
        finally:
            items.close()  # after the kernel thread has let go of the mapped file
        return
    damage: list[Any] = []
    try:
        records: Iterable[Any] = (
            read_frames(source) if isinstance(source, (str, os.PathLike)) else source
        )
    except (Cbi1kitError, OSError) as exc:
        yield _damage_df(exc, 0)
        return
    for batch in _record_batches(records, batch_records, damage):
        yield _frames_df(batch, engine)
    if damage and damage[0][0] is not None:
        yield _damage_df(damage[0][0], damage[0][1])


def frames_table(source: Any, *, batch_records: int = 65536, engine: str = "auto") -> pl.LazyFrame:
    """One row per message (schema ``FRAMES_SCHEMA``), produced lazily batch by batch
    (``engine``: see :func:`frames_batches`)."""
    from polars.io.plugins import register_io_source

    def produce(
        with_columns: list[str] | None,
        predicate: pl.Expr | None,
        n_rows: int | None,
        batch_size: int | None,
    ) -> Iterator[pl.DataFrame]:
        left = n_rows
        for batch in frames_batches(source, batch_records=batch_records, engine=engine):
            df = batch
            if left is not None:
                df = df.head(left)
                left -= df.height
            if predicate is not None:
                df = df.filter(predicate)
            if with_columns is not None:
                df = df.select(with_columns)
            yield df
            if left is not None and left <= 0:
                return

    return register_io_source(produce, schema=FRAMES_SCHEMA)


# ---------------------------------------------------------------------- images and snapshots


def _occupied(words: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint8]:
    slots = np.ascontiguousarray(words, dtype="<u8").view("<u2").reshape(-1, 4)
    out: npt.NDArray[np.uint8] = np.count_nonzero(slots, axis=1).astype(np.uint8)
    return out


class _Collector:
    def __init__(self, flush_rows: int) -> None:
        self.flush_rows = flush_rows
        self.images: list[tuple[Any, ...]] = []
        self.image_rows = 0
        self.snapshots: list[dict[str, Any]] = []

    def on_delta(
        self,
        index: int,
        sequence: int,
        buckets: npt.NDArray[np.uint32],
        new: npt.NDArray[np.uint64],
        prev: npt.NDArray[np.uint64],
    ) -> None:
        self.images.append((index, sequence, np.array(buckets), np.array(new), prev))
        self.image_rows += len(buckets)

    def on_snapshot(self, index: int, sequence: int, snap: AssembledSnapshot, stream: int) -> None:
        occupied = sum(int(_occupied(w).sum(dtype=np.int64)) for _, w in snap.parts)
        self.snapshots.append(
            {
                "record_index": index,
                "stream_id": stream,
                "sequence": sequence,
                "bucket_count": snap.bucket_count,
                "chunk_count": len(snap.parts),
                "nonzero_buckets": snap.image_count,
                "occupied_slots": occupied,
                "load_factor": occupied / (4 * snap.bucket_count),
            }
        )

    def images_df(self) -> pl.DataFrame:
        if not self.images:
            return pl.DataFrame(schema=IMAGES_SCHEMA)
        counts = [len(b) for _, _, b, _, _ in self.images]
        new = np.concatenate([x[3] for x in self.images]).astype(np.uint64)
        prev = np.concatenate([x[4] for x in self.images]).astype(np.uint64)
        df = pl.DataFrame(
            {
                "record_index": np.repeat([x[0] for x in self.images], counts).astype(np.uint64),
                "sequence": np.repeat(
                    np.array([x[1] for x in self.images], dtype=np.uint64), counts
                ),
                "bucket": np.concatenate([x[2] for x in self.images]).astype(np.uint32),
                "new_word": new,
                "previous_word": prev,
                "occupied_before": _occupied(prev),
                "occupied_after": _occupied(new),
            },
            schema=IMAGES_SCHEMA,
        )
        self.images.clear()
        self.image_rows = 0
        return df

    def snapshots_df(self) -> pl.DataFrame:
        df = pl.DataFrame(self.snapshots, schema=SNAPSHOTS_SCHEMA)
        self.snapshots.clear()
        return df


def _replay_batches(
    source: Any, *, expected_format: Any, flush_rows: int
) -> Iterator[tuple[pl.DataFrame | None, pl.DataFrame | None]]:
    """(images batch, snapshots batch) pairs from one replay pass."""
    c = _Collector(flush_rows)
    player = Replayer(
        expected_format=expected_format,
        keep_history=False,
        on_snapshot=c.on_snapshot,
        on_delta=c.on_delta,
    )
    try:
        it: Iterator[Any] = iter(
            read_frames(source, damage="report")
            if isinstance(source, (str, os.PathLike))
            else source
        )
        for rec in it:
            if isinstance(rec, FrameDamage):
                player.feed_damage(rec)
                continue
            player.feed(rec)
            if c.image_rows >= flush_rows:
                yield c.images_df(), None
            if c.snapshots:
                yield None, c.snapshots_df()
    except (Cbi1kitError, OSError, ValueError):
        pass  # damage ends the replayable part; replay() reports it
    yield c.images_df(), c.snapshots_df()


def images_table(
    source: Any, *, expected_format: Any = None, flush_rows: int = 1 << 20
) -> pl.DataFrame:
    """One row per image of every applied delta, with the word it replaced (``IMAGES_SCHEMA``)."""
    parts = [
        d
        for d, _ in _replay_batches(source, expected_format=expected_format, flush_rows=flush_rows)
        if d is not None
    ]
    return pl.concat(parts) if parts else pl.DataFrame(schema=IMAGES_SCHEMA)


def snapshots_table(source: Any, *, expected_format: Any = None) -> pl.DataFrame:
    """One row per installed snapshot (``SNAPSHOTS_SCHEMA``)."""
    parts = [
        s
        for _, s in _replay_batches(source, expected_format=expected_format, flush_rows=1 << 20)
        if s is not None
    ]
    return pl.concat(parts) if parts else pl.DataFrame(schema=SNAPSHOTS_SCHEMA)


def occupancy_table(lane: npt.ArrayLike, *, bins: int = 64) -> pl.DataFrame:
    """Per-bucket-range occupancy of one lane (``OCCUPANCY_SCHEMA``): ``bins`` equal ranges."""
    words = np.asarray(lane)
    if words.dtype != np.uint64 or words.ndim != 1:
        raise TypeError("lane must be a 1-D uint64 array")
    n = words.shape[0]
    bins = max(1, min(bins, n)) if n else 1
    edges = np.linspace(0, n, bins + 1).astype(np.int64)
    occ = _occupied(words).astype(np.int64)
    starts = edges[:-1]
    if n:
        slots = np.add.reduceat(occ, starts)
        nonzero = np.add.reduceat((occ > 0).astype(np.int64), starts)
        full_b = np.add.reduceat((occ == 4).astype(np.int64), starts)
    else:
        slots = nonzero = full_b = np.zeros(bins, np.int64)
    sizes = np.diff(edges)
    return pl.DataFrame(
        {
            "bin": np.arange(bins, dtype=np.uint32),
            "bucket_start": starts.astype(np.uint64),
            "bucket_end": edges[1:].astype(np.uint64),
            "buckets": sizes.astype(np.uint64),
            "nonzero_buckets": nonzero.astype(np.uint64),
            "full_buckets": full_b.astype(np.uint64),
            "occupied_slots": slots.astype(np.uint64),
            "load_factor": np.where(sizes > 0, slots / np.maximum(4 * sizes, 1), 0.0),
        },
        schema=OCCUPANCY_SCHEMA,
    )


def _arrow_schema(schema: dict[str, Any]) -> pa.Schema:
    return pl.DataFrame(schema=schema).to_arrow().schema


def export_parquet(
    source: Any,
    out_dir: str | os.PathLike[str],
    *,
    expected_format: Any = None,
    batch_records: int = 65536,
) -> dict[str, Path]:
    """Write ``frames.parquet``, ``images.parquet`` and ``snapshots.parquet`` batch by batch.

    Unsigned columns stay unsigned in Parquet (``UINT_64`` etc. logical types), so
    ``pl.read_parquet`` gives back ``pl.UInt64`` with values up to ``2**64 - 1``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / f"{name}.parquet" for name in ("frames", "images", "snapshots")}
    with pq.ParquetWriter(paths["frames"], _arrow_schema(FRAMES_SCHEMA)) as w:
        for df in frames_batches(source, batch_records=batch_records):
            w.write_table(df.to_arrow().cast(w.schema))
    with (
        pq.ParquetWriter(paths["images"], _arrow_schema(IMAGES_SCHEMA)) as wi,
        pq.ParquetWriter(paths["snapshots"], _arrow_schema(SNAPSHOTS_SCHEMA)) as ws,
    ):
        for images, snaps in _replay_batches(
            source, expected_format=expected_format, flush_rows=1 << 20
        ):
            if images is not None and images.height:
                wi.write_table(images.to_arrow().cast(wi.schema))
            if snaps is not None and snaps.height:
                ws.write_table(snaps.to_arrow().cast(ws.schema))
    return paths
