"""A KV-cache simulator: DC pools of workers with LRU block caches, a router (round robin,
random, exact or CKF-driven) and the engine events their producers receive.
``docs/simulator.md`` gives the model and the policies.
"""

from __future__ import annotations

import dataclasses
import heapq
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from cbi1kit.ckf._bucket import lane_occupancy
from cbi1kit.ckf._consumer import CkfLaneTable, find_prefix_depths
from cbi1kit.ckf._lane import DcCkfDelta, DcCkfSnapshot
from cbi1kit.ckf._limits import DEFAULT_SEED, DEFAULT_VERIFICATION_WINDOW
from cbi1kit.ckf._producer import (
    CkfConfig,
    DcCkfPublicationBatch,
    DcCkfPublisher,
    DcCkfState,
    EventOutcome,
    KvCleared,
    KvEvent,
    KvRemoved,
    KvStored,
    StoredBlock,
)
from cbi1kit.ckf._stats import FprMeasurement, estimated_false_positive_rate
from cbi1kit.ckf._table import DEFAULT_MAX_KICKS
from cbi1kit.errors import SimulationError, SimulationVariant
from cbi1kit.hashing._dc_names import sim_dc_name
from cbi1kit.hashing._formats import KvQueryHashFormat
from cbi1kit.hashing._identity import (
    MAX_LANES,
    ConsumerInstanceId,
    DcCkfFormatIdentity,
    LaneLease,
    ProducerIdentity,
)
from cbi1kit.hashing._pools import (
    IndexerDomainId,
    PoolId,
    derive_cache_semantics_id,
    derive_routing_scope_id,
    stable_dc_id,
)
from cbi1kit.sim._workload import Workload
from cbi1kit.wire._format import DELTA_BODY_PREFIX, HEADER_LEN, IMAGE_BYTES

if TYPE_CHECKING:
    import polars as pl

from cbi1kit.sim._policies import POLICIES, RoutingPolicy

_U64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
#: Absent probes are also counted by the lane's load α at the probe, in this many equal bins.
FPR_LOAD_BINS = 20

SnapshotHook = Callable[[int, int, DcCkfSnapshot], None]
DeltaHook = Callable[[int, int, DcCkfDelta], None]
EventHook = Callable[[int, int, KvEvent, EventOutcome], None]
ProgressHook = Callable[[int], None]


def config_error(
    field_name: str, value: object, reason: str, *, what: str = "simulator config"
) -> SimulationError:
    """``Config``: a simulator knob out of range (``what``: how the message names it)."""
    return SimulationError(
        SimulationVariant.Config,
        reason,
        message=f"invalid {what}: {field_name}={value!r}: {reason}",
        field=field_name,
        value=value,
    )


@dataclass(frozen=True, slots=True)
class SimulatorConfig:
    """Every simulator knob, and the producers' :class:`CkfConfig` fields.

    ``expected_blocks_per_dc`` 0 (the default) sizes each DC's filter for its members' total
    capacity (``workers_per_dc × dp_ranks × capacity_blocks``), as a deployment would.
    """

    dcs: int = 1
    workers_per_dc: int = 4
    dp_ranks: int = 1
    capacity_blocks: int = 4096
    policy: RoutingPolicy = "exact"
    seed: int = 0
    overlap_weight: float = 1.0
    decode_ms_per_token: float = 20.0
    clear_every_ms: int | None = None
    publish_delay_ms: int | None = None
    # CkfConfig
    expected_blocks_per_dc: int = 0
    ckf_seed: int = DEFAULT_SEED
    max_kicks: int = DEFAULT_MAX_KICKS
    verification_window: int = DEFAULT_VERIFICATION_WINDOW
    publish_every_n_events: int = 1
    # producer identity
    model: str = "mooncake/conversation"
    namespace: str = "dynamo"
    component: str = "backend"
    endpoint: str = "generate"
    producer_incarnation: int = 1
    layout_generation: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.dcs <= MAX_LANES:
            raise config_error("dcs", self.dcs, f"must be in 1..={MAX_LANES}")
        for name in ("workers_per_dc", "dp_ranks", "capacity_blocks"):
            if getattr(self, name) < 1:
                raise config_error(name, getattr(self, name), "must be >= 1")
        if self.policy not in POLICIES:
            raise config_error("policy", self.policy, f"must be one of {POLICIES}")
        if self.expected_blocks_per_dc < 0:
            raise config_error(
                "expected_blocks_per_dc", self.expected_blocks_per_dc, "must be >= 0"
            )
        for name in ("clear_every_ms", "publish_delay_ms"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise config_error(name, value, "must be >= 1 or None")
        if self.overlap_weight < 0 or self.decode_ms_per_token < 0:
            raise config_error(
                "overlap_weight/decode_ms_per_token", self.overlap_weight, "must be >= 0"
            )
        self.ckf_config()  # validate the CKF knobs now, with upstream's errors

    @property
    def members_per_dc(self) -> int:
        """Members (worker, DP rank) per DC: ``workers_per_dc × dp_ranks``."""
        return self.workers_per_dc * self.dp_ranks

    def ckf_config(self) -> CkfConfig:
        """The producers' ``CkfConfig`` (``expected_blocks_per_dc`` 0: sized for the members)."""
        expected = self.expected_blocks_per_dc or self.members_per_dc * self.capacity_blocks
        return CkfConfig(
            expected_blocks_per_dc=expected,
            seed=self.ckf_seed,
            max_kicks=self.max_kicks,
            verification_window=self.verification_window,
            publish_every_n_events=self.publish_every_n_events,
        )

    def to_json(self) -> dict[str, object]:
        """Every knob as a plain JSON value (``dataclasses.asdict``; u64 seeds as integers)."""
        return dataclasses.asdict(self)


def pool_identity(
    model: str,
    block_size: int,
    hash_format: KvQueryHashFormat,
    endpoint: Sequence[str],
    dc: str,
    generation: tuple[int, int],
    format: DcCkfFormatIdentity,
) -> ProducerIdentity:
    """A pool's producer identity, derived as the relay derives it (relay.md §1.2): its model's
    cache semantics, its endpoint's routing scope, its DC's name and ``generation`` (producer
    incarnation, layout generation)."""
    domain = IndexerDomainId(
        derive_cache_semantics_id([model], block_size, hash_format),
        derive_routing_scope_id(endpoint),
    )
    return ProducerIdentity(PoolId(domain, stable_dc_id(dc)), *generation, format)


def producer_identity(
    config: SimulatorConfig,
    dc: int,
    format: DcCkfFormatIdentity,
    hash_format: KvQueryHashFormat,
    bs: int,
) -> ProducerIdentity:
    """The producer identity of DC ``dc`` (``pool_identity``)."""
    return pool_identity(
        config.model,
        bs,
        hash_format,
        (config.namespace, config.component, config.endpoint),
        sim_dc_name(dc),
        (config.producer_incarnation, config.layout_generation),
        format,
    )


def _mix(x: int) -> int:
    """SplitMix64 finaliser: a member's engine-id salt."""
    z = (x + _GOLDEN) & _U64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
    return z ^ (z >> 31)


@dataclass(slots=True)
class Member:
    """One ``(worker, dp_rank)`` of one DC: an LRU cache ``canonical → engine block id``."""

    index: int
    dc: int
    worker_id: int
    dp_rank: int
    salt: int
    cache: OrderedDict[int, int] = field(default_factory=OrderedDict)
    inflight: list[tuple[float, int]] = field(default_factory=list)
    load: int = 0
    requests: int = 0

    def depth(self, seq: list[int]) -> int:
        cache = self.cache
        d = 0
        for h in seq:
            if h not in cache:
                break
            d += 1
        return d


@dataclass(slots=True)
class SimulationResult:
    """What a run did. ``hit_rate`` is hit blocks / requested blocks."""

    config: SimulatorConfig
    requests: int = 0
    requested_blocks: int = 0
    hit_blocks: int = 0
    stored_blocks: int = 0
    evicted_blocks: int = 0
    events: dict[str, int] = field(
        default_factory=lambda: {"stored": 0, "removed": 0, "cleared": 0}
    )
    event_errors: dict[str, int] = field(default_factory=dict)
    deltas: list[int] = field(default_factory=list)
    images: list[int] = field(default_factory=list)
    requests_per_dc: list[int] = field(default_factory=list)
    capacity_failures: list[int] = field(default_factory=list)
    load_factors: list[float] = field(default_factory=list)
    start_ms: int = 0
    end_ms: int = 0
    wall_seconds: float = 0.0
    # filter accuracy on distinct absent items (each (lane, item) counted once)
    absent_probes: int = 0
    false_positives: int = 0
    expected_false_positives: float = 0.0
    alpha_sum: float = 0.0
    depth_overestimates: int = 0
    depth_underestimates: int = 0
    # absent probes and false positives by the lane's load (FPR_LOAD_BINS bins of α)
    fpr_by_load: list[list[int]] = field(
        default_factory=lambda: [[0] * FPR_LOAD_BINS, [0] * FPR_LOAD_BINS], repr=False
    )
    # per request and DC: (request, dc, exact depth, CKF depth)
    depth_log: list[tuple[int, int, int, int]] = field(default_factory=list, repr=False)
    # per published delta: (time_ms, dc, sequence, images)
    delta_log: list[tuple[int, int, int, int]] = field(default_factory=list, repr=False)
    # every ``health_every`` requests, per DC: (request, time_ms, dc, occupied slots,
    # resident items, capacity failures)
    health_log: list[tuple[int, int, int, int, int, int]] = field(default_factory=list, repr=False)

    def depth_table(self) -> pl.DataFrame:
        """CKF against exact prefix depth of every request and DC (measured under every
        policy; only ``ckf`` routes by it)."""
        import polars as pl  # the CLI's parser imports this module: polars loads on use

        return pl.DataFrame(
            self.depth_log,
            schema={
                "request": pl.UInt32,
                "dc": pl.UInt8,
                "exact_depth": pl.UInt32,
                "ckf_depth": pl.UInt32,
            },
            orient="row",
        )

    def delta_table(self) -> pl.DataFrame:
        """Every published delta: time, DC, sequence, images and its CBI1 frame's bytes."""
        import polars as pl

        frame = pl.DataFrame(
            self.delta_log,
            schema={
                "time_ms": pl.Int64,
                "dc": pl.UInt8,
                "sequence": pl.UInt64,
                "images": pl.UInt32,
            },
            orient="row",
        )
        bytes_ = HEADER_LEN + DELTA_BODY_PREFIX + pl.col("images").cast(pl.Int64) * IMAGE_BYTES
        return frame.with_columns(bytes_.alias("frame_bytes"))

    def fpr_table(self) -> pl.DataFrame:
        """Measured false-positive rate by the lane's load, beside 8α/65534 at the bin's middle:
        absent probes and false positives per bin of α (empty bins left out)."""
        import polars as pl

        probes, hits = self.fpr_by_load
        width = 1 / FPR_LOAD_BINS
        mids = [(b + 0.5) * width for b in range(FPR_LOAD_BINS)]
        return (
            pl.DataFrame(
                {"load_factor": mids, "absent_probes": probes, "false_positives": hits},
                schema={
                    "load_factor": pl.Float64,
                    "absent_probes": pl.UInt64,
                    "false_positives": pl.UInt64,
                },
            )
            .filter(pl.col("absent_probes") > 0)
            .with_columns(
                (pl.col("false_positives") / pl.col("absent_probes")).alias("measured_fpr"),
                (pl.col("load_factor") * estimated_false_positive_rate(1.0)).alias("estimated_fpr"),
            )
        )

    def health_table(self) -> pl.DataFrame:
        """Each DC's filter over the run: load, resident items, capacity failures, estimate."""
        import polars as pl

        slots = 4 * self.config.ckf_config().bucket_count()
        return (
            pl.DataFrame(
                self.health_log,
                schema={
                    "request": pl.UInt32,
                    "time_ms": pl.Int64,
                    "dc": pl.UInt8,
                    "occupied_slots": pl.UInt64,
                    "resident_items": pl.UInt64,
                    "capacity_failures": pl.UInt64,
                },
                orient="row",
            )
            .with_columns((pl.col("occupied_slots") / slots).alias("load_factor"))
            .with_columns(
                (pl.col("load_factor") * estimated_false_positive_rate(1.0)).alias("estimated_fpr")
            )
        )

    @property
    def total_events(self) -> int:
        """Engine events of every kind (stored, removed, cleared)."""
        return sum(self.events.values())

    @property
    def hit_rate(self) -> float:
        """Hit blocks / requested blocks (0.0 before any request)."""
        return self.hit_blocks / self.requested_blocks if self.requested_blocks else 0.0

    @property
    def fpr(self) -> FprMeasurement | None:
        """False positives among the distinct absent probes, with their interval (ckf policy)."""
        if not self.absent_probes:
            return None
        return FprMeasurement(self.false_positives, self.absent_probes)

    @property
    def measured_fpr(self) -> float | None:
        """The measured false-positive rate (ckf policy), or None without absent probes."""
        return None if self.fpr is None else self.fpr.rate

    @property
    def estimated_fpr(self) -> float | None:
        """8α/65534 at the mean lane load seen by the absent probes."""
        if not self.absent_probes:
            return None
        return estimated_false_positive_rate(self.alpha_sum / self.absent_probes)

    @property
    def mean_probe_load(self) -> float | None:
        """Mean lane load α the absent probes saw (ckf policy), or None without any."""
        return self.alpha_sum / self.absent_probes if self.absent_probes else None

    def as_dict(self) -> dict[str, object]:
        """JSON-ready figures, FPR measurement and estimate included; the logs left out."""
        return {
            "requests": self.requests,
            "events": dict(self.events),
            "total_events": self.total_events,
            "event_errors": dict(self.event_errors),
            "requested_blocks": self.requested_blocks,
            "hit_blocks": self.hit_blocks,
            "hit_rate": self.hit_rate,
            "stored_blocks": self.stored_blocks,
            "evicted_blocks": self.evicted_blocks,
            "deltas": list(self.deltas),
            "images": list(self.images),
            "requests_per_dc": list(self.requests_per_dc),
            "capacity_failures": list(self.capacity_failures),
            "load_factors": list(self.load_factors),
            "simulated_ms": self.end_ms - self.start_ms,
            "wall_seconds": self.wall_seconds,
            "absent_probes": self.absent_probes,
            "false_positives": self.false_positives,
            "expected_false_positives": self.expected_false_positives,
            "measured_fpr": self.measured_fpr,
            "measured_fpr_interval": None if self.fpr is None else list(self.fpr.interval),
            "estimated_fpr": self.estimated_fpr,
            "mean_probe_load": self.mean_probe_load,
            "depth_overestimates": self.depth_overestimates,
            "depth_underestimates": self.depth_underestimates,
        }


class ReferenceSimulator:
    """Runs a :class:`Workload` through DC pools one event at a time: the reference the compiled
    engine (``cbi1kit.sim._compiled``) is held to; the model is ``docs/simulator.md``. Hooks:
    ``on_snapshot(time_ms, dc, snapshot)`` once per DC at the start (the barrier snapshot a hub
    subscribes with), ``on_delta(time_ms, dc, delta)`` per published batch,
    ``on_event(time_ms, dc, event, outcome)`` per engine event, ``progress(n)`` every ``n``
    requests. Runs once."""

    def __init__(self, config: SimulatorConfig | None = None) -> None:
        self.config = config or SimulatorConfig()
        cfg = self.config
        ckf = cfg.ckf_config()
        self.states = [DcCkfState(ckf) for _ in range(cfg.dcs)]
        self.members: list[Member] = []
        for dc in range(cfg.dcs):
            for w in range(cfg.workers_per_dc):
                for r in range(cfg.dp_ranks):
                    idx = len(self.members)
                    salt = _mix((cfg.seed << 16) ^ (dc << 8) ^ idx)
                    self.members.append(Member(idx, dc, w + 1, r, salt))
        self.by_dc = [[m for m in self.members if m.dc == dc] for dc in range(cfg.dcs)]
        self.format = self.states[0].format
        self.table = CkfLaneTable(self.format, (1 << cfg.dcs) - 1)
        self.publishers: list[DcCkfPublisher] = []
        self.identities: list[ProducerIdentity] = []
        self._consumer_leases: list[LaneLease] = []
        self._rng = np.random.default_rng(cfg.seed)
        self._rr = 0
        self._next_clear: int | None = None
        self._clear_cursor = 0
        self._pending_since: list[int | None] = [None] * cfg.dcs
        self._probed: list[set[int]] = [set() for _ in range(cfg.dcs)]  # absent items counted
        self._ran = False
        self.result = SimulationResult(cfg)

    def words(self, dc: int) -> npt.NDArray[np.uint64]:
        """DC ``dc``'s producer words (a copy)."""
        return self.states[dc].words()

    def lane_words(self, dc: int) -> npt.NDArray[np.uint64]:
        """The consumer's lane ``dc`` (a copy): what the DC published."""
        return self.table.lane_words(dc)

    # -- helpers -------------------------------------------------------------------------------
    def _setup(self, workload: Workload, t0: int, on_snapshot: SnapshotHook | None) -> None:
        """The run's start at ``t0``: the result's per-DC counters, each DC's identity, hub
        snapshot and consumer lane, the first restart due."""
        cfg, res = self.config, self.result
        res.deltas = [0] * cfg.dcs
        res.images = [0] * cfg.dcs
        res.requests_per_dc = [0] * cfg.dcs
        res.start_ms = res.end_ms = t0
        for dc, state in enumerate(self.states):
            ident = producer_identity(
                cfg, dc, state.format, workload.hash_format, workload.block_size
            )
            self.identities.append(ident)
            # The relay hub's lease (relay.md §2.5): (producer_incarnation, lane 0, layout gen).
            hub_lease = LaneLease(ConsumerInstanceId(cfg.producer_incarnation), 0, 1)
            pub = DcCkfPublisher(ident)
            _, snap = pub.snapshot_after_barrier(state, hub_lease)
            self.publishers.append(pub)
            lease = LaneLease(ConsumerInstanceId(0x53494D), dc, 1)  # "SIM", lane = dc
            self._consumer_leases.append(lease)
            rep = self.table.replica(dc)
            rep.assign(ident, lease)
            rep.install_snapshot(dataclasses.replace(snap, lease=lease))
            if on_snapshot is not None:
                on_snapshot(t0, dc, snap)
        if cfg.clear_every_ms is not None:
            self._next_clear = t0 + cfg.clear_every_ms

    def _publish(
        self, t: int, dc: int, batch: DcCkfPublicationBatch, on_delta: DeltaHook | None
    ) -> None:
        delta = self.publishers[dc].publish(batch)
        self._pending_since[dc] = None
        if delta is None:  # pragma: no cover - the publisher always has the hub's lease
            return
        self.result.deltas[dc] += 1
        self.result.images[dc] += len(batch)
        self.result.delta_log.append((t, dc, delta.sequence, len(batch)))
        self.table.replicas[dc].apply_delta(
            dataclasses.replace(delta, lease=self._consumer_leases[dc])
        )
        if on_delta is not None:
            on_delta(t, dc, delta)

    def _apply(
        self,
        t: int,
        dc: int,
        event: KvEvent,
        on_delta: DeltaHook | None,
        on_event: EventHook | None,
    ) -> None:
        state = self.states[dc]
        outcome = state.apply(event)
        res = self.result
        kind = (
            "stored"
            if isinstance(event, KvStored)
            else "removed"
            if isinstance(event, KvRemoved)
            else "cleared"
        )
        res.events[kind] += 1
        if outcome.error is not None:
            name = type(outcome.error).__name__
            res.event_errors[name] = res.event_errors.get(name, 0) + 1
        if on_event is not None:
            on_event(t, dc, event, outcome)
        if outcome.batch is not None:
            self._publish(t, dc, outcome.batch, on_delta)
        elif state.pending_events and self._pending_since[dc] is None:
            self._pending_since[dc] = t

    def _drain(self, t: int, dc: int, on_delta: DeltaHook | None) -> None:
        batch = self.states[dc].drain()
        self._pending_since[dc] = None
        if batch is not None:
            self._publish(t, dc, batch, on_delta)

    def _advance(self, t: int, on_delta: DeltaHook | None, on_event: EventHook | None) -> None:
        cfg = self.config
        for m in self.members:
            inflight = m.inflight
            while inflight and inflight[0][0] <= t:
                m.load -= heapq.heappop(inflight)[1]
        if cfg.publish_delay_ms is not None:
            for dc, since in enumerate(self._pending_since):
                if since is not None and t - since >= cfg.publish_delay_ms:
                    self._drain(since + cfg.publish_delay_ms, dc, on_delta)
        while self._next_clear is not None and self._next_clear <= t:
            m = self.members[self._clear_cursor % len(self.members)]
            self._clear_cursor += 1
            at = self._next_clear
            self._next_clear += cfg.clear_every_ms or 0
            if m.cache:
                m.cache.clear()
                self._apply(at, m.dc, KvCleared(m.worker_id, m.dp_rank), on_delta, on_event)

    def _dc_cost(self, dc: int, depth: int, n: int) -> float:
        load = sum(m.load for m in self.by_dc[dc]) / self.config.members_per_dc
        return self.config.overlap_weight * (n - depth) + load

    def _route(self, seq: list[int], seq_arr: npt.NDArray[np.uint64]) -> tuple[Member, int]:
        """The chosen member and its exact prefix depth; the CKF depths are measured (and
        logged beside the exact ones) under every policy, and route under ``ckf``."""
        cfg = self.config
        n = len(seq)
        member_depths = [m.depth(seq) for m in self.members]
        exact = [max(member_depths[m.index] for m in group) for group in self.by_dc]
        seen = self._ckf_depths(seq, seq_arr)
        request = self.result.requests
        for dc in range(cfg.dcs):
            self.result.depth_log.append((request, dc, exact[dc], seen[dc]))
            if seen[dc] > exact[dc]:
                self.result.depth_overestimates += 1
            elif seen[dc] < exact[dc]:
                self.result.depth_underestimates += 1
        if cfg.policy == "round_robin":
            m = self.members[self._rr % len(self.members)]
            self._rr += 1
            return m, member_depths[m.index]
        if cfg.policy == "random":
            m = self.members[int(self._rng.integers(len(self.members)))]
            return m, member_depths[m.index]
        if cfg.policy != "ckf":
            seen = exact
        best_dc = min(range(cfg.dcs), key=lambda d: (self._dc_cost(d, seen[d], n), d))
        w = cfg.overlap_weight
        m = min(
            self.by_dc[best_dc], key=lambda m: (w * (n - member_depths[m.index]) + m.load, m.index)
        )
        return m, member_depths[m.index]

    def _ckf_depths(self, seq: list[int], seq_arr: npt.NDArray[np.uint64]) -> list[int]:
        cfg = self.config
        n = len(seq)
        if n == 0:
            return [0] * cfg.dcs
        masks = self.table.probe_many(seq_arr).tolist()
        ready = self.table.ready_mask()
        depths = find_prefix_depths(n, ready, cfg.verification_window, masks.__getitem__)
        # Filter accuracy, only while the lanes equal their producers (nothing unpublished).
        if all(s.pending_events == 0 and not s.dirty_buckets() for s in self.states):
            res = self.result
            probes, hits = res.fpr_by_load
            for dc, state in enumerate(self.states):
                alpha = state.resident_count / (4 * state.bucket_count)
                est = estimated_false_positive_rate(alpha)
                where = min(int(alpha * FPR_LOAD_BINS), FPR_LOAD_BINS - 1)
                bit = 1 << dc
                probed = self._probed[dc]
                for pos, h in enumerate(seq):
                    if h in probed:
                        continue
                    own = state.ownership(h)
                    if own is not None and own.resident:
                        continue
                    probed.add(h)
                    res.absent_probes += 1
                    res.alpha_sum += alpha
                    res.expected_false_positives += est
                    probes[where] += 1
                    if masks[pos] & bit:
                        res.false_positives += 1
                        hits[where] += 1
        return depths[: cfg.dcs]

    def _log_health(self, request: int, t: int) -> None:
        for dc, state in enumerate(self.states):
            self.result.health_log.append(
                (
                    request,
                    t,
                    dc,
                    lane_occupancy(state.words()),
                    state.resident_count,
                    state.capacity_failures,
                )
            )

    def _serve(
        self,
        t: int,
        m: Member,
        seq: list[int],
        depth: int,
        local: tuple[list[int], int],
        hooks: tuple[DeltaHook | None, EventHook | None],
    ) -> None:
        """Member ``m`` serves a request of blocks ``seq`` whose first ``depth`` it holds: the
        hits touched deepest first, the LRU blocks evicted to make room (``Removed``), the rest
        stored (``Stored``, parent the last hit's engine id). ``local``: the workload's local
        hashes and where the request's start (not copied per request)."""
        res, cap = self.result, self.config.capacity_blocks
        n_eff = min(len(seq), cap)
        cache = m.cache
        for p in range(depth - 1, -1, -1):
            cache.move_to_end(seq[p])
        overflow = len(cache) + (n_eff - depth) - cap
        if overflow > 0:
            victims = [cache.popitem(last=False)[1] for _ in range(overflow)]
            res.evicted_blocks += overflow
            self._apply(t, m.dc, KvRemoved(m.worker_id, tuple(victims), m.dp_rank), *hooks)
        if n_eff > depth:
            salt = m.salt
            hashes, at = local
            blocks = [StoredBlock(seq[p] ^ salt, hashes[at + p]) for p in range(depth, n_eff)]
            for p in range(n_eff - 1, depth - 1, -1):
                cache[seq[p]] = seq[p] ^ salt
            for p in range(depth - 1, -1, -1):
                cache.move_to_end(seq[p])
            parent = cache[seq[depth - 1]] if depth else None
            res.stored_blocks += n_eff - depth
            self._apply(t, m.dc, KvStored(m.worker_id, tuple(blocks), parent, m.dp_rank), *hooks)

    # -- the run -------------------------------------------------------------------------------
    def run(
        self,
        workload: Workload,
        *,
        on_snapshot: SnapshotHook | None = None,
        on_delta: DeltaHook | None = None,
        on_event: EventHook | None = None,
        progress: ProgressHook | None = None,
        progress_every: int = 256,
        health_every: int = 64,
    ) -> SimulationResult:
        """Run ``workload`` through the pools, calling the hooks as it goes; the result."""
        if self._ran:
            raise RuntimeError("a Simulator runs once; make a new one")
        self._ran = True
        started = time.perf_counter()
        ts = workload.timestamps_ms.tolist()
        self._setup(workload, ts[0] if ts else 0, on_snapshot)
        offsets = workload.offsets.tolist()
        local_all = workload.local_hashes.tolist()
        seq_all = workload.seq_hashes.tolist()
        outputs = workload.output_tokens.tolist()
        done = 0
        for i, t in enumerate(ts):
            self._advance(t, on_delta, on_event)
            s, e = offsets[i], offsets[i + 1]
            seq = (seq_all[s:e], workload.seq_hashes[s:e])
            self._request(t, seq, (local_all, s), outputs[i], (on_delta, on_event))
            done += 1
            if health_every and done % health_every == 0:
                self._log_health(done, t)
            if progress is not None and done % progress_every == 0:
                progress(progress_every)
        self._finish(done, health_every, on_delta)
        if progress is not None and done % progress_every:
            progress(done % progress_every)
        res = self.result
        res.capacity_failures = [s.capacity_failures for s in self.states]
        res.load_factors = [s.resident_count / (4 * s.bucket_count) for s in self.states]
        res.wall_seconds = time.perf_counter() - started
        return res

    def _request(
        self,
        t: int,
        seq: tuple[list[int], npt.NDArray[np.uint64]],
        local: tuple[list[int], int],
        output_tokens: int,
        hooks: tuple[DeltaHook | None, EventHook | None],
    ) -> None:
        """A request of blocks ``seq`` (as a list and as an array) at ``t``: routed, counted,
        served, and its blocks in flight until its ``output_tokens`` are decoded."""
        res = self.result
        n = len(seq[0])
        m, depth = self._route(*seq)
        res.requests += 1
        res.requests_per_dc[m.dc] += 1
        m.requests += 1
        res.requested_blocks += n
        res.hit_blocks += depth
        self._serve(t, m, seq[0], depth, local, hooks)
        if n:
            heapq.heappush(m.inflight, (t + self.config.decode_ms_per_token * output_tokens, n))
            m.load += n
        res.end_ms = t

    def _finish(self, done: int, health_every: int, on_delta: DeltaHook | None) -> None:
        """End of run: every pending tail published so lanes equal producers, and the last
        health row."""
        end = self.result.end_ms
        for dc in range(self.config.dcs):
            self._drain(end, dc, on_delta)
        if health_every:
            self._log_health(done, end)
