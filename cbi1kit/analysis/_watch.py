"""A capture still being written, followed as a consumer would: every lane's load, churn,
staleness and broken rules as they happen, in memory bounded by the lanes and a ring of recent
violations (``cbi1kit watch``, the metrics). See docs/watch.md.
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from cbi1kit._text import shortened
from cbi1kit.analysis._events import EventKind, Violation
from cbi1kit.analysis._replayer import LaneReplayer, Replayer
from cbi1kit.capture._items import CatalogRecord, FrameRecord, FrameSpan
from cbi1kit.capture._scan import CaptureScan
from cbi1kit.ckf._bucket import bucket_occupancy
from cbi1kit.ckf._limits import DEFAULT_MAX_AGE_S
from cbi1kit.ckf._stats import estimated_false_positive_rate
from cbi1kit.errors import Cbi1kitError
from cbi1kit.hashing._dc_names import dc_fields, dc_text
from cbi1kit.hashing._pools import PoolId
from cbi1kit.relay._messages import catalog_from_wire
from cbi1kit.wire._format import FilterFormat, FrameKind
from cbi1kit.wire._layout import DELTA_PREFIX, HEADER

_FLAGS: Final = HEADER.field("flags")
#: what renews a lane for upstream's scorer (``received_at``: docs/replay.md, stale lanes)
_TOUCHES: Final = (EventKind.SNAPSHOT_INSTALLED, EventKind.DELTA_APPLIED, EventKind.HEARTBEAT)
_IMAGE_COUNT: Final = DELTA_PREFIX.field("image_count")
#: stretches of a lane its occupancy strip shows
STRIPE: Final = 128


def _images_in(payload: bytes) -> int:
    """The ``image_count`` of a delta frame (0 for anything else), read at the layout's offset."""
    if len(payload) < _IMAGE_COUNT.end:
        return 0
    flags = int.from_bytes(payload[_FLAGS.offset : _FLAGS.end], "little")
    if flags != FrameKind.DELTA:
        return 0
    return int.from_bytes(payload[_IMAGE_COUNT.offset : _IMAGE_COUNT.end], "little")


@dataclass
class _Tally:
    """What one lane received: counters since the watch began, and at the last look."""

    frames: int = 0
    deltas: int = 0
    images: int = 0
    bytes: int = 0
    last_unix_ns: int | None = None
    violations: Counter[str] = field(default_factory=Counter)
    looked: tuple[int, int] = (0, 0)  # images and bytes at the previous ``poll``


@dataclass(frozen=True)
class LaneFigures:
    """One lane as a watcher sees it now."""

    dc_id: int | None
    pool: str | None
    models: tuple[str, ...]
    sequence: int | None
    ready: bool
    bucket_count: int
    occupied_buckets: int
    load_factor: float
    frames: int
    deltas: int
    images: int
    bytes: int
    images_per_s: float
    bytes_per_s: float
    violations: dict[str, int]
    age_s: float | None
    stale: bool
    #: mean slots per bucket over ``STRIPE`` equal stretches of the lane (an occupancy strip)
    stripe: tuple[float, ...] = field(default=(), repr=False)

    @property
    def fpr(self) -> float:
        """The estimated per-probe false-positive rate at this load, 8α/65534."""
        return estimated_false_positive_rate(self.load_factor)

    @property
    def model(self) -> str:
        """The models the catalog says the lane's pool serves, comma-separated ("" unknown)."""
        return ",".join(self.models)

    @property
    def which(self) -> str:
        """What tells the lane from another of its DC: its models, else its pool key."""
        return ", ".join(self.models) or self.pool or "no pool"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the DC id in hex, every counter exact."""
        return {
            **dc_fields(self.dc_id),
            "pool": self.pool,
            "models": list(self.models),
            "sequence": self.sequence,
            "ready": self.ready,
            "bucket_count": self.bucket_count,
            "occupied_buckets": self.occupied_buckets,
            "load_factor": self.load_factor,
            "frames": self.frames,
            "deltas": self.deltas,
            "images": self.images,
            "bytes": self.bytes,
            "images_per_s": self.images_per_s,
            "bytes_per_s": self.bytes_per_s,
            "violations": dict(self.violations),
            "age_s": self.age_s,
            "stale": self.stale,
            "estimated_fpr": self.fpr,
        }


def _age_text(age: float | None) -> str:
    """An age in the unit that keeps it short: ``4.2 s``, ``17 min``, ``3 h``, ``700 d``."""
    if age is None:
        return "-"
    for unit, seconds in (("d", 86400), ("h", 3600), ("min", 60)):
        if age >= 2 * seconds:
            return f"{age / seconds:.0f} {unit}"
    return f"{age:.1f} s"


@dataclass(frozen=True)
class WatchState:
    """Every lane at one look, and the violations seen most recently."""

    source: str
    at_unix_ns: int
    frames: int
    max_age_s: float
    lanes: tuple[LaneFigures, ...]
    recent: tuple[Violation, ...]

    def __repr__(self) -> str:
        stale = sum(lane.stale for lane in self.lanes)
        said = f"{len(self.lanes)} lane(s), {self.frames:,} frames, {stale} stale"
        return f"<WatchState {self.source}: {said}>"

    @property
    def shared_dcs(self) -> set[int | None]:
        """The DCs with more than one lane (a pool per model): their lanes need ``which``."""
        return {dc for dc, n in Counter(lane.dc_id for lane in self.lanes).items() if n > 1}

    def __str__(self) -> str:
        lines = [f"{self.source}: {self.frames:,} frames, stale after {self.max_age_s:g} s"]
        lines.append(f"{'dc':<28}{'seq':>8}{'load':>7}{'img/s':>8}{'KB/s':>8}{'age':>9}{'bad':>5}")
        shared = self.shared_dcs
        for lane in self.lanes:
            mark = " STALE" if lane.stale else ("" if lane.ready else " not ready")
            seq = "-" if lane.sequence is None else str(lane.sequence)
            lines.append(
                f"{dc_text(lane.dc_id)[:27]:<28}{seq:>8}{lane.load_factor:>7.3f}"
                f"{lane.images_per_s:>8.0f}{lane.bytes_per_s / 1e3:>8.1f}"
                f"{_age_text(lane.age_s):>9}{sum(lane.violations.values()):>5}{mark}"
            )
            if lane.dc_id in shared:  # a DC serving several models: which lane is which
                lines.append("  model " + shortened(lane.which, 72))
        lines += ["  ! " + shortened(v.describe(), 76) for v in self.recent[-5:]]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``cbi1kit watch --json``."""
        return {
            "source": self.source,
            "at_unix_ns": self.at_unix_ns,
            "frames": self.frames,
            "max_age_s": self.max_age_s,
            "lanes": [lane.to_dict() for lane in self.lanes],
            "recent_violations": [v.to_dict() for v in self.recent],
        }


def _stripe(slots: np.ndarray[Any, Any]) -> tuple[float, ...]:
    """Mean slots per bucket over ``STRIPE`` equal stretches (fewer for a shorter lane)."""
    if not slots.shape[0]:
        return ()
    parts = np.array_split(slots.astype(np.float64), min(STRIPE, slots.shape[0]))
    return tuple(round(float(p.mean()), 3) for p in parts)


class Watch:
    """Follow the capture at ``path`` (a file a recorder is writing, or one written already):
    each :meth:`poll` reads what was appended, replays it by the consumer's rules and returns a
    :class:`WatchState`. ``max_age_s``: a ready lane with no frame or heartbeat for that long is
    stale (the router's ``overlap_max_age``); ``recent``: how many violations are kept; ``name``:
    what the state calls the source (the relay a recorder writes the capture from)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        recent: int = 32,
        expected_format: FilterFormat | None = None,
        clock: Callable[[], int] = time.time_ns,
        name: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.name = str(path) if name is None else name
        self.max_age_s = max_age_s
        self._clock = clock
        self._scan: CaptureScan | None = None
        self._player = Replayer(
            expected_format=expected_format, keep_history=False, keep_events=False
        )
        self._tallies: list[_Tally] = []
        self._models: dict[PoolId, tuple[str, ...]] = {}  # the models the catalog names a pool
        self._recent: deque[Violation] = deque(maxlen=recent)
        self._looked_ns: int | None = None

    def close(self) -> None:
        """Let go of the capture's files."""
        if self._scan is not None:
            self._scan.close()

    def poll(self) -> WatchState:
        """Read what was appended since the last poll; every lane as it stands now."""
        if self._scan is None and self.path.exists():
            self._scan = CaptureScan(self.path)
        if self._scan is not None:
            for item in self._scan.items(final=False):
                self._take(item)
        for v in self._player.forget():
            self._recent.append(v)
            index = self._player.lane_index(v.stream_id)
            if index is not None and index < len(self._tallies):
                self._tallies[index].violations[v.rule] += 1
        return self._state()

    def lane(self, index: int) -> tuple[int | None, np.ndarray[Any, Any] | None]:
        """Lane ``index``'s installed sequence and a copy of its words (None: none yet)."""
        player = self._player.lanes()[index][2]
        words = player.lane
        return player.installed_sequence, None if words is None else np.array(words)

    # -- reading ---------------------------------------------------------------------------
    def _take(self, item: Any) -> None:
        if isinstance(item, FrameSpan):
            for i in range(len(item)):
                self._take(item.record(i))
            return
        if isinstance(item, CatalogRecord):
            try:
                pools = catalog_from_wire(item.update).pools
            except Cbi1kitError:
                pools = ()  # a catalog that does not decode: the replayer reports it
            for desc in pools:  # by pool: a DC may serve several models, a pool one each
                self._models[desc.producer.pool_id] = tuple(
                    r.model.value for r in desc.registrations
                )
        if not isinstance(item, FrameRecord):
            self._player.feed_item(item)
            return
        event = self._player.feed(item)
        index = self._player.lane_index(item.stream_id)
        if index is None:
            return
        while len(self._tallies) <= index:
            self._tallies.append(_Tally())
        tally = self._tallies[index]
        tally.frames += 1
        tally.bytes += len(item.raw)
        if item.recv_unix_ns is not None and event.kind in _TOUCHES:
            tally.last_unix_ns = item.recv_unix_ns
        if event.kind is EventKind.DELTA_APPLIED:
            tally.deltas += 1
            tally.images += _images_in(item.payload)

    # -- figures ---------------------------------------------------------------------------
    def _state(self) -> WatchState:
        now = self._clock()
        span = None if self._looked_ns is None else max(now - self._looked_ns, 1) / 1e9
        self._looked_ns = now
        lanes = tuple(
            self._figures(pool, dc, player, tally, now, span)
            for (pool, dc, player), tally in zip(self._player.lanes(), self._tallies, strict=False)
        )
        recent = tuple(self._recent)
        return WatchState(self.name, now, self._player.frames, self.max_age_s, lanes, recent)

    def _figures(
        self,
        pool: Any,
        dc: int | None,
        player: LaneReplayer,
        tally: _Tally,
        now: int,
        span: float | None,
    ) -> LaneFigures:
        words = player.lane
        slots = bucket_occupancy(words) if words is not None else np.zeros(0, np.uint8)
        n = int(slots.shape[0])
        load = float(slots.sum(dtype=np.int64)) / (4 * n) if n else 0.0
        age = None if tally.last_unix_ns is None else max(now - tally.last_unix_ns, 0) / 1e9
        images, sent = tally.looked
        tally.looked = (tally.images, tally.bytes)
        ready = player.ready
        return LaneFigures(
            dc,
            None if pool is None else str(pool),
            self._models.get(pool, ()) if pool is not None else (),
            player.installed_sequence,
            ready,
            n,
            int(np.count_nonzero(slots)),
            load,
            tally.frames,
            tally.deltas,
            tally.images,
            tally.bytes,
            (tally.images - images) / span if span else 0.0,
            (tally.bytes - sent) / span if span else 0.0,
            dict(tally.violations),
            age,
            bool(ready and age is not None and age > self.max_age_s),
            _stripe(slots),
        )
