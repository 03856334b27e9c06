"""Peak memory of ``cbi1kit inspect``, ``replay`` and ``stats`` on a ~1 GiB capture with many
snapshots, and on a simulator-like one, beside what they have to hold: the lanes in play
(issue 13).

Seeded captures (``bench_tables.generate_mix``): snapshot-heavy, sessions of one snapshot of a
2^22-bucket lane (32 MiB in 8 chunk messages), each followed by deltas (log-normal image counts,
median 32), with about 60% of the bytes in snapshots: ~19 snapshots in 1 GiB; and the
harness's simulator-like mix (4,096-bucket lanes, small deltas), 128 MiB. Each command runs in
a fresh subprocess and its peak resident set is the kernel's (``VmHWM`` of that process, read
as it exits), printed beside baselines measured the same way in the same run:

* ``python -c "import cbi1kit"``: the interpreter and the package, before any work;
* the lane (``bucket_count`` x 8 bytes) and the file's size;
* ``replay`` of a capture a quarter as long, to show that the peak does not follow the length.

Commands: ``inspect``, ``replay``, ``stats``, and ``stats --at SEQ`` (which keeps the history it
reads on disk). Best and median of ``--rounds`` runs of each (a command's runs one after the
other: each is a process of its own, so there is nothing to alternate within). No goal: the
target (#13) is a peak above the import baseline of a few lanes and a bounded batch, whatever
the capture's length (it was 2.4 GB for this capture); the figures say how many lanes.

    .venv/bin/python benchmarks/bench_memory.py [--quick] [--size-mib 1024]
        [--sim-size-mib 128] [--buckets-log2 22] [--rounds 2] [--keep DIR]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import MIXES, MiB, Mix, Report, add_keep, parser
from bench_tables import generate_mix

ROOT = Path(__file__).resolve().parents[1]
#: Runs ``python ARGS...`` (``-c CODE`` or ``-m MODULE ...``) in this process and, at exit,
#: writes its peak resident set in bytes to the file named first. ``VmHWM`` counts this program
#: only: a child's ``ru_maxrss`` also counts the address space it was forked from (the parent's,
#: which generated the capture), recorded when it calls exec.
CHILD = """
import atexit, resource, runpy, sys
RSS_UNIT = 1 if sys.platform == "darwin" else 1024
out, mode, what, *rest = sys.argv[1:]
def report():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * RSS_UNIT
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    except OSError:
        pass
    with open(out, "w") as f:
        f.write(str(peak))
atexit.register(report)
if mode == "-c":
    exec(what)
else:
    sys.argv = [what, *rest]
    runpy.run_module(what, run_name="__main__", alter_sys=True)
"""  # ru_maxrss (where there is no /proc) is in KiB on Linux, in bytes on macOS


def run(argv: list[str]) -> tuple[int, float, str]:
    """(peak RSS bytes, seconds, stdout) of ``python ARGV`` in a fresh process; it must exit 0."""
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile("r") as peak,
    ):
        t = time.perf_counter()
        res = subprocess.run(
            [sys.executable, "-c", CHILD, peak.name, *argv],
            cwd=ROOT,
            stdout=out,
            stderr=err,
            check=False,
        )
        seconds = time.perf_counter() - t
        out.seek(0)
        err.seek(0)
        if res.returncode != 0:
            raise SystemExit(f"{argv} exited {res.returncode}: {err.read().decode()[-2000:]}")
        return int(peak.read()), seconds, out.read().decode()


def rounds_of(argv: list[str], n: int) -> tuple[list[int], list[float], str]:
    peaks, times, text = [], [], ""
    for _ in range(n):
        peak, seconds, text = run(argv)
        peaks.append(peak)
        times.append(seconds)
    return peaks, times, text


def lane_buckets(path: Path) -> int:
    from cbi1kit.capture import read_frames
    from cbi1kit.wire import peek_format

    for rec in read_frames(path):
        if rec.payload:
            return int(peek_format(rec.payload).bucket_count)
    raise SystemExit(f"{path} holds no CBI1 frame")


def _mib(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n / 1024:.0f} KiB"


def capture(path: Path, size_mib: int, mix: Mix, keep: bool) -> float:
    """Generate (unless kept); the seconds it took."""
    t = time.perf_counter()
    if not (keep and path.exists()):
        generate_mix(path, size_mib * MiB, mix)
    return time.perf_counter() - t


def run_mix(report: Report, mix: Mix, size_mib: int, rounds: int, keep: Path | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = (keep or Path(tmp)) / f"memory-{mix.name}-{size_mib}MiB.kvrcap"
        gen_s = capture(path, size_mib, mix, keep is not None)
        short = Path(tmp) / "short.kvrcap"
        capture(short, max(1, size_mib // 4), mix, False)
        size, buckets = path.stat().st_size, lane_buckets(path)
        lane = buckets * 8

        base, _, _ = rounds_of(["-c", "import cbi1kit"], rounds)
        cmd = ["-m", "cbi1kit"]
        results: dict[str, tuple[list[int], list[float]]] = {}
        replay = [*cmd, "replay", str(path), "--json", "--no-progress"]
        peaks, times, text = rounds_of(replay, rounds)
        results["replay"] = (peaks, times)
        summary = json.loads(text)
        first, last = summary["sequence_ranges"][0]
        at = (first + last) // 2
        for name, argv in (
            ("inspect", ["inspect", str(path), "--no-progress"]),
            ("stats", ["stats", str(path), "--no-progress"]),
            (f"stats --at {at}", ["stats", str(path), "--at", str(at), "--no-progress"]),
        ):
            peaks, times, _ = rounds_of([*cmd, *argv], rounds)
            results[name] = (peaks, times)
        short_peak, _, _ = run([*cmd, "replay", str(short), "--no-progress"])

    counts = summary["counts"]
    chunks = counts.get("snapshot_chunk", 0) + counts.get("snapshot_installed", 0)
    floor = min(base)
    print(
        f"capture [{mix.name}]: {size / MiB:.0f} MiB, {counts.get('snapshot_installed', 0)} "
        f"snapshots of {buckets:,} buckets ({chunks} chunk messages), "
        f"{counts.get('delta_applied', 0):,} deltas, {counts.get('heartbeat', 0):,} heartbeats"
        + ("" if keep is not None and gen_s < 1 else f"; generated in {gen_s:.1f} s")
        + f"; python -c 'import cbi1kit' peaks at {floor / MiB:.0f} MiB (best of {len(base)})"
    )
    for name, (p, t) in results.items():
        above = min(p) - floor
        report.value(
            f"peak RSS of cbi1kit {name} [{mix.name}, {size / MiB:.0f} MiB]",
            f"{above / MiB:.0f} MiB above importing cbi1kit",
            f"the lane {_mib(lane)}",
            above / lane,
            detail=f"best / median {min(p) / MiB:.0f} / {statistics.median(p) / MiB:.0f} MiB "
            f"({len(p)} runs, best {min(t):.1f} s); the capture is {size / lane:,.0f} lanes; "
            "no goal",
        )
    report.value(
        f"peak RSS of cbi1kit replay [{mix.name}, a capture a quarter as long]",
        f"{(short_peak - floor) / MiB:.0f} MiB above importing cbi1kit",
        f"the full capture's {(min(results['replay'][0]) - floor) / MiB:.0f} MiB",
        (short_peak - floor) / max(1, min(results["replay"][0]) - floor),
        detail="the peak must not follow the capture's length (#13); no goal",
    )


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--size-mib", type=int, default=None, help="snapshot-heavy capture size")
    ap.add_argument("--sim-size-mib", type=int, default=None, help="simulator-like capture size")
    ap.add_argument("--buckets-log2", type=int, default=22, help="snapshot-heavy lane size")
    add_keep(ap)
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 2)
    report = Report("bench_memory: peak memory of inspect, replay and stats", args.quick)
    heavy = Mix("snapshot-heavy", 1 << (20 if args.quick else args.buckets_log2), 0.6, 32, 1.0, 64)
    run_mix(report, heavy, args.size_mib or (64 if args.quick else 1024), rounds, args.keep)
    sim = MIXES["simulator-like"]
    run_mix(report, sim, args.sim_size_mib or (8 if args.quick else 128), rounds, args.keep)
    report.done()


if __name__ == "__main__":
    main()
