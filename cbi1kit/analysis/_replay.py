"""Replay a recorded relay stream with the consumer's rules, reporting everything it finds.

A real consumer (relay.md §3.1, the Global View ``CkfStreamSession``; ckf.md §4.4, the lane
ingestor) stops a session at its first error and resubscribes, which costs it a fresh snapshot.
Replay walks the records in order with the same rules, but instead of stopping it reports every
event — snapshot chunk absorbed, snapshot installed, delta applied, heartbeat — and every
:class:`Violation` with its record index, sequence and reason; after a violation it does what
the consumer would do next: forget the session and wait for the next snapshot (messages in
between are reported as ``skipped``). A new capture stream (``stream_id``) is a new session.

The lane rules themselves are :class:`cbi1kit.ckf._consumer.LaneReplica`'s; this module adds
the stream rules around them (envelope, producer and relay identity constant in a session,
CBI1 header against the envelope, snapshot assembly, heartbeats at the installed sequence).

Damage in the source (a torn capture tail, a corrupt record, bad JSON) arrives as an exception
from the record iterator after every intact record; it becomes the last event, a violation.

``lane_at(sequence)`` rebuilds the lane at any replayed sequence from the nearest snapshot point
plus the deltas after it (last write per bucket wins), without replaying the stream again.
"""

from __future__ import annotations

import bisect
import enum
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._readers import FrameDamage, FrameRecord, read_frames
from cbi1kit.ckf._consumer import (
    IngestOutcome,
    LaneReplica,
)
from cbi1kit.ckf._producer import DcCkfDelta, DcCkfSnapshot
from cbi1kit.errors import Cbi1kitError, LaneError
from cbi1kit.hashing._identity import ConsumerInstanceId, DcCkfFormatIdentity, LaneLease
from cbi1kit.relay._messages import check_filter_update
from cbi1kit.wire._assembly import AssembledSnapshot, SnapshotAssembly
from cbi1kit.wire._codec import Delta, SnapshotChunk, decode, peek_format
from cbi1kit.wire._format import FilterFormat
from cbi1kit.wire._rules import rule_id, rule_of

__all__ = [
    "EventKind",
    "ReplayEvent",
    "ReplayReport",
    "Replayer",
    "Violation",
    "replay",
]

Words = npt.NDArray[np.uint64]
_CONSUMER: Final = ConsumerInstanceId(0x5245504C4159)  # "REPLAY"
_KIND_NAMES: Final = {
    pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK: "snapshot chunk",
    pb.FILTER_UPDATE_KIND_DELTA: "delta",
    pb.FILTER_UPDATE_KIND_HEARTBEAT: "heartbeat",
}

# the envelope-against-header rules replay checks itself, named as the rulebook names them
_KIND_MISMATCH: Final = rule_id("cbi1-kind-mismatch")
_DC_ID: Final = rule_id("cbi1-dc-id")
_EPOCH: Final = rule_id("cbi1-epoch")
_BASE_EPOCH: Final = rule_id("cbi1-delta-base-epoch")
_CONTIGUOUS: Final = rule_id("relay-delta-contiguous")


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
    """A snapshot point and the deltas applied on top of it, for ``lane_at``."""

    record_index: int
    sequence: int
    words: Words
    delta_sequences: list[int] = field(default_factory=list)
    delta_buckets: list[npt.NDArray[np.uint32]] = field(default_factory=list)
    delta_words: list[Words] = field(default_factory=list)

    @property
    def last_sequence(self) -> int:
        return self.delta_sequences[-1] if self.delta_sequences else self.sequence


def _lane_at(segment: _Segment, sequence: int) -> Words:
    lane = segment.words.copy()
    upto = bisect.bisect_right(segment.delta_sequences, sequence)
    if upto:
        buckets = np.concatenate(segment.delta_buckets[:upto])
        words = np.concatenate(segment.delta_words[:upto])
        # last write per bucket wins: the first occurrence in the reversed order
        rb = buckets[::-1]
        uniq, first = np.unique(rb, return_index=True)
        lane[uniq] = words[::-1][first]
    return lane


@dataclass(slots=True, eq=False)
class ReplayReport:
    """Everything replay saw. ``final_lane`` is the lane at ``final_sequence`` (None if no
    snapshot was ever installed); a lane faulted later keeps its last consistent words."""

    events: list[ReplayEvent]
    final_lane: Words | None
    final_sequence: int | None
    records: int
    _segments: list[_Segment] = field(default_factory=list, repr=False)

    @property
    def violations(self) -> list[Violation]:
        return [e for e in self.events if isinstance(e, Violation)]

    @property
    def ok(self) -> bool:
        return not any(isinstance(e, Violation) for e in self.events)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.events:
            out[e.kind.value] = out.get(e.kind.value, 0) + 1
        return out

    @property
    def sequence_ranges(self) -> list[tuple[int, int]]:
        """``(snapshot sequence, last delta sequence)`` of every installed snapshot, in order."""
        return [(s.sequence, s.last_sequence) for s in self._segments]

    def lane_at(self, sequence: int) -> Words:
        """The lane right after ``sequence`` was applied (latest snapshot point covering it)."""
        for seg in reversed(self._segments):
            if seg.sequence <= sequence <= seg.last_sequence:
                return _lane_at(seg, sequence)
        spans = ", ".join(f"{a}..={b}" for a, b in self.sequence_ranges) or "none"
        raise LaneError(
            "SequenceNotReplayed",
            message=f"sequence {sequence} was not replayed (replayed ranges: {spans})",
            sequence=sequence,
            available=self.sequence_ranges,
        )


@dataclass(frozen=True, slots=True)
class _Key:
    """The lane ingestor compares identities by equality only: the producer's wire bytes do."""

    producer: bytes
    format: Any
    pool_id: Any = None


SnapshotHook = Callable[[int, int, AssembledSnapshot, int], None]
DeltaHook = Callable[[int, int, npt.NDArray[np.uint32], Words, Words], None]


class Replayer:
    """Incremental replay: ``feed`` records one by one, ``report()`` at any time.

    ``expected_format`` (a ``FilterFormat`` or anything with ``seed``/``bucket_count``) pins
    the format the way a catalog-selected producer would; otherwise each session adopts the
    format of its first message. ``keep_history=False`` drops the snapshot points and deltas
    ``lane_at`` needs (memory then stays at one lane). ``on_snapshot(record_index, sequence,
    snapshot, stream_id)`` and ``on_delta(record_index, sequence, buckets, new_words,
    previous_words)`` observe installs and applied deltas (the tables use them).
    """

    def __init__(
        self,
        *,
        expected_format: Any = None,
        keep_history: bool = True,
        on_snapshot: SnapshotHook | None = None,
        on_delta: DeltaHook | None = None,
    ) -> None:
        self.expected_format = (
            None
            if expected_format is None
            else FilterFormat(int(expected_format.seed), int(expected_format.bucket_count))
        )
        self.keep_history = keep_history
        self.on_snapshot = on_snapshot
        self.on_delta = on_delta
        self.events: list[ReplayEvent] = []
        self.records = 0
        self._segments: list[_Segment] = []
        self._replica: LaneReplica | None = None
        self._lease_epoch = 0
        self._ever_installed = False
        self._stream: int | None = None
        self._reset_session(recovering=False)

    # -- session state ------------------------------------------------------------------------
    def _reset_session(self, *, recovering: bool) -> None:
        self._recovering = recovering
        self._recover_from: int | None = None
        self._producer: bytes | None = None
        self._relay: bytes | None = None
        self._format: FilterFormat | None = None
        self._dc_id: int | None = None
        self._assembly: SnapshotAssembly | None = None
        self._assembly_start = 0
        self._key: _Key | None = None
        self._lease: LaneLease | None = None

    @property
    def installed_sequence(self) -> int | None:
        rep = self._replica
        return rep.installed_sequence if rep is not None and self._ever_installed else None

    @property
    def ready(self) -> bool:
        return self._replica is not None and self._replica.ready

    @property
    def lane(self) -> Words | None:
        """The replica's words (a live view; copy it to keep it)."""
        return self._replica.words if self._replica is not None and self._ever_installed else None

    # -- events -------------------------------------------------------------------------------
    def _emit(self, event: ReplayEvent) -> ReplayEvent:
        self.events.append(event)
        return event

    def _violation(
        self, rec: _Rec, rule: str, reason: str, *, sequence: int | None = None
    ) -> ReplayEvent:
        self._reset_session(recovering=True)
        self._recover_from = rec.index
        if self._replica is not None:
            self._replica.ready = False
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
        if damage.frames:
            self.records = max(self.records, damage.index + damage.frames)
        return event

    def _feed_update(self, rec: _Rec, update: pb.FilterUpdate) -> ReplayEvent:
        err = check_filter_update(update)
        # upstream checks a delta's contiguity last (the lane ingestor, after decode and the
        # header checks), so that rule waits for the others, as in the rulebook's order
        contiguity = None
        if err is not None:
            if rule_of(err) != _CONTIGUOUS:
                return self._violation(rec, rule_of(err), str(err))
            contiguity = err
        kind = update.kind
        producer = update.producer.SerializeToString(deterministic=True)
        relay = update.relay.SerializeToString(deterministic=True)
        starts_snapshot = kind == pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK and _chunk_index(
            update.payload
        ) in (0, None)
        if self._recovering:
            if not starts_snapshot:
                return self._event(
                    rec,
                    EventKind.SKIPPED,
                    f"awaiting a new snapshot after the violation at record {self._recover_from}",
                )
            self._reset_session(recovering=False)
        if self._producer is None:
            fmt = update.producer.ckf_format
            adopted = FilterFormat(fmt.seed, fmt.bucket_count)
            if self.expected_format is not None and adopted != self.expected_format:
                return self._violation(
                    rec,
                    "FormatMismatch",
                    f"producer format {adopted!r} differs from the expected "
                    f"{self.expected_format!r}",
                )
            self._producer, self._relay = producer, relay
            self._format = adopted
            self._dc_id = update.producer.pool_id.dc_id
        elif producer != self._producer:
            return self._violation(
                rec, "ProducerChanged", "different producer generation within one session"
            )
        elif relay != self._relay:
            return self._violation(rec, "RelayChanged", "relay identity changed within one session")
        if kind == pb.FILTER_UPDATE_KIND_HEARTBEAT:
            return self._heartbeat(rec)
        frame = self._decode(rec, update.payload)
        if frame is None:
            return self.events[-1]
        want = "snapshot chunk" if kind == pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK else "delta"
        got = "snapshot chunk" if isinstance(frame, SnapshotChunk) else "delta"
        if want != got:
            return self._violation(rec, _KIND_MISMATCH, f"envelope says {want}, CBI1 says {got}")
        if frame.header.dc_id != self._dc_id:
            return self._violation(
                rec,
                _DC_ID,
                f"CBI1 dc_id 0x{frame.header.dc_id:016x} != producer dc_id 0x{self._dc_id:016x}",
            )
        if frame.header.epoch != update.sequence:
            return self._violation(
                rec,
                _EPOCH,
                f"CBI1 epoch {frame.header.epoch} != envelope sequence {update.sequence}",
            )
        if isinstance(frame, Delta) and frame.base_epoch != update.base_sequence:
            return self._violation(
                rec,
                _BASE_EPOCH,
                f"CBI1 base_epoch {frame.base_epoch} != envelope base_sequence "
                f"{update.base_sequence}",
            )
        if contiguity is not None:
            return self._violation(rec, _CONTIGUOUS, str(contiguity))
        return self._apply(rec, frame)

    def _feed_bare(self, rec: _Rec, raw: bytes) -> ReplayEvent:
        """A bare CBI1 frame: no envelope, so the CBI1 header is all there is."""
        starts_snapshot = _bare_chunk_index(raw) in (0, None)
        if self._recovering:
            if not starts_snapshot:
                return self._event(
                    rec,
                    EventKind.SKIPPED,
                    f"awaiting a new snapshot after the violation at record {self._recover_from}",
                )
            self._reset_session(recovering=False)
        if self._format is None:
            try:
                adopted = self.expected_format or peek_format(raw)
            except Cbi1kitError as exc:
                return self._violation(rec, rule_of(exc), str(exc))
            self._format = adopted
        frame = self._decode(rec, raw)
        if frame is None:
            return self.events[-1]
        if self._dc_id is None:
            self._dc_id = frame.header.dc_id
        elif frame.header.dc_id != self._dc_id:
            return self._violation(
                rec, _DC_ID, f"CBI1 dc_id changed to 0x{frame.header.dc_id:016x}"
            )
        return self._apply(rec, frame)

    def _decode(self, rec: _Rec, payload: bytes) -> SnapshotChunk | Delta | None:
        assert self._format is not None
        try:
            frame = decode(self._format, payload)
        except Cbi1kitError as exc:
            self._violation(rec, rule_of(exc), str(exc))
            return None
        if rec.sequence is None:
            rec.sequence = frame.header.epoch
            if isinstance(frame, Delta):
                rec.base_sequence = frame.base_epoch
        return frame

    def _ensure_lane(self) -> LaneReplica:
        assert self._format is not None
        # The lane ingestor only compares identities, formats and leases for equality, so the
        # values handed to it are typed loosely (the producer's wire bytes are the identity).
        fmt: Any = DcCkfFormatIdentity(self._format.seed, self._format.bucket_count)
        rep = self._replica
        if rep is None or rep.format != fmt:
            rep = self._replica = LaneReplica(0, fmt)
        if self._key is None:
            self._key = _Key(self._producer or b"", rep.format)
            self._lease_epoch += 1
            self._lease = LaneLease(_CONSUMER, 0, self._lease_epoch)
            key: Any = self._key
            lease: Any = self._lease
            rep.assign(key, lease)
        return rep

    def _apply(self, rec: _Rec, frame: SnapshotChunk | Delta) -> ReplayEvent:
        rep = self._ensure_lane()
        if isinstance(frame, SnapshotChunk):
            if self._assembly is None:
                assert self._format is not None
                self._assembly = SnapshotAssembly(self._format)
            if frame.chunk_index == 0:
                self._assembly_start = rec.index
            try:
                done = self._assembly.absorb(frame)
            except Cbi1kitError as exc:
                return self._violation(rec, rule_of(exc), str(exc))
            if done is None:
                return self._event(
                    rec,
                    EventKind.SNAPSHOT_CHUNK,
                    f"chunk {frame.chunk_index + 1} of {frame.chunk_count}",
                )
            return self._install(rec, rep, done)
        if self._assembly is not None and self._assembly.in_progress:
            return self._violation(
                rec, "ChunkSequence", "a delta arrived while a snapshot was being assembled"
            )
        buckets = frame.buckets
        new_words = frame.words
        previous = rep.words[buckets.astype(np.intp)] if self.on_delta is not None else None
        key: Any = self._key
        lease: Any = self._lease
        try:
            outcome = rep.apply_delta(
                DcCkfDelta(key, lease, frame.base_epoch, frame.header.epoch, buckets, new_words)
            )
        except LaneError as exc:
            if exc.variant == "AwaitingSnapshot":
                return self._violation(
                    rec, "AwaitingSnapshot", "a delta arrived before any snapshot"
                )
            return self._violation(rec, str(exc.subvariant), str(exc.detail))
        if outcome is not IngestOutcome.DELTA_APPLIED:
            installed = rep.installed_sequence
            return self._violation(
                rec,
                "StaleOrDuplicateDelta",
                f"delta {frame.base_epoch} -> {frame.header.epoch} ignored by the lane "
                f"(installed {installed}); the consumer requires DeltaApplied",
            )
        if self.keep_history and self._segments:
            seg = self._segments[-1]
            seg.delta_sequences.append(frame.header.epoch)
            seg.delta_buckets.append(np.array(buckets, dtype=np.uint32))
            seg.delta_words.append(np.array(new_words, dtype=np.uint64))
        if self.on_delta is not None:
            assert previous is not None
            self.on_delta(rec.index, frame.header.epoch, buckets, new_words, previous)
        return self._event(rec, EventKind.DELTA_APPLIED)

    def _install(self, rec: _Rec, rep: LaneReplica, snap: AssembledSnapshot) -> ReplayEvent:
        key: Any = self._key
        lease: Any = self._lease
        try:
            # in one session a lane that is ready ignores a stale snapshot and faults a newer one
            outcome = rep.install_snapshot(DcCkfSnapshot(key, lease, snap.epoch, snap.words))
        except LaneError as exc:
            return self._violation(rec, str(exc.subvariant), str(exc.detail))
        if outcome is not IngestOutcome.SNAPSHOT_INSTALLED:
            return self._violation(
                rec,
                "SnapshotNotInstalled",
                f"snapshot {snap.epoch} ignored by the lane ({outcome.value})",
            )
        self._ever_installed = True
        if self.keep_history:
            words = snap.words
            if words.base is not None or not words.flags.owndata:
                words = words.copy()
            self._segments.append(_Segment(rec.index, snap.epoch, words))
        if self.on_snapshot is not None:
            self.on_snapshot(rec.index, snap.epoch, snap, rec.stream_id)
        return self._event(
            rec,
            EventKind.SNAPSHOT_INSTALLED,
            f"{len(snap.parts)} chunk(s) from record {self._assembly_start}",
        )

    def _heartbeat(self, rec: _Rec) -> ReplayEvent:
        rep = self._replica
        if rep is None or not rep.ready or self._key is None:
            return self._violation(rec, "HeartbeatBeforeSnapshot", "heartbeat before a snapshot")
        if rec.sequence != rep.installed_sequence:
            return self._violation(
                rec,
                "HeartbeatSequence",
                f"heartbeat at {rec.sequence}, installed {rep.installed_sequence}",
            )
        return self._event(rec, EventKind.HEARTBEAT)

    # -- results ------------------------------------------------------------------------------
    def report(self) -> ReplayReport:
        lane = self.lane
        return ReplayReport(
            list(self.events),
            None if lane is None else lane.copy(),
            self.installed_sequence,
            self.records,
            list(self._segments),
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


def _chunk_index(payload: bytes) -> int | None:
    """The CBI1 chunk index of a snapshot-chunk payload, without decoding (None if unreadable)."""
    if len(payload) < 52:
        return None
    return int.from_bytes(payload[48:52], "little")


def _bare_chunk_index(raw: bytes) -> int | None:
    if len(raw) < 52 or raw[6:8] != b"\x01\x00":
        return None
    return int.from_bytes(raw[48:52], "little")


def _records(source: Any) -> Iterator[FrameRecord | FrameDamage | pb.FilterUpdate]:
    if isinstance(source, (str, os.PathLike)):
        return iter(read_frames(source, damage="report"))
    return iter(source)


def replay(
    records: Iterable[FrameRecord | FrameDamage | pb.FilterUpdate] | str | os.PathLike[str],
    *,
    expected_format: Any = None,
    keep_history: bool = True,
) -> ReplayReport:
    """Replay a whole stream (records, ``FilterUpdate`` messages, or a path for
    ``read_frames``). Capture damage (``FrameDamage`` items; a capture path is read with
    ``damage="report"``) is a violation at its frame index and replay goes on after it; a
    reader's exception (other sources) becomes the last event, a violation."""
    player = Replayer(expected_format=expected_format, keep_history=keep_history)
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
