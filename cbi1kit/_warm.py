"""Compile the simulator, frames-table and replay kernels ahead of first use into numba's disk
cache, and bundle the notebooks' offline chart JavaScript into cbi1kit's.

``make`` runs this once after installing (``python -m cbi1kit._warm``), so a fresh clone does not
pay 10-20 s of compilation on its first table or replay (issue #17): a small simulated capture,
whole and torn (the damage path), goes through the frames table and replay. Never an error: caching
is an optimisation. Where the cache goes and when it is stale: docs/kernels.md.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path


def compile_ahead() -> float:
    """Build the frames table of a small simulated capture, whole and torn, and replay it; the
    seconds taken."""
    from cbi1kit.analysis._shorthands import frames_table, replay
    from cbi1kit.sim._simrelay import RelayConfig, SimRelayConfig, simulate_capture
    from cbi1kit.sim._simulator import SimulatorConfig
    from cbi1kit.sim._workload import synthetic_chat

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cbi1kit-warm-") as scratch:
        whole = Path(scratch) / "warm.kvrcap"
        config = SimRelayConfig(
            SimulatorConfig(dcs=2, workers_per_dc=1, capacity_blocks=256, policy="ckf"),
            RelayConfig(heartbeat_interval_ms=500),
        )
        simulate_capture(synthetic_chat(8, seed=1), whole, config)
        torn = Path(scratch) / "torn.kvrcap"
        data = whole.read_bytes()
        torn.write_bytes(data[: len(data) * 2 // 3])
        for path in (whole, torn):
            frames_table(path).collect()
            replay(path, keep_events=False)
    from cbi1kit.viz._display import offline_bundle

    offline_bundle()  # the notebooks' chart JavaScript, bundled once (viz._display)
    return time.perf_counter() - start


if __name__ == "__main__":
    seconds = compile_ahead()
    print(
        f"cbi1kit: kernels compiled and chart JavaScript bundled, cached, in {seconds:.1f} s",
        file=sys.stderr,
    )
