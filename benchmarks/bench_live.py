"""Following a relay live (#44): the CPU ``ck.live`` and its dashboard's redraws cost beyond what
``cbi1kit record`` alone costs, following the same simulated relay, and whether the follower's
memory stays flat over a long run.

``cbi1kit serve --pace 0.0007 --events-per-step 2 --expected-blocks 262144`` (about 1,000
deltas a second, measured and printed; a filter that never fills, whose steps keep their cost)
runs for the whole benchmark. Each round runs, for ``--seconds``, one process of each
side against it, alternating which goes first: the candidate ``ck.live(address)`` with a
listener that renders the dashboard's HTML at every look (twice a second), the baseline
``cbi1kit record``. Each side's CPU is its process's (``RUSAGE_CHILDREN``). Goal: candidate −
baseline ≤ 20 % of one core, by the median over rounds. Memory: one candidate process for
``--minutes``, its RSS sampled every second; goal: the last minute's median within 5 % of the
second minute's.

    .venv/bin/python benchmarks/bench_live.py [--quick] [--rounds 3] [--seconds 30]
        [--minutes 10]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import ROOT, Report, child_env, parser, time_process

#: the candidate: follow ADDRESS for SECONDS, redrawing the dashboard's HTML at each look
LIVE = """
import sys, time
import cbi1kit as ck
from cbi1kit.viz._live import state_html
address, seconds = sys.argv[1], float(sys.argv[2])
live = ck.live(address, interval=0.5)
live._listeners.append(lambda state: state_html(state))
time.sleep(seconds)
live.stop()
print(live.state.frames, sum(lane.deltas for lane in live.state.lanes))
"""


def serve() -> tuple[subprocess.Popen[str], str]:
    argv = [sys.executable, "-m", "cbi1kit", "serve", "--pace", "0.0007", "--heartbeat", "1"]
    argv += ["--events-per-step", "2", "--expected-blocks", str(1 << 18)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().split(" on ")[1].split()[0]


def rss_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_rounds(report: Report, address: str, rounds: int, seconds: float) -> None:
    live_argv = [sys.executable, "-c", LIVE, address, str(seconds)]
    cand: list[float] = []
    base: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(rounds):
            out = Path(scratch) / f"r{r}.kvrcap"
            record = [sys.executable, "-m", "cbi1kit", "record", address, "-o", str(out)]
            record += ["--duration", str(seconds), "--quiet"]
            sides = [(live_argv, cand), (record, base)]
            for argv, into in sides if r % 2 == 0 else sides[::-1]:
                into.append(time_process(argv)[0])
            rate = _deltas_per_second(out, seconds)
    extra = [(c - b) / seconds for c, b in zip(cand, base, strict=True)]
    median = statistics.median(extra)
    report.value(
        f"ck.live + dashboard beyond record, {seconds:g} s at {rate:,.0f} deltas/s",
        f"{statistics.median(cand) / seconds:.1%} of a core",
        f"record {statistics.median(base) / seconds:.1%}",
        statistics.median(cand) / max(statistics.median(base), 1e-9),
        ok=median <= 0.20,
        goal="≤ 20 % of one core beyond record, by the median",
        detail=f"beyond record: best {min(extra):.1%}, median {median:.1%} of a core; "
        f"{rounds} rounds, alternating",
    )


def _deltas_per_second(capture: Path, seconds: float) -> float:
    import cbi1kit as ck

    report = ck.replay(capture, keep_history=False, keep_events=False)
    return sum(lane.counts.get("delta_applied", 0) for lane in report.lanes) / seconds


def memory(report: Report, address: str, minutes: float) -> None:
    seconds = minutes * 60
    argv = [sys.executable, "-c", LIVE, address, str(seconds)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, text=True)
    samples: list[tuple[float, int]] = []
    start = time.monotonic()
    while proc.poll() is None:
        elapsed = time.monotonic() - start
        if elapsed > seconds - 1:
            break
        samples.append((elapsed, rss_of(proc.pid)))
        time.sleep(1.0)
    proc.wait(timeout=120)
    window = seconds / 10 if minutes < 2 else 60.0  # a minute, or a tenth of a short run
    second = [rss for t, rss in samples if window <= t < 2 * window]
    last = [rss for t, rss in samples if t >= seconds - 1 - window]
    a, b = statistics.median(second), statistics.median(last)
    report.value(
        f"ck.live RSS over {minutes:g} min, last vs second window of {window:g} s",
        f"{b / 2**20:,.1f} MiB",
        f"{a / 2**20:,.1f} MiB",
        b / a,
        ok=abs(b / a - 1) <= 0.05,
        goal="within 5 %",
        detail=f"{len(samples)} samples, every second; peak {max(samples)[1] / 2**20:,.1f} MiB",
    )


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--minutes", type=float, default=10.0)
    args = ap.parse_args()
    seconds = 4.0 if args.quick else args.seconds
    minutes = 0.5 if args.quick else args.minutes
    rounds = 1 if args.quick else (args.rounds or 3)
    report = Report("bench_live: following a relay live", args.quick)
    proc, address = serve()
    try:
        cpu_rounds(report, address, rounds, seconds)
        memory(report, address, minutes)
    finally:
        proc.kill()
        proc.wait(10)
    report.done()


if __name__ == "__main__":
    main()
