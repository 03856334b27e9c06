"""``make demo``: ``cbi1kit demo`` whose step 4 also runs every notebook in JupyterLab, offline in
Chromium, with Run All, while the demo replays, and screenshots each one; the report's notebook
pages are those runs (``cbi1kit demo`` alone runs them headless with papermill)."""

from __future__ import annotations

import argparse
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cbi1kit import cli
from cbi1kit.data import FOLDER
from tools.browser import NotebookRun, screenshot_notebooks, unavailable


class ScreenshotReport(cli.DemoReport):
    """The demo's report, with the notebooks' Lab runs and their screenshots."""

    def __init__(self, args: argparse.Namespace, capture: Path, trace: Path) -> None:
        self.shots = args.report / "screenshots"
        self.browser_missing = unavailable()
        self._pool = ThreadPoolExecutor(1)
        self._lab: Future[dict[str, NotebookRun]] | None = None
        self._held: list[str] | None = []  # the thread's progress, held until step 4 shows it
        self._lock = threading.Lock()
        super().__init__(args, capture, trace)

    def outputs(self) -> list[Path]:
        shots = [self.shots / f"{p.stem}.png" for p in sorted(Path("notebooks").glob("*.ipynb"))]
        return super().outputs() + (shots if self.browser_missing is None else [])

    def _say(self, msg: str) -> None:
        if self.args.no_progress:
            return
        with self._lock:
            if self._held is not None:
                self._held.append(msg)
                return
        print(f"   {msg}", file=sys.stderr, flush=True)

    def start(self) -> None:
        if self.browser_missing is None:
            self._lab = self._pool.submit(
                screenshot_notebooks, self.folder, self.shots, say=self._say
            )

    def close(self) -> None:
        """Wait for the notebooks' thread: it cannot be cut short without leaving Lab's
        processes behind."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def heading(self) -> str:
        return (
            f"\n4. report: every chart → {self.args.report}/, and beside them each notebook run"
            f" in JupyterLab with Run All, offline → {self.shots}/"
        )

    def before(self) -> None:
        if self.browser_missing is not None:
            print(f"   no screenshots: {self.browser_missing}; the notebooks run headless")
        with self._lock:
            held, self._held = self._held or [], None
        for msg in held:
            self._say(msg)

    def executed(self) -> Any:
        from cbi1kit.viz._report import drawn_cells

        if self._lab is None:
            return None
        runs = self._lab.result()
        for name, run in runs.items():
            for problem in run.on_opening + run.problems:
                print(f"   {name}: {problem}")
        print(f"   wrote {len(runs)} screenshots")
        self.ok = not any(r.on_opening or r.problems for r in runs.values())
        # the pages are these runs when they ran on the demo's data (the notebooks read the
        # bundled ck.data); otherwise papermill runs them with its capture and trace
        ours = self.args.data.resolve() == FOLDER.resolve()
        return {n: drawn_cells(r.cells, r.drawn) for n, r in runs.items()} if ours else None


def main(argv: list[str] | None = None) -> int:
    """``cbi1kit demo`` with ``argv``, its report taking screenshots."""
    args = sys.argv[1:] if argv is None else argv
    return cli.main(["demo", *args], demo_report=ScreenshotReport)


if __name__ == "__main__":
    sys.exit(main())
