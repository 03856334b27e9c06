"""Simulation: workloads (Mooncake, synthetic), the routed fleet simulator, the simulated relay
stream and gRPC server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import attach

if TYPE_CHECKING:
    from cbi1kit.sim._engine import Simulator as Simulator
    from cbi1kit.sim._fleet import FleetModel as FleetModel, record_fleet as record_fleet
    from cbi1kit.sim._hub import FaultPlan as FaultPlan, ServerConfig as ServerConfig
    from cbi1kit.sim._policies import POLICIES as POLICIES, RoutingPolicy as RoutingPolicy
    from cbi1kit.sim._roundtrip import (
        HashSpace as HashSpace,
        HashSpaceRoundTrip as HashSpaceRoundTrip,
        hash_space_round_trip as hash_space_round_trip,
    )
    from cbi1kit.sim._server import RelayServer as RelayServer
    from cbi1kit.sim._simrelay import (
        RelayConfig as RelayConfig,
        SimRelayConfig as SimRelayConfig,
        SimRelayResult as SimRelayResult,
        simulate_capture as simulate_capture,
    )
    from cbi1kit.sim._simulator import (
        SimulationResult as SimulationResult,
        SimulatorConfig as SimulatorConfig,
    )
    from cbi1kit.sim._workload import (
        TraceRequest as TraceRequest,
        Workload as Workload,
        read_mooncake as read_mooncake,
        read_workload as read_workload,
        synthetic_chat as synthetic_chat,
    )
else:
    __getattr__, __dir__, __all__ = attach(__name__, __file__)
