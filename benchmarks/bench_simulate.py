"""Simulate the full Mooncake conversation trace (12,031 requests) to a capture.

Figures: wall time (target < 60 s on a 2-core machine), events/s, frames, capture size, beside
two baselines measured in the same run: the simulation alone (no relay, no capture; exact
routing, so no filter probes) and reading the trace into a workload.

Configuration: the bundled sample's (``sample_config()``: 4 DCs × 2 workers × 4,096 blocks,
CKF-routed, DC 0 recorded), plus one run recording every publication of a 1-DC, 8-worker pool.

Run: ``.venv/bin/python benchmarks/bench_simulate.py`` (or ``make bench``).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

from cbi1kit.sim._simrelay import RelayConfig, SimRelayConfig, sample_config, simulate_capture
from cbi1kit.sim._simulator import Simulator, SimulatorConfig
from cbi1kit.sim._workload import read_mooncake

TRACE = Path(__file__).parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def main() -> None:
    t0 = time.perf_counter()
    workload = read_mooncake(TRACE)
    t_read = time.perf_counter() - t0
    print(
        f"trace: {len(workload)} requests, {workload.total_blocks} blocks, read in {t_read:.2f} s"
    )

    base_cfg = dataclasses.replace(sample_config().simulator, policy="exact")
    t0 = time.perf_counter()
    base = Simulator(base_cfg).run(workload)
    t_base = time.perf_counter() - t0
    print(
        f"baseline  simulator only (exact routing, no relay): {t_base:6.2f} s, "
        f"{base.total_events / t_base:,.0f} events/s"
    )

    one_dc = SimRelayConfig(
        SimulatorConfig(dcs=1, workers_per_dc=8, capacity_blocks=4096, policy="ckf"),
        RelayConfig(),
    )
    for name, cfg in (
        ("sample config (4 DCs, ckf)", sample_config()),
        ("1 DC x 8 workers", one_dc),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "bench.kvrcap"
            t0 = time.perf_counter()
            res = simulate_capture(workload, out, cfg)
            wall = time.perf_counter() - t0
        sim = res.simulation
        frames = res.snapshot_frames + res.delta_frames + res.heartbeats
        print(
            f"simulate  {name}: {wall:6.2f} s wall (target < 60 s), "
            f"{sim.total_events:,} events = {sim.total_events / wall:,.0f} events/s, "
            f"{frames:,} frames ({res.snapshot_frames} snapshot, {res.delta_frames:,} delta, "
            f"{res.heartbeats} heartbeat), capture {res.capture_bytes / 2**20:.2f} MiB, "
            f"hit rate {sim.hit_rate:.4f}, ratio to baseline {wall / t_base:.2f}x"
        )
        if sim.fpr is not None:
            print(f"          CKF: FPR {sim.fpr}; 8α/65534 = {sim.estimated_fpr:.2e}")
        assert wall < 60, "target missed"


if __name__ == "__main__":
    main()
