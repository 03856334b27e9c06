"""The notebooks and the report as a user opens them (#14): Debian's chromium, no network.

JupyterLab runs on a copy of ``notebooks/`` on a free loopback port with a random token, the way
``cbi1kit lab`` starts it; chromium reaches loopback only (every other request is aborted and
recorded). Every notebook is opened in one Lab page, a tab each, and run with Run All, their
kernels side by side — once, as ``cbi1kit demo`` runs them: each must open with its kernel
started and nothing to ask or save, run without an error output, draw every chart, log no
console error, and save back unchanged; the brush and scrubber checks then work on those open
tabs. The report is built from those runs (its notebook pages are what chromium drew), and its
pages are opened from disk and checked the same way. A screenshot of every notebook after Run
All goes to the session's temporary folder.

Without chromium or playwright the module skips, unless CI is set: there it fails, so a broken
install cannot pass as a skip.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from cbi1kit.analysis import replay
from cbi1kit.data import mooncake_trace, sample_capture
from cbi1kit.viz._lab import KERNELSPEC
from cbi1kit.viz._report import NOTEBOOKS as REPORT_NOTEBOOKS, build_report, drawn_cells
from tools.browser import (
    LabNotebook,
    NotebookRun,
    OfflineBrowser,
    check_report_page,
    run_notebooks,
    unavailable,
)
from tools.lab import LabServer, running_lab

ROOT = Path(__file__).parents[1]
SAMPLE = sample_capture()
TRACE = mooncake_trace()
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
def runs(
    lab: tuple[LabServer, OfflineBrowser], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, NotebookRun]:
    """Every notebook run once with Run All, a kernel per core at a time in one Lab page (the
    demo's run); the tests read these runs, and the notebooks stay open for the interaction
    tests."""
    server, browser = lab
    browser.findings.clear()
    shots = tmp_path_factory.mktemp("screenshots")
    return run_notebooks(browser, server, [p.name for p in NOTEBOOKS], screenshots=shots)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_offline_in_lab_and_draws_every_chart(
    notebook: Path, lab: tuple[LabServer, OfflineBrowser], runs: dict[str, NotebookRun]
) -> None:
    server, _ = lab
    run = runs[notebook.stem]
    # as a user opens it: the kernel started unasked, nothing modified yet
    assert run.on_opening == []
    assert not run.problems, "\n".join(run.problems)
    assert run.screenshot is not None and run.screenshot.stat().st_size > 10_000
    opened = run.notebook
    for cell in run.cells:  # what a cell printed is on the screen under it
        printed = [line for line in cell.text().splitlines() if line.strip()]
        if printed and all(o.get("output_type") == "stream" for o in cell.outputs):
            assert printed[0].strip() in opened.shown_text(cell.index), cell.index
    opened.save()  # what autosave does: the tracked files must come out unchanged
    tracked, saved = _files(ROOT / "notebooks"), _files(server.root)
    assert [n for n in tracked if saved.get(n) != tracked[n]] == []


def test_the_checks_see_a_raising_cell_and_the_cells_it_stopped(
    lab: tuple[LabServer, OfflineBrowser],
) -> None:
    """The run's checks can fail: a cell that raises is an error and stops Run All, so the
    cells after it are reported as not run."""
    server, browser = lab
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": KERNELSPEC})
    nb.cells = [
        nbformat.v4.new_code_cell("raise ValueError('on purpose')"),
        nbformat.v4.new_code_cell("print('never')"),
    ]
    nbformat.write(nb, server.root / "scratch_raises.ipynb")
    browser.findings.clear()
    try:
        (run,) = run_notebooks(browser, server, ["scratch_raises.ipynb"]).values()
        assert "cell 0: ValueError: on purpose" in run.problems, run.problems
        assert "cell 1: not run" in run.problems, run.problems
        run.notebook.close()
    finally:
        for scratch in server.root.glob("scratch_raises.*"):
            scratch.unlink()


def test_a_chart_drawn_from_a_cdn_is_caught(lab: tuple[LabServer, OfflineBrowser]) -> None:
    """The checks above can fail: a notebook that does not call ``ck.setup_notebook()`` gets
    altair's default renderer, whose vega comes from a CDN; its chart does not draw, and the
    request is recorded."""
    server, browser = lab
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": KERNELSPEC})
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import cbi1kit as ck\n\n"
            "frame = ck.encode_delta(ck.FilterFormat(seed=1, bucket_count=8), 0, 0, 1, [(0, 1)])\n"
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


@pytest.fixture(scope="module")
def lab_report(runs: dict[str, NotebookRun], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's report: every notebook's page made from its run above, not run again."""
    out = tmp_path_factory.mktemp("lab-report")
    executed = {name: drawn_cells(run.cells, run.drawn) for name, run in runs.items()}
    result = build_report(
        SAMPLE, out, trace=TRACE, notebooks_dir=ROOT / "notebooks", executed=executed
    )
    assert set(result.notebooks) == set(REPORT_NOTEBOOKS)
    return out


def test_report_pages_draw_every_chart_offline(
    lab_report: Path, full_report: Path, browser: OfflineBrowser
) -> None:
    """Every page of the report made from the Lab runs, and the page papermill made, draw every
    chart (a widget's chart: the SVG or canvas chromium drew in Lab) with nothing fetched."""
    browser.findings.clear()
    pages = [lab_report / "index.html", *sorted((lab_report / "notebooks").glob("*.html"))]
    pages += sorted((full_report / "notebooks").glob("*.html"))
    assert len(pages) == 1 + len(REPORT_NOTEBOOKS) + 1
    problems = [p for page in pages for p in check_report_page(browser, page)]
    problems += browser.findings.problems()
    assert not problems, "\n".join(problems)
    for name in REPORT_NOTEBOOKS:
        page = (lab_report / "notebooks" / f"{name}.html").read_text()
        assert "<pre class='code'>" in page and "class='error'" not in page, name
        assert not re.search(r"<script|src=['\"]https?:|href=['\"]https?:", page, re.I), name
    occupancy = (lab_report / "notebooks" / "03_bucket_occupancy.html").read_text()
    assert "buckets 0–" in occupancy  # the explorer's listed words: a widget's drawn output


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


def test_brushing_in_03_lists_the_brushed_words(runs: dict[str, NotebookRun]) -> None:
    """A brush dragged over 03's overview strip lists that range's words under the chart (a
    ``display()`` in the callback went to Lab's hidden log console, one table per step)."""
    from cbi1kit.viz._widgets import LISTED_BUCKETS

    lane = replay(SAMPLE).final_lane
    buckets = int(lane.shape[0])
    opened = runs["03_bucket_occupancy"].notebook
    index = opened.cell_index("ck.viz.occupancy_explorer(")
    assert f"buckets 0–{LISTED_BUCKETS - 1}" in opened.shown_text(index)
    opened.drag_across_first_marks(index, 0.40, 0.60)
    shown = opened.shown_text(index)
    for _ in range(60):  # until the brush's range came back through the kernel
        found = re.search(r"buckets (\d+)–(\d+)", shown)
        if found and found.group(1) != "0":
            break
        time.sleep(0.5)
        shown = opened.shown_text(index)
    assert found and found.group(1) != "0", shown
    first, last = int(found.group(1)), int(found.group(2))
    assert abs(first - 0.40 * buckets) < 0.02 * buckets, (first, buckets)
    assert last == first + LISTED_BUCKETS - 1
    # the listed words are the lane's, bucket by bucket, as hex
    for bucket in (first, last):
        word = f"0x{int(lane[bucket]):016x}"
        assert word in shown, (bucket, word)


def test_the_scrubber_in_02_shows_the_lane_at_the_sequence_chosen(
    runs: dict[str, NotebookRun],
) -> None:
    from cbi1kit.ckf import lane_occupancy

    report = replay(SAMPLE)
    first, last = report.sequence_ranges[-1]
    chosen = (first + last) // 2
    occupied = lane_occupancy(report.lane_at(chosen))
    opened = runs["02_load_captured_frames"].notebook
    index = opened.cell_index("ck.viz.stream_scrubber(")
    assert f"the delta at sequence {last}" in opened.shown_text(index)
    opened.set_slider(index, chosen)
    shown = opened.wait_for_text(index, f"the delta at sequence {chosen}")
    assert f"the delta at sequence {chosen}" in shown, shown
    assert f"{occupied:,}" in shown or str(occupied) in shown, (occupied, shown)
    opened.charts(index).first.wait_for(timeout=30_000)  # the lane's chart, redrawn
    assert opened.charts(index).count() == 1


#: The measured-FPR points of the what-if explorer's first chart, as vega labels each for a
#: reader ("slot load factor α: 0.475; false positives per probe: ...").
_FPR_POINTS = """(e) => [...e.querySelectorAll('.what_if_fpr_group path')]
  .filter(p => p.getAttribute('aria-roledescription') === 'point')
  .map(p => p.getAttribute('aria-label'))"""
#: The churn's images-per-second area within the brushed window: the path vega drew for it.
_IMAGES_IN_WINDOW = """(e) => [...e.querySelectorAll('.mark-area.role-mark')]
  .filter(m => !m.getAttribute('class').includes('what_if_'))
  .map(m => m.querySelector('path')?.getAttribute('d') ?? '')[0]"""


def _loads(labels: list[str]) -> list[float]:
    """The load factor of each labelled point."""
    found = [re.search(r"slot load factor α: ([\d.]+)", label) for label in labels]
    return [float(m.group(1)) for m in found if m is not None]


def test_the_what_if_explorer_in_06_redraws_as_its_slider_moves(
    runs: dict[str, NotebookRun],
) -> None:
    """06 ends with ``ck.viz.what_if``: one step down of its expected-blocks slider (the arrow
    key on the handle, as a hand does it) simulates a smaller filter and the FPR chart's points
    move to higher loads within 2 s, in place; a brush over the load chart picks the same
    window in the churn chart. No error in the page or the cell."""
    opened = runs["06_filter_accuracy"].notebook
    index = opened.cell_index("ck.viz.what_if(")
    charts = opened.charts(index)
    assert charts.count() == 1
    chart = charts.first
    before = chart.evaluate(_FPR_POINTS)
    assert before, "no FPR points drawn"
    shown = opened.shown_text(index)
    blocked, errors = len(opened.findings.blocked), len(opened.findings.console_errors)
    opened.activate()
    handle = opened.cell(index).locator(".noUi-handle").first  # expected_blocks_per_dc's
    handle.scroll_into_view_if_needed()
    handle.focus()
    moved = time.monotonic()
    handle.press("ArrowLeft")
    after = before
    while after == before and time.monotonic() - moved < 2.0:
        time.sleep(0.05)
        after = chart.evaluate(_FPR_POINTS)
    assert after != before, "the FPR chart did not change within 2 s of the slider's move"
    assert max(_loads(after)) > max(_loads(before)), (before, after)
    assert opened.charts(index).count() == 1  # redrawn where it was, not a second chart
    assert opened.shown_text(index) != shown  # the readout and the headline moved with it
    assert "not simulated" not in opened.shown_text(index)
    # the brush: a window dragged over the load chart highlights that window of churn
    whole = chart.evaluate(_IMAGES_IN_WINDOW)
    load = chart.locator("svg .what_if_load_0_marks").first
    load.scroll_into_view_if_needed()
    box = load.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    opened.page.mouse.move(box["x"] + 0.2 * box["width"], y)
    opened.page.mouse.down()
    for step in range(1, 11):
        opened.page.mouse.move(box["x"] + (0.2 + 0.03 * step) * box["width"], y)
    opened.page.mouse.up()
    window = chart.evaluate(_IMAGES_IN_WINDOW)
    assert whole and window and len(window) < len(whole) / 2, (len(whole), len(window))
    assert opened.errors() == []
    assert opened.findings.blocked[blocked:] == []
    assert opened.findings.console_errors[errors:] == []


def test_the_byte_editor_in_01_names_what_an_edit_broke(runs: dict[str, NotebookRun]) -> None:
    """01's byte editor, as a hand uses it: pick "Try it 1" and the cell names the broken
    magic and its golden vector; type an offset and a value, apply, and the edit is shown."""
    opened = runs["01_wire_format_tour"].notebook
    index = opened.cell_index("explorer.edit()")
    opened.activate()
    cell = opened.cell(index)
    picker = cell.locator("select").first
    picker.scroll_into_view_if_needed()
    picker.select_option(index=1)
    shown = opened.wait_for_text(index, "golden vector bad-magic")
    assert "decode raises Magic at header.magic (offset 0)" in shown, shown
    offset, value = cell.locator("input[type=number]").first, cell.locator("input[type=text]").first
    offset.fill("6")
    offset.press("Enter")
    value.fill("0x01")
    value.press("Enter")
    cell.get_by_role("button", name="apply").click()
    shown = opened.wait_for_text(index, "(header.flags): 0x02 → 0x01")
    assert "(header.flags): 0x02 → 0x01" in shown, shown
    assert not opened.errors()


def test_the_live_dashboard_in_08_shows_the_sequence_advance(
    lab: tuple[LabServer, OfflineBrowser], runs: dict[str, NotebookRun]
) -> None:
    """08 run again in a page of its own, watched while it runs: the dashboard's sequence for
    the simulated relay's lane goes up between redraws, then the notebook stops both."""
    server, browser = lab
    browser.findings.clear()  # what earlier tests provoked on purpose (a CDN chart) is theirs
    opened = LabNotebook.open(browser, server, "08_live.ipynb")
    try:
        opened.start_run_all()
        index = opened.cell_index("live.dashboard()")
        seen: list[int] = []
        ends = time.monotonic() + 60
        while len(set(seen)) < 3 and time.monotonic() < ends:
            found = re.search(r"\(sim-dc-0\)\s*(\d+)", opened.shown_text(index))
            if found:
                seen.append(int(found.group(1)))
            time.sleep(0.5)
        assert len(set(seen)) >= 3 and seen == sorted(seen), seen
        opened.wait_for_run()
        assert not opened.problems(), opened.problems()
        assert "(stopped)" in opened.shown_text(index)
    finally:
        opened.close()
