"""Replay a recorded relay stream with the consumer's rules, reporting everything it finds.

A real consumer (relay.md §3.1, the Global View ``CkfStreamSession``; ckf.md §4.4, the lane
ingestor) stops a session at its first error and resubscribes, which costs it a fresh snapshot.
Replay walks the records in order with the same rules, but instead of stopping it reports every
event — snapshot chunk absorbed, snapshot installed, delta applied, heartbeat — and every
:class:`Violation` with its record index, sequence and reason; after a violation it does what
the consumer would do next: forget the session and wait for the next snapshot (messages in
between are reported as ``skipped``). A new capture stream (``stream_id``) is a new session.

Every rule, per message and per stream, is the stream engine's (:class:`cbi1kit.relay.
StreamChecker`, over the thin :class:`cbi1kit.ckf.Lane`), the same engine the recorder
validates with; this module adds what a whole capture needs around it: sessions, recovery,
events, history and the tables' hooks.

Damage in the source (a torn capture tail, a corrupt record, bad JSON) arrives as an exception
from the record iterator after every intact record; it becomes the last event, a violation.

``lane_at(sequence)`` rebuilds the lane at any replayed sequence from the nearest snapshot point
plus the deltas after it (last write per bucket wins), without replaying the stream again. That
history is kept in an unlinked temporary file, not in memory: memory stays at the lanes in play
(the lane, a snapshot being assembled) however many snapshots the capture holds.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._readers import FrameDamage, FrameRecord, read_frames
from cbi1kit.ckf._lane import Lane
from cbi1kit.errors import Cbi1kitError, LaneError
from cbi1kit.relay._stream import (
    Step,
    StepKind,
    StreamChecker,
    bare_starts_snapshot,
    message_violation,
    starts_snapshot,
)
from cbi1kit.wire._assembly import AssembledSnapshot
from cbi1kit.wire._codec import Delta
from cbi1kit.wire._format import FilterFormat
from cbi1kit.wire._rules import RULE_INDEX, rule_of

__all__ = [
    "EventKind",
    "ReplayEvent",
    "ReplayReport",
    "Replayer",
    "Violation",
    "replay",
]

Words = npt.NDArray[np.uint64]


class EventKind(enum.StrEnum):
    SNAPSHOT_CHUNK = "snapshot_chunk"  # a chunk absorbed, snapshot not complete yet
    SNAPSHOT_INSTALLED = "snapshot_installed"  # the last chunk: the lane is ready at sequence
    DELTA_APPLIED = "delta_applied"
    HEARTBEAT = "heartbeat"
    SKIPPED = "skipped"  # after a violation, until the next snapshot starts
    VIOLATION = "violation"


@dataclass(frozen=True, slots=True)
class ReplayEvent:
    """What replay did with one record (``record_index`` counts the source's frames from 0)."""

    record_index: int
    kind: EventKind
    sequence: int | None
    reason: str | None = None
    base_sequence: int | None = None
    stream_id: int = 0
    source_offset: int | None = None


@dataclass(frozen=True, slots=True)
class Violation(ReplayEvent):
    """A broken rule. ``rule`` names it (upstream's variant where there is one)."""

    rule: str = ""


@dataclass(slots=True, eq=False)
class _Segment:
    """A snapshot point and the deltas applied on top of it: the sequences it covers, and where
    its history is (``lane_offset`` is None when no history is kept)."""

    record_index: int
    sequence: int
    last_sequence: int
    bucket_count: int
    lane_offset: int | None = None
    rows: int = 0


#: one applied image in the history: the delta's sequence, the bucket, the new word (packed)
_ROW: Final = np.dtype([("sequence", "<u8"), ("bucket", "<u4"), ("word", "<u8")])
_SPILL_BYTES: Final = 4 << 20  # delta rows gathered in memory before they are written
_READ_ROWS: Final = 1 << 18  # rows ``lane_at`` reads back at a time (5 MiB)


def _bytes(array: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


class _History:
    """What ``lane_at`` rebuilds lanes from, in an unlinked temporary file: each installed
    snapshot's words, then the images of the deltas applied on top of it as ``_ROW`` rows (a
    segment's rows follow its words). A capture's snapshots add up to many times a lane (16
    snapshots of a 2^22-bucket lane are 512 MiB); on disk they cost memory nothing. Where no
    temporary file can be made the history is kept in memory: slower to fill, never a failure.
    """

    def __init__(self) -> None:
        self._file: io.BufferedIOBase | None = None
        self._size = 0
        self._pending: list[npt.NDArray[np.void]] = []
        self._pending_bytes = 0

    def _open(self) -> io.BufferedIOBase:
        if self._file is None:
            try:  # unlinked at once; closed (and its space freed) with the history
                made = tempfile.TemporaryFile(prefix="cbi1kit-history-")  # noqa: SIM115
                self._file = cast(io.BufferedIOBase, made)
            except OSError:  # no writable temporary directory
                self._file = io.BytesIO()
        return self._file

    def _write(self, array: npt.NDArray[Any]) -> None:
        f = self._open()
        f.seek(self._size)
        data = _bytes(array)
        f.write(data.data)
        self._size += data.nbytes

    def _read(self, offset: int, array: npt.NDArray[Any]) -> None:
        f = self._open()
        f.seek(offset)
        got = f.readinto(_bytes(array).data)
        if got != array.nbytes:  # pragma: no cover - only if the file is cut under us
            raise OSError(f"replay history ends {got} bytes into {array.nbytes} at {offset}")

    def flush(self) -> None:
        if self._pending:
            self._write(np.concatenate(self._pending))
            self._pending.clear()
            self._pending_bytes = 0

    def add_lane(self, parts: Sequence[tuple[int, Words]]) -> int:
        """Write a snapshot's words (its chunks in order); their offset in the file."""
        self.flush()
        at = self._size
        for _offset, words in parts:
            self._write(np.asarray(words, dtype="<u8"))
        return at

    def add_rows(self, sequence: int, buckets: npt.ArrayLike, words: npt.ArrayLike) -> int:
        """Keep a delta's images; how many rows that added."""
        b = np.asarray(buckets)
        rows = np.empty(b.shape[0], dtype=_ROW)
        rows["sequence"] = sequence
        rows["bucket"] = b
        rows["word"] = np.asarray(words)
        self._pending.append(rows)
        self._pending_bytes += rows.nbytes
        if self._pending_bytes >= _SPILL_BYTES:
            self.flush()
        return int(rows.shape[0])

    def lane_at(self, segment: _Segment, sequence: int) -> Words:
        """The segment's snapshot words, then its rows up to ``sequence`` a batch at a time, in
        order (the last write of a bucket wins): one lane and one batch in memory."""
        assert segment.lane_offset is not None
        self.flush()
        lane = np.empty(segment.bucket_count, dtype=np.uint64)
        self._read(segment.lane_offset, lane)
        offset, left = segment.lane_offset + lane.nbytes, segment.rows
        while left:
            rows = np.empty(min(left, _READ_ROWS), dtype=_ROW)
            self._read(offset, rows)
            upto = int(np.searchsorted(rows["sequence"], sequence, side="right"))
            # last write per bucket wins: the first occurrence in the reversed order
            reverse = rows[:upto][::-1]
            uniq, first = np.unique(reverse["bucket"], return_index=True)
            lane[uniq] = reverse["word"][first]
            if upto < rows.shape[0]:
                break
            offset += rows.nbytes
            left -= rows.shape[0]
        return lane


@dataclass(slots=True, eq=False)
class ReplayReport:
    """Everything replay saw. ``final_lane`` is the lane at ``final_sequence`` (None if no
    snapshot was ever installed); a lane faulted later keeps its last consistent words.
    ``events`` is empty when replay kept none (``keep_events=False``); the counts, the
    violations and the snapshot sessions are there either way."""

    events: list[ReplayEvent]
    final_lane: Words | None
    final_sequence: int | None
    records: int
    _segments: list[_Segment] = field(default_factory=list, repr=False)
    _history: _History | None = field(default=None, repr=False)
    _counts: dict[str, int] = field(default_factory=dict, repr=False)
    _violations: list[Violation] = field(default_factory=list, repr=False)

    @property
    def violations(self) -> list[Violation]:
        return list(self._violations)

    @property
    def ok(self) -> bool:
        return not self._violations

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    @property
    def sequence_ranges(self) -> list[tuple[int, int]]:
        """``(snapshot sequence, last delta sequence)`` of every installed snapshot, in order."""
        return [(s.sequence, s.last_sequence) for s in self._segments]

    def lane_at(self, sequence: int) -> Words:
        """The lane right after ``sequence`` was applied (latest snapshot point covering it),
        read back from the replay's history."""
        for seg in reversed(self._segments):
            if seg.sequence <= sequence <= seg.last_sequence:
                if self._history is None or seg.lane_offset is None:
                    raise LaneError(
                        "HistoryNotKept",
                        message=f"sequence {sequence} was replayed without its history "
                        "(replay with keep_history=True to rebuild lanes)",
                        sequence=sequence,
                    )
                return self._history.lane_at(seg, sequence)
        spans = ", ".join(f"{a}..={b}" for a, b in self.sequence_ranges) or "none"
        raise LaneError(
            "SequenceNotReplayed",
            message=f"sequence {sequence} was not replayed (replayed ranges: {spans})",
            sequence=sequence,
            available=self.sequence_ranges,
        )


SnapshotHook = Callable[[int, int, AssembledSnapshot, int], None]
DeltaHook = Callable[[int, int, npt.NDArray[np.uint32], Words, Words], None]


class Replayer:
    """Incremental replay: ``feed`` records one by one, ``report()`` at any time.

    ``expected_format`` (a ``FilterFormat`` or anything with ``seed``/``bucket_count``) pins
    the format the way a catalog-selected producer would; otherwise each session adopts the
    format of its first message. ``keep_history`` keeps what ``lane_at`` needs in a temporary
    file (False: nothing, and no file); ``keep_events=False`` keeps no per-record events, only
    their counts and the violations. Either way memory stays at the lanes in play, however long
    the stream. ``on_snapshot(record_index, sequence, snapshot, stream_id)`` and
    ``on_delta(record_index, sequence, buckets, new_words, previous_words)`` observe installs
    and applied deltas (the tables use them).
    """

    def __init__(
        self,
        *,
        expected_format: Any = None,
        keep_history: bool = True,
        keep_events: bool = True,
        on_snapshot: SnapshotHook | None = None,
        on_delta: DeltaHook | None = None,
    ) -> None:
        self.expected_format = (
            None
            if expected_format is None
            else FilterFormat(int(expected_format.seed), int(expected_format.bucket_count))
        )
        self.keep_history = keep_history
        self.keep_events = keep_events
        self.on_snapshot = on_snapshot
        self.on_delta = on_delta
        self.events: list[ReplayEvent] = []
        self.records = 0
        self._counts: dict[str, int] = {}
        self._violations: list[Violation] = []
        self._segments: list[_Segment] = []
        self._history = _History() if keep_history else None
        self._lane: Lane | None = None  # one lane across sessions; each session resets it
        self._ever_installed = False
        self._stream: int | None = None
        self._reset_session(recovering=False)

    # -- session state ------------------------------------------------------------------------
    def _reset_session(self, *, recovering: bool) -> None:
        """A new session: the stream engine starts over (a new lease on the same lane)."""
        self._recovering = recovering
        self._recover_from: int | None = None
        self._checker: StreamChecker | None = None
        self._assembly_start = 0

    def _session(self) -> StreamChecker:
        if self._checker is None:
            self._checker = StreamChecker(
                expected_format=self.expected_format,
                lane=self._lane,
                keep_previous=self.on_delta is not None,
            )
        return self._checker

    @property
    def installed_sequence(self) -> int | None:
        lane = self._lane
        return lane.installed_sequence if lane is not None and self._ever_installed else None

    @property
    def ready(self) -> bool:
        return self._lane is not None and self._lane.ready

    @property
    def lane(self) -> Words | None:
        """The lane's words (a live view; copy it to keep it)."""
        return self._lane.words if self._lane is not None and self._ever_installed else None

    # -- events -------------------------------------------------------------------------------
    def _emit(self, event: ReplayEvent) -> ReplayEvent:
        self._counts[event.kind.value] = self._counts.get(event.kind.value, 0) + 1
        if isinstance(event, Violation):
            self._violations.append(event)
        if self.keep_events:
            self.events.append(event)
        return event

    def _violation(
        self, rec: _Rec, rule: str, reason: str, *, sequence: int | None = None
    ) -> ReplayEvent:
        self._reset_session(recovering=True)
        self._recover_from = rec.index
        if self._lane is not None:
            self._lane.ready = False
        return self._emit(
            Violation(
                rec.index,
                EventKind.VIOLATION,
                rec.sequence if sequence is None else sequence,
                reason,
                rec.base_sequence,
                rec.stream_id,
                rec.offset,
                rule,
            )
        )

    def _event(self, rec: _Rec, kind: EventKind, reason: str | None = None) -> ReplayEvent:
        return self._emit(
            ReplayEvent(
                rec.index, kind, rec.sequence, reason, rec.base_sequence, rec.stream_id, rec.offset
            )
        )

    # -- feeding ------------------------------------------------------------------------------
    def feed(self, record: FrameRecord | pb.FilterUpdate) -> ReplayEvent:
        """Apply one record; returns the event it produced (also appended to ``events``)."""
        if isinstance(record, pb.FilterUpdate):
            raw = record.SerializeToString()
            record = FrameRecord(self.records, 0, None, None, record, raw)
        self.records += 1
        rec = _Rec.of(record)
        if rec.stream_id != self._stream:
            if self._stream is not None:
                self._reset_session(recovering=False)
            self._stream = rec.stream_id
        if record.update is not None:
            return self._feed_update(rec, record.update)
        return self._feed_bare(rec, record.raw)

    def feed_error(self, error: BaseException, *, offset: int | None = None) -> ReplayEvent:
        """Record source damage (the reader's exception) as a violation after the last record."""
        index = self.records
        reason = f"{rule_of(error)}: {error}"
        off = getattr(error, "offset", offset)
        return self._emit(
            Violation(
                index,
                EventKind.VIOLATION,
                None,
                reason,
                None,
                self._stream or 0,
                off,
                "SourceDamaged",
            )
        )

    def feed_damage(self, damage: FrameDamage) -> ReplayEvent:
        """Capture damage met between frames: a violation at the frame index it sits at; a
        damaged frame (``consumed``) uses up its index, and replay goes on with the next."""
        err = damage.error
        if damage.frames:
            self.records = max(self.records, damage.index + damage.frames)
        rule = rule_of(err)
        if rule in RULE_INDEX:  # an intact record that breaks a message rule: the stream ends
            stream = damage.damage.stream_id
            sid = self._stream or 0 if stream is None else stream
            rec = _Rec(damage.index, sid, err.offset, None, None)
            return self._violation(rec, rule, str(err))
        event = self._emit(
            Violation(
                damage.index,
                EventKind.VIOLATION,
                None,
                f"{rule_of(err)}: {err}",
                None,
                self._stream or 0,
                err.offset,
                "SourceDamaged",
            )
        )
        return event

    def _feed_update(self, rec: _Rec, update: pb.FilterUpdate) -> ReplayEvent:
        if self._recovering:
            broken = message_violation(update)
            if broken is not None:
                return self._violation(rec, broken[0], str(broken[1]))
            if not starts_snapshot(update):
                return self._skip(rec)
            self._reset_session(recovering=False)
        return self._record(rec, self._session().check(update))

    def _feed_bare(self, rec: _Rec, raw: bytes) -> ReplayEvent:
        if self._recovering:
            if not bare_starts_snapshot(raw):
                return self._skip(rec)
            self._reset_session(recovering=False)
        return self._record(rec, self._session().check_frame(raw))

    def _skip(self, rec: _Rec) -> ReplayEvent:
        return self._event(
            rec,
            EventKind.SKIPPED,
            f"awaiting a new snapshot after the violation at record {self._recover_from}",
        )

    def _record(self, rec: _Rec, step: Step) -> ReplayEvent:
        """The engine's step as replay's event; history and hooks on installs and deltas."""
        checker = self._checker
        assert checker is not None
        self._lane = checker.lane
        if rec.sequence is None:
            rec.sequence, rec.base_sequence = step.sequence, step.base_sequence
        if step.chunk is not None and step.chunk.chunk_index == 0:
            self._assembly_start = rec.index
        if step.kind is StepKind.VIOLATION:
            assert step.rule is not None and step.reason is not None
            return self._violation(rec, step.rule, step.reason)
        if step.kind is StepKind.SNAPSHOT_INSTALLED:
            assert step.snapshot is not None
            return self._installed(rec, step.snapshot)
        if step.kind is StepKind.DELTA_APPLIED:
            assert step.delta is not None
            self._applied(rec, step.delta, step.previous)
            return self._event(rec, EventKind.DELTA_APPLIED)
        kind = EventKind.HEARTBEAT if step.kind is StepKind.HEARTBEAT else EventKind.SNAPSHOT_CHUNK
        return self._event(rec, kind, step.reason)

    def _applied(self, rec: _Rec, delta: Delta, previous: Words | None) -> None:
        if self._segments:  # the lane was installed in this session: the last segment
            seg = self._segments[-1]
            seg.last_sequence = delta.header.epoch
            if self._history is not None:
                seg.rows += self._history.add_rows(delta.header.epoch, delta.buckets, delta.words)
        if self.on_delta is not None:
            assert previous is not None
            self.on_delta(rec.index, delta.header.epoch, delta.buckets, delta.words, previous)

    def _installed(self, rec: _Rec, snap: AssembledSnapshot) -> ReplayEvent:
        self._ever_installed = True
        at = None if self._history is None else self._history.add_lane(snap.parts)
        self._segments.append(_Segment(rec.index, snap.epoch, snap.epoch, snap.bucket_count, at))
        if self.on_snapshot is not None:
            self.on_snapshot(rec.index, snap.epoch, snap, rec.stream_id)
        return self._event(
            rec,
            EventKind.SNAPSHOT_INSTALLED,
            f"{len(snap.parts)} chunk(s) from record {self._assembly_start}",
        )

    # -- results ------------------------------------------------------------------------------
    def report(self) -> ReplayReport:
        lane = self.lane
        return ReplayReport(
            list(self.events),
            None if lane is None else lane.copy(),
            self.installed_sequence,
            self.records,
            [dataclasses.replace(s) for s in self._segments],  # as they stand now
            self._history,
            dict(self._counts),
            list(self._violations),
        )


@dataclass(slots=True)
class _Rec:
    index: int
    stream_id: int
    offset: int | None
    sequence: int | None
    base_sequence: int | None

    @classmethod
    def of(cls, record: FrameRecord) -> _Rec:
        u = record.update
        if u is None:
            return cls(record.index, record.stream_id, record.source_offset, None, None)
        return cls(
            record.index, record.stream_id, record.source_offset, u.sequence, u.base_sequence
        )


def _records(source: Any) -> Iterator[FrameRecord | FrameDamage | pb.FilterUpdate]:
    if isinstance(source, (str, os.PathLike)):
        return iter(read_frames(source, damage="report"))
    return iter(source)


def replay(
    records: Iterable[FrameRecord | FrameDamage | pb.FilterUpdate] | str | os.PathLike[str],
    *,
    expected_format: Any = None,
    keep_history: bool = True,
    keep_events: bool = True,
) -> ReplayReport:
    """Replay a whole stream (records, ``FilterUpdate`` messages, or a path for
    ``read_frames``). Capture damage (``FrameDamage`` items; a capture path is read with
    ``damage="report"``) is a violation at its frame index and replay goes on after it; a
    reader's exception (other sources) becomes the last event, a violation.
    ``keep_history`` and ``keep_events`` are :class:`Replayer`'s."""
    player = Replayer(
        expected_format=expected_format, keep_history=keep_history, keep_events=keep_events
    )
    try:
        it = _records(records)
    except (Cbi1kitError, OSError) as exc:
        player.feed_error(exc)
        return player.report()
    while True:
        try:
            record = next(it)
        except StopIteration:
            break
        except (Cbi1kitError, DecodeError, OSError, ValueError) as exc:
            player.feed_error(exc)
            break
        if isinstance(record, FrameDamage):
            player.feed_damage(record)
        else:
            player.feed(record)
    return player.report()
