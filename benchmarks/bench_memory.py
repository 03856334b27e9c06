"""Peak memory of ``cbi1kit inspect``, ``replay`` and ``stats`` on a ~1 GiB capture with many
snapshots, beside what they have to hold: the lanes in play (issue 13).

A seeded capture (``bench_tables.generate``): sessions of one snapshot of a 2^22-bucket lane
(32 MiB in 8 chunk messages), each followed by deltas (log-normal image counts, median 32), with
about 60% of the bytes in snapshots: ~19 snapshots in 1 GiB. Each command runs in a fresh
subprocess and its peak resident set is the kernel's (``VmHWM`` of that process, read as it
exits), printed beside baselines measured the same way in the same run:

* ``python -c "import cbi1kit"``: the interpreter and the package, before any work;
* the lane (``bucket_count`` x 8 bytes) and the file's size;
* ``replay`` of a capture a quarter as long, to show that the peak does not follow the length.

Commands: ``inspect``, ``replay``, ``stats``, and ``stats --at SEQ`` (which keeps the history it
reads on disk). Best and median of ``--rounds`` runs of each. Target: above the import baseline,
a few lanes and a bounded batch, whatever the capture's length (it was 2.4 GB for this capture).

    .venv/bin/python benchmarks/bench_memory.py [--size-mib 1024] [--buckets-log2 22]
        [--rounds 2] [--keep FILE] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_tables import MiB, generate

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


def rounds(argv: list[str], n: int) -> tuple[list[int], list[float], str]:
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


def capture(path: Path, size_mib: int, buckets: int, keep: bool) -> float:
    """Generate (unless kept); the seconds it took."""
    t = time.perf_counter()
    if not (keep and path.exists()):
        generate(path, size_mib * MiB, snapshot_share=0.6, median_images=32, buckets=buckets)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--buckets-log2", type=int, default=22)
    ap.add_argument("--rounds", type=int, default=2, help="runs of each command (best, median)")
    ap.add_argument(
        "--keep", type=Path, help="capture path: reuse it if it exists, else generate it there"
    )
    ap.add_argument("--quick", action="store_true", help="64 MiB, 2^20 buckets, one round")
    args = ap.parse_args()
    if args.quick:
        args.size_mib, args.buckets_log2, args.rounds = 64, 20, 1
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "bench.kvrcap"
        gen_s = capture(path, args.size_mib, 1 << args.buckets_log2, args.keep is not None)
        short = Path(tmp) / "short.kvrcap"
        capture(short, max(1, args.size_mib // 4), 1 << args.buckets_log2, False)
        size, buckets = path.stat().st_size, lane_buckets(path)
        lane = buckets * 8

        base, _, _ = rounds(["-c", "import cbi1kit"], args.rounds)
        cmd = ["-m", "cbi1kit"]
        results: dict[str, tuple[list[int], list[float]]] = {}
        replay = [*cmd, "replay", str(path), "--json", "--no-progress"]
        peaks, times, text = rounds(replay, args.rounds)
        results["replay"] = (peaks, times)
        summary = json.loads(text)
        first, last = summary["sequence_ranges"][0]
        at = (first + last) // 2
        for name, argv in (
            ("inspect", ["inspect", str(path), "--no-progress"]),
            ("stats", ["stats", str(path), "--no-progress"]),
            (f"stats --at {at}", ["stats", str(path), "--at", str(at), "--no-progress"]),
        ):
            peaks, times, _ = rounds([*cmd, *argv], args.rounds)
            results[name] = (peaks, times)
        short_peak, _, _ = run([*cmd, "replay", str(short), "--no-progress"])

    counts = summary["counts"]
    chunks = counts.get("snapshot_chunk", 0) + counts.get("snapshot_installed", 0)
    print(
        f"capture: {size / MiB:.0f} MiB, {counts.get('snapshot_installed', 0)} snapshots of "
        f"{buckets} buckets ({chunks} chunk messages), {counts.get('delta_applied', 0)} deltas, "
        f"{counts.get('heartbeat', 0)} heartbeats"
        + ("" if args.keep and gen_s < 1 else f"; generated in {gen_s:.1f} s")
    )
    print(f"lane: {lane / MiB:.0f} MiB ({buckets} buckets x 8 bytes)")
    floor = min(base)
    print(
        f"baseline, python -c 'import cbi1kit': peak RSS best {min(base) / MiB:.0f} MiB, "
        f"median {statistics.median(base) / MiB:.0f} MiB"
    )
    print(f"\n{'command':<22} {'peak RSS best / median':>24} {'above import':>13} {'lanes':>6}")
    for name, (p, t) in results.items():
        above = min(p) - floor
        print(
            f"{name:<22} {min(p) / MiB:>13.0f} / {statistics.median(p) / MiB:>4.0f} MiB "
            f"{above / MiB:>9.0f} MiB {above / lane:>6.1f}   ({len(p)} runs, best {min(t):.1f} s)"
        )
    print(
        f"replay of a capture a quarter as long: {short_peak / MiB:.0f} MiB "
        f"({(short_peak - floor) / lane:.1f} lanes above import)"
    )
    print(
        f"target (#13): above the import baseline, a few lanes plus a bounded batch, not the "
        f"file ({size / MiB:.0f} MiB = {size / lane:.0f} lanes)"
    )


if __name__ == "__main__":
    main()
