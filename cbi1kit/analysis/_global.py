"""The global view: upstream's consumer tables of a replayed capture at one moment.

Per model, a router consults up to 16 DC lanes of one indexer domain: ``GlobalCkfManifest``
(``lib/kv-router/src/indexer/cuckoo/global.rs``, newest) over a ``TransposedCkfTable<16>``. Here
each domain is a :class:`~cbi1kit.ckf.CkfLaneTable` of the pools the catalog advertised for the
model then, a lane ready with the words its session held (from replay's history) and where they came
from, or not ready. A moment is a lane ``sequence`` (each lane right after its own), a time (ISO
8601 with a zone) or an offset after the first message (``+90s``): all received by then is applied,
and a lane whose session had ended is not ready. No moment: every lane's final words.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from cbi1kit._text import table, wrapped
from cbi1kit.analysis._replay import LaneReport, ReplayReport, Words, _producer, _Segment
from cbi1kit.ckf._bucket import lane_occupancy
from cbi1kit.ckf._consumer import CkfLaneTable
from cbi1kit.ckf._lane import DcCkfSnapshot
from cbi1kit.errors import Cbi1kitError, IdentityError, IdentityVariant, LaneError, LaneVariant
from cbi1kit.hashing._dc_names import dc_fields, dc_text
from cbi1kit.hashing._identity import (
    ConsumerInstanceId,
    DcCkfFormatIdentity,
    LaneLease,
    ProducerIdentity,
)
from cbi1kit.hashing._pools import IndexerDomainId, PoolId
from cbi1kit.relay._messages import PoolCatalog, PoolDescriptor, catalog_from_wire

#: the view's consumer instance ("KVVIEW"): one manifest per domain, leases on it
VIEW_CONSUMER: Final = ConsumerInstanceId(0x4B5656494557)
_U64_MAX: Final = (1 << 64) - 1
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_UNITS: Final = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_OFFSET: Final = re.compile(r"\+(\d+)(?:\.(\d{1,9}))?(ns|us|ms|s|m|h)")
_ISO: Final = re.compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}(?::\d{2})?)(?:\.(\d{1,9}))?(Z|[+-]\d{2}:?\d{2})"
)


# ---------------------------------------------------------------------------------- moments


@dataclass(frozen=True, slots=True)
class At:
    """A moment of a capture: each lane right after its ``sequence``, the wall clock
    ``unix_ns`` (ns since the Unix epoch), or ``offset_ns`` after the capture's first message.
    Exactly one is set."""

    sequence: int | None = None
    unix_ns: int | None = None
    offset_ns: int | None = None

    def __post_init__(self) -> None:
        given = {
            name: v
            for name, v in (
                ("sequence", self.sequence),
                ("unix_ns", self.unix_ns),
                ("offset_ns", self.offset_ns),
            )
            if v is not None
        }
        if len(given) != 1:
            named = ", ".join(given) or "none"
            raise _at_error(f"exactly one of sequence, unix_ns, offset_ns, not {named}")
        ((name, v),) = given.items()
        if not 0 <= v <= _U64_MAX:
            meaning = {"unix_ns": " (a time from 1970 to 2554)"}.get(name, "")
            raise _at_error(f"{name} {v} is outside 0..={_U64_MAX}{meaning}")

    def __str__(self) -> str:
        if self.sequence is not None:
            return f"sequence {self.sequence}"
        if self.unix_ns is not None:
            return format_unix_ns(self.unix_ns)
        assert self.offset_ns is not None
        return f"+{_fraction(self.offset_ns)}s"


#: what names a moment of a capture: ``At``, a sequence, an ISO time with a zone, ``+90s``
Moment = At | int | str | datetime | timedelta | None
_AT_PREFIX: Final = "cannot name a moment: "


def _at_error(reason: str) -> LaneError:
    return LaneError(LaneVariant.At, message=f"{_AT_PREFIX}{reason}")


def _fraction(ns: int) -> str:
    whole, part = divmod(ns, 10**9)
    return f"{whole}.{part:09d}".rstrip("0").rstrip(".")


def format_unix_ns(unix_ns: int) -> str:
    """ISO 8601 in UTC to the nanosecond (``2025-01-01T00:01:30.000000123Z``)."""
    seconds, part = divmod(unix_ns, 10**9)
    stamp = (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{part:09d}Z" if part else f"{stamp}Z"


def _time_text(unix_ns: int | None) -> str | None:
    return None if unix_ns is None else format_unix_ns(unix_ns)


#: the columns of ``DomainView.text``'s lane table
_LANE_COLUMNS: Final = (
    "lane",
    "dc",
    "producer",
    "ready",
    "sequence",
    "time",
    "stream",
    "load",
    "why",
)


def _timedelta_ns(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1_000


def _digits_ns(whole: str, part: str | None, unit: int) -> int:
    """``whole.part`` units in ns, exactly (no float)."""
    frac = part or ""
    scale = int(10 ** len(frac))
    return (int(whole) * scale + int(frac or "0")) * unit // scale


def parse_at(value: At | int | str | datetime | timedelta | None) -> At | None:
    """A moment from what a user gives: an :class:`At`; an ``int`` or a string of digits (or
    ``0x`` hex) is a sequence; a ``timedelta`` or ``"+90s"`` (``ns us ms s m h``, a fraction
    allowed) an offset after the first message; a ``datetime`` (naive means UTC) or an ISO 8601
    string with its zone (``2026-11-30T12:00:00Z``, ``...+02:00``, up to 9 fraction digits) a
    wall-clock time. ``LaneError`` ``At`` (a ``ValueError``) for anything else."""
    if value is None or isinstance(value, At):
        return value
    if isinstance(value, bool):
        raise _at_error(f"{value!r} is not a sequence or a time")
    if isinstance(value, int):
        return At(sequence=value)
    if isinstance(value, timedelta):
        return At(offset_ns=_timedelta_ns(value))
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return At(unix_ns=_timedelta_ns(aware - _EPOCH))
    if not isinstance(value, str):
        raise _at_error(f"{value!r} is not a sequence or a time")
    text = value.strip()
    try:
        if re.fullmatch(r"\d+|0[xX][0-9a-fA-F]+", text):
            return At(sequence=int(text, 0))
        if m := _OFFSET.fullmatch(text):
            return At(offset_ns=_digits_ns(m[1], m[2], _UNITS[m[3]]))
        if m := _ISO.fullmatch(text):
            zone = "+00:00" if m[4] == "Z" else m[4]
            when = datetime.fromisoformat(f"{m[1]}T{m[2]}{zone}")
            return At(unix_ns=_timedelta_ns(when - _EPOCH) + _digits_ns("0", m[3], 10**9))
    except LaneError as exc:  # At's own: a moment outside what it holds
        raise _at_error(f"{value!r}: {str(exc).removeprefix(_AT_PREFIX)}") from None
    except ValueError as exc:  # a date that does not exist, a number past u64
        raise _at_error(f"{value!r}: {exc}") from None
    raise _at_error(
        f"{value!r} is neither a sequence (digits), an offset after the first message (+90s) "
        "nor an ISO 8601 time with a zone (2026-11-30T12:00:00Z)"
    )


# ------------------------------------------------------------------------------------ views


@dataclass(frozen=True, slots=True)
class ViewLane:
    """One lane of a consumer table at the moment, and where its words came from. ``producer``: the
    generation held (ready) or the catalog's; ``sequence``, ``time_unix_ns`` (receive time of the
    message that made it), ``stream_id``: None when not ready; ``session``: snapshot sessions from 1
    (the lease's ``assignment_epoch``); ``why``: why not ready; ``touched_unix_ns``: receive time of
    the last install, delta or heartbeat; ``stale``: over ``max_age`` since (None: unjudged)."""

    lane: int
    pool: PoolId
    producer: ProducerIdentity | None
    ready: bool
    sequence: int | None = None
    time_unix_ns: int | None = None
    stream_id: int | None = None
    session: int | None = None
    why: str = ""
    touched_unix_ns: int | None = None
    stale: bool | None = None

    def __repr__(self) -> str:
        state = f"ready at {self.sequence}" if self.ready else f"not ready ({self.why})"
        if self.stale:
            state += ", stale"
        return f"<ViewLane {self.lane}: pool {self.pool}, {state}>"

    @property
    def producer_text(self) -> str | None:
        """The producer generation as ``incarnation.generation`` (hex incarnation)."""
        p = self.producer
        return None if p is None else f"{p.producer_incarnation:x}.{p.layout_generation}"

    def note(self, now_unix_ns: int | None) -> str:
        """Why the lane is not ready, or that it is stale (and since when), or nothing."""
        if not self.ready:
            return self.why.removeprefix("not ready: ")
        if self.stale and now_unix_ns is not None and self.touched_unix_ns is not None:
            return f"stale: last message {(now_unix_ns - self.touched_unix_ns) / 1e9:.1f} s before"
        return ""

    def to_dict(self) -> dict[str, object]:
        """The lane as JSON-ready data (``cbi1kit view --json``): u64 identities as hex."""
        p = self.producer
        return {
            "lane": self.lane,
            "pool": str(self.pool),
            **dc_fields(self.pool.dc_id.value),
            "producer": None
            if p is None
            else {
                "producer_incarnation": f"0x{p.producer_incarnation:016x}",
                "layout_generation": p.layout_generation,
            },
            "ready": self.ready,
            "sequence": self.sequence,
            "time_unix_ns": self.time_unix_ns,
            "time": _time_text(self.time_unix_ns),
            "stream_id": self.stream_id,
            "session": self.session,
            "why": self.why,
            "last_message_unix_ns": self.touched_unix_ns,
            "stale": self.stale,
        }


@dataclass(slots=True, eq=False)
class DomainView:
    """One indexer domain's consumer table (``table``) and its lanes' provenance."""

    indexer_domain: IndexerDomainId
    table: CkfLaneTable
    lanes: list[ViewLane]

    def __repr__(self) -> str:
        ready = sum(n.ready for n in self.lanes)
        return f"<DomainView {self.indexer_domain}: {len(self.lanes)} lane(s), {ready} ready>"

    def to_dict(self) -> dict[str, object]:
        """The domain's table and lanes as JSON-ready data."""
        fmt = self.table.format
        return {
            "indexer_domain": str(self.indexer_domain),
            "seed": f"0x{fmt.seed:016x}",
            "bucket_count": fmt.bucket_count,
            "configured_lanes": self.table.configured_lanes,
            "ready_lanes": self.table.ready_mask(),
            "lanes": [n.to_dict() for n in self.lanes],
        }

    def text(self, now_unix_ns: int | None = None) -> str:
        """A heading with the table's format and ready mask, then a row per lane."""
        t, fmt = self.table, self.table.format
        head = wrapped(
            f"-- indexer domain {self.indexer_domain}: seed 0x{fmt.seed:016x}, "
            f"{fmt.bucket_count} buckets, {len(self.lanes)} lane(s), "
            f"ready {t.ready_mask():#06x} of {t.configured_lanes:#06x}"
        )
        rows = [
            (
                n.lane,
                dc_text(n.pool.dc_id.value),
                n.producer_text or "-",
                "yes" if n.ready else "no",
                "-" if n.sequence is None else n.sequence,
                _time_text(n.time_unix_ns) or "-",
                "-" if n.stream_id is None else n.stream_id,
                f"{_load(t.lane_words(n.lane)):.4f}" if n.ready else "-",
                n.note(now_unix_ns),
            )
            for n in self.lanes
        ]
        return head + "\n" + table(rows, _LANE_COLUMNS)


@dataclass(slots=True, eq=False)
class GlobalView:
    """Upstream's consumer tables at ``at`` (resolved to ``unix_ns`` for a time): one per
    indexer domain of the model's pools. ``catalogs`` are the catalog revisions it used (per
    relay target); ``skipped`` the pools left out, and why (``None``: a lane of frames without a
    producer identity, such as bare CBI1 frames, which no indexer domain holds). ``max_age_ns``
    is the scorer's ``overlap_max_age`` the lanes' staleness was judged by (None: not judged),
    at ``now_unix_ns`` (the moment's time; the capture's last record without a moment)."""

    model: str | None
    at: At | None
    unix_ns: int | None
    domains: list[DomainView]
    catalogs: list[PoolCatalog] = field(default_factory=list)
    skipped: list[tuple[PoolId | None, str]] = field(default_factory=list)
    max_age_ns: int | None = None
    now_unix_ns: int | None = None

    def __repr__(self) -> str:
        when = "" if self.at is None else f" at {self.at}"
        return (
            f"<GlobalView {self.model or 'of every model'}{when}: {len(self.domains)} indexer "
            f"domain(s), {len(self.lanes)} lane(s), {len(self.skipped)} pool(s) skipped>"
        )

    def __str__(self) -> str:
        return self.text()

    @property
    def when(self) -> str:
        """The moment in words: ``at the end of every lane``, ``at 120``, ``at +90s (...)``."""
        if self.at is None:
            return "at the end of every lane"
        if self.unix_ns is not None and self.at.unix_ns is None:
            return f"at {self.at} ({format_unix_ns(self.unix_ns)})"
        return f"at {self.at}"

    def text(self) -> str:
        """The view as ``cbi1kit view`` prints it: the catalogs, a table per domain, the
        pools left out and why."""
        what = "every pool" if self.model is None else f"model {self.model!r}"
        out = [wrapped(f"the global view of {what} {self.when}")]
        out += [f"catalog revision {c.revision}: {len(c.pools)} pool(s)" for c in self.catalogs]
        if not self.domains:  # no pool at all, or none placeable at this moment (skipped below)
            out.append(
                f"no lane: none of its {len(self.skipped)} pool(s) can be placed {self.when}"
                if self.skipped
                else "no lane: the capture holds no pool"
            )
        out += ["\n" + d.text(self.now_unix_ns) for d in self.domains]
        out += [f"skipped {'a lane' if p is None else p}: {why}" for p, why in self.skipped]
        return "\n".join(out)

    def to_dict(self) -> dict[str, object]:
        """The view as JSON-ready data (``cbi1kit view --json``): u64 identities as hex."""
        return {
            "model": self.model,
            "at": None if self.at is None else str(self.at),
            "unix_ns": self.unix_ns,
            "max_age_ns": self.max_age_ns,
            "catalog_revisions": [c.revision for c in self.catalogs],
            "domains": [d.to_dict() for d in self.domains],
            "skipped": [[None if p is None else str(p), why] for p, why in self.skipped],
        }

    @property
    def table(self) -> CkfLaneTable:
        """The one domain's table; ``LaneError`` ``SeveralDomains`` when the model's pools
        span several (one table per domain: pick one in ``domains``)."""
        if len(self.domains) == 1:
            return self.domains[0].table
        names = ", ".join(str(d.indexer_domain) for d in self.domains) or "none"
        raise LaneError(
            LaneVariant.SeveralDomains,
            message=f"the view has {len(self.domains)} indexer domains ({names}): one consumer "
            "table each, pick one in view.domains",
        )

    @property
    def lanes(self) -> list[ViewLane]:
        """Every lane of every indexer domain, in order."""
        return [lane for d in self.domains for lane in d.lanes]

    def to_frame(self) -> pl.DataFrame:
        """Every lane of every domain, u64 identities as hex strings."""
        rows = []
        for d in self.domains:
            for n in d.lanes:
                words = d.table.lane_words(n.lane)
                rows.append(
                    {
                        "domain": str(d.indexer_domain),
                        "lane": n.lane,
                        **dc_fields(n.pool.dc_id.value),
                        "producer": n.producer_text,
                        "ready": n.ready,
                        "sequence": n.sequence,
                        "time": _time_text(n.time_unix_ns),
                        "stream": n.stream_id,
                        "session": n.session,
                        "load_factor": _load(words) if n.ready else None,
                        "why": n.why,
                        "last_message": _time_text(n.touched_unix_ns),
                        "stale": n.stale,
                    }
                )
        return pl.DataFrame(
            rows,
            schema={
                "domain": pl.String,
                "lane": pl.UInt8,
                "dc_id": pl.String,
                "dc_name": pl.String,
                "producer": pl.String,
                "ready": pl.Boolean,
                "sequence": pl.UInt64,
                "time": pl.String,
                "stream": pl.UInt32,
                "session": pl.UInt32,
                "load_factor": pl.Float64,
                "why": pl.String,
                "last_message": pl.String,
                "stale": pl.Boolean,
            },
        )


def _load(words: npt.NDArray[np.uint64]) -> float:
    return lane_occupancy(words) / (4 * max(1, int(words.shape[0])))


# ----------------------------------------------------------------------------- construction


def _catalogs_at(report: ReplayReport, unix_ns: int | None) -> list[PoolCatalog]:
    """Each relay target's newest valid catalog received at or before ``unix_ns`` (the newest
    of all without a time); a catalog that breaks the contract is one a consumer drops."""
    newest: dict[object, PoolCatalog] = {}
    for rec in report.catalogs:
        if unix_ns is not None and rec.recv_unix_ns > unix_ns:
            break
        info = report.streams.get(rec.stream_id)
        target = info.opened.target if info is not None and info.opened is not None else None
        try:
            newest[target or rec.stream_id] = catalog_from_wire(rec.update)
        except Cbi1kitError:
            continue
    return list(newest.values())


@dataclass(slots=True)
class _Entry:
    pool: PoolId
    descriptor: PoolDescriptor | None
    lane: LaneReport | None


def _entries(
    report: ReplayReport, catalogs: Sequence[PoolCatalog], model: str | None
) -> list[_Entry]:
    """The view's pools in lane order: the catalogs' (those serving ``model``), then, without a
    model, the replayed pools no catalog names."""
    replayed = {lane.pool: lane for lane in report.lanes if lane.pool is not None}
    out: dict[PoolId, _Entry] = {}
    for catalog in catalogs:
        for desc in catalog.pools:
            pool = desc.producer.pool_id
            if pool not in out and (model is None or desc.serves(model)):
                out[pool] = _Entry(pool, desc, replayed.get(pool))
    if model is not None and not out:
        served = sorted({r.model.value for c in catalogs for d in c.pools for r in d.registrations})
        raise IdentityError(
            IdentityVariant.UnknownModel,
            f"no pool of the capture's catalog serves model {model!r} "
            f"(models: {', '.join(served) or '-'})",
            field="model",
            value=model,
        )
    if model is None:
        for pool, lane in replayed.items():
            out.setdefault(pool, _Entry(pool, None, lane))
    return list(out.values())


@dataclass(slots=True)
class _State:
    """What one lane holds at the moment (``segment`` None: not ready, ``why`` says why)."""

    producer: ProducerIdentity | None
    segment: _Segment | None = None
    session: int | None = None
    sequence: int | None = None
    time_unix_ns: int | None = None
    why: str = ""


def _time_of(seg: _Segment, sequence: int) -> int | None:
    if not seg.timed:
        return None
    if sequence == seg.sequence:
        return seg.installed_unix_ns
    return seg.delta_unix_ns[sequence - seg.sequence - 1]


def _state(
    lane: LaneReport | None, descriptor: PoolDescriptor | None, at: At | None, unix_ns: int | None
) -> _State:
    """What ``lane`` (the pool the catalog's ``descriptor`` describes, if any) holds at the
    moment: its session and sequence, or why it is not ready."""
    catalog = None if descriptor is None else descriptor.producer
    if lane is None or not lane._segments:
        return _State(catalog, why="not ready: no subscription of the pool installed a snapshot")
    segments = lane._segments
    if at is None:
        seg, sequence = segments[-1], segments[-1].last_sequence
        if seg.faulted:
            return _State(catalog, why=f"not ready: {seg.ended_by}")
    elif at.sequence is not None:
        try:
            seg = lane._segment_of(at.sequence)
        except LaneError as exc:
            return _State(catalog, why=f"not ready: {exc}")
        sequence = at.sequence
    else:
        assert unix_ns is not None
        found = lane._point_at(unix_ns)
        if isinstance(found, str):
            return _State(catalog, why=found)
        seg, sequence = found
    producer = _producer(seg.producer)
    return _State(
        producer, seg, segments.index(seg) + 1, sequence, _time_of(seg, sequence), "ready"
    )


def _format(states: Sequence[_State]) -> DcCkfFormatIdentity | None:
    """The manifest's format: the first ready lane's, else the first the catalog names."""
    ready = [s.producer for s in states if s.segment is not None and s.producer is not None]
    known = ready or [s.producer for s in states if s.producer is not None]
    return known[0].format if known else None


def resolve_moment(report: ReplayReport, at: Any) -> tuple[At | None, int | None]:
    """``at`` parsed, and the wall clock it names (None for a sequence or no moment): an
    offset counts from the report's first message (``LaneError`` ``TimeNotRecorded`` when the
    source has no receive times)."""
    point = parse_at(at)
    if point is None or point.sequence is not None:
        return point, None
    if point.unix_ns is not None:
        return point, point.unix_ns
    assert point.offset_ns is not None
    if report.first_unix_ns is None:
        raise LaneError(
            LaneVariant.TimeNotRecorded,
            message="the source has no receive times: ask for a sequence instead",
        )
    return point, report.first_unix_ns + point.offset_ns


def lane_at_moment(
    report: ReplayReport, lane: LaneReport, at: Any
) -> tuple[int | None, Words | None, str | None]:
    """The sequence and words ``lane`` of ``report`` held at ``at`` (a sequence, a time or an
    offset; None: its final ones), and None; ``(None, None, why)`` at a time it was not ready
    (``why``: "not ready: stream 4 closed ..."). A sequence not replayed is ``lane_at``'s
    ``LaneError``."""
    point, unix_ns = resolve_moment(report, at)
    if point is None:
        return lane.final_sequence, lane.final_lane, None
    if point.sequence is not None:
        return point.sequence, lane.lane_at(point.sequence), None
    assert unix_ns is not None
    found = lane._point_at(unix_ns)
    if isinstance(found, str):
        return None, None, found
    return found[1], lane._words(*found), None


def _model_catalogs(
    report: ReplayReport, model: str | None, unix_ns: int | None
) -> list[PoolCatalog]:
    """The catalogs at ``unix_ns``; ``LaneError`` ``NoCatalog`` when a model is asked for and
    none had been received (no pool is known to serve it)."""
    catalogs = _catalogs_at(report, unix_ns)
    if model is not None and not catalogs:
        when = "" if unix_ns is None else f" received by {format_unix_ns(unix_ns)}"
        held = f"no valid catalog update{when}" if report.catalogs else "no catalog stream"
        raise LaneError(
            LaneVariant.NoCatalog,
            message=f"the capture holds {held}, so no pool is known to serve {model!r}: "
            "view every lane without a model",
        )
    return catalogs


def model_pools(report: ReplayReport, model: str) -> frozenset[PoolId]:
    """The pools the capture's newest catalogs advertise for ``model`` (a model or alias):
    what ``--model`` narrows a lane to. ``LaneError`` ``NoCatalog`` without a catalog,
    ``IdentityError`` ``UnknownModel`` when no pool serves it."""
    return frozenset(e.pool for e in _entries(report, _model_catalogs(report, model, None), model))


def max_age_ns(value: float | timedelta | None) -> int | None:
    """The scorer's ``overlap_max_age`` (seconds or a ``timedelta``) in ns; upstream takes no
    default and refuses zero (``GlobalViewRuntime::new``), so ``LaneError`` ``MaxAge`` for a
    duration that is not positive."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        ns = _timedelta_ns(value)
    elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        ns = round(value * 1e9)
    else:
        ns = 0
    if ns <= 0:
        raise LaneError(
            LaneVariant.MaxAge,
            message=f"max_age is the scorer's overlap_max_age: a positive duration in "
            f"seconds or a timedelta, got {value!r}",
        )
    return ns


def _staleness(st: _State, now: int | None, limit: int | None) -> tuple[int | None, bool | None]:
    """A ready lane's last message by ``now`` and whether it is stale (scorer.rs: elapsed
    since ``received_at`` > ``max_age``, strictly)."""
    if st.segment is None or now is None:
        return None, None
    touched = st.segment.touched_at(now)
    if touched is None or limit is None:
        return touched, None
    return touched, now - touched > limit


def build_global_view(
    report: ReplayReport,
    *,
    model: str | None = None,
    at: Any = None,
    max_age: float | timedelta | None = None,
) -> GlobalView:
    """The consumer tables of ``report`` at ``at`` (see the module docstring). The manifest's
    rules are :class:`~cbi1kit.ckf.CkfLaneTable`'s: more than 16 pools of one domain is
    ``LaneError`` ``Manifest.InvalidLane``, a lane of another format ``Assignment.WrongFormat``.
    ``model`` without a catalog by then is ``LaneError`` ``NoCatalog``; a model no catalog
    pool serves is ``IdentityError`` ``UnknownModel``. With ``max_age`` (the scorer's
    ``overlap_max_age``) each ready lane is judged stale or not at the moment's time."""
    limit = max_age_ns(max_age)
    point, unix_ns = resolve_moment(report, at)
    catalogs = _model_catalogs(report, model, unix_ns)
    now = report.last_unix_ns if point is None else unix_ns
    view = GlobalView(model, point, unix_ns, [], catalogs, max_age_ns=limit, now_unix_ns=now)
    by_domain: dict[IndexerDomainId, list[tuple[_Entry, _State]]] = {}
    for entry in _entries(report, catalogs, model):
        by_domain.setdefault(entry.pool.indexer_domain, []).append(
            (entry, _state(entry.lane, entry.descriptor, point, unix_ns))
        )
    for domain, members in by_domain.items():
        fmt = _format([s for _, s in members])
        if fmt is None:
            why = "no format known by then: no snapshot installed, no catalog received"
            view.skipped += [(entry.pool, why) for entry, _ in members]
            continue
        view.domains.append(_domain_view(domain, fmt, members, now, limit))
    if model is None:  # a lane a router cannot place: said, not dropped
        view.skipped += [(None, _unplaced(lane)) for lane in report.lanes if lane.pool is None]
    return view


def _domain_view(
    domain: IndexerDomainId,
    fmt: DcCkfFormatIdentity,
    members: list[tuple[_Entry, _State]],
    now: int | None,
    limit: int | None,
) -> DomainView:
    """One domain's consumer table: each member a lane, its words installed where ready."""
    table = CkfLaneTable(
        fmt,
        pools={i: e.pool for i, (e, _) in enumerate(members)},
        indexer_domain=domain,
        consumer_instance=VIEW_CONSUMER,
    )
    return DomainView(
        domain,
        table,
        [_view_lane(table, i, e, st, now, limit) for i, (e, st) in enumerate(members)],
    )


def _view_lane(
    table: CkfLaneTable, i: int, entry: _Entry, st: _State, now: int | None, limit: int | None
) -> ViewLane:
    """Lane ``i``: leased and installed from the session's words when ready; its staleness."""
    ready = st.segment is not None and st.producer is not None
    if not ready:
        return ViewLane(i, entry.pool, st.producer, False, why=st.why)
    assert st.producer is not None and st.session is not None and st.segment is not None
    assert st.sequence is not None and entry.lane is not None
    lease = LaneLease(VIEW_CONSUMER, i, st.session)
    replica = table.replica(i)
    replica.assign(st.producer, lease)
    words = entry.lane._words(st.segment, st.sequence)
    replica.install_snapshot(DcCkfSnapshot(st.producer, lease, st.sequence, words))
    touched, stale = _staleness(st, now, limit)
    return ViewLane(
        i,
        entry.pool,
        st.producer,
        True,
        st.sequence,
        st.time_unix_ns,
        st.segment.stream_id,
        st.session,
        st.why,
        touched,
        stale,
    )


def _unplaced(lane: LaneReport) -> str:
    """Why a lane of frames without a producer identity is in no consumer table."""
    return (
        f"the lane of DC {dc_text(lane.dc_id)}: frames without a producer identity (bare CBI1 "
        "frames), so no indexer domain holds it; `cbi1kit stats` shows it"
    )


def build_timeline(
    report: ReplayReport, *, model: str | None = None, points: int = 24
) -> pl.DataFrame:
    """The global view at ``points`` evenly spaced receive times, from the capture's first
    message to its last, as one table: every lane of ``GlobalView.to_frame`` with the moment's
    ``offset_s`` (seconds after the first message) and ``at`` (ISO time): each moment reads
    the lanes back from the replay's history. With a ``model``, the moments start at the first
    catalog (a pool's frames may arrive before it: no pool was known to serve it then)."""
    if not 2 <= points <= 1000:
        raise _at_error(f"points {points} is outside 2..1000")
    first = report.first_unix_ns
    if first is None:
        raise LaneError(LaneVariant.TimeNotRecorded, message="the source has no receive times")
    last = max(
        (s.last_unix_ns or first for lane in report.lanes for s in lane.sessions), default=first
    )
    start = first
    if model is not None and report.catalogs:
        start = min(max(first, report.catalogs[0].recv_unix_ns), last)
    frames = []
    for i in range(points):
        unix_ns = start + (last - start) * i // (points - 1)
        frame = build_global_view(report, model=model, at=At(unix_ns=unix_ns)).to_frame()
        frames.append(
            frame.with_columns(
                pl.lit((unix_ns - first) / 1e9).alias("offset_s"),
                pl.lit(format_unix_ns(unix_ns)).alias("at"),
            )
        )
    return pl.concat(frames)
