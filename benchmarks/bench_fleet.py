"""Fleet conversion on Dask: 8 seeded captures into the partitioned dataset, on a 2-worker local
cluster, against the single-process conversion measured in the same run.

Eight captures are simulated (seeded: ``synthetic_chat`` traces through 2-DC fleets, each with
its own seed and relay) into a temp dir. Then, for ``--rounds`` rounds on the shared harness
(alternating which side goes first), each into a fresh dataset directory:

* baseline: ``cbi1kit.export_dataset`` of the 8 captures in this process (one after the other);
* fleet: ``cbi1kit.fleet.convert`` of the same captures on ``fleet.client()`` (a
  ``LocalCluster`` of 2 worker processes, one thread each, on loopback; started once, before the
  rounds, and warmed by one conversion, as a long-lived cluster is);

best and median of each by wall time (the goal's clock: the work is in other processes) and by
CPU time (the fleet's: both workers and this process), and the speed-up (baseline / fleet).
Every fleet dataset is checked against the baseline's: the same files, and every table the
same rows.

Target (#16): speed-up ≥ 1.6× with identical output.

    .venv/bin/python benchmarks/bench_fleet.py [--requests 2500] [--rounds 5] [--quick]
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from _harness import Comparison, Report, compare_processes, parser

from cbi1kit import fleet
from cbi1kit.analysis import export_dataset, open_dataset
from cbi1kit.analysis._schema import DATASET_TABLES
from cbi1kit.fleet._cluster import DEFAULT_WORKERS
from cbi1kit.sim import RelayConfig, SimRelayConfig, SimulatorConfig, simulate_capture
from cbi1kit.sim._workload import synthetic_chat

CAPTURES = 8


def make_captures(root: Path, requests: int) -> list[Path]:
    paths = []
    for i in range(CAPTURES):
        cfg = SimRelayConfig(
            SimulatorConfig(
                dcs=2, workers_per_dc=2, capacity_blocks=1024, policy="ckf", seed=100 + i
            ),
            RelayConfig(heartbeat_interval_ms=2_000, drt_instance_id=0x100 + i),
        )
        path = root / f"capture-{i}.kvrcap"
        simulate_capture(synthetic_chat(requests, seed=100 + i), path, cfg)
        paths.append(path)
    return paths


def cpu_seconds() -> float:
    """This process's CPU time, its threads included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def same_output(a: Path, b: Path) -> None:
    da, db = open_dataset(a), open_dataset(b)
    for table in DATASET_TABLES:
        fa = {p.relative_to(a) for p in da.files(table)}
        fb = {p.relative_to(b) for p in db.files(table)}
        if fa != fb:
            sys.exit(f"{table}: the fleet wrote other files than the single process")
        ra = da.tables[table].collect().sort(pl.all())
        rb = db.tables[table].collect().sort(pl.all())
        if not ra.equals(rb):
            sys.exit(f"{table}: the fleet's rows differ from the single process's")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--requests", type=int, default=2500, help="trace requests per capture")
    args = ap.parse_args()
    requests = 150 if args.quick else args.requests
    rounds = args.rounds or (1 if args.quick else 5)  # a median of 5: this figure is noisy
    report = Report("bench_fleet: fleet conversion on Dask", args.quick)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        captures = make_captures(root, requests)
        size = sum(p.stat().st_size for p in captures)
        print(
            f"{CAPTURES} captures, {size / (1 << 20):.1f} MiB, simulated in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        with fleet.client() as client:
            print(f"cluster: 2 worker processes, dashboard {fleet.dashboard_link(client)}")
            fleet.convert(captures[:2], root / "warm", client=client)  # workers load the kernels
            export_dataset(captures[:2], root / "warm-local")  # and so does this process
            pairs: list[tuple[Path, Path]] = []

            def single() -> tuple[float, float]:
                out = root / f"local-{len(pairs)}"
                t, c = time.perf_counter(), cpu_seconds()
                export_dataset(captures, out)
                return cpu_seconds() - c, time.perf_counter() - t

            def on_fleet() -> tuple[float, float]:
                out = root / f"fleet-{len(pairs)}"
                before = sum(client.run(cpu_seconds).values()) + cpu_seconds()
                t = time.perf_counter()
                fleet.convert(captures, out, client=client)
                wall = time.perf_counter() - t
                return sum(client.run(cpu_seconds).values()) + cpu_seconds() - before, wall

            def round_of(side: str) -> tuple[float, float]:
                timing = single() if side == "single" else on_fleet()
                done = {p.name for p in root.iterdir()}
                if f"local-{len(pairs)}" in done and f"fleet-{len(pairs)}" in done:
                    pair = (root / f"local-{len(pairs)}", root / f"fleet-{len(pairs)}")
                    same_output(*pair)
                    pairs.append(pair)
                    for out in pair:
                        shutil.rmtree(out)
                return timing

            cand, base = compare_processes(
                lambda: round_of("fleet"), lambda: round_of("single"), rounds=rounds
            )
    cores = min(os.cpu_count() or 1, DEFAULT_WORKERS)
    floor = cand.cpu_median / cores
    report.figure(
        Comparison(
            f"fleet conversion of {CAPTURES} captures ({size / (1 << 20):.1f} MiB)",
            cand,
            base,
            "2-worker LocalCluster",
            "one process",
        ),
        goal_ratio=1.6,
        clock="wall",
        note=(
            f"CPU seconds per wall second: one process {sum(base.cpu) / sum(base.wall):.2f} "
            f"(its threads included), fleet {sum(cand.cpu) / sum(cand.wall):.2f} (both workers "
            f"and this process); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
            f"cores; output identical in all {len(pairs)} rounds (every table's rows and files). "
            f"Ceiling here: the fleet's {cand.cpu_median:.2f} s of CPU take at least "
            f"{floor:.2f} s of wall on {cores} cores, so the speed-up cannot pass "
            f"{base.wall_median / floor:.2f}x (the one process's wall / that floor)"
        ),
    )
    report.done()


if __name__ == "__main__":
    main()
