"""``cbi1kit demo``: simulate (or reuse) the sample, replay, summary, report."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cbi1kit._extras import require
from cbi1kit._text import table
from cbi1kit.cli._common import (
    EXIT_UNREADABLE,
    check_source,
    checkout,
    no_notebooks,
    quiet_arg,
    verdict,
)
from cbi1kit.cli._lanes import replay_source
from cbi1kit.cli._report import build
from cbi1kit.cli._simulate import run_simulation
from cbi1kit.data import FOLDER
from cbi1kit.errors import CliError

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def run(args: argparse.Namespace) -> int:
    data: Path = args.data
    capture = data / "sample.kvrcap"
    trace = data / "mooncake" / "conversation_trace.jsonl"
    if not (capture.exists() or trace.exists()):  # neither a capture nor a trace to make one
        raise CliError(
            f"{data}: no bundled data in it{checkout('give --data DIR')}", EXIT_UNREADABLE
        )
    if not args.no_report:  # the notebooks and their extra, before any work
        require("notebooks")
        if not Path("notebooks").is_dir():
            raise no_notebooks(Path("notebooks"), "--no-report")
    notebooks = None if args.no_report else args.demo_report(args, capture, trace)
    try:
        print("cbi1kit demo: simulate → replay → summary on the bundled data\n")
        _simulate_or_reuse(args, capture, trace, notebooks)
        print(f"\n2. replay {capture} with the consumer's rules")
        report = replay_source(capture, None, not args.no_progress)
        print(report.text(10))
        print("\n3. summary: the replayed lane at its final sequence")
        if report.lanes:  # the sample records one DC
            _summary(report.lanes[0])
        notebooks_ok = notebooks.report() if notebooks is not None else True
    finally:
        if notebooks is not None:
            notebooks.close()
    print("\nnext: cbi1kit inspect / stats / export on", capture)
    return verdict(report.ok and notebooks_ok)


def _simulate_or_reuse(
    args: argparse.Namespace, capture: Path, trace: Path, notebooks: DemoReport | None
) -> None:
    """Step 1: the bundled capture, or a fresh one from the trace; what runs beside the
    replay (Lab, the notebooks' kernels) starts once the capture is known to be one."""
    if capture.exists() and not args.resimulate:
        if notebooks is not None:
            check_source(capture)  # not a capture: say so now, not after the notebooks
            notebooks.start()  # Lab and the notebooks' kernels start while we replay
        size = capture.stat().st_size
        print(f"1. simulate: reusing {capture} ({size} bytes; `make sample` rebuilds it)")
        return
    from cbi1kit.sim._simrelay import sample_config

    print(f"1. simulate: {trace} → {capture}")
    progress = not args.no_progress
    print(
        run_simulation(trace, capture, sample_config(), limit=None, force=True, progress=progress)
    )
    if notebooks is not None:
        notebooks.start()


def _summary(lane: Any) -> None:
    """Step 3: the lane's filter figures at its final sequence (nothing when none installed)."""
    from cbi1kit.ckf._addressing import CkfAddressing
    from cbi1kit.ckf._stats import lane_stats

    fmt = lane.format
    if lane.final_lane is None or fmt is None:
        return
    addressing = CkfAddressing(seed=fmt.seed, bucket_count=fmt.bucket_count)
    stats = lane_stats(lane.final_lane, addressing=addressing, fpr_probes=200_000)
    rows = [
        ("buckets", stats.buckets),
        ("occupied slots", stats.occupied_slots),
        ("load factor α", f"{stats.load_factor:.4f}"),
        ("estimated FPR 8α/65534", f"{stats.estimated_fpr:.2e}"),
        ("measured FPR", str(stats.fpr)),
        ("lane size", f"{stats.size_bytes} bytes"),
    ]
    print(table(rows, ("figure", "value")))


class DemoReport:
    """The demo's step 4: every chart of the bundled data and each notebook run headless by
    papermill, into ``--report``. ``make demo`` runs a subclass (``tools/demo.py``) that also runs
    the notebooks in JupyterLab and Chromium, beside the replay, and screenshots them."""

    def __init__(self, args: argparse.Namespace, capture: Path, trace: Path) -> None:
        from cbi1kit._files import claim_outputs

        self.args, self.capture, self.trace = args, capture, trace
        self.folder = Path("notebooks")
        self.ok = True
        claim_outputs(self.outputs(), overwrite=args.force)  # before any work, not after a minute

    def outputs(self) -> list[Path]:
        """The files the report writes, claimed before the demo starts."""
        from cbi1kit.viz._report import NOTEBOOKS, report_outputs

        return report_outputs(self.args.report, trace=True, notebooks=NOTEBOOKS)

    def start(self) -> None:
        """Start what runs beside the replay (nothing, headless)."""

    def close(self) -> None:
        """Stop what ``start`` began."""

    def heading(self) -> str:
        return f"\n4. report: every chart and each notebook, run headless → {self.args.report}/"

    def before(self) -> None:
        """What to say between the heading and the report's progress."""

    def executed(self) -> Any:
        """Notebook runs the report takes as they are (None: papermill runs them)."""
        return None

    def report(self) -> bool:
        """Step 4: the charts, then the notebooks' pages; whether every notebook ran clean."""
        print(self.heading())
        self.before()
        try:
            built = build(
                self.capture,
                self.args.report,
                self.trace,
                self.folder,
                self.args.no_progress,
                force=self.args.force,
                executed=self.executed,
            )
        finally:
            self.close()
        print(
            f"   wrote {built.index} ({len(built.pngs)} chart PNGs, "
            f"{len(built.notebooks)} notebooks) in {built.seconds:.0f} s"
        )
        return self.ok


def register(sub: Commands) -> None:
    """``cbi1kit demo``."""
    p = sub.add_parser(
        "demo",
        help="simulate (or reuse) the sample → replay → summary, on the bundled data",
        description="The main job on a checkout's bundled data: simulate the sample capture "
        "from the Mooncake trace (or reuse it), replay it, print its summary, then run every "
        "notebook once in JupyterLab (screenshots where chromium is installed) and write the "
        "offline report.",
    )
    p.add_argument(
        "--data", type=Path, default=FOLDER, help="data folder (default: the bundled ck.data)"
    )
    p.add_argument("--resimulate", action="store_true", help="simulate even if the sample exists")
    p.add_argument("--report", type=Path, default=Path("reports"), help="report folder")
    p.add_argument("--no-report", action="store_true", help="stop after the summary")
    p.add_argument(
        "--force", action="store_true", help="overwrite an existing report and screenshots"
    )
    quiet_arg(p)
    p.set_defaults(handler=run, demo_report=DemoReport)
