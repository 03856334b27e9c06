"""Simulation: workloads (Mooncake, synthetic), the routed fleet simulator, the simulated relay
stream and gRPC server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cbi1kit._lazy import lazy_stage

if TYPE_CHECKING:
    from cbi1kit.sim._fleet import *  # noqa: F403
    from cbi1kit.sim._policies import *  # noqa: F403
    from cbi1kit.sim._roundtrip import *  # noqa: F403
    from cbi1kit.sim._server import *  # noqa: F403
    from cbi1kit.sim._simrelay import *  # noqa: F403
    from cbi1kit.sim._simulator import *  # noqa: F403
    from cbi1kit.sim._workload import *  # noqa: F403

#: the modules whose ``__all__`` is this stage's surface, in order; each loads on first use
MODULES = ("_policies", "_workload", "_simulator", "_simrelay", "_roundtrip", "_server", "_fleet")
__getattr__, __dir__ = lazy_stage(__name__, MODULES)
