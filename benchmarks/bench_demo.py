"""The two commands of the README's setup (#17): ``make demo`` and ``make test`` on a warm
environment, each against a baseline doing the same work in the same run, alternating rounds.

* ``python -m tools.demo --force`` (what ``make demo`` runs once ``.venv`` is built): replay
  and summary of the bundled capture, every notebook run once in JupyterLab in chromium (side by
  side, a screenshot each) and the report, its notebook pages made from those runs. Baseline:
  ``cbi1kit report`` of the same capture and trace, which draws the same charts and runs the
  same notebooks one after another through papermill, headless (the old demo ran both, the
  notebooks twice). Goal: <= 45 s by wall median (it is many processes; a user waits on the
  wall clock).
* ``make test`` once installed (ruff, mypy, and pytest with a worker per core, pytest-xdist),
  against the same with ``pytest -n0`` (one process). One round each (the suite takes minutes).
  Goal: <= 5 min by wall median.

CPU time is the child's and every process it waited for (``RUSAGE_CHILDREN``). ``--quick``
(a smoke run, which ``make test`` runs) times ``demo --no-report`` against ``replay`` and
``make pytest`` collecting one test module instead: nothing ``make test`` runs is run twice.

    .venv/bin/python benchmarks/bench_demo.py [--rounds 2] [--quick]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from _harness import (
    DATA,
    ROOT,
    TRACE,
    Comparison,
    Report,
    child_env,
    compare_processes,
    parser,
    time_process,
)

SAMPLE = str(DATA / "sample.kvrcap")


def cli(*argv: str) -> tuple[float, float]:
    return time_process([sys.executable, "-m", "cbi1kit", *argv])


def make(target: str, pytest_args: str = "") -> tuple[float, float]:
    """``make TARGET`` as the README runs it, ``pytest_args`` added to its pytest run
    (``PYTEST_ADDOPTS``: after the project's own options, so ``-n0`` wins over ``-n auto``)."""
    return time_process(["make", "-s", target], env=child_env(PYTEST_ADDOPTS=pytest_args))


def main() -> None:
    args = parser(__doc__).parse_args()
    rounds = args.rounds or (1 if args.quick else 2)
    report = Report("bench_demo: make demo and make test", args.quick)
    sys.path.insert(0, str(ROOT))  # tools/: the demo's Lab and Chromium driving
    from tools.browser import unavailable

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
            demo = ["--force", "--no-progress", "--report", str(out / "demo")]
            headless = ["report", SAMPLE, "--trace", str(TRACE), "-o", str(out / "headless")]
            cli(*demo)  # warm-up: the page cache, Lab's assets, the kernels' bytecode
            cand, base = compare_processes(
                lambda: time_process([sys.executable, "-m", "tools.demo", *demo]),
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
        suite = "--collect-only -q tests/test_errors.py"
        cand, base = compare_processes(
            lambda: make("pytest", suite), lambda: make("pytest", f"{suite} -n0"), rounds=1
        )
        label = "make pytest, collecting one module"
    else:
        cand, base = compare_processes(lambda: make("test"), lambda: make("test", "-n0"), rounds=1)
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
