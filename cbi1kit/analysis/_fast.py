"""Replay at memory speed: runs of deltas, heartbeats and skipped messages taken per batch.

The per-message engine (:class:`cbi1kit.analysis._replay.Replayer` over
:class:`cbi1kit.relay.StreamChecker`) is the reference: it parses each message, checks it with
the rulebook and the stream rules, and reports what it did. On a busy pool almost every message
is a clean delta whose outcome follows from its bytes and its lane's state, so this engine reads
a capture as the frames table does (batches of message rows and the envelope kernel's scan of
each, :class:`cbi1kit.analysis._sources._ItemScan`) and lets compiled kernels
(:mod:`cbi1kit.analysis._replay_kernels`) take every message they can show is a clean step of
its lane:

* a delta of a ready session: the session's producer and relay bytes, its format and DC, the
  next sequence, every per-message rule of the rulebook, no bucket twice; written into the lane
  (the last write of each bucket wins), its history rows and receive times appended in bulk;
* a heartbeat of a ready session at the installed sequence;
* a message that a lane waiting for a snapshot skips (a valid envelope, not a snapshot's start).

Everything else (a stream's first message, snapshot chunks, violations, damage, stream opens
and closes, catalog updates, anything unusual in the bytes) goes to the per-message engine, one
message at a time, exactly as it would without this one: both work on the same
:class:`~cbi1kit.analysis._replay.LaneReplayer` state. The report is the same, bit for bit
(``tests/test_replay_fast.py`` holds the two engines to it). Memory: the lanes in play and a
few groups of capture blocks (``GROUP_BYTES`` each) with their batches; with
``keep_events=False``, no Python object per message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

import cbi1kit.analysis._replay_kernels as k
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._kernels import scan_filter_updates
from cbi1kit.analysis._replay import (
    _ROW,
    EventKind,
    LaneReplayer,
    Replayer,
    ReplayEvent,
    ReplayReport,
)
from cbi1kit.analysis._sources import _Batch, _ItemScan
from cbi1kit.capture._file import CaptureDamage, CaptureRecord, RecordType
from cbi1kit.capture._readers import FrameDamage, FrameRecord, ReadCursor, _unreadable_message
from cbi1kit.capture._segments import capture_segments
from cbi1kit.errors import Cbi1kitError
from cbi1kit.wire._codec import IMAGE_DTYPE
from cbi1kit.wire._format import U64_MAX
from cbi1kit.wire._layout import DELTA_IMAGE

__all__ = ["available", "feed_capture", "replay_capture"]

_BATCH_RECORDS: Final = 65536
#: bytes of capture blocks checked and scanned at a time (the frames table's are 32 MiB): the
#: groups in flight, their mapped pages and scans are most of what replay holds beside the lanes
GROUP_BYTES: Final = 8 << 20
_NO_BYTES: Final = np.zeros(0, dtype=np.uint8)
_NO_WORDS: Final = np.zeros(0, dtype=np.uint64)

# the kernel writes history rows as the sequence, then the image's bytes: ``_ROW``'s layout
assert _ROW.itemsize == k.HISTORY_ROW
assert _ROW.fields is not None
assert _ROW.fields["bucket"][1] == 8 + DELTA_IMAGE.field("bucket").offset
assert _ROW.fields["word"][1] == 8 + DELTA_IMAGE.field("word").offset

#: a lane's state as the kernels need it: (mode, installed sequence, seed, bucket count, DC,
#: deltas allowed (no snapshot being assembled), producer bytes, relay bytes)
_State = tuple[int, int, int, int, int, bool, bytes, bytes]


@lru_cache(maxsize=1)
def available() -> bool:
    """Whether the replay kernels and the envelope scan load and run (compiled, or read from
    their cache): any failure means the per-message engine, never an error."""
    try:
        raw = pb.FilterUpdate(sequence=1, payload=b"x" * 64).SerializeToString()
        one_row = np.zeros(1, dtype=np.int64)
        buf = np.frombuffer(raw, dtype=np.uint8)
        scan_filter_updates(buf, one_row, one_row + len(raw), np.ones(1, dtype=np.bool_))
        k.replay_candidates(
            np.zeros((1, 9), dtype=np.uint64),
            np.zeros((1, 9), dtype=np.bool_),
            np.zeros(1, dtype=np.uint8),
            np.zeros(1, dtype=np.uint64),
            np.zeros((1, 64), dtype=np.uint8),
        )
        none = np.zeros(0, dtype=np.int64)
        one = np.zeros(1, np.uint64)
        k.apply_deltas(_NO_BYTES, none, none, _NO_WORDS, one, _NO_BYTES, _NO_WORDS, _NO_BYTES)
        return True
    except Exception:  # ImportError, numba errors, an unusable cache: fall back, never fail
        return False


def feed_capture(
    player: Replayer,
    path: str | os.PathLike[str],
    *,
    batch_records: int = _BATCH_RECORDS,
    cursor: ReadCursor | None = None,
) -> Iterator[int]:
    """Replay the capture at ``path`` into ``player`` with the fast engine, item by item (a
    batch of messages, a stream open or close, a catalog update, damage); yields how many
    items each step replayed, so that a caller can act between them (flush a table). A rotated
    recording is read segment after segment as one capture (``read_capture_items``' rule); with
    ``cursor``, ``path`` is one segment read on from where the cursor stands (it moves on)."""
    feeder = _Feeder(player, str(path))
    try:
        paths = [Path(path)] if cursor is not None else capture_segments(path)
    except (Cbi1kitError, OSError, ValueError) as exc:
        player.feed_error(exc)  # as replay() reports a reader's exception
        return
    cursor = ReadCursor() if cursor is None else cursor
    for segment in paths:
        feeder.source = str(segment)
        scan = _ItemScan(segment, group_bytes=GROUP_BYTES, cursor=cursor)
        items = scan.items(batch_records)
        try:
            while True:
                try:
                    item = next(items)
                except StopIteration:
                    break
                except (Cbi1kitError, DecodeError, OSError, ValueError) as exc:
                    player.feed_error(exc)  # as replay() reports a reader's exception
                    return
                if isinstance(item, _Batch):
                    feeder.batch(item)
                    yield len(item.index)
                else:
                    player.feed_item(item)
                    yield 1
        finally:
            items.close()


def replay_capture(
    player: Replayer,
    path: str | os.PathLike[str],
    *,
    progress: Callable[[int], None] | None = None,
    batch_records: int = _BATCH_RECORDS,
) -> ReplayReport:
    """Replay the capture at ``path`` into ``player`` with the fast engine; its report."""
    for n in feed_capture(player, path, batch_records=batch_records):
        if progress is not None:
            progress(n)
    return player.report()


def _state(lane: LaneReplayer, stream_id: int) -> _State | None:
    """What the kernels need of ``lane`` for messages of ``stream_id`` (None: the per-message
    engine's, e.g. the stream does not feed the lane, or no session is ready)."""
    if lane._stream != stream_id:
        return None
    if lane._recovering:
        env = lane._valid_envelope
        if lane._checker is not None or env is None:
            return None
        return (k.MODE_RECOVERING, 0, 0, 0, 0, False, env[0], env[1])
    c = lane._checker
    if (
        c is None
        or c.ended
        or c.format is None
        or c.dc_id is None
        or c._producer is None
        or c._relay is None
    ):
        return None
    words = c.lane
    if (
        words is None
        or not words.ready
        or words is not lane._lane
        or words.bucket_count != c.format.bucket_count
        or not lane._segments
    ):
        return None
    delta_ok = c._assembly is None or not c._assembly.in_progress
    return (
        k.MODE_READY,
        words.installed_sequence,
        c.format.seed,
        c.format.bucket_count,
        c.dc_id,
        delta_ok,
        c._producer,
        c._relay,
    )


class _Feeder:
    """Feeds a capture's batches to a :class:`Replayer`: the kernels where they can, the
    per-message engine where they cannot."""

    def __init__(self, player: Replayer, source: str) -> None:
        self.player = player
        self.source = source
        #: the duplicate-bucket check's stamps (a bucket's last delta) and the last stamp used
        self.stamps = np.zeros(0, dtype=np.uint32)
        self.stamp = np.zeros(1, dtype=np.uint32)

    def stamps_for(self, buckets: int, rows: int) -> npt.NDArray[np.uint32]:
        """Stamps for lanes of up to ``buckets`` and ``rows`` more deltas (zeroed on wrap)."""
        if len(self.stamps) < buckets:
            self.stamps = np.zeros(buckets, dtype=np.uint32)
            self.stamp[0] = 0
        elif int(self.stamp[0]) + rows >= 0xFFFFFFFF:
            self.stamps[:] = 0
            self.stamp[0] = 0
        return self.stamps

    def batch(self, batch: _Batch) -> None:
        scanned = batch.scanned
        if scanned is None:  # rows the block check did not scan (a walked stretch)
            end = batch.start + batch.length
            scanned = scan_filter_updates(batch.buf, batch.start, end, batch.is_pb)
        value, present, _offset, flags, checksum, _run, head, _top = scanned
        cand = k.replay_candidates(value, present, flags, checksum, head)
        streams, row_slot = np.unique(batch.stream_id, return_inverse=True)
        run = _Run(self, batch, scanned, cand, streams.tolist(), row_slot.reshape(-1))
        n = len(cand)
        i = 0
        while i < n:
            j = run.advance(i) if cand[i] else i
            if j < n:  # the kernels stopped here: this one is the per-message engine's
                self.one(batch, j)
                j += 1
            i = j

    def one(self, batch: _Batch, r: int) -> None:
        """Row ``r`` to the per-message engine, as ``read_capture_items`` would have yielded it.
        A message it takes without a violation vouches for its producer and relay (they parse
        and validate): a lane waiting for a snapshot then skips messages carrying them."""
        player = self.player
        start, length = int(batch.start[r]), int(batch.length[r])
        raw = bytes(batch.buf[start : start + length])
        sid = int(batch.stream_id[r])
        index, offset = int(batch.index[r]), int(batch.offset[r])
        wall, mono = int(batch.wall[r]) & U64_MAX, int(batch.mono[r])
        try:
            update = pb.FilterUpdate.FromString(raw)
        except DecodeError as exc:
            number = -1 if batch.number is None else int(batch.number[r])
            rec = CaptureRecord(number, offset, RecordType.MESSAGE, sid, wall, mono, start, raw)
            err = _unreadable_message(self.source, rec, "FilterUpdate", exc)
            gone = CaptureDamage(err, rec.end_offset, range(0), rec.type, sid)
            player.feed_item(FrameDamage(index, 1, err, gone))
            return
        record = FrameRecord(index, offset, wall, mono, update, raw, sid, self.source)
        event = player.feed_item(record)
        if event is None or event.kind is EventKind.VIOLATION:
            return
        lane = player._lane_player(sid)
        if lane is not None and update.HasField("producer") and update.HasField("relay"):
            lane._valid_envelope = (
                update.producer.SerializeToString(),
                update.relay.SerializeToString(),
            )


class _Run:
    """The kernels over one batch: its rows, and the lanes its streams feed."""

    def __init__(
        self,
        feeder: _Feeder,
        batch: _Batch,
        scanned: tuple[npt.NDArray[Any], ...],
        cand: npt.NDArray[np.uint8],
        streams: list[int],
        row_slot: npt.NDArray[np.intp],
    ) -> None:
        self.feeder = feeder
        self.player = feeder.player
        self.batch = batch
        self.scanned = scanned
        self.cand = cand
        self.streams = streams
        self.row_slot = row_slot.astype(np.int64, copy=False)
        self.out = np.zeros(len(cand), dtype=np.uint8)

    def advance(self, lo: int) -> int:
        """Take every row from ``lo`` on that the kernels can; the first one they cannot."""
        lanes = [self.player._lane_player(s) for s in self.streams]
        states = [
            None if lane is None else _state(lane, s)
            for lane, s in zip(lanes, self.streams, strict=True)
        ]
        if states[int(self.row_slot[lo])] is None:
            return lo
        n = len(states)
        mode = np.zeros(n, dtype=np.int64)
        installed, seed, buckets, dc = (np.zeros(n, dtype=np.uint64) for _ in range(4))
        delta_ok = np.zeros(n, dtype=np.bool_)
        at = np.zeros((4, n), dtype=np.int64)  # producer offset and length, relay's
        expect: list[bytes] = []
        size = 0
        for s, st in enumerate(states):
            if st is None:
                continue
            mode[s], installed[s], seed[s], buckets[s], dc[s], delta_ok[s] = st[:6]
            producer, relay = st[6], st[7]
            at[:, s] = size, len(producer), size + len(producer), len(relay)
            expect += (producer, relay)
            size += len(producer) + len(relay)
        value, present, offset, _flags, _checksum, run, head, top = self.scanned
        end = int(
            k.advance_rows(
                self.batch.buf,
                self.cand,
                value,
                present,
                offset,
                head,
                top,
                run,
                self.row_slot,
                lo,
                len(self.cand),
                mode,
                installed,
                seed,
                buckets,
                dc,
                delta_ok,
                np.frombuffer(b"".join(expect), dtype=np.uint8).copy(),
                at[0],
                at[1],
                at[2],
                at[3],
                self.feeder.stamps_for(int(buckets.max()), len(self.cand) - lo),
                self.feeder.stamp,
                self.out,
            )
        )
        if end > lo:
            self._taken(lo, end, lanes)
        return end

    def _taken(self, lo: int, hi: int, lanes: list[LaneReplayer | None]) -> None:
        """Rows ``lo`` to ``hi`` were taken: each lane's share, then the whole replay's."""
        value, _present, offset, _flags, _checksum, _run, head, _top = self.scanned
        out = self.out[lo:hi]
        slots = self.row_slot[lo:hi]
        applied: list[_Applied] = []
        for s, lane in enumerate(lanes):
            if lane is None:
                continue
            rows = lo + (np.arange(hi - lo) if len(lanes) == 1 else np.flatnonzero(slots == s))
            if not rows.size:
                continue
            kinds = out[rows - lo]
            deltas = rows[kinds == k.APPLIED]
            if deltas.size:
                c0, c1 = k.COUNT_FIELD
                counts = head[deltas, c0 : c0 + c1].copy().view("<u4").reshape(-1)
                applied.append(
                    _apply(
                        lane,
                        self.batch,
                        deltas,
                        value[deltas, k.SLOT_SEQUENCE],
                        offset[deltas, k.SLOT_PAYLOAD] + k.IMAGES_AT,
                        counts.astype(np.int64),
                    )
                )
            _count(lane._counts, kinds)
            lane.records += len(rows)
            if lane.keep_events:
                lane.events += self._events(rows, lanes)
        if applied:
            self._hooks(applied)
        player = self.player
        batch = self.batch
        player.records += hi - lo
        player._last_stream = int(batch.stream_id[hi - 1])
        timed = batch.has_time[lo:hi]
        if timed.any():
            player._seen(int(batch.wall[lo:hi][timed].view(np.uint64).min()))
        _count(player._counts, out)
        if player.keep_events:
            player.events += self._events(np.arange(lo, hi), lanes)

    def _hooks(self, applied: list[_Applied]) -> None:
        """The delta hooks, as the per-message engine calls them: in record order."""
        on_delta = self.player._lane_args["on_delta"]
        on_deltas = self.player._lane_args["on_deltas"]
        if on_delta is None and on_deltas is None:
            return
        rows = np.concatenate([a.rows for a in applied])
        sequences = np.concatenate([a.sequences for a in applied])
        counts = np.concatenate([a.counts for a in applied])
        images = np.concatenate([a.images for a in applied]).view(IMAGE_DTYPE)
        previous = np.concatenate([a.previous for a in applied])
        if len(applied) > 1:  # several lanes: their deltas back in record order
            order = np.argsort(rows, kind="stable")
            ends = np.cumsum(counts)
            starts = ends - counts
            take = np.repeat(
                starts[order] - np.cumsum(counts[order]) + counts[order], counts[order]
            )
            take += np.arange(len(take))
            rows, sequences, counts = rows[order], sequences[order], counts[order]
            images, previous = images[take], previous[take]
        index = self.batch.index[rows]
        if on_deltas is not None:
            on_deltas(index, sequences, counts, images["bucket"], images["word"], previous)
        if on_delta is not None:
            ends = np.cumsum(counts)
            for i, seq, a, b in zip(
                index.tolist(),
                sequences.tolist(),
                (ends - counts).tolist(),
                ends.tolist(),
                strict=True,
            ):
                on_delta(i, seq, images["bucket"][a:b], images["word"][a:b], previous[a:b])

    def _events(
        self, rows: npt.NDArray[Any], lanes: list[LaneReplayer | None]
    ) -> list[ReplayEvent]:
        """The per-message engine's event for each taken row."""
        value = self.scanned[0]
        batch = self.batch
        reasons: list[str | None] = [
            None
            if lane is None
            else f"awaiting a new snapshot after the violation at record {lane._recover_from}"
            for lane in lanes
        ]
        return [
            ReplayEvent(
                index,
                _KINDS[kind],
                seq,
                reasons[slot] if kind == k.SKIPPED else None,
                base,
                sid,
                off,
            )
            for index, kind, seq, base, sid, off, slot in zip(
                batch.index[rows].tolist(),
                self.out[rows].tolist(),
                value[rows, k.SLOT_SEQUENCE].tolist(),
                value[rows, k.SLOT_BASE].tolist(),
                batch.stream_id[rows].tolist(),
                batch.offset[rows].tolist(),
                self.row_slot[rows].tolist(),
                strict=True,
            )
        ]


_KINDS: Final = {
    k.APPLIED: EventKind.DELTA_APPLIED,
    k.HEARTBEAT: EventKind.HEARTBEAT,
    k.SKIPPED: EventKind.SKIPPED,
}


def _count(counts: dict[str, int], kinds: npt.NDArray[np.uint8]) -> None:
    """Add the taken rows' events to ``counts``, new kinds in the order they first appear (as
    the per-message engine adds them)."""
    values, first, n = np.unique(kinds, return_index=True, return_counts=True)
    for at in np.argsort(first).tolist():
        name = _KINDS[int(values[at])].value
        counts[name] = counts.get(name, 0) + int(n[at])


@dataclass(frozen=True, slots=True)
class _Applied:
    """A lane's deltas taken in a run: their rows, sequences and image counts, the images
    (packed ``IMAGE_DTYPE`` bytes) and the words they replaced, where a hook wants them."""

    rows: npt.NDArray[np.int64]
    sequences: npt.NDArray[np.uint64]
    counts: npt.NDArray[np.int64]
    images: npt.NDArray[np.uint8]
    previous: npt.NDArray[np.uint64]


def _apply(
    lane: LaneReplayer,
    batch: _Batch,
    rows: npt.NDArray[np.int64],
    sequences: npt.NDArray[np.uint64],
    image_at: npt.NDArray[np.int64],
    counts: npt.NDArray[np.int64],
) -> _Applied:
    """Apply the deltas at ``rows`` (in order) to ``lane``'s words, as ``StreamChecker`` and
    ``LaneReplayer`` would one by one: the installed sequence, the session's last sequence
    and receive times, the history rows."""
    checker = lane._checker
    assert checker is not None and checker.lane is not None
    words = checker.lane
    history = lane._history
    hooked = lane.on_delta is not None or lane.on_deltas is not None
    total = int(counts.sum())
    images = np.empty(total * k.IMAGE_SIZE, dtype=np.uint8) if hooked else _NO_BYTES
    previous = np.empty(total, dtype=np.uint64) if hooked else _NO_WORDS
    rows_out = np.empty(total * k.HISTORY_ROW, dtype=np.uint8) if history is not None else _NO_BYTES
    sequences = np.ascontiguousarray(sequences)
    k.apply_deltas(batch.buf, image_at, counts, sequences, words.words, images, previous, rows_out)
    last = int(sequences[-1])
    words.installed_sequence = last
    seg = lane._segments[-1]
    seg.last_sequence = last
    if seg.timed:
        timed = batch.has_time[rows]
        upto = len(rows) if timed.all() else int(np.argmin(timed))
        seg.delta_unix_ns.frombytes(batch.wall[rows[:upto]].view(np.uint64).tobytes())
        if upto < len(rows):
            seg.timed = False
    if history is not None:
        seg.rows += history.add_row_array(rows_out.view(_ROW))
    return _Applied(rows, sequences, counts, images, previous)
