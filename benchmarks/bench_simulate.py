"""Simulate the Mooncake conversation trace (12,031 requests) to a capture.

Candidate: ``simulate_capture`` (the simulator, every DC's producer and relay, the capture
written) in the bundled sample's configuration (``sample_config()``: 4 DCs x 2 workers x 4,096
blocks, CKF-routed) and in a 1-DC, 8-worker pool recording every publication. Baseline: **the
simulation alone** (``Simulator.run`` with exact routing: no relay, no capture, no filter
probes) on the same workload: what any simulation of this trace costs, so the ratio is what
the filter, the relay and the capture add. Alternating rounds (``_harness``); reading the trace
into a workload is printed beside (no goal).

Goal: the sample configuration in under 60 s (by CPU median; wall time beside it) on a 2-core
machine.

    .venv/bin/python benchmarks/bench_simulate.py [--quick] [--rounds N]
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import TRACE, Comparison, Report, compare, parser

from cbi1kit.sim._simrelay import RelayConfig, SimRelayConfig, sample_config, simulate_capture
from cbi1kit.sim._simulator import Simulator, SimulatorConfig
from cbi1kit.sim._workload import read_mooncake


def main() -> None:
    args = parser(__doc__).parse_args()
    report = Report("bench_simulate: the trace simulated to a capture", args.quick)
    rounds = args.rounds or (1 if args.quick else 2)
    limit = 1_000 if args.quick else None
    t0 = time.perf_counter()
    workload = read_mooncake(TRACE, limit=limit)
    print(
        f"trace: {len(workload):,} requests, {workload.total_blocks:,} blocks, read in "
        f"{time.perf_counter() - t0:.2f} s"
    )
    base_cfg = dataclasses.replace(sample_config().simulator, policy="exact")
    one_dc = SimRelayConfig(
        SimulatorConfig(dcs=1, workers_per_dc=8, capacity_blocks=4096, policy="ckf"),
        RelayConfig(),
    )
    for name, cfg, goal in (
        ("sample config (4 DCs, ckf)", sample_config(), 60.0),
        ("1 DC x 8 workers", one_dc, None),
    ):
        last: dict[str, Any] = {}

        def simulate(cfg: SimRelayConfig = cfg, last: dict[str, Any] = last) -> None:
            with tempfile.TemporaryDirectory() as tmp:
                last["result"] = simulate_capture(workload, Path(tmp) / "bench.kvrcap", cfg)

        def baseline() -> None:
            Simulator(base_cfg).run(workload)

        cand, base = compare(simulate, baseline, rounds=rounds, min_seconds=0.0)
        res = last["result"]
        sim = res.simulation
        frames = res.snapshot_frames + res.delta_frames + res.heartbeats
        fpr = "" if sim.fpr is None else f"; CKF FPR {sim.fpr}, 8α/65534 = {sim.estimated_fpr:.2e}"
        report.figure(
            Comparison(
                f"simulate, {name} [{sim.total_events:,} events]",
                cand,
                base,
                "simulate_capture",
                "the simulator alone (exact routing, no relay)",
            ),
            goal_time=goal,
            note=f"{sim.total_events / cand.cpu_median:,.0f} events/s by CPU; {frames:,} frames "
            f"({res.snapshot_frames} snapshot, {res.delta_frames:,} delta, {res.heartbeats} "
            f"heartbeat), capture {res.capture_bytes / 2**20:.2f} MiB, hit rate "
            f"{sim.hit_rate:.4f}{fpr}",
        )
    report.done()


if __name__ == "__main__":
    main()
