"""Two lanes, bucket by bucket: what differs between the words of two captures, two DCs of one
capture, one lane at two moments, or a producer's lane and what its consumer holds (the question a
capacity hole or a lagging stream raises).

Words are absolute bucket images, so a bucket differs when its words do, and what changed in it is
the fingerprints one side holds and the other does not, as multisets. See docs/tables.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, cast

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from cbi1kit.analysis._explain import _plain
from cbi1kit.analysis._global import (
    At,
    Moment,
    _entries,
    _model_catalogs,
    _state,
    _time_of,
    format_unix_ns,
    resolve_moment,
)
from cbi1kit.analysis._replay import LaneReport, ReplayReport, lane_matcher
from cbi1kit.analysis._schema import DIFF_SCHEMA
from cbi1kit.ckf._bucket import lane_occupancy, lane_slots
from cbi1kit.ckf._lane import DcCkfSnapshot
from cbi1kit.errors import CaptureError, CaptureVariant, LaneError, LaneVariant
from cbi1kit.hashing._dc_names import dc_fields, dc_text
from cbi1kit.hashing._pools import DcId, PoolId
from cbi1kit.relay._messages import PoolDescriptor
from cbi1kit.relay._publication import HubSnapshot
from cbi1kit.wire._assembly import AssembledSnapshot

Words = npt.NDArray[np.uint64]
#: the first bytes of every .npy file
NPY_MAGIC: Final = b"\x93NUMPY"
_SHOWN: Final = 20  # rows ``str()`` lists


class Producer(Protocol):
    """A producer whose lane is read now (``DcCkfState``)."""

    def words(self) -> Words:
        """The lane's words."""
        ...


class ProducerFleet(Protocol):
    """Producers by DC index (a ``Simulator``)."""

    @property
    def config(self) -> Any:
        """The fleet's configuration (its ``dcs``)."""
        ...

    @property
    def format(self) -> Any:
        """The producers' CKF format (its ``seed``)."""
        ...

    def words(self, dc: int) -> Words:
        """DC ``dc``'s producer words."""
        ...

    def lane_words(self, dc: int) -> Words:
        """What DC ``dc`` published."""
        ...


#: what a side of :func:`diff` may be (see its docstring)
LaneSource = (
    str
    | os.PathLike[str]
    | ReplayReport
    | Words
    | DcCkfSnapshot
    | HubSnapshot
    | AssembledSnapshot
    | Producer
    | ProducerFleet
)
#: a DC as ``diff`` and ``explain`` take it: an id, a ``DcId``, 16 hex digits or a DC name
DcName = int | str | DcId


@dataclass(frozen=True, slots=True)
class LaneSide:
    """One side of a diff: what its words are (``source``: a capture's name, ``array``,
    ``snapshot``, ``producer``) and where they came from: the format (``seed`` None where the
    source does not say: an array), the DC and pool, the sequence and its receive time, the
    stream and the moment asked for; ``ok`` is False when the capture broke a consumer rule."""

    source: str
    bucket_count: int
    seed: int | None = None
    dc_id: int | None = None
    pool: PoolId | None = None
    sequence: int | None = None
    unix_ns: int | None = None
    stream_id: int | None = None
    at: At | None = None
    ok: bool = True

    def __str__(self) -> str:
        parts = [self.source]
        if self.dc_id is not None:
            parts.append(f"DC {dc_text(self.dc_id)}")
        if self.sequence is not None:
            parts.append(f"sequence {self.sequence}")
        if self.unix_ns is not None:
            parts.append(format_unix_ns(self.unix_ns))
        return ", ".join(parts)

    def to_dict(self) -> dict[str, object]:
        """The side as JSON-ready values (u64 in hex)."""
        return {
            "source": self.source,
            "seed": None if self.seed is None else f"0x{self.seed:016x}",
            "bucket_count": self.bucket_count,
            **dc_fields(self.dc_id),
            "pool": None if self.pool is None else str(self.pool),
            "sequence": self.sequence,
            "unix_ns": self.unix_ns,
            "time": None if self.unix_ns is None else format_unix_ns(self.unix_ns),
            "stream_id": self.stream_id,
            "at": None if self.at is None else str(self.at),
            "ok": self.ok,
        }


@dataclass(frozen=True, slots=True, eq=False)
class LaneDiff:
    """Lane ``a`` against lane ``b``: ``table`` (``DIFF_SCHEMA``) has a row per bucket whose
    words differ, in bucket order, with the fingerprints ``b`` lacks (``removed``) and holds
    anew (``added``); ``occupied_a`` / ``occupied_b`` count each lane's occupied slots."""

    a: LaneSide
    b: LaneSide
    table: pl.DataFrame
    occupied_a: int
    occupied_b: int

    @property
    def bucket_count(self) -> int:
        """Buckets in each lane (both sides have one format)."""
        return self.a.bucket_count

    @property
    def differing_buckets(self) -> int:
        """Buckets whose words differ (the rows of ``table``)."""
        return self.table.height

    @property
    def fingerprints_added(self) -> int:
        """Fingerprints ``b`` holds anew, over every differing bucket."""
        return int(self.table["added"].list.len().sum() or 0)

    @property
    def fingerprints_removed(self) -> int:
        """Fingerprints ``b`` lacks, over every differing bucket."""
        return int(self.table["removed"].list.len().sum() or 0)

    @property
    def same(self) -> bool:
        """No bucket differs: the lanes are word for word equal."""
        return self.table.height == 0

    def to_dict(self, limit: int | None = None) -> dict[str, object]:
        """JSON-ready, u64 words and fingerprints as hex; the first ``limit`` buckets listed."""
        shown = self.table if limit is None else self.table.head(limit)
        return {
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "bucket_count": self.bucket_count,
            "differing_buckets": self.differing_buckets,
            "fingerprints_added": self.fingerprints_added,
            "fingerprints_removed": self.fingerprints_removed,
            "occupied_slots_a": self.occupied_a,
            "occupied_slots_b": self.occupied_b,
            "buckets": [
                {
                    "bucket": bucket,
                    "word_a": f"0x{wa:016x}",
                    "word_b": f"0x{wb:016x}",
                    "removed": [f"0x{f:04x}" for f in removed],
                    "added": [f"0x{f:04x}" for f in added],
                }
                for bucket, wa, wb, removed, added in shown.iter_rows()
            ],
            "shown": shown.height,
        }

    def render(self, limit: int | None = _SHOWN) -> RenderableType:
        """The diff for a terminal: both sides, the counts, the first ``limit`` buckets."""
        return Group(*self._parts(limit))

    def __rich__(self) -> RenderableType:
        return self.render()

    def text(self, limit: int | None = _SHOWN) -> str:
        """:meth:`render` as plain text (what the CLI prints)."""
        return _plain(self.render(limit))

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        """One line of key figures (``str()`` is the whole diff)."""
        return (
            f"<LaneDiff {self.a.source} vs {self.b.source}: {self.differing_buckets:,} of "
            f"{self.bucket_count:,} buckets differ, {self.fingerprints_removed:,} fingerprint(s) "
            f"removed, {self.fingerprints_added:,} added>"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """A notebook shows the diff, not the dataclass."""
        printer.text(self.text())

    def _parts(self, limit: int | None) -> Iterable[RenderableType]:
        seed = self.a.seed if self.a.seed is not None else self.b.seed
        fmt = "seed unknown" if seed is None else f"seed 0x{seed:016x}"
        yield Text(f"== diff: a = {self.a}\n         b = {self.b}", style="bold")
        yield Text(f"{fmt}, {self.bucket_count} buckets")
        if self.same:
            yield Text("the lanes are equal: no bucket differs")
            return
        yield Text(
            f"{self.differing_buckets} bucket(s) differ: {self.fingerprints_added} fingerprint(s) "
            f"added, {self.fingerprints_removed} removed (occupied slots {self.occupied_a} → "
            f"{self.occupied_b})"
        )
        rows = self.table if limit is None else self.table.head(limit)
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for name in ("bucket", "word a", "word b", "removed", "added"):
            table.add_column(name, no_wrap=True)
        for bucket, wa, wb, removed, added in rows.iter_rows():
            table.add_row(
                str(bucket),
                f"{wa:016x}",
                f"{wb:016x}",
                " ".join(f"{f:04x}" for f in removed) or "-",
                " ".join(f"{f:04x}" for f in added) or "-",
            )
        yield table
        if rows.height < self.table.height:
            yield Text(f"… {self.table.height - rows.height} more bucket(s)")


# -------------------------------------------------------------------------------- sides


def _not_a_lane(what: str, reason: str) -> LaneError:
    return LaneError(LaneVariant.NotALane, message=f"{what} is not a lane's words: {reason}")


def _words(array: Any, what: str) -> Words:
    """A lane's words: a 1-D array of unsigned 64-bit words (any byte order), never converted
    from a float or signed type."""
    arr = np.asarray(array)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise _not_a_lane(what, f"shape {arr.shape}, expected one word per bucket (1-D)")
    if arr.dtype.kind != "u" or arr.dtype.itemsize != 8:
        raise _not_a_lane(what, f"dtype {arr.dtype}, expected unsigned 64-bit words")
    return arr.astype(np.uint64, copy=False)


def _is_npy(path: Path) -> bool:
    """A ``.npy`` file by name or by its first bytes (an unreadable path is replay's to
    report)."""
    if path.suffix == ".npy":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(len(NPY_MAGIC)) == NPY_MAGIC
    except OSError:
        return False


def load_lane(path: str | os.PathLike[str]) -> Words:
    """A lane's words saved with ``numpy.save`` (no pickles): ``CaptureError`` ``Npy`` when the
    file is no ``.npy`` numpy reads, ``LaneError`` ``NotALane`` when it holds no lane."""
    p = Path(path)
    with open(p, "rb") as f:  # OSError (missing, a directory, ...) goes through
        head = f.read(len(NPY_MAGIC))
    if head != NPY_MAGIC:
        raise CaptureError(
            CaptureVariant.Npy,
            message=f"{p}: not a .npy file (it starts with {head!r})",
            source=str(p),
        )
    try:
        array = np.load(p, allow_pickle=False)
    except (ValueError, EOFError) as exc:
        raise CaptureError(
            CaptureVariant.Npy,
            message=f"{p}: not a .npy array numpy can read ({exc})",
            source=str(p),
        ) from None
    return _words(array, str(p))


_Candidate = tuple[PoolId | None, PoolDescriptor | None, LaneReport | None]


def _capture_side(
    report: ReplayReport, label: str, *, dc: Any, model: str | None, at: Moment
) -> tuple[LaneSide, Words]:
    """The lane of DC ``dc`` (among the catalog's pools for ``model``) at ``at``, as the global
    view resolves it."""
    point, unix_ns = resolve_moment(report, at)
    candidates: list[_Candidate]
    if model is not None:
        catalogs = _model_catalogs(report, model, unix_ns)
        candidates = [(e.pool, e.descriptor, e.lane) for e in _entries(report, catalogs, model)]
    else:
        candidates = [(lane.pool, None, lane) for lane in report.lanes]
    known = ", ".join(_dc_name(c) for c in candidates) or "none"
    if dc is not None:
        names = lane_matcher(dc)
        candidates = [c for c in candidates if names(c[0], _dc_of(c))]
    if len(candidates) != 1:
        if not candidates:
            broken = report.violations[:1]
            why = f"; the source: {broken[0].reason}" if broken and not report.lanes else ""
            raise LaneError(
                LaneVariant.NoSuchLane,
                message=f"{label}: no lane matches (lanes: {known}){why}",
                available=known,
            )
        named = ", ".join(_dc_name(c) for c in candidates)
        raise LaneError(
            LaneVariant.SeveralLanes,
            message=f"{label}: {len(candidates)} lanes match ({named}): pick one by its DC",
            available=known,
        )
    pool, descriptor, lane = candidates[0]
    st = _state(lane, descriptor, point, unix_ns)
    if st.segment is None or lane is None or st.sequence is None:
        moment = "at the end" if point is None else f"at {point}"
        raise LaneError(
            LaneVariant.NotReady,
            message=f"{label}: {_lane_name(candidates[0])} {moment} is {st.why}",
        )
    seg = st.segment
    side = LaneSide(
        label,
        seg.bucket_count,
        seg.seed,
        _dc_of(candidates[0]),
        pool,
        st.sequence,
        _time_of(seg, st.sequence),
        seg.stream_id,
        point,
        report.ok,
    )
    return side, lane._words(seg, st.sequence)


def _dc_of(candidate: _Candidate) -> int | None:
    pool, _, lane = candidate
    if pool is not None:
        return pool.dc_id.value
    return None if lane is None else lane.dc_id


def _lane_name(candidate: _Candidate) -> str:
    value = _dc_of(candidate)
    return "its lane (no DC known)" if value is None else f"the lane of DC {value:016x}"


def _dc_name(candidate: _Candidate) -> str:
    value = _dc_of(candidate)
    return "a lane without a DC" if value is None else f"DC {value:016x}"


def capture_side(source: object) -> bool:
    """Whether a diff side is a capture to replay: a path that is no ``.npy`` lane."""
    return isinstance(source, (str, os.PathLike)) and not _is_npy(Path(source))


def _side(
    source: LaneSource, *, dc: DcName | None, model: str | None, at: Moment, label: str | None
) -> tuple[LaneSide, Words]:
    """One side's words and where they came from, named ``label`` (or after its source)."""
    if isinstance(source, ReplayReport):
        return _capture_side(source, label or "the replay", dc=dc, model=model, at=at)
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not _is_npy(path):  # cbi1kit.diff replays a capture path first
            raise TypeError(f"{path}: a capture to replay first (cbi1kit.diff does)")
        words = load_lane(path)
        return LaneSide(label or path.name, int(words.shape[0])), words
    if isinstance(source, (DcCkfSnapshot, HubSnapshot)):
        name = label or "snapshot"
        words = _words(source.buckets, name)
        ident = source.identity
        side = LaneSide(
            name,
            ident.format.bucket_count,
            ident.format.seed,
            ident.pool_id.dc_id.value,
            ident.pool_id,
            source.sequence,
        )
        return _checked(side, words), words
    if isinstance(source, AssembledSnapshot):
        name = label or "snapshot"
        words = _words(source.words, name)
        return LaneSide(name, source.bucket_count, sequence=source.epoch), words
    if hasattr(source, "lane_words") and hasattr(source, "config"):  # a Simulator's producer
        fleet = cast(ProducerFleet, source)
        dcs = int(fleet.config.dcs)
        if isinstance(dc, bool) or not isinstance(dc, int) or not 0 <= dc < dcs:
            raise LaneError(
                LaneVariant.NoSuchLane,
                message=f"a simulator's lane is named by its DC index 0..{dcs - 1} "
                f"(dc=), got {dc!r}",
            )
        name = label or f"simulator DC {dc}"
        words = _words(fleet.words(dc), name)
        side = LaneSide(name, int(words.shape[0]), int(fleet.format.seed))
        return _checked(side, words), words
    if isinstance(source, np.ndarray):
        name = label or "array"
        words = _words(source, name)
        return LaneSide(name, int(words.shape[0])), words
    if callable(getattr(source, "words", None)):
        return _producer_side(source, label or "producer")
    raise _not_a_lane(
        type(source).__name__, "expected a capture, a .npy file, an array, a snapshot or a producer"
    )


def _producer_side(producer: Producer, label: str) -> tuple[LaneSide, Words]:
    words = _words(producer.words(), label)
    fmt = getattr(producer, "format", None)
    seed = None if fmt is None else int(fmt.seed)
    return _checked(LaneSide(label, int(words.shape[0]), seed), words), words


def _checked(side: LaneSide, words: Words) -> LaneSide:
    if words.shape[0] != side.bucket_count:
        raise _not_a_lane(
            side.source, f"{words.shape[0]} words for a format of {side.bucket_count} buckets"
        )
    return side


# ----------------------------------------------------------------------------- comparison


def _minus(x: npt.NDArray[np.uint16], y: npt.NDArray[np.uint16]) -> npt.NDArray[np.bool_]:
    """Which slots of ``x`` (rows of 4) hold a fingerprint ``y``'s row lacks, as multisets:
    the k-th copy of a value in a row is kept when ``y``'s row holds it at most k times."""
    in_y = (x[:, :, None] == y[:, None, :]).sum(axis=2)
    rank = np.zeros(x.shape, dtype=np.int64)
    for j in range(1, x.shape[1]):
        rank[:, j] = (x[:, :j] == x[:, j : j + 1]).sum(axis=1)
    kept: npt.NDArray[np.bool_] = (x != 0) & (rank >= in_y)
    return kept


def _lists(slots: npt.NDArray[np.uint16], kept: npt.NDArray[np.bool_]) -> pl.Series:
    """Each row's kept slots as a list column (built from offsets, no per-row Python)."""
    offsets = np.zeros(slots.shape[0] + 1, dtype=np.int64)
    np.cumsum(kept.sum(axis=1), out=offsets[1:])
    values = pa.array(slots[kept], type=pa.uint16())
    array = pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()), values)
    series = pl.from_arrow(array)
    assert isinstance(series, pl.Series)
    return series


def compare_words(words_a: Words, words_b: Words) -> pl.DataFrame:
    """The buckets whose words differ (``DIFF_SCHEMA``)."""
    idx = np.flatnonzero(words_a != words_b)
    a, b = words_a[idx], words_b[idx]
    sa, sb = lane_slots(a), lane_slots(b)
    return pl.DataFrame(
        {
            "bucket": idx.astype(np.uint32),
            "word_a": a,
            "word_b": b,
            "removed": _lists(sa, _minus(sa, sb)),
            "added": _lists(sb, _minus(sb, sa)),
        },
        schema=DIFF_SCHEMA,
    )


def build_diff(
    a: LaneSource,
    b: LaneSource | None = None,
    *,
    dc: DcName | None = None,
    dc_a: DcName | None = None,
    dc_b: DcName | None = None,
    model: str | None = None,
    at: Moment = None,
    at_a: Moment = None,
    at_b: Moment = None,
    labels: tuple[str | None, str | None] = (None, None),
) -> LaneDiff:
    """Lane ``a`` against lane ``b`` (``b`` None: ``a`` again, at another moment or DC). A side is a
    capture's ``ReplayReport`` (its lane of DC ``dc``, an id, hex or name, needless with one lane,
    among ``model``'s pools at ``at``, as :func:`cbi1kit.analysis.global_view` takes them; ``dc_a``,
    ``at_b`` etc. set one side), lane words (a 1-D ``uint64`` array or ``.npy``), a snapshot, a
    ``DcCkfState`` or a ``Simulator`` (its DC ``dc``); ``labels`` name the sides. ``LaneError``:
    ``DifferentFormats``, ``NotReady``, ``NoSuchLane``, ``SeveralLanes``, ``NotALane``, and the
    global view's ``NoCatalog``, ``TimeNotRecorded``, ``At``."""
    side_a, words_a = _side(
        a,
        dc=dc if dc_a is None else dc_a,
        model=model,
        at=at if at_a is None else at_a,
        label=labels[0],
    )
    side_b, words_b = _side(
        a if b is None else b,
        dc=dc if dc_b is None else dc_b,
        model=model,
        at=at if at_b is None else at_b,
        label=labels[1],
    )
    seeds_differ = None not in (side_a.seed, side_b.seed) and side_a.seed != side_b.seed
    if side_a.bucket_count != side_b.bucket_count or seeds_differ:
        raise LaneError(
            LaneVariant.DifferentFormats,
            message=f"the lanes have different formats: a {_format(side_a)}, b {_format(side_b)}"
            " (words of two formats address different buckets: nothing to compare)",
            expected=(side_a.seed, side_a.bucket_count),
            actual=(side_b.seed, side_b.bucket_count),
        )
    return LaneDiff(
        side_a,
        side_b,
        compare_words(words_a, words_b),
        lane_occupancy(words_a),
        lane_occupancy(words_b),
    )


def _format(side: LaneSide) -> str:
    seed = "seed unknown" if side.seed is None else f"seed 0x{side.seed:x}"
    return f"({seed}, {side.bucket_count} buckets)"
