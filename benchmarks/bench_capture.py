"""One capture, opened once (#27): everything on one ``Capture`` against each job alone, and a
refresh after an append against opening the whole capture again.

For each mix of ``_harness.MIXES`` a seeded capture is generated (``bench_tables.generate_mix``,
256 MiB, ``--quick`` 4 MiB) and measured in a fresh process (its memory is not the generator's):

* **one capture**: ``c = ck.open(path)``, then ``c.frames.collect()``, ``c.images.collect()``,
  ``c.snapshots.collect()`` and ``c.replay()`` against ``frames_table(path).collect()`` plus
  ``ck.replay(path)``, each alone: what the two passes a user needs at least cost. The tables
  of images and snapshots come from the replay the capture keeps, so the whole is one scan
  (printed; ``tests/test_capture_object.py`` counts it). Goal <= 1.3x (ratio >= 0.77x).
* **refresh**: the capture's first 99 % (cut at a record, as a recorder flushes) opened and
  replayed with its tables, then the last 1 % appended: ``c.refresh()`` (which carries the
  frames table and the replay on) against ``ck.open(path)`` + ``.frames.collect()`` +
  ``.replay()`` of the whole file. Each round writes the 99 % file afresh, untimed. Goal: the
  refresh <= 3 % of the whole (ratio >= 33x).

    .venv/bin/python benchmarks/bench_capture.py [--quick] [--size-mib 256] [--rounds N]
        [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from _harness import (
    MIXES,
    Comparison,
    MiB,
    Report,
    Timing,
    add_keep,
    child_json,
    compare,
    compare_processes as compare_rounds,
    parser,
)
from bench_tables import generate_mix

GOAL_ONCE = 1 / 1.3  # everything on one Capture <= 1.3x the frames table + replay alone
GOAL_REFRESH = 1 / 0.03  # a refresh after a 1 % append <= 3 % of opening it all again
APPENDED = 0.01


def _everything(path: Path) -> int:
    import cbi1kit as ck

    c = ck.open(path)
    c.frames.collect()
    c.images.collect()
    c.snapshots.collect()
    c.replay()
    return c.scans


def _alone(path: Path) -> None:
    import cbi1kit as ck

    ck.frames_table(path).collect()
    ck.replay(path)


def _whole(path: Path) -> None:
    import cbi1kit as ck

    c = ck.open(path)
    c.frames.collect()
    c.replay()


def _cut(path: Path) -> int:
    """The offset of the first record at or past 99 % of the file."""
    from cbi1kit.capture._scan import FileScan, Stretch

    want = int(path.stat().st_size * (1 - APPENDED))
    scan = FileScan(path)
    try:
        for item in scan.scan():
            if isinstance(item, Stretch):
                after = item.cols[0][item.cols[0] >= want]
                if after.size:
                    return int(after[0])
    finally:
        scan.close()
    raise SystemExit(f"{path}: no record past {want}")


def _refresh_round(path: Path, grow: Path, cut: int) -> tuple[float, float]:
    """Write the first ``cut`` bytes afresh, open and replay them (untimed), append the rest
    and time the refresh."""
    import cbi1kit as ck

    with open(path, "rb") as src, open(grow, "wb") as dst:
        dst.write(src.read(cut))
    c = ck.open(grow)
    c.frames.collect()
    c.images.collect()
    c.replay()
    with open(path, "rb") as src, open(grow, "ab") as dst:
        src.seek(cut)
        shutil.copyfileobj(src, dst)
        dst.flush()
        os.fsync(dst.fileno())
    cpu, wall = time.process_time(), time.perf_counter()
    c.refresh()
    c.replay()
    out = time.process_time() - cpu, time.perf_counter() - wall
    assert c.replay().frames == ck.open(path).replay(keep_history=False).frames
    return out


def _whole_round(path: Path) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    _whole(path)
    return time.process_time() - cpu, time.perf_counter() - wall


def measure(path: Path, rounds: int) -> dict[str, Any]:
    scans = _everything(path)  # also loads the kernels
    once, alone = compare(lambda: _everything(path), lambda: _alone(path), rounds=rounds)
    cut = _cut(path)
    with tempfile.TemporaryDirectory() as tmp:
        grow = Path(tmp) / "growing.kvrcap"
        refresh, whole = compare_rounds(
            lambda: _refresh_round(path, grow, cut), lambda: _whole_round(path), rounds=rounds
        )
    return {
        "bytes": path.stat().st_size,
        "scans": scans,
        "appended": path.stat().st_size - cut,
        "once": [once.cpu, once.wall],
        "alone": [alone.cpu, alone.wall],
        "refresh": [refresh.cpu, refresh.wall],
        "whole": [whole.cpu, whole.wall],
    }


def run_mix(report: Report, name: str, size_mib: int, rounds: int, keep: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = (keep or Path(tmp)) / f"tables-{name}-{size_mib}MiB.kvrcap"
        if not path.exists():
            generate_mix(path, size_mib * MiB, MIXES[name])
        r = child_json(__file__, "--measure", str(path), "--rounds", str(rounds))
    size = r["bytes"] / MiB
    report.figure(
        Comparison(
            f"one capture [{name}, {size:.0f} MiB, scanned {r['scans']}x]",
            Timing(*r["once"]),
            Timing(*r["alone"]),
            "ck.open: .frames + .images + .snapshots + .replay()",
            "frames_table(path) + replay(path), each alone",
        ),
        goal_ratio=GOAL_ONCE,
    )
    report.figure(
        Comparison(
            f"refresh [{name}, {r['appended'] / MiB:.1f} MiB appended to {size:.0f} MiB]",
            Timing(*r["refresh"]),
            Timing(*r["whole"]),
            "c.refresh() + c.replay() (frames and replay carried on)",
            "ck.open + .frames + .replay() of the whole file",
        ),
        goal_ratio=GOAL_REFRESH,
    )


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--size-mib", type=int, default=None, help="each capture's size")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    add_keep(ap)
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 5)
    if args.measure:
        print(json.dumps(measure(args.measure, rounds)))
        return
    report = Report("bench_capture: one capture opened once, and followed", args.quick)
    size = args.size_mib or (4 if args.quick else 256)
    for name in MIXES:
        run_mix(report, name, size, rounds, args.keep)
    report.done()


if __name__ == "__main__":
    main()
