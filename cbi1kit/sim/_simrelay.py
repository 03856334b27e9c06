"""A simulated KV DC relay writing what a subscriber would receive into a capture file, on a
simulated clock: the same trace and config give the same bytes. ``docs/simulator.md``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypedDict

import numpy as np
import numpy.typing as npt

from cbi1kit._files import written_whole
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit._text import table
from cbi1kit.capture._layout import RecordType
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD, WATCH_KV_POOL_CATALOG_METHOD
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.ckf._lane import DcCkfDelta, DcCkfSnapshot
from cbi1kit.errors import SimulationError, SimulationVariant
from cbi1kit.hashing._formats import KvQuerySemantics
from cbi1kit.hashing._identity import RelayIdentity
from cbi1kit.hashing._models import CanonicalModelRegistration
from cbi1kit.relay._messages import (
    RELAY_CONTRACT_MARKER,
    PoolCatalog,
    PoolDescriptor,
    catalog_to_wire,
    filter_update_from_frame,
    heartbeat_update,
    producer_to_wire,
)
from cbi1kit.relay._publication import (
    HubSnapshot,
    PublicationFrame,
    encode_delta_publication,
    encode_snapshot_publication,
)
from cbi1kit.sim._engine import Engine, Simulator
from cbi1kit.sim._simulator import (
    SimulationResult,
    SimulatorConfig,
    config_error,
    producer_identity,
)
from cbi1kit.sim._workload import SIM_NS_MAX, Workload
from cbi1kit.wire._format import max_delta_images

DEFAULT_EPOCH_UNIX_NS: Final = 1_735_689_600 * 10**9
"""2025-01-01T00:00:00Z: the wall clock a simulated capture starts at (never the real one)."""
_MS: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class RelayConfig:
    """The simulated relay's knobs (defaults are upstream's where upstream has one)."""

    heartbeat_interval_ms: int = 10_000
    max_delta_images: int = max_delta_images()
    resubscribe_every_ms: int | None = None
    record_dc: int | None = None  # None: every DC's pool stream (the catalog always)
    subscriber_id: str = "cbi1kit-simrelay"
    target: str = "sim://kv-dc-relay"
    drt_instance_id: int = 0x5EED
    relay_incarnation: int = 1
    epoch_unix_ns: int = DEFAULT_EPOCH_UNIX_NS

    def __post_init__(self) -> None:
        if self.heartbeat_interval_ms < 1:
            raise _relay_error("heartbeat_interval_ms", self.heartbeat_interval_ms, "must be >= 1")
        if not 1 <= self.max_delta_images <= max_delta_images():
            why = f"must be in 1..={max_delta_images()}"
            raise _relay_error("max_delta_images", self.max_delta_images, why)
        if self.resubscribe_every_ms is not None and self.resubscribe_every_ms < 1:
            raise _relay_error(
                "resubscribe_every_ms", self.resubscribe_every_ms, "must be >= 1 or None"
            )
        if not 0 <= self.epoch_unix_ns <= SIM_NS_MAX:  # receive times wrapped past 2262
            raise _relay_error("epoch_unix_ns", self.epoch_unix_ns, f"must be in 0..={SIM_NS_MAX}")


def _relay_error(name: str, value: object, reason: str) -> SimulationError:
    return config_error(name, value, reason, what="relay config")


@dataclass(frozen=True, slots=True)
class SimRelayConfig:
    """Simulator (incl. every ``CkfConfig`` field) and relay knobs together."""

    simulator: SimulatorConfig = field(default_factory=SimulatorConfig)
    relay: RelayConfig = field(default_factory=RelayConfig)

    def __post_init__(self) -> None:
        dc = self.relay.record_dc
        if dc is not None and not 0 <= dc < self.simulator.dcs:
            why = f"DC {dc} does not exist ({self.simulator.dcs} DCs)"
            raise _relay_error("record_dc", dc, why)

    def to_json(self) -> dict[str, Any]:
        """Both configs as plain JSON values, ``simulator`` and ``relay`` (u64s as integers)."""
        return {"simulator": self.simulator.to_json(), "relay": dataclasses.asdict(self.relay)}


@dataclass(slots=True)
class SimRelayResult:
    """The run's figures: simulator result plus what went into the capture."""

    simulation: SimulationResult
    path: Path
    messages: int = 0
    snapshot_frames: int = 0
    delta_frames: int = 0
    heartbeats: int = 0
    streams: int = 0
    forced_snapshots: int = 0
    resubscriptions: int = 0
    catalog_updates: int = 0
    capture_bytes: int = 0
    final_sequence: dict[int, int] = field(default_factory=dict)
    #: per recorded DC, the producer's words at the end (the hub mirror is checked against them)
    final_words: dict[int, npt.NDArray[np.uint64]] = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready figures, the simulation's as a nested dict; ``final_words`` left out."""
        return {
            "path": str(self.path),
            "messages": self.messages,
            "snapshot_frames": self.snapshot_frames,
            "delta_frames": self.delta_frames,
            "heartbeats": self.heartbeats,
            "streams": self.streams,
            "forced_snapshots": self.forced_snapshots,
            "resubscriptions": self.resubscriptions,
            "catalog_updates": self.catalog_updates,
            "capture_bytes": self.capture_bytes,
            "final_sequence": dict(self.final_sequence),
            "simulation": self.simulation.as_dict(),
        }

    def __str__(self) -> str:
        return self.text()

    def text(self) -> str:
        """The figures as ``cbi1kit simulate`` prints them: the simulation's, the capture's,
        then the false positives the simulator measured (when it probed)."""
        sim = self.simulation
        rows: list[tuple[str, object]] = [
            ("requests", sim.requests),
            ("events (stored/removed/cleared)", "/".join(map(str, sim.events.values()))),
            ("event errors", sim.event_errors or "none"),
            ("hit rate", f"{sim.hit_rate:.4f}"),
            ("requests per DC", sim.requests_per_dc),
            ("deltas per DC", sim.deltas),
            ("load factor per DC", [round(a, 4) for a in sim.load_factors]),
            ("capacity failures per DC", sim.capacity_failures),
            ("simulated time", f"{(sim.end_ms - sim.start_ms) / 1000:.1f} s"),
            ("wall time", f"{sim.wall_seconds:.2f} s"),
            ("capture", f"{self.path} ({self.capture_bytes} bytes)"),
            ("messages", self.messages),
            ("snapshot frames / delta frames", f"{self.snapshot_frames} / {self.delta_frames}"),
            ("heartbeats", self.heartbeats),
            ("catalog updates", self.catalog_updates),
            (
                "streams (forced snapshots, resubscriptions)",
                f"{self.streams} ({self.forced_snapshots}, {self.resubscriptions})",
            ),
            ("final sequence per recorded DC", self.final_sequence),
        ]
        if sim.fpr is not None:
            rows += [
                ("distinct absent probes", sim.absent_probes),
                (
                    "false positives (expected 8α/65534)",
                    f"{sim.false_positives} ({sim.expected_false_positives:.1f})",
                ),
                ("measured FPR", str(sim.fpr)),
                ("estimated FPR 8α/65534", f"{sim.estimated_fpr:.2e}"),
            ]
        return table(rows, ("figure", "value"))


class _Stamp(TypedDict):
    """A record's receive times, as the capture writer takes them."""

    recv_unix_ns: int
    recv_mono_ns: int


@dataclass(slots=True)
class _Hub:
    dc: int
    identity: Any
    mirror: npt.NDArray[np.uint64]
    sequence: int
    stream: int | None = None
    last_frame_ms: int = 0


class _Relay:
    def __init__(self, writer: CaptureWriter, cfg: SimRelayConfig, result: SimRelayResult) -> None:
        self.w = writer
        self.cfg = cfg.relay
        self.info = cfg.to_json()
        self.result = result
        self.relay = RelayIdentity(self.cfg.drt_instance_id, self.cfg.relay_incarnation)
        self.hubs: dict[int, _Hub] = {}
        dcs = cfg.simulator.dcs
        self.recorded = set(range(dcs)) if self.cfg.record_dc is None else {self.cfg.record_dc}
        self.now_ns = 0  # simulated monotonic clock, strictly increasing per record
        self.next_resub: int | None = None
        self.catalog: int | None = None  # the catalog stream, when the whole fleet is recorded

    # -- clock --------------------------------------------------------------------------------
    def stamp(self, t_ms: int) -> _Stamp:
        """The next record's receive times, at ``t_ms`` or just after the last record's."""
        self.now_ns = max(self.now_ns + 1, t_ms * _MS)
        return {"recv_unix_ns": self.cfg.epoch_unix_ns + self.now_ns, "recv_mono_ns": self.now_ns}

    def send_us(self) -> int:
        return (self.cfg.epoch_unix_ns + self.now_ns) // 1000

    # -- stream ------------------------------------------------------------------------------
    def watch_catalog(self, t: int, pools: list[PoolDescriptor]) -> None:
        """The catalog stream and its one complete update: every DC's pool."""
        request = pb.WatchKvPoolCatalogRequest(
            subscriber_id=self.cfg.subscriber_id, contract_marker=RELAY_CONTRACT_MARKER
        ).SerializeToString(deterministic=True)
        self.catalog = self.w.open_stream(
            self.cfg.target,
            WATCH_KV_POOL_CATALOG_METHOD,
            request,
            info={"reason": "watch", "config": self.info},
            **self.stamp(t),
        )
        update = catalog_to_wire(PoolCatalog(self.relay, 1, tuple(pools)))
        self.w.message(self.catalog, update.SerializeToString(deterministic=True), **self.stamp(t))
        self.result.catalog_updates += 1

    def subscribe(self, t: int, hub: _Hub, reason: str) -> None:
        request = pb.SubscribeKvPoolRequest(
            subscriber_id=self.cfg.subscriber_id,
            expected_producer=producer_to_wire(hub.identity),
            contract_marker=RELAY_CONTRACT_MARKER,
        ).SerializeToString(deterministic=True)
        hub.stream = self.w.open_stream(
            self.cfg.target,
            SUBSCRIBE_KV_POOL_METHOD,
            request,
            info={"dc": hub.dc, "reason": reason, "config": self.info},
            **self.stamp(t),
        )
        self.result.streams += 1
        frames = encode_snapshot_publication(HubSnapshot(hub.identity, hub.sequence, hub.mirror))
        for frame in frames:
            self.forward(t, hub, frame)
            self.result.snapshot_frames += 1

    def close(
        self, t: int, hub: _Hub, code: int, name: str, reason: str | None, local: str | None
    ) -> None:
        assert hub.stream is not None
        self.w.close_stream(
            hub.stream,
            status_code=code,
            status_name=name,
            details=local or "",
            error_reason=reason,
            local_reason=local,
            trailing_metadata=(("kv-relay-error-reason", reason),) if reason else (),
            **self.stamp(t),
        )
        hub.stream = None

    def forward(self, t: int, hub: _Hub, frame: PublicationFrame) -> None:
        stamp = self.stamp(t)  # before the update: it is sent when it is received
        update = filter_update_from_frame(frame, self.relay, send_ts_us=self.send_us())
        assert hub.stream is not None
        self.w.message(hub.stream, update.SerializeToString(deterministic=True), **stamp)
        self.result.messages += 1
        hub.last_frame_ms = t

    def heartbeats(self, t: int) -> None:
        """Heartbeats due before ``t`` on every open stream (the timer resets on each frame)."""
        interval = self.cfg.heartbeat_interval_ms
        for hub in self.hubs.values():
            while hub.stream is not None and hub.last_frame_ms + interval <= t:
                at = hub.last_frame_ms + interval
                stamp = self.stamp(at)
                update = heartbeat_update(
                    hub.identity, hub.sequence, self.relay, send_ts_us=self.send_us()
                )
                self.w.message(hub.stream, update.SerializeToString(deterministic=True), **stamp)
                self.result.messages += 1
                self.result.heartbeats += 1
                hub.last_frame_ms = at

    def resubscriptions(self, t: int) -> None:
        every = self.cfg.resubscribe_every_ms
        if every is None or self.next_resub is None:
            return
        while self.next_resub <= t:
            at = self.next_resub
            self.next_resub += every
            self.heartbeats(at)
            for hub in self.hubs.values():
                self.close(at, hub, 1, "CANCELLED", None, "forced resubscription")
                self.result.resubscriptions += 1
                self.subscribe(at, hub, "forced resubscription")

    # -- simulator hooks -----------------------------------------------------------------------
    def on_snapshot(self, t: int, dc: int, snap: DcCkfSnapshot) -> None:
        if dc not in self.recorded:
            return
        hub = _Hub(dc, snap.identity, np.array(snap.buckets, dtype=np.uint64), snap.sequence)
        self.hubs[dc] = hub
        self.subscribe(t, hub, "subscribe")
        if self.cfg.resubscribe_every_ms is not None and self.next_resub is None:
            self.next_resub = t + self.cfg.resubscribe_every_ms

    def on_delta(self, t: int, dc: int, delta: DcCkfDelta) -> None:
        self.heartbeats(t)
        self.resubscriptions(t)
        hub = self.hubs.get(dc)
        if hub is None:
            return
        if delta.base_sequence != hub.sequence or delta.identity != hub.identity:
            raise SimulationError(
                SimulationVariant.Relay,
                f"hub for DC {dc} at sequence {hub.sequence} got delta "
                f"{delta.base_sequence}→{delta.sequence}",
            )
        hub.mirror[delta.buckets.astype(np.intp)] = delta.values
        hub.sequence = delta.sequence
        if len(delta.buckets) > self.cfg.max_delta_images:
            # recover_snapshot: fresh barrier snapshot into the mirror, every subscriber closed.
            self.close(
                t,
                hub,
                14,
                "UNAVAILABLE",
                "PUBLICATION_UNAVAILABLE",
                f"delta of {len(delta.buckets)} images exceeds {self.cfg.max_delta_images}",
            )
            self.result.forced_snapshots += 1
            self.subscribe(t, hub, "resubscribe after hub recovery")
            return
        self.forward(t, hub, encode_delta_publication(delta))
        self.result.delta_frames += 1

    def finish(self, t: int) -> None:
        self.heartbeats(t)
        for hub in self.hubs.values():
            if hub.stream is not None:
                self.close(t, hub, 0, "OK", None, "end of simulation")
            self.result.final_sequence[hub.dc] = hub.sequence
            self.result.final_words[hub.dc] = hub.mirror.copy()
        if self.catalog is not None:
            end = "end of simulation"
            self.w.close_stream(self.catalog, details=end, local_reason=end, **self.stamp(t))


def simulate_capture(
    workload: Workload,
    path: str | os.PathLike[str],
    config: SimRelayConfig | None = None,
    *,
    overwrite: bool = False,
    progress: Callable[[int], None] | None = None,
    engine: Engine = "compiled",
) -> SimRelayResult:
    """Simulate ``workload`` (every DC; ``engine``: the ``Simulator``'s, same bytes either way) and
    write what a global consumer of the fleet receives to a capture at ``path``: a ``MARK`` with the
    configuration (JSON), a catalog stream of every pool, then ``SubscribeKvPool`` streams (a new
    one per pool after a forced snapshot or resubscription) of every DC, or of
    ``RelayConfig.record_dc`` alone, as ``record --pool`` (the catalog still lists every pool, for
    ``explain``)."""
    cfg = config or SimRelayConfig()
    out = Path(path)
    # written beside it and put in place whole: a simulation cut short (Ctrl-C, a bad event,
    # a full disk) leaves no capture that reads as whole and valid
    with written_whole([out], overwrite=overwrite) as (partial,):
        result = _simulate_into(partial, out, workload, cfg, progress, engine)
    result.capture_bytes = out.stat().st_size
    return result


def _simulate_into(
    partial: Path,
    out: Path,
    workload: Workload,
    cfg: SimRelayConfig,
    progress: Callable[[int], None] | None,
    engine: Engine,
) -> SimRelayResult:
    sim = Simulator(cfg.simulator, engine=engine)
    result = SimRelayResult(sim.result, out)
    t0 = int(workload.timestamps_ms[0]) if len(workload) else 0
    clock_ns = [cfg.relay.epoch_unix_ns + t0 * _MS, t0 * _MS]

    def clock() -> tuple[int, int]:
        return clock_ns[0], clock_ns[1]

    with CaptureWriter(partial, clock=clock, flush_records=4096) as writer:
        relay = _Relay(writer, cfg, result)
        writer.write(
            RecordType.MARK,
            json.dumps(
                {"simulation": cfg.to_json(), "workload": workload.summary()},
                sort_keys=True,
                separators=(",", ":"),
                default=str,
            ).encode(),
            recv_unix_ns=clock_ns[0],
            recv_mono_ns=clock_ns[1],
        )
        relay.now_ns = clock_ns[1]
        relay.watch_catalog(t0, catalog_pools(cfg.simulator, sim, workload))
        sim.run(workload, on_snapshot=relay.on_snapshot, on_delta=relay.on_delta, progress=progress)
        relay.finish(sim.result.end_ms)
        for dc, mirror in result.final_words.items():
            result.final_words[dc] = sim.words(dc)
            if not np.array_equal(mirror, result.final_words[dc]):  # pragma: no cover
                raise SimulationError(
                    SimulationVariant.Relay,
                    f"hub mirror of DC {dc} differs from its producer's words",
                )
    return result


def catalog_pools(
    config: SimulatorConfig,
    sim: Simulator,
    workload: Workload,
    registrations: tuple[CanonicalModelRegistration, ...] | None = None,
) -> list[PoolDescriptor]:
    """Every DC's pool as the catalog describes it: the identity the simulator derives, its
    registrations (default: the base model alone), the workload's query semantics, an
    aggregated pool."""
    semantics = KvQuerySemantics(workload.block_size, workload.hash_format)
    regs = registrations or (CanonicalModelRegistration.new(config.model),)
    return [
        PoolDescriptor(
            producer_identity(config, dc, sim.format, workload.hash_format, workload.block_size),
            (config.namespace, config.component, config.endpoint),
            regs,
            semantics,
        )
        for dc in range(config.dcs)
    ]


def sample_config() -> SimRelayConfig:
    """The bundled sample's configuration (``make sample``): the whole conversation trace on
    4 DCs × 2 workers of 4,096 blocks, CKF-routed, DC 0 recorded, a forced resubscription every
    20 simulated minutes. Fixed seeds throughout, so the bytes are reproducible."""
    return SimRelayConfig(
        SimulatorConfig(dcs=4, workers_per_dc=2, capacity_blocks=4096, policy="ckf", seed=0),
        RelayConfig(resubscribe_every_ms=20 * 60 * 1000, record_dc=0),
    )
