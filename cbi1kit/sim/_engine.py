"""``Simulator``: one front over the simulator's two engines, the compiled one (the default)
and the per-event reference it is held to (``docs/simulator.md``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from cbi1kit._lazy import compiled
from cbi1kit.hashing._identity import DcCkfFormatIdentity, ProducerIdentity
from cbi1kit.sim._simulator import (
    DeltaHook,
    EventHook,
    ProgressHook,
    ReferenceSimulator,
    SimulationResult,
    SimulatorConfig,
    SnapshotHook,
    config_error,
)
from cbi1kit.sim._workload import Workload

if TYPE_CHECKING:
    from cbi1kit.sim._compiled import CompiledSimulator

Engine = Literal["compiled", "reference"]


class Simulator:
    """Runs a :class:`Workload` through DC pools of LRU workers, a router and CKF producers, once.
    ``engine="compiled"`` (default) runs the per-request path as numba kernels, ``"reference"`` one
    event at a time in Python; both give the same :class:`SimulationResult` and hooks:
    ``on_snapshot(time_ms, dc, snapshot)`` once per DC first, ``on_delta(time_ms, dc, delta)`` per
    published batch, ``progress(n)`` every ``n`` requests; ``on_event(time_ms, dc, event, outcome)``
    needs the reference. See docs/simulator.md."""

    def __init__(self, config: SimulatorConfig | None = None, *, engine: Engine = "compiled"):
        if engine not in ("compiled", "reference"):
            raise config_error(
                "engine", engine, "must be 'compiled' or 'reference'", what="simulator"
            )
        self.config = config or SimulatorConfig()
        kernels = compiled("cbi1kit.sim._compiled") if engine == "compiled" else None
        self._impl: ReferenceSimulator | CompiledSimulator = (
            ReferenceSimulator(self.config)
            if kernels is None
            else kernels.CompiledSimulator(self.config)
        )
        self.engine: Engine = "reference" if kernels is None else "compiled"

    def __repr__(self) -> str:
        return f"Simulator({self.config!r}, engine={self.engine!r})"

    @property
    def result(self) -> SimulationResult:
        """The run's result (filled in by :meth:`run`)."""
        return self._impl.result

    @property
    def format(self) -> DcCkfFormatIdentity:
        """The CKF format every DC's producer publishes under."""
        return self._impl.format

    @property
    def identities(self) -> list[ProducerIdentity]:
        """Each DC's producer identity (after :meth:`run` has started)."""
        return self._impl.identities

    def words(self, dc: int) -> npt.NDArray[np.uint64]:
        """DC ``dc``'s producer words after the run (a copy)."""
        return self._impl.words(dc)

    def lane_words(self, dc: int) -> npt.NDArray[np.uint64]:
        """The global consumer's lane ``dc`` after the run (a copy): what the DC published."""
        return self._impl.lane_words(dc)

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
        return self._impl.run(
            workload,
            on_snapshot=on_snapshot,
            on_delta=on_delta,
            on_event=on_event,
            progress=progress,
            progress_every=progress_every,
            health_every=health_every,
        )
