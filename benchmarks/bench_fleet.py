"""Fleet conversion on Dask: 8 seeded captures into the partitioned dataset, on a 2-worker local
cluster, against the single-process conversion measured in the same run.

Eight captures are simulated (seeded: ``synthetic_chat`` traces through 2-DC fleets, each with
its own seed and relay) into a temp dir. Then, alternating for ``--rounds`` rounds, each into a
fresh dataset directory:

* baseline: ``cbi1kit.export_dataset`` of the 8 captures in this process (one after the other);
* fleet: ``cbi1kit.fleet.convert`` of the same captures on ``fleet.client()`` (a
  ``LocalCluster`` of 2 worker processes, one thread each, on loopback; started once, before the
  rounds, and warmed by one conversion, as a long-lived cluster is);

best and median wall time of each, and the speed-up (baseline / fleet). Every fleet dataset is
checked against the baseline's: the same files, and every table the same rows.

Target (#16): speed-up ≥ 1.6× with identical output.

    .venv/bin/python benchmarks/bench_fleet.py [--requests 2500] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from cbi1kit import fleet
from cbi1kit.analysis import DATASET_TABLES, export_dataset, open_dataset
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
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2500, help="trace requests per capture")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small captures, one round (CI smoke)")
    args = ap.parse_args()
    if args.quick:
        args.requests, args.rounds = 150, 1
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        captures = make_captures(root, args.requests)
        size = sum(p.stat().st_size for p in captures)
        print(
            f"{CAPTURES} captures, {size / (1 << 20):.1f} MiB, simulated in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        with fleet.client() as client:
            print(f"cluster: 2 worker processes, dashboard {fleet.dashboard_link(client)}")
            fleet.convert(captures[:2], root / "warm", client=client)  # workers load the kernels
            export_dataset(captures[:2], root / "warm-local")  # and so does this process
            base: list[float] = []
            dask: list[float] = []
            base_cpu: list[float] = []
            dask_cpu: list[float] = []
            for r in range(args.rounds):
                local_out, fleet_out = root / f"local-{r}", root / f"fleet-{r}"
                t, c = time.perf_counter(), cpu_seconds()
                export_dataset(captures, local_out)
                base.append(time.perf_counter() - t)
                base_cpu.append(cpu_seconds() - c)
                before = sum(client.run(cpu_seconds).values())
                t = time.perf_counter()
                fleet.convert(captures, fleet_out, client=client)
                dask.append(time.perf_counter() - t)
                dask_cpu.append(sum(client.run(cpu_seconds).values()) - before)
                same_output(local_out, fleet_out)
                shutil.rmtree(local_out)
                if r:
                    shutil.rmtree(fleet_out)
    print(f"{'':<34}{'best':>9}{'median':>9}")
    print(f"{'baseline: single process':<34}{min(base):>8.2f}s{statistics.median(base):>8.2f}s")
    print(f"{'fleet: 2-worker LocalCluster':<34}{min(dask):>8.2f}s{statistics.median(dask):>8.2f}s")
    best, median = min(base) / min(dask), statistics.median(base) / statistics.median(dask)
    print(f"speed-up (baseline / fleet): best {best:.2f}x, median {median:.2f}x (target >= 1.6x)")
    print(
        f"CPU seconds per wall second: baseline {sum(base_cpu) / sum(base):.2f} (this process, "
        f"its threads included), fleet {sum(dask_cpu) / sum(dask):.2f} (both workers); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print("output: identical (every table's rows and files)")


if __name__ == "__main__":
    main()
