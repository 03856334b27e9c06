"""Run All of the simulating notebooks (#41): 03, 04 and 06, headless, each in a fresh kernel.

Figure, per notebook: every code cell executed in order in a kernel just started (what "Run All"
costs once the notebook is open: the kernel's own start is not in it), wall time from the first
cell sent to the last cell's reply, and the kernel process's CPU time (all its threads) over the
same span. Baseline: a fresh kernel running the first cell every notebook shares
(``import cbi1kit as ck; ck.setup_notebook()``): the floor of imports below each notebook's own
work, of which jsonschema's optional ``rfc3987_syntax`` grammar build (pulled in by altair) is
about 1.7 s. Goal: <= 8 s by wall median (the wait a user sees; polars' threads make CPU exceed
wall). Charts are live widgets, as in JupyterLab; numba's disk cache and the offline chart
bundle as ``make`` leaves them.

Alternating rounds (``_harness``); ``--quick`` runs notebook 06 once against the first cell.

    .venv/bin/python benchmarks/bench_notebooks.py [--quick] [--rounds N]
"""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path

import nbformat
from _harness import ROOT, Comparison, Report, child_env, compare_processes, parser
from nbclient import NotebookClient

from cbi1kit.viz._display import STATIC_ENV

NOTEBOOKS = ROOT / "notebooks"
SIMULATING = ("03_bucket_occupancy", "04_delta_churn", "06_filter_accuracy")
FIRST_CELL = "import cbi1kit as ck\nck.setup_notebook()"


def kernel_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread) a live process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_all(nb: nbformat.NotebookNode) -> tuple[float, float]:
    """(kernel CPU, wall) seconds of executing ``nb``'s code cells in a fresh kernel."""
    client = NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    env = child_env() | {STATIC_ENV: ""}  # a live kernel's setting: charts are widgets
    with client.setup_kernel(env=env):
        pid = client.km.provisioner.process.pid  # type: ignore[union-attr]
        cpu, wall = kernel_cpu(pid), time.perf_counter()
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                client.execute_cell(cell, index)
        return kernel_cpu(pid) - cpu, time.perf_counter() - wall


def main() -> None:
    args = parser(__doc__).parse_args()
    rounds = args.rounds or (1 if args.quick else 5)
    report = Report("bench_notebooks: Run All of the simulating notebooks", args.quick)
    first = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(FIRST_CELL)])
    for name in SIMULATING[-1:] if args.quick else SIMULATING:
        nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        cand, base = compare_processes(partial(run_all, nb), partial(run_all, first), rounds=rounds)
        report.figure(
            Comparison(name, cand, base, "Run All", "first cell alone"),
            goal_time=8.0,
            clock="wall",
            note="a fresh kernel each round, its start not counted; CPU is the kernel's",
        )
    report.done()


if __name__ == "__main__":
    main()
