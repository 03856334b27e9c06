"""The notebooks and the report as a user opens them (#14): Debian's chromium, no network.

JupyterLab runs on a copy of ``notebooks/`` on a free loopback port with a random token, the way
``cbi1kit lab`` starts it; chromium reaches loopback only (every other request is aborted and
recorded). Each notebook must open with its kernel started and nothing to ask or save, run with
Run All without an error output, draw every chart, log no console error, and save back unchanged.
The report's pages are opened from disk and checked the same way. A screenshot of every notebook
after Run All goes to the session's temporary folder.

Without chromium or playwright the module skips, unless CI is set: there it fails, so a broken
install cannot pass as a skip.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from cbi1kit.viz._browser import (
    LabNotebook,
    OfflineBrowser,
    check_report_page,
    unavailable,
)
from cbi1kit.viz._lab import KERNELSPEC, LabServer, running_lab

ROOT = Path(__file__).parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def browser() -> Iterator[OfflineBrowser]:
    """One chromium for the module (Playwright's sync API runs one at a time); findings are
    cleared by each test."""
    missing = unavailable()
    if missing is not None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI must run the browser test: {missing}")
        pytest.skip(missing)
    with OfflineBrowser() as offline:
        yield offline


@pytest.fixture(scope="module")
def lab(
    tmp_path_factory: pytest.TempPathFactory, browser: OfflineBrowser
) -> Iterator[tuple[LabServer, OfflineBrowser]]:
    scratch = tmp_path_factory.mktemp("lab")
    with running_lab(ROOT / "notebooks", scratch, token=secrets.token_hex(24)) as server:
        yield server, browser


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_offline_in_lab_and_draws_every_chart(
    notebook: Path, lab: tuple[LabServer, OfflineBrowser], screenshots: Path
) -> None:
    server, browser = lab
    browser.findings.clear()
    opened = LabNotebook.open(browser, server, notebook.name)
    try:
        # as a user opens it: the kernel started unasked, nothing modified yet
        assert opened.dialogs() == [], "a dialog on opening (Select Kernel?)"
        assert opened.kernel_name() == KERNELSPEC["name"]
        assert not opened.is_dirty(), "marked modified on opening"
        problems = opened.run_and_check(screenshots / f"{notebook.stem}.png")
        assert not problems, "\n".join(problems)
        for cell in opened.cells():  # what a cell printed is on the screen under it
            printed = [line for line in cell.text().splitlines() if line.strip()]
            if printed and all(o.get("output_type") == "stream" for o in cell.outputs):
                assert printed[0].strip() in opened.shown_text(cell.index), cell.index
        opened.save()  # what autosave does: the tracked files must come out unchanged
        tracked, saved = _files(ROOT / "notebooks"), _files(server.root)
        assert [n for n in tracked if saved.get(n) != tracked[n]] == []
    finally:
        opened.close()


def test_a_chart_drawn_from_a_cdn_is_caught(lab: tuple[LabServer, OfflineBrowser]) -> None:
    """The checks above can fail: a notebook that does not call ``ck.setup_notebook()`` gets
    altair's default renderer, whose vega comes from a CDN; its chart does not draw, and the
    request is recorded."""
    server, browser = lab
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": KERNELSPEC})
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import cbi1kit as ck\n\n"
            "frame = ck.encode_delta(ck.FilterFormat(1, 8), 0, 0, 1, [(0, 1)])\n"
            "ck.viz.byte_map_chart(frame)"
        )
    ]
    nbformat.write(nb, server.root / "scratch_cdn.ipynb")
    browser.findings.clear()
    notebook = LabNotebook.open(browser, server, "scratch_cdn.ipynb")
    try:
        problems = notebook.run_and_check(chart_wait_ms=5_000)  # it will not draw: no long wait
        assert any("no chart drawn" in p for p in problems), problems
        assert any(p.startswith("request off the machine: https://cdn.") for p in problems)
    finally:
        notebook.close()
        for scratch in server.root.glob("scratch_cdn.*"):
            scratch.unlink()


def test_report_pages_draw_every_chart_offline(full_report: Path, browser: OfflineBrowser) -> None:
    browser.findings.clear()
    pages = [full_report / "index.html", *sorted((full_report / "notebooks").glob("*.html"))]
    problems = [p for page in pages for p in check_report_page(browser, page)]
    problems += browser.findings.problems()
    assert len(pages) > 1
    assert not problems, "\n".join(problems)


def test_a_report_page_that_fetches_or_lacks_a_chart_is_caught(
    tmp_path: Path, browser: OfflineBrowser
) -> None:
    browser.findings.clear()
    page = tmp_path / "page.html"
    page.write_text(
        "<!doctype html><html><body>"
        "<script src='https://cdn.jsdelivr.net/npm/vega@6'></script>"
        "<figure data-chart='churn'><figcaption>churn</figcaption></figure>"
        "<pre class='code'>ck.viz.churn_chart(frames, images)</pre><div class='out'></div>"
        "</body></html>"
    )
    problems = check_report_page(browser, page) + browser.findings.problems()
    assert any("figure churn: no chart drawn" in p for p in problems), problems
    assert any("code block 0: no chart drawn" in p for p in problems), problems
    assert "request off the machine: https://cdn.jsdelivr.net/npm/vega@6" in problems
