"""What a replay found: every lane with its sessions and the history that rebuilds it at any
replayed sequence, every violation, the capture's streams and planes; each result prints itself
(``text()``, ``to_dict()``). ``_replayer`` computes them; ``docs/replay.md`` says how.
"""

from __future__ import annotations

import bisect
import contextlib
from array import array
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit._text import spans, table, wrapped
from cbi1kit.analysis._events import EventLog, Violation
from cbi1kit.analysis._history import History, SegmentHistory
from cbi1kit.capture._file import StreamClose, StreamOpen
from cbi1kit.capture._items import CatalogRecord, FrameDamage, ReadinessRecord, StreamEvent
from cbi1kit.errors import Cbi1kitError, LaneError, LaneVariant, error_name
from cbi1kit.hashing._dc_names import dc_fields, dc_text, learn_dc_names
from cbi1kit.hashing._identity import ProducerIdentity
from cbi1kit.hashing._pools import DcId, PoolId, stable_dc_id
from cbi1kit.relay._messages import producer_from_wire
from cbi1kit.relay._planes import PlaneRecord, PlaneViolation, plane_violations
from cbi1kit.wire._format import FilterFormat

Words = npt.NDArray[np.uint64]


@dataclass(slots=True, eq=False)
class _Segment:
    """A snapshot point and the deltas applied on top of it: the sequences it covers, its
    history (the messages ``lane_at`` reads back; None when none is kept), and its session's
    provenance: stream, producer (wire bytes), DC, format seed, the receive time of the install
    and of every delta and heartbeat after it (``timed`` while every message had one), and when
    and why the session stopped feeding the lane."""

    frame_index: int
    sequence: int
    last_sequence: int
    bucket_count: int
    history: SegmentHistory | None = None
    stream_id: int = 0
    producer: bytes | None = None
    dc_id: int | None = None
    seed: int | None = None
    installed_unix_ns: int | None = None
    delta_unix_ns: array[int] = field(default_factory=lambda: array("Q"))
    heartbeat_unix_ns: array[int] = field(default_factory=lambda: array("Q"))
    timed: bool = False
    ended_unix_ns: int | None = None
    ended_by: str | None = None
    faulted: bool = False  # ended by a violation

    @property
    def kept(self) -> bool:
        """Whether ``lane_at`` can rebuild the segment's lanes."""
        return self.history is not None

    def touched_at(self, unix_ns: int) -> int | None:
        """The receive time of the session's last install, delta or heartbeat at or before
        ``unix_ns``: what upstream's scorer keeps as ``received_at`` (None: untimed, or none)."""
        if not self.timed or self.installed_unix_ns is None or self.installed_unix_ns > unix_ns:
            return None
        last = self.installed_unix_ns
        for times in (self.delta_unix_ns, self.heartbeat_unix_ns):
            k = bisect.bisect_right(times, unix_ns)
            if k:
                last = max(last, times[k - 1])
        return last


@dataclass(frozen=True, slots=True)
class LaneSession:
    """One snapshot session of a lane: the stream, the producer generation it carried, the
    sequences it covered and when (receive times, ns; None where the source has none), and
    what ended it (a violation, the stream's close, the next stream; None: still open)."""

    stream_id: int
    producer: ProducerIdentity | None
    dc_id: int | None
    sequence: int
    last_sequence: int
    installed_unix_ns: int | None
    last_unix_ns: int | None
    ended_unix_ns: int | None
    ended_by: str | None


def _producer(raw: bytes | None) -> ProducerIdentity | None:
    """A session's producer: valid, since the contract checks passed before its install."""
    return None if raw is None else producer_from_wire(pb.ProducerIdentity.FromString(raw))


@dataclass(slots=True, eq=False)
class LaneReport:
    """One lane of a replay (one pool: the producer pool of its streams' first messages; bare
    CBI1 frames are one lane). ``final_lane`` is the lane at ``final_sequence`` (None if no
    snapshot was ever installed); a lane faulted later keeps its last consistent words.
    ``pool`` is None where the stream carried no valid pool (bare frames, a broken envelope)."""

    pool: PoolId | None
    dc_id: int | None
    streams: list[int]
    final_lane: Words | None
    final_sequence: int | None
    frames: int
    _segments: list[_Segment] = field(default_factory=list, repr=False)
    _history: History | None = field(default=None, repr=False)
    _counts: dict[str, int] = field(default_factory=dict, repr=False)
    _violations: list[Violation] = field(default_factory=list, repr=False)

    @property
    def violations(self) -> list[Violation]:
        """Every rule the stream broke, in record order."""
        return list(self._violations)

    @property
    def ok(self) -> bool:
        """True when nothing broke a rule."""
        return not self._violations

    @property
    def counts(self) -> dict[str, int]:
        """How many events of each kind (``delta_applied``, ``heartbeat``, ...)."""
        return dict(self._counts)

    def __repr__(self) -> str:
        at = "nothing installed" if self.final_sequence is None else f"at {self.final_sequence}"
        return (
            f"<LaneReport {_lane_name(self)}: {at}, {self.frames:,} frames, "
            f"{len(self.streams)} stream(s), {_verdict(self._violations)}>"
        )

    def to_dict(self) -> dict[str, object]:
        """The lane as JSON-ready data (``cbi1kit replay --json``): its DC id in hex."""
        return {
            **dc_fields(self.dc_id),
            "pool": None if self.pool is None else str(self.pool),
            "streams": self.streams,
            "sequence_ranges": self.sequence_ranges,
            "final_sequence": self.final_sequence,
            "counts": self.counts,
            "violations": len(self._violations),
        }

    def row(self) -> tuple[object, ...]:
        """The lane as a row of ``ReplayReport.text``'s lane table (``LANE_HEADER``)."""
        domain = "-" if self.pool is None else str(self.pool.indexer_domain)[:17]
        last = "-" if self.final_sequence is None else self.final_sequence
        ranges = spans(self.sequence_ranges, 3)
        return (dc_text(self.dc_id), domain, len(self.streams), ranges, last, len(self._violations))

    @property
    def format(self) -> FilterFormat | None:
        """The format of the lane's last installed snapshot."""
        seg = self._segments[-1] if self._segments else None
        return (
            None
            if seg is None or seg.seed is None
            else FilterFormat(seed=seg.seed, bucket_count=seg.bucket_count)
        )

    @property
    def sessions(self) -> list[LaneSession]:
        """Each snapshot session of the lane: its stream, sequences and how it ended."""
        return [
            LaneSession(
                s.stream_id,
                _producer(s.producer),
                s.dc_id,
                s.sequence,
                s.last_sequence,
                s.installed_unix_ns,
                (s.delta_unix_ns[-1] if s.delta_unix_ns else s.installed_unix_ns)
                if s.timed
                else None,
                s.ended_unix_ns,
                s.ended_by,
            )
            for s in self._segments
        ]

    @property
    def sequence_ranges(self) -> list[tuple[int, int]]:
        """``(snapshot sequence, last delta sequence)`` of every installed snapshot, in order."""
        return [(s.sequence, s.last_sequence) for s in self._segments]

    def _kept(self, seg: _Segment, sequence: int) -> tuple[History, SegmentHistory]:
        if self._history is None or seg.history is None:
            raise LaneError(
                LaneVariant.HistoryNotKept,
                message=f"sequence {sequence} was replayed without its history "
                "(replay with keep_history=True to rebuild lanes)",
                sequence=sequence,
            )
        return self._history, seg.history

    def _words(self, seg: _Segment, sequence: int) -> Words:
        history, kept = self._kept(seg, sequence)
        return kept.lane_at(history, sequence)

    def _bucket_writes(
        self, seg: _Segment, buckets: npt.ArrayLike, sequence: int
    ) -> tuple[Words, npt.NDArray[np.void]]:
        """``buckets``' snapshot words in ``seg`` and the delta rows that wrote them up to
        ``sequence`` (``sequence``, ``bucket``, ``word``), in order."""
        history, kept = self._kept(seg, sequence)
        wanted = np.asarray(buckets, dtype=np.int64)
        rows = kept.writes(history, sequence)
        return kept.snapshot(history, wanted), rows[np.isin(rows["bucket"], wanted)]

    def _segment_of(self, sequence: int) -> _Segment:
        for seg in reversed(self._segments):
            if seg.sequence <= sequence <= seg.last_sequence:
                return seg
        spans = ", ".join(f"{a}..={b}" for a, b in self.sequence_ranges) or "none"
        raise LaneError(
            LaneVariant.SequenceNotReplayed,
            message=f"sequence {sequence} was not replayed (replayed ranges: {spans})",
            sequence=sequence,
            available=self.sequence_ranges,
        )

    def lane_at(self, sequence: int) -> Words:
        """The lane right after ``sequence`` was applied (latest snapshot point covering it),
        read back from the replay's history."""
        return self._words(self._segment_of(sequence), sequence)

    def session_at(self, unix_ns: int) -> tuple[LaneSession, int] | str:
        """The session the lane was ready in at wall-clock ``unix_ns`` (every message received
        at or before it applied) and the sequence it held, or why it held none: no snapshot
        installed yet, or its session had ended (the consumer retires the lane until the next
        snapshot). ``LaneError`` ``TimeNotRecorded`` when the source has no receive times."""
        found = self._point_at(unix_ns)
        if isinstance(found, str):
            return found
        seg, sequence = found
        return self.sessions[self._segments.index(seg)], sequence

    def _point_at(self, unix_ns: int) -> tuple[_Segment, int] | str:
        for seg in reversed(self._segments):
            if not seg.timed or seg.installed_unix_ns is None:
                raise LaneError(
                    LaneVariant.TimeNotRecorded,
                    message="the source has no receive times: ask for a sequence instead",
                )
            if seg.installed_unix_ns > unix_ns:
                continue
            if seg.ended_unix_ns is not None and seg.ended_unix_ns <= unix_ns:
                return f"not ready: {seg.ended_by}"
            applied = bisect.bisect_right(seg.delta_unix_ns, unix_ns)
            return seg, min(seg.sequence + applied, seg.last_sequence)
        return "not ready: no snapshot installed yet"

    def lane_at_time(self, unix_ns: int) -> Words | None:
        """The lane's words at wall-clock ``unix_ns`` (None when it was not ready then)."""
        found = self._point_at(unix_ns)
        return None if isinstance(found, str) else self._words(*found)


def lane_matcher(dc: int | str | DcId) -> Callable[[PoolId | None, int | None], bool]:
    """Whether a lane of (pool, DC id) is the one ``dc`` names: a DC id, its hex, a DC name, or
    a pool key ``domain/dc`` as a lane prints it (``record --list``'s ``@generation`` after
    it): what ``--dc`` means in every command that picks a lane."""
    if isinstance(dc, str) and "/" in dc:
        key = str(PoolId.parse(dc.strip().lower().split("@")[0]))  # as a lane prints it
        return lambda pool, _dc: str(pool) == key
    ids = _dc_value(dc)
    return lambda _pool, dc_id: dc_id in ids


def _dc_value(dc: int | str | DcId) -> set[int]:
    """The DC ids a user's ``dc`` may mean: an id, a ``DcId``, its hex (either case: a user
    copies it from anywhere), or a DC name."""
    if isinstance(dc, DcId):
        return {dc.value}
    if isinstance(dc, int):
        return {dc}
    ids = {stable_dc_id(dc).value}
    learn_dc_names([dc])
    with contextlib.suppress(Cbi1kitError, ValueError):
        ids.add(DcId.parse(dc.lower()).value)
    return ids


@dataclass(slots=True)
class StreamInfo:
    """One capture stream: what it asked for (``opened``: method, target, request, info) and how
    it ended (``closed``), with receive times; either is None when its record is missing."""

    stream_id: int
    opened: StreamOpen | None = None
    closed: StreamClose | None = None
    opened_unix_ns: int | None = None
    closed_unix_ns: int | None = None

    @property
    def method(self) -> str | None:
        """The gRPC method the stream opened (None: no STREAM_OPEN seen)."""
        return None if self.opened is None else self.opened.method


@dataclass(slots=True, eq=False)
class ReplayReport:
    """Everything replay saw: the events and violations of the whole source, and every lane.
    ``events`` is empty under ``keep_events=False``; ``catalogs``, ``streams``, ``readiness`` and
    ``plane_damage`` (those planes' undecodable records: no violation) are a capture's;
    ``first_unix_ns``/``last_unix_ns`` the receive times of its first and last message.
    ``final_lane``, ``final_sequence``, ``sequence_ranges`` and ``lane_at`` are the one lane's
    (none: nothing installed; several: ``LaneError`` ``SeveralLanes``, pick with :meth:`lane`)."""

    events: EventLog
    frames: int
    lanes: list[LaneReport] = field(default_factory=list)
    catalogs: list[CatalogRecord] = field(default_factory=list, repr=False)
    streams: dict[int, StreamInfo] = field(default_factory=dict, repr=False)
    first_unix_ns: int | None = None
    _counts: dict[str, int] = field(default_factory=dict, repr=False)
    _violations: list[Violation] = field(default_factory=list, repr=False)
    plane_damage: list[FrameDamage] = field(default_factory=list, repr=False)
    last_unix_ns: int | None = None
    readiness: list[ReadinessRecord] = field(default_factory=list, repr=False)
    _plane_log: list[PlaneRecord | StreamEvent] = field(default_factory=list, repr=False)

    @property
    def violations(self) -> list[Violation]:
        """Every rule the stream broke, in record order."""
        return list(self._violations)

    @property
    def plane_violations(self) -> list[PlaneViolation]:
        """The catalog and readiness updates that break their streams' rules (upstream's
        coordinator: one relay across the streams open together, revisions never go back, a
        repeated revision repeats its content): the planes', listed apart from the frames'
        violations as their damage is."""
        return plane_violations(self._plane_log)

    @property
    def ok(self) -> bool:
        """True when nothing broke a rule."""
        return not self._violations

    @property
    def counts(self) -> dict[str, int]:
        """How many events of each kind (``delta_applied``, ``heartbeat``, ...)."""
        return dict(self._counts)

    def __repr__(self) -> str:
        lanes = ", ".join(_lane_name(n) for n in self.lanes[:4])
        more = f" +{len(self.lanes) - 4}" if len(self.lanes) > 4 else ""
        return (
            f"<ReplayReport: {self.frames:,} frames, {len(self.lanes)} lane(s) [{lanes}{more}], "
            f"{_verdict(self._violations)}>"
        )

    def __str__(self) -> str:
        return self.text()

    def text(self, limit: int = 20) -> str:
        """The report as ``cbi1kit replay`` prints it: the counts, the lanes, the first
        ``limit`` violations with what a consumer does about each, the planes' breaks."""
        out = [f"frames: {self.frames}", table(sorted(self._counts.items()), ("event", "count"))]
        if len(self.lanes) <= 1:
            out.append(f"snapshot sessions (sequence ranges): {spans(self.sequence_ranges, 10**9)}")
            out.append(f"final sequence: {self.final_sequence}")
        else:
            out.append(f"lanes: {len(self.lanes)} (one per pool; a session per stream)")
            out.append(table([n.row() for n in self.lanes], LANE_HEADER))
        if self.ok:
            out.append("valid: no violations")
        else:
            out.append(f"{len(self._violations)} violation(s):")
            out += [
                wrapped(f"  - {v.describe()} [{v.action}]", "    ")
                for v in self._violations[:limit]
            ]
            if len(self._violations) > limit:
                out.append(f"  … {len(self._violations) - limit} more")
        return "\n".join(out + [wrapped(line) for line in self._plane_lines()])

    def _plane_lines(self) -> list[str]:
        """The catalog's and readiness records that do not decode (no frame's violation), and
        the breaks of their rules (coordinator.rs)."""
        out = []
        if self.plane_damage:
            first = self.plane_damage[0].error
            out.append(
                f"planes: {len(self.plane_damage)} catalog or readiness update(s) that do not "
                f"decode, first: {error_name(first)}: {first}"
            )
        if broken := self.plane_violations:
            out.append(f"planes: {len(broken)} rule break(s), first: {broken[0].describe()}")
        return out

    def to_dict(self) -> dict[str, object]:
        """The report as JSON-ready data (``cbi1kit replay --json``): with one lane, its
        sequences at the top as well."""
        only = len(self.lanes) <= 1
        return {
            "frames": self.frames,
            "counts": self.counts,
            "sequence_ranges": self.sequence_ranges if only else None,
            "final_sequence": self.final_sequence if only else None,
            "lanes": [lane.to_dict() for lane in self.lanes],
            "ok": self.ok,
            "violations": [v.to_dict() for v in self._violations],
            "plane_damage": [
                {"record_index": d.error.record_index, "error": f"{error_name(d.error)}: {d.error}"}
                for d in self.plane_damage
            ],
            "plane_violations": [v.to_dict() for v in self.plane_violations],
        }

    def lane(
        self,
        dc: int | str | DcId | None = None,
        *,
        pool: PoolId | None = None,
        pools: Collection[PoolId] | None = None,
    ) -> LaneReport:
        """The lane of ``pool``, or of ``dc`` (a DC id, its hex, a DC name, or a pool key
        ``domain/dc`` as a lane prints it), among ``pools`` when given (a model's:
        ``model_pools``), or the only one; ``LaneError`` ``SeveralLanes`` when that names more
        than one, ``NoSuchLane`` when none."""
        lanes = self.lanes
        if pools is not None:
            lanes = [n for n in lanes if n.pool in pools]
        if pool is not None:
            lanes = [n for n in lanes if n.pool == pool]
        if dc is not None:
            names = lane_matcher(dc)
            lanes = [n for n in lanes if names(n.pool, n.dc_id)]
        if len(lanes) == 1:
            return lanes[0]
        known = ", ".join(_lane_name(n) for n in self.lanes) or "none"
        if not lanes:
            raise LaneError(
                LaneVariant.NoSuchLane, message=f"no lane matches (lanes: {known})", available=known
            )
        if len({n.dc_id for n in lanes}) == len(lanes):
            named = ", ".join(_lane_name(n) for n in lanes)
            message = f"{len(lanes)} lanes match ({named}): pick one by its DC"
        else:  # one DC serves several pools (models): the DC alone does not name a lane
            named = ", ".join(f"pool {n.pool}" for n in lanes)
            message = f"{len(lanes)} lanes match ({named}): pick one by its pool key or model"
        raise LaneError(LaneVariant.SeveralLanes, message=message, available=known)

    def _only(self) -> LaneReport | None:
        return self.lane() if self.lanes else None

    @property
    def final_lane(self) -> Words | None:
        """The only lane's words at its final sequence (None: no lane, or several)."""
        only = self._only()
        return None if only is None else only.final_lane

    @property
    def final_sequence(self) -> int | None:
        """The only lane's last applied sequence (None: no lane, or several)."""
        only = self._only()
        return None if only is None else only.final_sequence

    @property
    def sequence_ranges(self) -> list[tuple[int, int]]:
        """The only lane's ``(snapshot, last delta)`` sequence pairs, one per session."""
        only = self._only()
        return [] if only is None else only.sequence_ranges

    def lane_at(self, sequence: int) -> Words:
        """The only lane right after ``sequence`` (``rep.lane(dc).lane_at`` for one of several);
        needs ``keep_history``."""
        only = self._only()
        if only is None:
            raise LaneError(
                LaneVariant.SequenceNotReplayed,
                message=f"sequence {sequence} was not replayed (replayed ranges: none)",
                sequence=sequence,
                available=[],
            )
        return only.lane_at(sequence)


#: the columns of ``ReplayReport.text``'s lane table
LANE_HEADER = ("dc", "indexer domain", "streams", "sessions", "final seq", "violations")


def _lane_name(lane: LaneReport) -> str:
    return "a lane without a DC" if lane.dc_id is None else f"DC {dc_text(lane.dc_id)}"


def _verdict(violations: list[Violation]) -> str:
    """``ok``, or how many violations and the first."""
    if not violations:
        return "ok"
    return f"{len(violations):,} violation(s), the first at frame {violations[0].frame_index}"
