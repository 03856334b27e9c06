"""Simulation: workloads (Mooncake, synthetic), the routed fleet simulator, the simulated relay
stream and gRPC server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_getattr, lazy_names
from cbi1kit.sim import _roundtrip, _simrelay, _simulator, _workload
from cbi1kit.sim._roundtrip import *  # noqa: F403
from cbi1kit.sim._simrelay import *  # noqa: F403
from cbi1kit.sim._simulator import *  # noqa: F403
from cbi1kit.sim._workload import *  # noqa: F403

if TYPE_CHECKING:
    from cbi1kit.sim._fleet import *  # noqa: F403
    from cbi1kit.sim._server import *  # noqa: F403

# altair and grpc load on first use; the names are each module's __all__ (a test checks)
_SERVER = (
    "DEFAULT_HEARTBEAT_INTERVAL",
    "MALFORMED_MESSAGE",
    "QUEUE_BYTES",
    "QUEUE_FRAMES",
    "FaultPlan",
    "FrameListFeed",
    "PoolFeed",
    "PoolLoad",
    "ProducerFeed",
    "ReceivedCall",
    "RelayServer",
    "ServerConfig",
    "SubscriberStats",
    "reason_status",
    "simulated_pool",
    "trace_feed",
)
_FLEET = ("FleetModel", "FleetPools", "fleet_pools", "fleet_server", "record_fleet")
_LAZY = {**lazy_names("_server", _SERVER), **lazy_names("_fleet", _FLEET)}

__all__: list[str] = []
__all__ += _workload.__all__
__all__ += _simulator.__all__
__all__ += _simrelay.__all__
__all__ += _roundtrip.__all__
__all__ += _SERVER  # noqa: PLE0605 (a tuple of str, defined above)
__all__ += _FLEET  # noqa: PLE0605 (a tuple of str, defined above)

__getattr__ = lazy_getattr(__name__, _LAZY)
