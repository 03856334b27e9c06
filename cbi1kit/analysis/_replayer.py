"""Replay a recorded relay capture with the consumer's rules: lanes fed record by record over
the stream engine (``relay/_stream``), each event and violation reported, the history that
``lane_at`` reads kept by reference. The results are ``_replay``'s; ``docs/replay.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._events import EventKind, EventLog, ReplayEvent, Violation
from cbi1kit.analysis._history import History, Ref, SegmentHistory
from cbi1kit.analysis._replay import LaneReport, ReplayReport, StreamInfo, Words, _Segment
from cbi1kit.capture._items import (
    CatalogRecord,
    FrameDamage,
    FrameRecord,
    FrameSpan,
    ReadinessRecord,
    SourceError,
    StreamEvent,
    is_plane_update_damage,
)
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD
from cbi1kit.ckf._lane import Lane
from cbi1kit.errors import CaptureError, CaptureVariant, Cbi1kitError
from cbi1kit.hashing._pools import PoolId
from cbi1kit.relay._messages import pool_id_from_wire
from cbi1kit.relay._planes import PlaneRecord
from cbi1kit.relay._stream import (
    Step,
    StepKind,
    StreamChecker,
    bare_starts_snapshot,
    message_violation,
    starts_snapshot,
)
from cbi1kit.wire._assembly import AssembledSnapshot
from cbi1kit.wire._format import FilterFormat
from cbi1kit.wire._frames import Delta
from cbi1kit.wire._rules import RULE_INDEX, SOURCE_DAMAGED, rule_of

SnapshotHook = Callable[[int, int, AssembledSnapshot, int], None]
DeltaHook = Callable[[int, int, npt.NDArray[np.uint32], Words, Words], None]
#: ``on_deltas(record_indices, sequences, image_counts, buckets, new_words, previous_words)``:
#: applied deltas in record order, their images back to back (``image_counts`` per delta);
#: the arrays are valid during the call only (the fast engine fills them again): copy to keep
DeltasHook = Callable[
    [npt.NDArray[np.int64], Words, npt.NDArray[np.int64], npt.NDArray[np.uint32], Words, Words],
    None,
]


class LaneReplayer:
    """Incremental replay of one lane: ``feed`` records one by one, ``report()`` at any time; a new
    ``stream_id`` is a new session, and memory stays at the lane in play. ``expected_format`` (a
    ``FilterFormat``, or anything with ``seed``/``bucket_count``) pins the format as a
    catalog-selected producer would (else each session adopts its first message's); ``keep_history``
    keeps what ``lane_at`` needs in a temporary file; ``keep_events=False`` only counts and
    violations. Hooks: ``on_snapshot(frame_index, sequence, snapshot, stream_id)``,
    ``on_delta(frame_index, sequence, buckets, new_words, previous_words)``, ``on_deltas``
    (:data:`DeltasHook`: many at a time where the fast engine takes them)."""

    def __init__(
        self,
        *,
        expected_format: Any = None,
        keep_history: bool = True,
        keep_events: bool = True,
        on_snapshot: SnapshotHook | None = None,
        on_delta: DeltaHook | None = None,
        on_deltas: DeltasHook | None = None,
        history: History | None = None,
    ) -> None:
        self.expected_format = (
            None
            if expected_format is None
            else FilterFormat(
                seed=int(expected_format.seed), bucket_count=int(expected_format.bucket_count)
            )
        )
        self.keep_history = keep_history
        self.keep_events = keep_events
        self.on_snapshot = on_snapshot
        self.on_delta = on_delta
        self.on_deltas = on_deltas
        self.events = EventLog()
        self.frames = 0
        self.streams: list[int] = []
        self._counts: dict[str, int] = {}
        self._violations: list[Violation] = []
        self._segments: list[_Segment] = []
        self._current: _Segment | None = None  # the segment the open session installed
        self._history = (history if history is not None else History()) if keep_history else None
        self._chunks: list[Ref] = []  # the refs of the snapshot being assembled
        self._lane: Lane | None = None  # one lane across sessions; each session resets it
        self._ever_installed = False
        self._stream: int | None = None
        #: producer and relay bytes of a message this lane took without a violation (they
        #: parse and validate): the fast engine skips messages carrying them while recovering
        self._valid_envelope: tuple[bytes, bytes] | None = None
        self._reset_session(recovering=False)

    # -- session state ------------------------------------------------------------------------
    def _reset_session(self, *, recovering: bool) -> None:
        """A new session: the stream engine starts over (a new lease on the same lane)."""
        self._recovering = recovering
        self._recover_from: int | None = None
        self._checker: StreamChecker | None = None
        self._assembly_start = 0
        self._chunks = []

    def _session(self) -> StreamChecker:
        if self._checker is None:
            self._checker = StreamChecker(
                expected_format=self.expected_format,
                lane=self._lane,
                keep_previous=self.on_delta is not None or self.on_deltas is not None,
            )
        return self._checker

    def _end(self, unix_ns: int | None, why: str, *, faulted: bool = False) -> None:
        """The open session stops feeding the lane (a consumer retires it until a snapshot)."""
        if self._current is not None:
            self._current.ended_unix_ns = unix_ns
            self._current.ended_by = why
            self._current.faulted = faulted
            self._current = None

    def start_stream(
        self, stream_id: int, unix_ns: int | None = None, *, recovering_from: int | None = None
    ) -> None:
        """``stream_id`` takes the lane: a new session (after damage at ``recovering_from`` on
        that stream, one that waits for a snapshot)."""
        if self._stream is not None:
            self._end(unix_ns, f"stream {stream_id} replaced stream {self._stream}")
        self._reset_session(recovering=recovering_from is not None)
        self._recover_from = recovering_from
        self._stream = stream_id
        if stream_id not in self.streams:
            self.streams.append(stream_id)

    def end_stream(self, stream_id: int, unix_ns: int | None, why: str) -> None:
        """The capture recorded the close of ``stream_id``: its session ends there."""
        if stream_id == self._stream:
            self._end(unix_ns, why)

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
        self._end(rec.unix_ns, f"violation {rule} at frame {rec.index}", faulted=True)
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
    def feed(self, record: FrameRecord | pb.FilterUpdate, ref: Ref | None = None) -> ReplayEvent:
        """Apply one record; returns the event it produced (also appended to ``events``).
        ``ref``: where the source holds the message, for the history (else it is kept)."""
        if isinstance(record, pb.FilterUpdate):
            raw = record.SerializeToString()
            record = FrameRecord(self.frames, 0, None, None, record, raw)
        self.frames += 1
        rec = _Rec.of(record)
        rec.ref = ref if ref is not None or self._history is None else self._keep(record)
        if rec.stream_id != self._stream:
            self.start_stream(rec.stream_id, rec.unix_ns)
        if record.update is not None:
            return self._feed_update(rec, record.update)
        return self._feed_bare(rec, record.raw)

    def _keep(self, record: FrameRecord) -> Ref:
        """The history's copy of a message that no source holds for it (a bare frame as the
        payload of a message, so that every kept message reads the same way)."""
        assert self._history is not None
        raw = record.raw if record.update is not None else pb.FilterUpdate(payload=record.raw)
        return self._history.message(raw if isinstance(raw, bytes) else raw.SerializeToString())

    def feed_error(self, error: BaseException, *, offset: int | None = None) -> ReplayEvent:
        """Record source damage (the reader's exception) as a violation after the last record."""
        return self._emit(_source_damaged(self.frames, error, self._stream or 0, offset))

    def feed_damage(self, damage: FrameDamage) -> ReplayEvent:
        """Capture damage met between frames: a violation at the frame index it sits at; a
        damaged frame (``consumed``) uses up its index, and replay goes on with the next."""
        err = damage.error
        if damage.frames:
            self.frames = max(self.frames, damage.index + damage.frames)
        rule = rule_of(err)
        if rule in RULE_INDEX:  # an intact record that breaks a message rule: the stream ends
            stream = damage.damage.stream_id
            sid = self._stream or 0 if stream is None else stream
            rec = _Rec(damage.index, sid, err.offset, None, None)
            return self._violation(rec, rule, str(err))
        return self._emit(_source_damaged(damage.index, err, self._stream or 0, err.offset))

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
            f"awaiting a new snapshot after the violation at frame {self._recover_from}",
        )

    def _record(self, rec: _Rec, step: Step) -> ReplayEvent:
        """The engine's step as replay's event; history and hooks on installs and deltas."""
        checker = self._checker
        assert checker is not None
        self._lane = checker.lane
        if rec.sequence is None:
            rec.sequence, rec.base_sequence = step.sequence, step.base_sequence
        if step.chunk is not None:
            if step.chunk.chunk_index == 0:
                self._assembly_start = rec.index
                self._chunks = []
            if rec.ref is not None:
                self._chunks.append(rec.ref)
        if step.kind is StepKind.VIOLATION:
            assert step.rule is not None and step.reason is not None
            return self._violation(rec, step.rule, step.reason)
        if step.kind is StepKind.SNAPSHOT_INSTALLED:
            assert step.snapshot is not None
            return self._installed(rec, step.snapshot, checker)
        if step.kind is StepKind.DELTA_APPLIED:
            assert step.delta is not None
            self._applied(rec, step.delta, step.previous)
            return self._event(rec, EventKind.DELTA_APPLIED)
        if step.kind is StepKind.HEARTBEAT:
            self._beat(rec)
            return self._event(rec, EventKind.HEARTBEAT, step.reason)
        return self._event(rec, EventKind.SNAPSHOT_CHUNK, step.reason)

    def _beat(self, rec: _Rec) -> None:
        """An accepted heartbeat: the scorer's ``touch`` (its time keeps the lane fresh)."""
        seg = self._current
        if seg is None:
            return
        if rec.unix_ns is None:
            seg.timed = False
        elif seg.timed:
            seg.heartbeat_unix_ns.append(rec.unix_ns)

    def _applied(self, rec: _Rec, delta: Delta, previous: Words | None) -> None:
        if self._segments:  # the lane was installed in this session: the last segment
            seg = self._segments[-1]
            seg.last_sequence = delta.header.epoch
            if rec.unix_ns is None:
                seg.timed = False
            elif seg.timed:
                seg.delta_unix_ns.append(rec.unix_ns)
            if seg.history is not None and rec.ref is not None:
                seg.history.deltas.add((*rec.ref, delta.header.epoch))
        if self.on_delta is not None:
            assert previous is not None
            self.on_delta(rec.index, delta.header.epoch, delta.buckets, delta.words, previous)
        if self.on_deltas is not None:
            assert previous is not None
            self.on_deltas(
                np.array([rec.index], dtype=np.int64),
                np.array([delta.header.epoch], dtype=np.uint64),
                np.array([delta.image_count], dtype=np.int64),
                delta.buckets,
                delta.words,
                previous,
            )

    def _installed(self, rec: _Rec, snap: AssembledSnapshot, checker: StreamChecker) -> ReplayEvent:
        self._ever_installed = True
        seed = None if checker.format is None else checker.format.seed
        kept = (
            None
            if self._history is None or seed is None
            else SegmentHistory(seed, snap.bucket_count, list(self._chunks))
        )
        update = rec.update
        seg = _Segment(
            rec.index,
            snap.epoch,
            snap.epoch,
            snap.bucket_count,
            kept,
            stream_id=rec.stream_id,
            producer=(
                update.producer.SerializeToString(deterministic=True)
                if update is not None and update.HasField("producer")
                else None
            ),
            dc_id=checker.dc_id,
            seed=seed,
            installed_unix_ns=rec.unix_ns,
            timed=rec.unix_ns is not None,
        )
        self._segments.append(seg)
        self._current = seg
        if self.on_snapshot is not None:
            self.on_snapshot(rec.index, snap.epoch, snap, rec.stream_id)
        return self._event(
            rec,
            EventKind.SNAPSHOT_INSTALLED,
            f"{len(snap.parts)} chunk(s) from frame {self._assembly_start}",
        )

    # -- results ------------------------------------------------------------------------------
    def report(self, *, pool: PoolId | None = None, dc_id: int | None = None) -> LaneReport:
        """The lane as it stands (``pool``/``dc_id`` name it; the DC defaults to the frames')."""
        lane = self.lane
        if dc_id is None and self._segments:
            dc_id = self._segments[-1].dc_id
        return LaneReport(
            pool,
            dc_id,
            list(self.streams),
            None if lane is None else lane.copy(),
            self.installed_sequence,
            self.frames,
            [dataclasses.replace(s) for s in self._segments],  # as they stand now
            self._history,
            dict(self._counts),
            list(self._violations),
        )


def _source_damaged(
    index: int, error: BaseException, stream_id: int, offset: int | None
) -> Violation:
    """Damage in the source itself (not a message that breaks a rule)."""
    return Violation(
        index,
        EventKind.VIOLATION,
        None,
        f"{rule_of(error)}: {error}",
        None,
        stream_id,
        getattr(error, "offset", offset),
        SOURCE_DAMAGED,
    )


@dataclass(slots=True)
class _LaneSlot:
    """A lane being replayed and what names it."""

    player: LaneReplayer
    pool: PoolId | None
    dc_id: int | None


class Replayer:
    """Incremental replay of a whole source: a :class:`LaneReplayer` per pool (its arguments, for
    every lane), a session per stream; ``feed`` / ``feed_damage`` / ``feed_error`` / ``feed_item``
    one by one, ``report()`` at any time. A stream belongs to the pool of its first message's
    producer (no envelope: the bare frames' lane; no producer: a lane of its own). Catalog updates,
    stream opens and closes: :meth:`feed_item`; a close ends its session at its receive time."""

    def __init__(
        self,
        *,
        expected_format: Any = None,
        keep_history: bool = True,
        keep_events: bool = True,
        on_snapshot: SnapshotHook | None = None,
        on_delta: DeltaHook | None = None,
        on_deltas: DeltasHook | None = None,
    ) -> None:
        #: where every lane's history finds its messages (shared: the engines give refs in it)
        self.history = History() if keep_history else None
        self._lane_args: dict[str, Any] = {
            "expected_format": expected_format,
            "keep_history": keep_history,
            "history": self.history,
            "keep_events": False,
            "on_snapshot": on_snapshot,
            "on_delta": on_delta,
            "on_deltas": on_deltas,
        }
        self.keep_events = keep_events
        self.events = EventLog()
        self.frames = 0
        self.catalogs: list[CatalogRecord] = []
        self.streams: dict[int, StreamInfo] = {}
        self.plane_damage: list[FrameDamage] = []
        self.readiness: list[ReadinessRecord] = []
        self._plane_log: list[PlaneRecord | StreamEvent] = []  # in record order
        self._plane_streams: set[int] = set()
        self.first_unix_ns: int | None = None
        self.last_unix_ns: int | None = None
        self._lanes: dict[bytes, _LaneSlot] = {}
        self._stream_lane: dict[int, bytes] = {}
        self._damaged: dict[int, int] = {}  # stream -> frame index of damage before its lane
        self._counts: dict[str, int] = {}
        self._violations: list[Violation] = []
        self._last_stream: int | None = None

    def _emit(self, event: ReplayEvent) -> ReplayEvent:
        self._counts[event.kind.value] = self._counts.get(event.kind.value, 0) + 1
        if isinstance(event, Violation):
            self._violations.append(event)
        if self.keep_events:
            self.events.append(event)
        return event

    def _seen(self, unix_ns: int | None, last: int | None = None) -> None:
        """Receive times seen: ``unix_ns`` (and ``last``, the latest of a batch)."""
        if unix_ns is None:
            return
        if self.first_unix_ns is None or unix_ns < self.first_unix_ns:
            self.first_unix_ns = unix_ns
        last = unix_ns if last is None else last
        if self.last_unix_ns is None or last > self.last_unix_ns:
            self.last_unix_ns = last

    def _slot(self, record: FrameRecord) -> _LaneSlot:
        """The lane of ``record``'s stream (decided by the stream's first message)."""
        sid = record.stream_id
        key = self._stream_lane.get(sid)
        if key is None:
            key, pool, dc = _lane_of(record)
            self._stream_lane[sid] = key
            if key not in self._lanes:
                self._lanes[key] = _LaneSlot(LaneReplayer(**self._lane_args), pool, dc)
        slot = self._lanes[key]
        if slot.player._stream != sid:
            slot.player.start_stream(
                sid, record.recv_unix_ns, recovering_from=self._damaged.pop(sid, None)
            )
        return slot

    def _lane_player(self, stream_id: int) -> LaneReplayer | None:
        """The lane ``stream_id`` feeds now (None: not yet, or another stream took it)."""
        key = self._stream_lane.get(stream_id)
        if key is None:
            return None
        player = self._lanes[key].player
        return player if player._stream == stream_id else None

    def feed(self, record: FrameRecord | pb.FilterUpdate, ref: Ref | None = None) -> ReplayEvent:
        """Apply one frame to its lane; returns the event it produced (``ref``: where the
        source holds it, for the history)."""
        if isinstance(record, pb.FilterUpdate):
            record = FrameRecord(self.frames, 0, None, None, record, record.SerializeToString())
        self.frames += 1
        self._last_stream = record.stream_id
        self._seen(record.recv_unix_ns)
        return self._emit(self._slot(record).player.feed(record, ref))

    def feed_error(self, error: BaseException, *, offset: int | None = None) -> ReplayEvent:
        """Record source damage (the reader's exception) as a violation after the last record."""
        return self._emit(_source_damaged(self.frames, error, self._last_stream or 0, offset))

    def feed_damage(self, damage: FrameDamage) -> ReplayEvent | None:
        """Capture damage: a violation at the frame index it sits at (its stream's session ends
        when it is an intact record that is no ``FilterUpdate``). An undecodable catalog or
        readiness update is that plane's business, not the frames': it is kept in
        ``plane_damage`` (None). A damaged record of those streams is damage to the capture, as
        every reader says."""
        err = damage.error
        sid = damage.damage.stream_id
        if is_plane_update_damage(damage):
            self.plane_damage.append(damage)
            return None
        if damage.frames:
            self.frames = max(self.frames, damage.index + damage.frames)
        if rule_of(err) in RULE_INDEX:
            stream = (self._last_stream or 0) if sid is None else sid
            key = self._stream_lane.get(stream)
            if key is not None:
                return self._emit(self._lanes[key].player.feed_damage(damage))
            self._damaged[stream] = damage.index  # its lane starts recovering
            event = Violation(
                damage.index,
                EventKind.VIOLATION,
                None,
                str(err),
                None,
                stream,
                err.offset,
                rule_of(err),
            )
            return self._emit(event)
        # the damaged record's own stream where its header is intact (a body that fails its
        # check, a torn record); else the stream read last, the best guess there is
        stream = (self._last_stream or 0) if sid is None else sid
        return self._emit(_source_damaged(damage.index, err, stream, err.offset))

    def feed_item(self, item: Any, ref: Ref | None = None) -> ReplayEvent | None:
        """Any item of :func:`cbi1kit.capture.read_capture_items` (or a frame source)."""
        if isinstance(item, SourceError):
            return self.feed_error(item.error)
        if isinstance(item, FrameDamage):
            return self.feed_damage(item)
        if isinstance(item, CatalogRecord | ReadinessRecord):
            self._seen(item.recv_unix_ns)
            kept = self.catalogs if isinstance(item, CatalogRecord) else self.readiness
            kept.append(item)  # type: ignore[arg-type]
            self._plane_log.append(item)
            self._plane_streams.add(item.stream_id)
            return None
        if isinstance(item, StreamEvent):
            if item.closed is not None and item.stream_id in self._plane_streams:
                self._plane_log.append(item)  # its part of the relay's epoch ends
            elif item.opened is not None and item.opened.method == SUBSCRIBE_KV_POOL_METHOD:
                self._plane_log.append(item)  # a pool the catalog must describe as a source
            if item.recv_unix_ns and (self.last_unix_ns or 0) < item.recv_unix_ns:
                self.last_unix_ns = item.recv_unix_ns  # the capture's end is its last record
            info = self.streams.setdefault(item.stream_id, StreamInfo(item.stream_id))
            if item.opened is not None:
                info.opened, info.opened_unix_ns = item.opened, item.recv_unix_ns
            elif item.closed is not None:
                info.closed, info.closed_unix_ns = item.closed, item.recv_unix_ns
                key = self._stream_lane.get(item.stream_id)
                if key is not None:
                    c = item.closed
                    why = c.error_reason or c.local_reason or c.details or c.status_name
                    self._lanes[key].player.end_stream(
                        item.stream_id,
                        item.recv_unix_ns,
                        f"stream {item.stream_id} closed ({c.status_name}: {why})",
                    )
            return None
        return self.feed(item, ref)

    def lanes(self) -> list[tuple[PoolId | None, int | None, LaneReplayer]]:
        """Every lane so far, first seen first: its pool, its DC and its replayer."""
        return [(s.pool, s.dc_id, s.player) for s in self._lanes.values()]

    def lane_index(self, stream_id: int) -> int | None:
        """The position in ``lanes()`` of the lane ``stream_id`` feeds (None: none yet)."""
        key = self._stream_lane.get(stream_id)
        return None if key is None else list(self._lanes).index(key)

    def forget(self) -> list[Violation]:
        """Drop what only grows (violations, plane records and damage; the last catalog stays)
        so that a follower's memory is bounded by its lanes; the violations dropped."""
        dropped, self._violations = self._violations, []
        self.catalogs[:-1] = []
        self.readiness[:-1] = []
        self._plane_log.clear()
        self.plane_damage.clear()
        for slot in self._lanes.values():
            slot.player._violations.clear()
        return dropped

    def report(self) -> ReplayReport:
        return ReplayReport(
            self.events.frozen(),
            self.frames,
            [s.player.report(pool=s.pool, dc_id=s.dc_id) for s in self._lanes.values()],
            list(self.catalogs),
            dict(self.streams),
            self.first_unix_ns,
            dict(self._counts),
            list(self._violations),
            list(self.plane_damage),
            self.last_unix_ns,
            list(self.readiness),
            list(self._plane_log),
        )


def _lane_of(record: FrameRecord) -> tuple[bytes, PoolId | None, int | None]:
    """The lane key, pool and DC of a stream whose first message is ``record``."""
    update = record.update
    if update is None:
        return b"frames", None, None
    if not update.HasField("producer"):
        return b"stream:%d" % record.stream_id, None, None
    wire = update.producer.pool_id
    pool: PoolId | None
    try:
        pool = pool_id_from_wire(wire, path="FilterUpdate.producer.pool_id")
    except Cbi1kitError:
        pool = None  # the stream engine reports what is wrong with it
    return b"pool:" + wire.SerializeToString(deterministic=True), pool, wire.dc_id


@dataclass(slots=True)
class _Rec:
    index: int
    stream_id: int
    offset: int | None
    sequence: int | None
    base_sequence: int | None
    unix_ns: int | None = None
    update: pb.FilterUpdate | None = None
    ref: Ref | None = None  # where the source holds the message (the history's)

    @classmethod
    def of(cls, record: FrameRecord) -> _Rec:
        u = record.update
        if u is None:
            return cls(
                record.index,
                record.stream_id,
                record.source_offset,
                None,
                None,
                record.recv_unix_ns,
            )
        return cls(
            record.index,
            record.stream_id,
            record.source_offset,
            u.sequence,
            u.base_sequence,
            record.recv_unix_ns,
            u,
        )


def span_ref(history: History | None, span: FrameSpan, i: int) -> Ref | None:
    """Where the source holds row ``i`` of ``span``, for the history (None: keep a copy)."""
    if history is None:
        return None
    if span.number is not None:
        store = history.file(span.source)
        return store, int(span.offset[i]), int(span.length[i]), int(span.number[i])
    if not span.is_pb[i]:
        return None  # a bare frame: the lane keeps it as a message's payload
    return history.buffer(span.buf), int(span.start[i]), int(span.length[i]), 0


class ReferenceFeeder:
    """Every message to the per-message engine, one by one."""

    def __init__(self, player: Replayer) -> None:
        self.player = player

    def feed(self, item: object) -> int:
        """Replay one scan item; how many items it held (a span's rows)."""
        if not isinstance(item, FrameSpan):
            self.player.feed_item(item)
            return 1
        history = self.player.history
        for i in range(len(item)):
            self.player.feed_item(item.record(i), span_ref(history, item, i))
        return len(item)


#: ``auto``: the compiled engine unless the input is small (``_lazy.worth_compiling``)
ENGINES: Final = ("auto", "compiled", "reference")


def check_engine(engine: str) -> str:
    """``engine`` itself, once it names one (``CaptureError`` ``Usage`` if not)."""
    if engine not in ENGINES:
        raise CaptureError(
            CaptureVariant.Usage, f"engine must be one of {ENGINES}, got {engine!r}", field="engine"
        )
    return engine
