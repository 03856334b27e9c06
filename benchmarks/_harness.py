"""What every benchmark shares: same-run baselines, alternating rounds, CPU and wall time.

A figure is a *candidate* (our code) against a *baseline* (the same work done the plainest fair
way) measured in the same process, in the same run, round by round: round ``r`` runs the
candidate then the baseline when ``r`` is even and the other way round when it is odd, so a
burst of load or a cache warmed by the one before lands on both sides alike. A round of short
work repeats it until the round lasts 50 ms (times are per call), after a garbage collection
and with the collector off, as ``timeit`` does. Each side is timed
by CPU time (``time.process_time``: this process, all threads) and by wall time
(``time.perf_counter``); the machine these run on is shared, and wall time swung up to 3x with
load while CPU time stayed within a few percent, so goals are judged on the **median CPU time**
and every line also prints the best and median of both clocks.

Every benchmark prints its figures in one shape::

    NAME: candidate X vs baseline Y (R.RRx; goal >= G by CPU median: met)
        cpu best/median ... | wall best/median ... | N rounds, alternating

and takes ``--quick`` (small inputs, few rounds: a smoke test for CI that the code paths run;
its figures are printed but mean little, and nothing is asserted on a time). A goal that is not
met prints ``NOT MET``; the script still exits 0 (the figures are the result, not a test).

The two capture mixes (``MIXES``) are what the table, replay and memory benchmarks read:
``snapshot-heavy`` (half the bytes in 4 MiB snapshot chunks of a 2^21-bucket lane, deltas of a
median 32 images) and ``simulator-like`` (what ``cbi1kit simulate`` records: a 4,096-bucket
lane's single-chunk snapshots, ~4% of the bytes, and small deltas, a median of 9 images, with a
heartbeat every 64 deltas), generated with fixed seeds.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from cbi1kit.data import FOLDER, mooncake_trace

ROOT = Path(__file__).resolve().parents[1]
DATA = FOLDER
TRACE = mooncake_trace()
MiB = 1 << 20

__all__ = [
    "DATA",
    "DELTAS_16",
    "MIXES",
    "ROOT",
    "TRACE",
    "Comparison",
    "MiB",
    "Mix",
    "Report",
    "Timing",
    "calls_for",
    "compare",
    "current_rss",
    "measure",
    "parser",
    "peak_rss",
    "reset_peak_rss",
    "section",
    "time_once",
]


# ------------------------------------------------------------------------------------- timing


@dataclass
class Timing:
    """CPU and wall seconds of each round of one side."""

    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)

    def add(self, cpu: float, wall: float) -> None:
        self.cpu.append(cpu)
        self.wall.append(wall)

    @property
    def cpu_best(self) -> float:
        return min(self.cpu)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)

    @property
    def wall_best(self) -> float:
        return min(self.wall)

    @property
    def wall_median(self) -> float:
        return statistics.median(self.wall)


def time_once(fn: Callable[[], Any], number: int = 1) -> tuple[float, float, Any]:
    """(cpu seconds, wall seconds, last result) of one call of ``fn`` (``number`` calls, times
    divided by ``number``): a garbage collection first, none during (as ``timeit``)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(number):
            out = fn()
        w1, c1 = time.perf_counter(), time.process_time()
    finally:
        if enabled:
            gc.enable()
    return (c1 - c0) / number, (w1 - w0) / number, out


def calls_for(fn: Callable[[], Any], min_seconds: float) -> int:
    """How many calls of ``fn`` make a round of at least ``min_seconds`` (one call's time is
    measured after a first, warm-up, call): short work is repeated within a round, so that
    a round is not dominated by a cache the collection before it left cold."""
    fn()
    _, wall, _ = time_once(fn)
    return max(1, min(1_000_000, int(min_seconds / max(wall, 1e-7)) + 1))


@dataclass
class Comparison:
    """One figure: the candidate's and the baseline's rounds and what they did."""

    name: str
    candidate: Timing
    baseline: Timing
    candidate_label: str
    baseline_label: str
    work: float = 1.0  # units of work per round (frames, blocks, bytes), for rates
    unit: str = ""  # e.g. "frames/s"; "" prints times instead of rates
    scale: float = 1.0  # rate divisor for printing (1e6 with unit "M blocks/s")

    def ratio(self, stat: str) -> float:
        """Baseline time / candidate time: > 1 means the candidate is faster."""
        return float(getattr(self.baseline, stat) / getattr(self.candidate, stat))

    def rate(self, t: float) -> float:
        return self.work / t / self.scale


def compare(
    candidate: Callable[[], Any],
    baseline: Callable[[], Any],
    *,
    rounds: int,
    min_seconds: float = 0.05,
) -> tuple[Timing, Timing]:
    """Alternating rounds (candidate first on even rounds, baseline first on odd ones), each
    side's round at least ``min_seconds`` long (short work is repeated; times are per call).
    One warm-up call of each side comes first, untimed."""
    n_cand = calls_for(candidate, min_seconds)
    n_base = calls_for(baseline, min_seconds)
    cand, base = Timing(), Timing()
    for r in range(rounds):
        order = ((candidate, cand, n_cand), (baseline, base, n_base))
        for fn, timing, number in order if r % 2 == 0 else order[::-1]:
            cpu, wall, _ = time_once(fn, number)
            timing.add(cpu, wall)
    return cand, base


def measure(fn: Callable[[], Any], *, rounds: int, min_seconds: float = 0.05) -> Timing:
    """One side alone (a reference figure printed beside a comparison), timed as ``compare``."""
    number = calls_for(fn, min_seconds)
    timing = Timing()
    for _ in range(rounds):
        cpu, wall, _ = time_once(fn, number)
        timing.add(cpu, wall)
    return timing


def _fmt_time(t: float) -> str:
    if t >= 1:
        return f"{t:.2f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.1f} ms"
    return f"{t * 1e6:.1f} µs"


class Report:
    """Prints figures as they are measured and a summary of the goals at the end."""

    def __init__(self, title: str, quick: bool) -> None:
        self.title = title
        self.quick = quick
        self.goals: list[tuple[str, bool]] = []
        print(f"# {title}" + ("  [--quick: smoke run, figures not meaningful]" if quick else ""))

    def _verdict(self, name: str, ok: bool | None, goal: str) -> str:
        if ok is None:
            return "" if not goal else f"; goal {goal}"
        self.goals.append((name, ok))
        return f"; goal {goal} by CPU median: {'met' if ok else 'NOT MET'}"

    def figure(
        self,
        c: Comparison,
        *,
        goal_ratio: float | None = None,
        goal_rate: float | None = None,
        goal_time: float | None = None,
        note: str = "",
        clock: str = "cpu",
    ) -> None:
        """``goal_ratio``: baseline time / candidate time must reach it; ``goal_rate``: the
        candidate's rate (``work / cpu median / scale``) must reach it; ``goal_time``: the
        candidate's time (seconds, CPU median) must stay within it. ``clock``: which median
        the headline (and any goal) uses, ``cpu`` or ``wall`` (a pipeline across processes,
        where the receiving process's CPU is not the whole cost)."""
        stat = f"{clock}_median"
        r = c.ratio(stat)
        t_cand, t_base = getattr(c.candidate, stat), getattr(c.baseline, stat)
        if c.unit:
            cand = f"{c.rate(t_cand):,.3g} {c.unit}"
            base = f"{c.rate(t_base):,.3g} {c.unit}"
        else:
            cand, base = _fmt_time(t_cand), _fmt_time(t_base)
        ok: bool | None = None
        goal = ""
        if goal_ratio is not None:
            ok, goal = r >= goal_ratio, f">= {goal_ratio:.2g}x the baseline"
        if goal_rate is not None:
            met = c.rate(t_cand) >= goal_rate
            ok = met if ok is None else ok and met
            goal = (goal + " and " if goal else "") + f">= {goal_rate:,g} {c.unit}"
        if goal_time is not None:
            met = t_cand <= goal_time
            ok = met if ok is None else ok and met
            goal = (goal + " and " if goal else "") + f"<= {_fmt_time(goal_time)}"
        verdict = self._verdict(c.name, ok, goal).replace("by CPU median", f"by {clock} median")
        print(
            f"{c.name}: {c.candidate_label} {cand} vs {c.baseline_label} {base} "
            f"({r:.2f}x by {clock} median{verdict})"
        )
        n = len(c.candidate.cpu)
        print(
            f"    cpu best/median {_fmt_time(c.candidate.cpu_best)} / "
            f"{_fmt_time(c.candidate.cpu_median)} vs {_fmt_time(c.baseline.cpu_best)} / "
            f"{_fmt_time(c.baseline.cpu_median)} ({c.ratio('cpu_best'):.2f}x / "
            f"{c.ratio('cpu_median'):.2f}x) | "
            f"wall best/median {_fmt_time(c.candidate.wall_best)} / "
            f"{_fmt_time(c.candidate.wall_median)} vs {_fmt_time(c.baseline.wall_best)} / "
            f"{_fmt_time(c.baseline.wall_median)} ({c.ratio('wall_best'):.2f}x / "
            f"{c.ratio('wall_median'):.2f}x) | {n} rounds, alternating"
        )
        if note:
            print(f"    {note}")

    def value(
        self,
        name: str,
        candidate: str,
        baseline: str,
        ratio: float,
        *,
        ok: bool | None = None,
        goal: str = "",
        detail: str = "",
    ) -> None:
        """A figure measured another way (memory, a child process): the same line shape."""
        verdict = ""
        if ok is not None:
            self.goals.append((name, ok))
            verdict = f"; goal {goal}: {'met' if ok else 'NOT MET'}"
        elif goal:
            verdict = f"; goal {goal}"
        print(f"{name}: {candidate} vs {baseline} ({ratio:.2f}x{verdict})")
        if detail:
            print(f"    {detail}")

    def done(self) -> None:
        met = sum(ok for _, ok in self.goals)
        missed = [name for name, ok in self.goals if not ok]
        line = f"# {self.title}: " + (
            f"{met} of {len(self.goals)} goals met" if self.goals else "no goals (figures only)"
        )
        if missed:
            line += " (not met: " + "; ".join(missed) + ")"
        if self.quick:
            line += " [--quick]"
        print(line)
        sys.stdout.flush()


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with the shared ``--quick`` and ``--rounds``."""
    ap = argparse.ArgumentParser(
        description=(doc or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--quick", action="store_true", help="small inputs, few rounds: a smoke run for CI"
    )
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds of each side")
    return ap


def add_keep(ap: argparse.ArgumentParser) -> None:
    """``--keep DIR``: where generated captures are kept and reused (made if missing)."""
    ap.add_argument(
        "--keep",
        type=_kept_dir,
        help="a directory: reuse its captures if they exist, else write them",
    )


def _kept_dir(arg: str) -> Path:
    path = Path(arg)
    path.mkdir(parents=True, exist_ok=True)
    return path


# ---------------------------------------------------------------------------------- processes


_MAKE_VARIABLES: Final = frozenset({"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"})


def child_env(**extra: str) -> dict[str, str]:
    """This environment for a child process, with this checkout first on ``PYTHONPATH`` (the
    cbi1kit measured is this one, installed or not) and ``extra`` set. Without make's own
    variables: a ``make`` measured is a top-level one, as the README runs it. (Run from ``make
    test PYTEST_ADDOPTS=...``, the child ``make pytest`` took that assignment from
    ``MAKEFLAGS`` over ``bench_demo --quick``'s "collect one module", and ran the whole suite,
    this benchmark included, again and again.)"""
    import os

    env = {k: v for k, v in os.environ.items() if k not in _MAKE_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env | extra


def child_json(script: str, *argv: str) -> Any:
    """What ``script`` prints as JSON, run with ``argv`` in a fresh process (a measurement
    whose memory and kernels are not this process's)."""
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, script, *argv], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout)


def time_process(
    argv: list[str], *, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """(CPU, wall) seconds of a command run to the end in a fresh process (in ``cwd``, with
    ``env``, by default the checkout and ``child_env()``): CPU is what it and
    every descendant it waited for used (``RUSAGE_CHILDREN``), wall from start to exit. It must
    exit 0 (its output is kept only to show the tail of it when it does not)."""
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=child_env() if env is None else env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        tail = done.stdout.decode(errors="replace")[-3000:]
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{tail}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def compare_processes(
    candidate: Callable[[], tuple[float, float]],
    baseline: Callable[[], tuple[float, float]],
    *,
    rounds: int,
) -> tuple[Timing, Timing]:
    """``compare`` for work done in other processes: each side returns its own (CPU, wall) of a
    round (``time_process``); rounds alternate as ``compare``'s, with no warm-up unless the
    caller makes one."""
    cand, base = Timing(), Timing()
    for r in range(rounds):
        order = ((candidate, cand), (baseline, base))
        for fn, timing in order if r % 2 == 0 else order[::-1]:
            timing.add(*fn())
    return cand, base


# ------------------------------------------------------------------------------------- memory


def peak_rss() -> int:
    """This process's peak resident set in bytes (VmHWM; ru_maxrss where /proc is missing)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    unit = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit


def current_rss() -> int:
    """This process's resident set now, in bytes (VmRSS)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return peak_rss()


def reset_peak_rss() -> int:
    """Restart the peak from the current RSS (Linux: ``5`` to clear_refs); the RSS now."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    return current_rss()


# --------------------------------------------------------------------------------------- mixes


@dataclass(frozen=True)
class Mix:
    """A capture's message mix, generated with fixed seeds by ``bench_tables.generate``."""

    name: str
    buckets: int  # lane size: 2^21 is 4 chunks of 4 MiB; 4,096 is one 32 KiB chunk
    snapshot_share: float  # fraction of the bytes in snapshot chunks
    median_images: int  # deltas' image counts: log-normal with this median ...
    sigma: float  # ... and this sigma, capped at 4,096
    heartbeat_every: int  # a heartbeat after every N deltas


MIXES: dict[str, Mix] = {
    "snapshot-heavy": Mix("snapshot-heavy", 1 << 21, 0.5, 32, 1.0, 64),
    "simulator-like": Mix("simulator-like", 4096, 0.04, 9, 1.1, 64),
}
#: the simulator-like mix with every delta 16 images (#27's second replay figure)
DELTAS_16 = Mix("16-image deltas", 4096, 0.04, 16, 0.0, 64)


@contextlib.contextmanager
def section(title: str) -> Iterator[None]:
    print(f"## {title}")
    yield
    sys.stdout.flush()
