"""What ``lane_at`` rebuilds a lane from, kept by reference: each session's snapshot chunks and
the deltas applied on top of them, where the source holds their messages. A capture's records
are read back from the file when a lane is asked for, each checked to be the record replay took
(its number, header and body checksums); other sources' messages are held in memory. Replay
itself writes nothing: the history costs a few numbers per message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._file import RECORD_FIELD, RECORD_HEADER_LEN, body_verifies, record_header
from cbi1kit.errors import CaptureError, CaptureVariant
from cbi1kit.wire._codec import decode
from cbi1kit.wire._format import FilterFormat
from cbi1kit.wire._frames import SnapshotChunk

_INDEX: Final = RECORD_FIELD["record_index"]

Words = npt.NDArray[np.uint64]
#: a message: (store, where, body length, capture record number; 0 where it is no record)
Ref = tuple[int, int, int, int]
_WINDOW: Final = 8 << 20  # bytes of a capture read back at a time
#: a history row, as ``bucket_writes`` returns them: the delta's sequence, the bucket, the word
ROW: Final = np.dtype([("sequence", "<u8"), ("bucket", "<u4"), ("word", "<u8")])


class History:
    """Where the messages are: capture files by path, in-memory buffers, single messages."""

    def __init__(self) -> None:
        self._stores: list[str | npt.NDArray[np.uint8] | list[bytes]] = [[]]
        self._files: dict[str, int] = {}
        self._buffers: dict[int, int] = {}

    def file(self, path: str) -> int:
        """The store of capture file ``path`` (refs: record offset, body length, number)."""
        if path not in self._files:
            self._files[path] = len(self._stores)
            self._stores.append(path)
        return self._files[path]

    def buffer(self, buf: npt.NDArray[np.uint8]) -> int:
        """The store of an in-memory buffer (refs: start, length)."""
        key = id(buf)
        at = self._buffers.get(key)
        if at is None or self._stores[at] is not buf:
            at = self._buffers[key] = len(self._stores)
            self._stores.append(buf)
        return at

    def message(self, raw: bytes) -> Ref:
        """A message kept as it is (a source with nothing to read it back from)."""
        blobs = self._stores[0]
        assert isinstance(blobs, list)
        blobs.append(raw)
        return 0, len(blobs) - 1, len(raw), 0

    def bodies(
        self,
        store: int,
        at: npt.NDArray[np.int64],
        length: npt.NDArray[np.int64],
        number: npt.NDArray[np.uint64],
    ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
        """The messages of ``store`` at ``at`` (in order) back to back: the buffer and where
        each starts in it. A capture's records are checked to be the ones replay took."""
        where = self._stores[store]
        if isinstance(where, list):
            raws = [where[int(i)] for i in at]
            return _joined(raws)
        if isinstance(where, np.ndarray):
            return where, at
        return _read_records(where, at, length, number)


def _joined(raws: list[bytes]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    starts = np.zeros(len(raws), np.int64)
    if raws:
        np.cumsum([len(r) for r in raws[:-1]], out=starts[1:])
    return np.frombuffer(b"".join(raws) or b"\0", np.uint8), starts


def _changed(path: str, offset: int, number: int, why: str) -> CaptureError:
    return CaptureError(
        CaptureVariant.Changed,
        f"record {number} at byte offset {offset} is not the record replay read ({why}): the "
        "capture changed since; replay it again",
        source=path,
        offset=offset,
        record_index=number,
    )


def _read_records(
    path: str,
    at: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    number: npt.NDArray[np.uint64],
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """Records of a capture file read back a window at a time, each header and body checked."""
    parts: list[npt.NDArray[np.uint8]] = []
    starts: list[npt.NDArray[np.int64]] = []
    base = 0
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise _changed(path, int(at[0]), int(number[0]), f"cannot open it: {exc}") from None
    try:
        k = 0
        while k < len(at):
            end = k
            lo = int(at[k])
            while end < len(at) and int(at[end]) + RECORD_HEADER_LEN + int(length[end]) - lo <= max(
                _WINDOW, RECORD_HEADER_LEN + int(length[k])
            ):
                end += 1
            hi = int(at[end - 1]) + RECORD_HEADER_LEN + int(length[end - 1])
            buf = np.frombuffer(os.pread(fd, hi - lo, lo), np.uint8)
            rel = at[k:end] - lo
            _check_records(path, buf, rel, length[k:end], number[k:end], lo)
            parts.append(buf)
            starts.append(rel + RECORD_HEADER_LEN + base)
            base += len(buf)
            k = end
    finally:
        os.close(fd)
    if len(parts) == 1:
        return parts[0], starts[0]
    return np.concatenate(parts), np.concatenate(starts)


def _check_records(
    path: str,
    buf: npt.NDArray[np.uint8],
    rel: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    number: npt.NDArray[np.uint64],
    base: int,
) -> None:
    """Each record at ``buf[rel]`` is whole and the one replay took."""
    for i, r in enumerate(rel.tolist()):
        n = int(length[i])
        if r + RECORD_HEADER_LEN + n > len(buf):
            raise _changed(path, base + r, int(number[i]), "the file ends before it")
        fields = record_header(buf[r : r + RECORD_HEADER_LEN])
        if (
            fields is None
            or fields[_INDEX] != int(number[i])
            or not body_verifies(fields, buf[r + RECORD_HEADER_LEN : r + RECORD_HEADER_LEN + n])
        ):
            raise _changed(path, base + r, int(number[i]), "its header or body differs")


class _Growing:
    """Columns appended a few rows or a run at a time."""

    def __init__(self, dtype: np.dtype[np.void]) -> None:
        self.dtype = dtype
        self.parts: list[npt.NDArray[np.void]] = []
        self.pending: list[tuple[int, ...]] = []
        self.n = 0

    def add(self, row: tuple[int, ...]) -> None:
        self.pending.append(row)
        self.n += 1

    def extend(self, rows: npt.NDArray[np.void]) -> None:
        self._flush()
        self.parts.append(rows)
        self.n += len(rows)

    def _flush(self) -> None:
        if self.pending:
            self.parts.append(np.array(self.pending, dtype=self.dtype))
            self.pending.clear()

    def all(self) -> npt.NDArray[np.void]:
        self._flush()
        if len(self.parts) != 1:
            self.parts = [np.concatenate(self.parts) if self.parts else np.zeros(0, self.dtype)]
        return self.parts[0]


#: a delta applied in a segment: where its message is, and the sequence it made
DELTA_REF: Final = np.dtype(
    [("store", "<u4"), ("at", "<i8"), ("length", "<i8"), ("number", "<u8"), ("sequence", "<u8")]
)


@dataclass(eq=False)
class SegmentHistory:
    """One segment's messages: its snapshot's chunks, then the deltas applied on top."""

    seed: int
    bucket_count: int
    chunks: list[Ref] = field(default_factory=list)
    deltas: _Growing = field(default_factory=lambda: _Growing(DELTA_REF))

    @property
    def rows(self) -> int:
        return self.deltas.n

    def snapshot(self, history: History, buckets: npt.NDArray[np.int64] | None = None) -> Words:
        """The snapshot's words (only ``buckets``' where given)."""
        lane = np.zeros(self.bucket_count, np.uint64)
        fmt = FilterFormat.unchecked(seed=self.seed, bucket_count=self.bucket_count)
        for store, at, length, number in self.chunks:
            buf, starts = history.bodies(
                store, np.array([at]), np.array([length]), np.array([number], np.uint64)
            )
            s = int(starts[0])
            update = pb.FilterUpdate.FromString(bytes(buf[s : s + length]))
            frame = decode(fmt, update.payload) if update.payload else None
            if frame is None:  # a bare CBI1 frame, kept as it is
                frame = decode(fmt, bytes(buf[s : s + length]))
            assert isinstance(frame, SnapshotChunk)
            lane[frame.bucket_offset : frame.bucket_offset + frame.word_count] = frame.words
        return lane if buckets is None else lane[buckets]

    def writes(self, history: History, sequence: int) -> npt.NDArray[np.void]:
        """Every image the segment's deltas wrote up to ``sequence``, in order (``ROW``)."""
        from cbi1kit.analysis._replay_kernels import delta_images

        refs = self.deltas.all()
        refs = refs[refs["sequence"] <= np.uint64(sequence)]
        out: list[npt.NDArray[np.void]] = []
        for store in np.unique(refs["store"]).tolist():
            mine = refs[refs["store"] == store]
            buf, starts = history.bodies(store, mine["at"], mine["length"], mine["number"])
            most = int(mine["length"].sum()) // 12 + 1
            buckets = np.empty(most, np.uint32)
            words = np.empty(most, np.uint64)
            counts = delta_images(buf, starts, mine["length"], buckets, words)
            n = int(counts.sum())
            rows = np.empty(n, dtype=ROW)
            rows["sequence"] = np.repeat(mine["sequence"], counts)
            rows["bucket"], rows["word"] = buckets[:n], words[:n]
            out.append(rows)
        if len(out) > 1:  # messages from several stores: back in sequence order
            rows = np.concatenate(out)
            return rows[np.argsort(rows["sequence"], kind="stable")]
        return out[0] if out else np.zeros(0, dtype=ROW)

    def lane_at(self, history: History, sequence: int) -> Words:
        """The lane right after ``sequence``: the snapshot, then every image up to it in order
        (the last write of a bucket wins)."""
        lane = self.snapshot(history)
        rows = self.writes(history, sequence)
        reverse = rows[::-1]
        uniq, first = np.unique(reverse["bucket"], return_index=True)
        lane[uniq] = reverse["word"][first]
        return lane
