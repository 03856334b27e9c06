"""The two commands of the README's setup (#17): ``make demo`` and ``make test`` on a warm
environment, each against a baseline doing the same work in the same run, alternating rounds.

* ``cbi1kit demo --force`` (what ``make demo`` runs once ``.venv`` is built): replay and summary
  of the bundled capture, every notebook run once in JupyterLab in chromium (side by side, a
  screenshot each) and the report, its notebook pages made from those runs. Baseline:
  ``cbi1kit report`` of the same capture and trace, which draws the same charts and runs the
  same notebooks one after another through papermill, headless (the old demo ran both, the
  notebooks twice). Goal: <= 45 s by wall median (it is many processes; a user waits on the
  wall clock).
* ``make test``'s work once installed: ``ruff check``, ``ruff format --check``, ``mypy`` and
  ``pytest`` (a worker per core, pytest-xdist), against the same with ``pytest -n0`` (one
  process). One round each (the suite takes minutes). Goal: <= 5 min by wall median.

CPU time is the child's and every process it waited for (``RUSAGE_CHILDREN``). ``--quick``
(a smoke run, which ``make test`` runs) times ``demo --no-report`` against ``replay`` and the
collection of one test module instead: nothing ``make test`` runs is run twice.

    .venv/bin/python benchmarks/bench_demo.py [--rounds 2] [--quick]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from _harness import Comparison, Report, compare_processes, parser, time_process

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
BIN = Path(PY).parent
SAMPLE = "data/sample.kvrcap"
TRACE = "data/mooncake/conversation_trace.jsonl"


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return e


def cli(*argv: str) -> tuple[float, float]:
    return time_process([PY, "-m", "cbi1kit", *argv], cwd=ROOT, env=env())


def checks(pytest_args: list[str], *, lint: bool = True) -> tuple[float, float]:
    """``make test``'s four steps (``lint``: or pytest alone), one after another, as one
    timing."""
    steps = [
        f"{BIN}/ruff check cbi1kit tests benchmarks notebooks",
        f"{BIN}/ruff format --check cbi1kit tests benchmarks notebooks",
        f"{BIN}/mypy cbi1kit",
    ]
    suite = " ".join([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args])
    script = " && ".join([*(steps if lint else []), suite])
    return time_process(["bash", "-c", script], cwd=ROOT, env=env())


def main() -> None:
    args = parser(__doc__).parse_args()
    rounds = args.rounds or (1 if args.quick else 2)
    report = Report("bench_demo: make demo and make test", args.quick)
    from cbi1kit.viz._browser import unavailable

    missing = unavailable()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        if args.quick:
            cand, base = compare_processes(
                lambda: cli("demo", "--no-report", "--no-progress"),
                lambda: cli("replay", SAMPLE, "--no-progress"),
                rounds=rounds,
            )
            names = ("cbi1kit demo --no-report", "demo", "replay of the sample")
        else:
            demo = ["demo", "--force", "--no-progress", "--report", str(out / "demo")]
            headless = ["report", SAMPLE, "--trace", TRACE, "-o", str(out / "headless")]
            cli(*demo)  # warm-up: the page cache, Lab's assets, the kernels' bytecode
            cand, base = compare_processes(
                lambda: cli(*demo),
                lambda: cli(*headless, "--force", "--no-progress"),
                rounds=rounds,
            )
            names = ("cbi1kit demo (make demo)", "demo", "cbi1kit report, papermill")
            shutil.rmtree(out / "demo", ignore_errors=True)
        report.figure(
            Comparison(names[0], cand, base, names[1], names[2]),
            goal_time=45.0,
            clock="wall",
            note=(
                "smoke run: no notebooks"
                if args.quick
                else f"no browser here ({missing}): the demo ran the notebooks headless"
                if missing
                else "the demo: 7 notebooks in JupyterLab (screenshots) + the report; the "
                "baseline: the same charts and notebooks, headless, one after another"
            ),
        )

    if args.quick:  # collection only: make test runs this, and must not run its tests twice
        suite = ["--collect-only", "tests/test_errors.py"]
        cand, base = compare_processes(
            lambda: checks(suite, lint=False),
            lambda: checks([*suite, "-n0"], lint=False),
            rounds=1,
        )
        label = "pytest --collect-only of one module"
    else:
        cand, base = compare_processes(lambda: checks([]), lambda: checks(["-n0"]), rounds=1)
        label = "make test (ruff, mypy, pytest)"
    report.figure(
        Comparison(label, cand, base, "a worker per core", "pytest -n0"),
        goal_time=300.0,
        clock="wall",
        note=f"{os.cpu_count()} cores; one round each",
    )
    report.done()


if __name__ == "__main__":
    main()
