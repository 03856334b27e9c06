"""Simulate the Mooncake conversation trace (12,031 requests).

Figure 1, per router (``exact`` and ``ckf``, 4 DCs x 2 workers x 4,096 blocks): the compiled
simulator (``Simulator(config).run``: LRU workers, routing, the producers' filters with kicks
and publication, the consumer's prefix search, every figure and log) against **reading and
hashing the trace** (``read_mooncake``: JSON, then each block's local and sequence hash), the
work any question about the trace starts with. Goal: at most 5x that, by CPU median (ratio
>= 0.2). The per-event reference engine's time on the same run is printed beside (one round:
it is the slow path the compiled one is held to).

Figure 2: ``simulate_capture`` (the simulator, every DC's producer and relay, the capture
written) in the bundled sample's configuration and in a 1-DC, 8-worker pool, against the
simulator alone with exact routing: what the relay and the capture add. Goal: the sample
configuration in under 60 s.

Alternating rounds (``_harness``).

    .venv/bin/python benchmarks/bench_simulate.py [--quick] [--rounds N]
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import TRACE, Comparison, Report, compare, parser, time_once

from cbi1kit.sim._engine import Simulator
from cbi1kit.sim._simrelay import RelayConfig, SimRelayConfig, sample_config, simulate_capture
from cbi1kit.sim._simulator import SimulatorConfig
from cbi1kit.sim._workload import Workload, read_mooncake


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
    against_reading(report, workload, limit, rounds=args.rounds or (2 if args.quick else 7))
    base_cfg = dataclasses.replace(sample_config().simulator, policy="exact")
    one_dc = SimRelayConfig(
        SimulatorConfig(dcs=1, workers_per_dc=8, capacity_blocks=4096, policy="ckf"), RelayConfig()
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


def against_reading(report: Report, workload: Workload, limit: int | None, rounds: int) -> None:
    """Figure 1: the compiled simulator per router against reading and hashing the trace."""
    for policy in ("exact", "ckf"):
        config = SimulatorConfig(dcs=4, workers_per_dc=2, capacity_blocks=4096, policy=policy)
        last: dict[str, Any] = {}

        def simulate(config: SimulatorConfig = config, last: dict[str, Any] = last) -> None:
            last["result"] = Simulator(config).run(workload)

        def read() -> None:
            read_mooncake(TRACE, limit=limit)

        cand, base = compare(simulate, read, rounds=rounds, min_seconds=0.0)
        ref_cpu, _, _ = time_once(
            lambda config=config: Simulator(config, engine="reference").run(workload)
        )
        sim = last["result"]
        report.figure(
            Comparison(
                f"simulate the trace, {policy} router [{sim.total_events:,} events]",
                cand,
                base,
                "the compiled simulator",
                "reading and hashing the trace",
            ),
            goal_ratio=0.2,
            note=f"the reference engine: {ref_cpu:.2f} s by CPU "
            f"({ref_cpu / cand.cpu_median:.0f}x the compiled one); the compiled one is "
            f"{cand.cpu_median / base.cpu_median:.2f}x the reading; hit rate {sim.hit_rate:.4f}",
        )


if __name__ == "__main__":
    main()
