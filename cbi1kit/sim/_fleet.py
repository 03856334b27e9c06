"""A simulated fleet: several models, each served on every DC, as one relay publishes them.

Each :class:`FleetModel` is simulated on its own (its workload in its hash space, over ``dcs`` DCs)
and every DC of every model becomes one pool feed of a :class:`~cbi1kit.sim.RelayServer`, so
``serve`` → ``record`` captures what a global router would see. In the LoRA hash space a pool also
registers each adapter under its alias, so a request naming the alias resolves to the adapter whose
name salts its blocks (hashing.md §4). Catalog entries are the simulator's own
(``_simrelay.catalog_pools``), so identities match what the simulator derives.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cbi1kit.errors import SimulationError, SimulationVariant
from cbi1kit.hashing._models import CanonicalModelRegistration, ModelTarget
from cbi1kit.relay._messages import descriptor_to_wire
from cbi1kit.sim._feeds import FrameListFeed, frame_feed, simulated_frames
from cbi1kit.sim._hub import ServerConfig
from cbi1kit.sim._policies import RoutingPolicy
from cbi1kit.sim._server import RelayServer
from cbi1kit.sim._simrelay import catalog_pools
from cbi1kit.sim._simulator import SimulatorConfig
from cbi1kit.sim._workload import HashSpaceName, Workload, synthetic_chat


@dataclass(frozen=True)
class FleetModel:
    """One model of the fleet: its name, hash space and synthetic chat workload.

    ``lora_aliases`` maps each LoRA adapter (its canonical name, the hash salt) to the alias
    requests name it by; only the ``"lora"`` hash space runs adapter sessions.
    """

    model: str
    hash_space: HashSpaceName = "standard"
    lora_aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    sessions: int = 60
    seed: int = 0

    def registrations(self) -> tuple[CanonicalModelRegistration, ...]:
        """The base model, then each adapter as a LoRA target on it under its alias."""
        base = CanonicalModelRegistration.new(self.model)
        adapters = tuple(
            CanonicalModelRegistration.with_target(
                adapter, ModelTarget.lora(self.model, adapter), [alias]
            )
            for adapter, alias in sorted(self.lora_aliases.items())
        )
        return (base, *adapters)

    def workload(self) -> Workload:
        """The model's synthetic chat workload: ``sessions`` sessions from ``seed``."""
        adapters = tuple(sorted(self.lora_aliases)) or ("adapter-a",)
        return synthetic_chat(
            self.sessions, hash_space=self.hash_space, lora_names=adapters, seed=self.seed
        )


@dataclass(frozen=True)
class FleetPools:
    """Each model's workload and, per model, one feed per DC (DC order)."""

    models: tuple[FleetModel, ...]
    workloads: Mapping[str, Workload]
    feeds: Mapping[str, tuple[FrameListFeed, ...]]

    def all_feeds(self) -> list[FrameListFeed]:
        """Every model's feeds, in model order."""
        return [feed for model in self.models for feed in self.feeds[model.model]]


def fleet_pools(
    models: Sequence[FleetModel],
    *,
    dcs: int = 4,
    workers_per_dc: int = 2,
    capacity_blocks: int = 2048,
    policy: RoutingPolicy = "ckf",
    seed: int = 0,
) -> FleetPools:
    """Simulate each model over ``dcs`` DCs; every DC's publications become a pool feed."""
    names = [m.model for m in models]
    if not models or len(set(names)) != len(names):
        raise SimulationError(
            SimulationVariant.Config, f"a fleet needs distinct models, got {names}"
        )
    workloads: dict[str, Workload] = {}
    feeds: dict[str, tuple[FrameListFeed, ...]] = {}
    for model in models:
        config = SimulatorConfig(
            dcs=dcs,
            workers_per_dc=workers_per_dc,
            capacity_blocks=capacity_blocks,
            policy=policy,
            seed=seed,
            model=model.model,
        )
        workload = model.workload()
        workloads[model.model] = workload
        feeds[model.model] = _model_feeds(config, workload, model.registrations())
    return FleetPools(tuple(models), MappingProxyType(workloads), MappingProxyType(feeds))


def _model_feeds(
    config: SimulatorConfig,
    workload: Workload,
    registrations: tuple[CanonicalModelRegistration, ...],
) -> tuple[FrameListFeed, ...]:
    sim, first, frames = simulated_frames(config, workload, range(config.dcs))
    pools = catalog_pools(config, sim, workload, registrations)
    out = []
    for dc, pool in enumerate(pools):
        snap = first.get(dc)
        if snap is None:  # pragma: no cover - the simulator installs every DC's lane first
            raise SimulationError(
                SimulationVariant.Relay, f"model {config.model}: DC {dc} never published"
            )
        out.append(frame_feed(config, snap, frames[dc], descriptor_to_wire(pool)))
    return tuple(out)


def fleet_server(
    models: Sequence[FleetModel],
    *,
    dcs: int = 4,
    server_config: ServerConfig | None = None,
    pace: float = 0.005,
    **simulation: Any,
) -> tuple[RelayServer, FleetPools]:
    """A simulated relay serving every pool of the fleet (not started), and the pools behind it
    (their workloads, and each feed's ``words()``: the producer's lane a replay must reach)."""
    pools = fleet_pools(models, dcs=dcs, **simulation)
    config = replace(server_config or ServerConfig(), pace=pace)
    return RelayServer(pools.all_feeds(), config), pools


#: the kinds a pool's stream carries once its snapshot is in (its last sequence is then live)
_LIVE = ("FILTER_UPDATE_KIND_DELTA", "FILTER_UPDATE_KIND_HEARTBEAT")


def record_fleet(
    models: Sequence[FleetModel],
    capture: str | os.PathLike[str],
    *,
    dcs: int = 4,
    overwrite: bool = False,
    timeout: float = 120.0,
    **simulation: Any,
) -> FleetPools:
    """Serve the fleet on loopback and record it with the recorder, as ``cbi1kit serve`` →
    ``cbi1kit record`` would, until every pool has published everything and its stream has
    received it; returns the pools (the producers' lanes, the workloads). The capture holds
    every pool's stream with the catalog, readiness and load planes beside them."""
    from cbi1kit.relay._recorder import Recorder
    from cbi1kit.relay._session import RecorderConfig, pool_key_text

    path = Path(capture)
    if path.exists() and not overwrite:
        raise SimulationError(
            SimulationVariant.Config, f"{path} exists (pass overwrite=True to replace it)"
        )
    if overwrite:
        path.unlink(missing_ok=True)
    server, pools = fleet_server(models, dcs=dcs, **simulation)
    feeds = pools.all_feeds()
    keys = [pool_key_text(feed.descriptor().producer.pool_id) for feed in feeds]
    with server:
        recorder = Recorder(RecorderConfig(server.address, path, status=False, seed=0))
        worker = threading.Thread(target=recorder.run, daemon=True)
        worker.start()

        def caught_up() -> bool:
            got = {p.pool: p for p in recorder.report.pools}
            return all(
                server.pool_exhausted(i)
                and key in got
                and got[key].last_kind in _LIVE
                and got[key].last_sequence == feed.sequence
                for i, (key, feed) in enumerate(zip(keys, feeds, strict=True))
            )

        deadline = time.monotonic() + timeout
        while not caught_up() and worker.is_alive():
            if time.monotonic() > deadline:
                recorder.stop("timed out")
                worker.join(10)
                raise SimulationError(
                    SimulationVariant.Relay, f"the fleet was not recorded within {timeout} s"
                )
            time.sleep(0.05)
        recorder.stop("the fleet has published everything")
        worker.join(10)
    return pools
