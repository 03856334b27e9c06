"""Simulation: workloads (Mooncake, synthetic), the routed fleet simulator, the simulated relay
stream and gRPC server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cbi1kit.sim._roundtrip import (
    HashSpace,
    HashSpaceRoundTrip,
    SpaceResult,
    hash_space_round_trip,
)
from cbi1kit.sim._simrelay import (
    DEFAULT_EPOCH_UNIX_NS,
    SAMPLE_CAPTURE,
    SAMPLE_TRACE,
    RelayConfig,
    SimRelayConfig,
    SimRelayResult,
    sample_config,
    simulate_capture,
)
from cbi1kit.sim._simulator import (
    POLICIES,
    Member,
    RoutingPolicy,
    SimulationResult,
    Simulator,
    SimulatorConfig,
    producer_identity,
)
from cbi1kit.sim._workload import (
    MOONCAKE_BLOCK_SIZE,
    HashSpaceName,
    Workload,
    concat,
    mooncake_local_hashes,
    read_mooncake,
    read_workload,
    synthetic_chat,
)

if TYPE_CHECKING:
    from cbi1kit.sim._server import (
        DEFAULT_HEARTBEAT_INTERVAL,
        QUEUE_BYTES,
        QUEUE_FRAMES,
        FaultPlan,
        FrameListFeed,
        PoolFeed,
        ProducerFeed,
        RelayServer,
        ServerConfig,
        SubscriberStats,
        reason_status,
        simulated_pool,
        trace_feed,
    )

# heavy imports (altair, grpc) load on first use
_LAZY = {
    "DEFAULT_HEARTBEAT_INTERVAL": "_server",
    "FaultPlan": "_server",
    "FrameListFeed": "_server",
    "PoolFeed": "_server",
    "ProducerFeed": "_server",
    "QUEUE_BYTES": "_server",
    "QUEUE_FRAMES": "_server",
    "RelayServer": "_server",
    "ServerConfig": "_server",
    "SubscriberStats": "_server",
    "reason_status": "_server",
    "simulated_pool": "_server",
    "trace_feed": "_server",
}

__all__ = [
    "DEFAULT_EPOCH_UNIX_NS",
    "DEFAULT_HEARTBEAT_INTERVAL",
    "MOONCAKE_BLOCK_SIZE",
    "POLICIES",
    "QUEUE_BYTES",
    "QUEUE_FRAMES",
    "SAMPLE_CAPTURE",
    "SAMPLE_TRACE",
    "FaultPlan",
    "FrameListFeed",
    "HashSpace",
    "HashSpaceName",
    "HashSpaceRoundTrip",
    "Member",
    "PoolFeed",
    "ProducerFeed",
    "RelayConfig",
    "RelayServer",
    "RoutingPolicy",
    "ServerConfig",
    "SimRelayConfig",
    "SimRelayResult",
    "SimulationResult",
    "Simulator",
    "SimulatorConfig",
    "SpaceResult",
    "SubscriberStats",
    "Workload",
    "concat",
    "hash_space_round_trip",
    "mooncake_local_hashes",
    "producer_identity",
    "read_mooncake",
    "read_workload",
    "reason_status",
    "sample_config",
    "simulate_capture",
    "simulated_pool",
    "synthetic_chat",
    "trace_feed",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
