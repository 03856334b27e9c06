"""Chromium, offline, on the notebooks in JupyterLab and on the report: what a user sees.

Debian's chromium is driven through Playwright (whose own browser download needs a network this
project does not assume). Every request that would leave the machine — any host but loopback — is
aborted and recorded, and so is every console error; a notebook is opened, run with Run All and
checked for error outputs and for charts that did not draw. The browser test and ``make demo``'s
screenshots both run through here; later checks (drag a brush, move a slider, read what a cell
lists) are written with ``LabNotebook``'s helpers.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from cbi1kit.viz._lab import KERNELSPEC
from tools.lab import LabServer, running_lab

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page, Playwright, Route, WebSocketRoute

__all__ = [
    "CHART_CALL",
    "Findings",
    "LabNotebook",
    "NotebookRun",
    "OfflineBrowser",
    "check_report_page",
    "find_chromium",
    "lab_session",
    "run_notebooks",
    "screenshot_notebooks",
    "unavailable",
]

#: Code that makes a chart: a cell holding it must show one that draws.
CHART_CALL = re.compile(
    r"\bck\.viz\.(\w+_chart|occupancy_explorer|stream_scrubber)\(|\bJupyterChart\("
)
#: A chart vega drew: the SVG or canvas it renders into (vega-embed's action icons are no chart).
_DRAWN = ".marks"
#: How long the UI may take for one step before a run is called stuck (a hang guard, not a check).
STEP_TIMEOUT_MS = 120_000
RUN_TIMEOUT_MS = 900_000

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
#: Chromium's own background traffic off too; the route below is what catches the page's.
_CHROMIUM_ARGS = [
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-dev-shm-usage",
    "--disable-sync",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]


def find_chromium() -> str | None:
    """Debian's chromium (or a Chrome) on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def unavailable() -> str | None:
    """Why a browser session cannot start here (None: it can)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[browser]')"
    if find_chromium() is None:
        return "chromium is not installed (apt-get install chromium)"
    return None


def _stays_on_the_machine(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in ("file", "data", "blob", "about"):
        return True
    return (parts.hostname or "") in _LOOPBACK


@dataclass
class Findings:
    """What a page did that it must not: requests off the machine, console errors."""

    blocked: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        return [f"request off the machine: {u}" for u in self.blocked] + [
            f"console error: {e}" for e in self.console_errors
        ]

    def clear(self) -> None:
        self.blocked.clear()
        self.console_errors.clear()


class OfflineBrowser:
    """Headless chromium whose pages reach loopback only; ``findings`` records every attempt
    to go further and every console error, across all its pages."""

    def __init__(self, *, width: int = 1280, height: int = 900) -> None:
        self.findings = Findings()
        self._viewport = {"width": width, "height": height}
        self._playwright: Playwright | None = None

    def __enter__(self) -> OfflineBrowser:
        from playwright.sync_api import sync_playwright

        chromium = find_chromium()
        if chromium is None:
            raise RuntimeError(unavailable() or "no chromium")
        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(
            executable_path=chromium, args=_CHROMIUM_ARGS
        )
        self._context = self._browser.new_context(
            viewport=self._viewport,  # type: ignore[arg-type]
            device_scale_factor=1,
            service_workers="block",
        )
        self._context.route(lambda url: not _stays_on_the_machine(url), self._abort)
        self._context.route_web_socket(lambda url: not _stays_on_the_machine(url), self._close)
        return self

    def __exit__(self, *exc: object) -> None:
        self._context.close()
        self._browser.close()
        if self._playwright is not None:
            self._playwright.stop()

    def _abort(self, route: Route) -> None:
        self.findings.blocked.append(route.request.url)
        route.abort("blockedbyclient")

    def _close(self, ws: WebSocketRoute) -> None:
        self.findings.blocked.append(ws.url)
        ws.close()

    def new_page(self) -> Page:
        page = self._context.new_page()
        page.set_default_timeout(STEP_TIMEOUT_MS)
        errors = self.findings.console_errors
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"uncaught {e}"))
        return page


# -------------------------------------------------------------------------- a notebook in Lab

#: The notebook panel a script works on, found by its id: every script below is called with the
#: id, so several notebooks can be open, and running, in one Lab page at once.
_FIND = "[...window.jupyterapp.shell.widgets('main')].find(w => w.id === id)"

#: The element the notebook scrolls in.
_SCROLLER = (
    f"(({_FIND}).content.node.querySelector('.jp-WindowedPanel-outer') ?? ({_FIND}).content.node)"
)

_KERNEL_CHOSEN = f"(id) => !!({_FIND})?.sessionContext?.session?.kernel?.name"
_KERNEL_IDLE = f"(id) => ({_FIND})?.sessionContext?.session?.kernel?.status === 'idle'"

#: Run All is over: the kernel idle, no cell queued or running, and every code cell run unless
#: one raised (Run All stops there).
_RUN_OVER = f"""(id) => {{
  const panel = {_FIND};
  if (panel?.sessionContext?.session?.kernel?.status !== 'idle') return false;
  const prompts = [...panel.node.querySelectorAll('.jp-InputArea-prompt')];
  if (prompts.some(p => p.textContent.includes('*'))) return false;
  const code = panel.content.widgets.filter(c => c.model.type === 'code');
  const raised = code.some(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'));
  return raised || code.every(c => c.model.executionCount !== null);
}}"""

#: Every cell: its type, source, execution count and outputs (nbformat JSON).
_CELLS = f"""(id) => ({_FIND}).content.widgets.map(c => ({{
  type: c.model.type,
  source: c.model.sharedModel.getSource(),
  count: c.model.type === 'code' ? c.model.executionCount : null,
  outputs: c.model.type === 'code' ? c.model.outputs.toJSON() : [],
}}))"""

#: Each code cell's outputs as the browser drew them, as static HTML (a widget's output is a
#: model id in the notebook; what it drew is only here): a canvas becomes the PNG it holds,
#: vega-embed's action menu and any script are dropped, a reference to this page is made local.
_DRAWN_OUTPUTS = f"""(id) => ({_FIND}).content.widgets.map(c => c.model.type !== 'code' ? [] :
  [...c.outputArea.node.children].filter(e => e.classList.contains('jp-OutputArea-child'))
    .map(child => {{
      const out = child.querySelector('.jp-OutputArea-output');
      if (!out) return '';
      const copy = out.cloneNode(true);
      const drawn = [...out.querySelectorAll('canvas')];
      copy.querySelectorAll('canvas').forEach((canvas, i) => {{
        const img = document.createElement('img');
        img.src = drawn[i].toDataURL('image/png');
        img.className = canvas.className;
        img.style.width = drawn[i].style.width || drawn[i].width + 'px';
        canvas.replaceWith(img);
      }});
      copy.querySelectorAll('details, script, .vega-actions').forEach(e => e.remove());
      // vega points a gradient fill at this page's own URL (url(http://…/lab/tree/NB#id)): on
      // another page that is a fetch back to Lab, so keep the fragment only
      return copy.innerHTML.replace(/url\\((['"]?)[^)'"#]*#/g, 'url($1#');
    }}))"""

#: Open ``path`` as a double-click in the file browser does; the new panel's id once loaded.
_OPEN = """async (path) => {
  const panel = await window.jupyterapp.commands.execute('docmanager:open', {path});
  await panel.context.ready;
  return panel.id;
}"""

_DRAWN_IN = f"""(el) => [...el.querySelectorAll('{_DRAWN}')].some(m => {{
  const r = m.getBoundingClientRect();
  return r.width > 0 && r.height > 0;
}})"""


@dataclass(frozen=True)
class Cell:
    """A cell as the notebook model in the browser holds it."""

    index: int
    type: str
    source: str
    count: int | None
    outputs: list[dict[str, Any]]

    def text(self) -> str:
        """Its stream and plain-text outputs, as a user reads them."""
        parts = []
        for out in self.outputs:
            if out.get("output_type") == "stream":
                parts.append("".join(out.get("text", "")))
            elif "text/plain" in out.get("data", {}):
                parts.append("".join(out["data"]["text/plain"]))
        return "".join(parts)

    def errors(self) -> list[str]:
        return [
            f"{o.get('ename')}: {o.get('evalue')}"
            for o in self.outputs
            if o.get("output_type") == "error"
        ]


class LabNotebook:
    """One notebook open in a Lab page, as a tab among others: run it, read it, look at it.

    Every method acts on this notebook's panel (found by its id), so several can be open and
    running at once; what needs the screen (a menu, a drag, a screenshot) activates its tab."""

    def __init__(self, page: Page, panel_id: str, name: str, findings: Findings) -> None:
        self.page = page
        self.id = panel_id
        self.name = name
        self.findings = findings  # the browser's: what its pages did off the machine, their errors

    @classmethod
    def open(
        cls, browser: OfflineBrowser, server: LabServer, name: str, *, idle: bool = True
    ) -> LabNotebook:
        """``name`` opened the way a user opens it (its URL, a fresh page and workspace), once
        its kernel is up and idle (``idle=False``: once it has one, starting or not)."""
        page = browser.new_page()
        page.goto(server.notebook_url(name))
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
        panel_id = str(page.evaluate("() => window.jupyterapp.shell.currentWidget.id"))
        notebook = cls(page, panel_id, name, browser.findings)
        if idle:
            notebook.wait_for_kernel_idle()
        return notebook

    def open_beside(self, name: str) -> LabNotebook:
        """``name`` opened in this notebook's Lab as a double-click in the file browser opens it:
        a new tab, its kernel started (not waited for: ``wait_for_kernel_idle``)."""
        panel_id = str(self.page.evaluate(_OPEN, name))
        return LabNotebook(self.page, panel_id, name, self.findings)

    # -- state
    def _eval(self, script: str) -> Any:
        return self.page.evaluate(script, self.id)

    def wait_for_kernel(self) -> None:
        """Until its session has a kernel (starting, perhaps not yet ready)."""
        self.page.wait_for_function(_KERNEL_CHOSEN, arg=self.id, timeout=STEP_TIMEOUT_MS)

    def wait_for_kernel_idle(self) -> None:
        self.page.wait_for_function(_KERNEL_IDLE, arg=self.id, timeout=STEP_TIMEOUT_MS)

    def kernel_name(self) -> str:
        return str(self._eval(f"(id) => ({_FIND}).sessionContext.session.kernel.name"))

    def dialogs(self) -> list[str]:
        """The text of every dialog on screen (a "Select Kernel" would be one)."""
        return self.page.locator(".jp-Dialog").all_inner_texts()

    def is_dirty(self) -> bool:
        """Whether Lab holds the notebook modified (its tab's dot)."""
        return bool(self._eval(f"(id) => ({_FIND}).context.model.dirty"))

    def cells(self) -> list[Cell]:
        return [Cell(i, **c) for i, c in enumerate(self._eval(_CELLS))]

    def drawn_outputs(self) -> list[list[str]]:
        """Each cell's outputs as the browser drew them, static HTML (``_DRAWN_OUTPUTS``)."""
        return [list(cell) for cell in self._eval(_DRAWN_OUTPUTS)]

    # -- actions, through the menus as a user clicks them
    def activate(self) -> None:
        """Bring its tab to the front (what a click on the tab does)."""
        self._eval("(id) => window.jupyterapp.shell.activateById(id)")

    def menu(self, menu: str, item: str) -> None:
        self.activate()
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$")).click()

    def start_run_all(self) -> None:
        """Run → Run All Cells, without waiting for the run (``wait_for_run``)."""
        self.menu("Run", "Run All Cells")

    def wait_for_run(self) -> None:
        """Until the run is over (stopped at an error or not)."""
        self.page.wait_for_function(_RUN_OVER, arg=self.id, timeout=RUN_TIMEOUT_MS, polling=500)

    def run_all(self) -> None:
        """Run → Run All Cells, then wait until the run is over."""
        self.start_run_all()
        self.wait_for_run()

    def save(self) -> None:
        """File → Save Notebook (what autosave does), then wait until Lab has written it."""
        self.menu("File", "Save Notebook")
        self.page.wait_for_function(f"(id) => !({_FIND}).context.model.dirty", arg=self.id)
        self.page.wait_for_function(
            f"(id) => {{ const p = {_FIND}; "
            "return !p.context.isDisposed && p.context.contentsModel !== null; }",
            arg=self.id,
        )

    def close(self) -> None:
        """Shut its kernel down and close its tab (the page with it, when it is the last)."""
        self._eval(
            f"async (id) => {{ const p = {_FIND}; "
            "await p.sessionContext.shutdown(); p.dispose(); }"
        )
        if not self._eval("() => [...window.jupyterapp.shell.widgets('main')].length"):
            self.page.close()

    # -- what it shows
    def _panel(self) -> Locator:
        return self.page.locator(f'[id="{self.id}"]')

    def cell(self, index: int) -> Locator:
        return self._panel().locator(".jp-Cell").nth(index)

    def outputs(self, index: int) -> Locator:
        """The output areas of cell ``index`` (a widget, a table, a chart each)."""
        return self.cell(index).locator(".jp-OutputArea-output")

    def shown_text(self, index: int) -> str:
        """The text cell ``index`` shows under it, as rendered: tables, streams, and what a widget
        (an ``ipywidgets.Output`` a brush fills) holds, which the cell's own outputs do not."""
        return "\n".join(self.outputs(index).all_inner_texts())

    def charts(self, index: int | None = None) -> Locator:
        """vega-embed's containers in cell ``index`` (all cells: None): a chart each."""
        scope = self._panel() if index is None else self.cell(index)
        return scope.locator(".vega-embed")

    def chart_cells(self) -> list[Cell]:
        """The code cells that make a chart (``CHART_CALL``)."""
        return [c for c in self.cells() if c.type == "code" and CHART_CALL.search(c.source)]

    def undrawn_charts(self, wait_ms: int = STEP_TIMEOUT_MS) -> list[str]:
        """Each chart-making cell without a chart vega drew, after up to ``wait_ms`` for the
        charts to draw (they draw once their widget's JavaScript has loaded)."""
        self.activate()
        missing: list[str] = []
        deadline = time.monotonic() + wait_ms / 1000
        for cell in self.chart_cells():
            drawn = False
            while not drawn:
                charts = self.charts(cell.index)
                drawn = charts.count() > 0 and all(
                    bool(charts.nth(i).evaluate(_DRAWN_IN)) for i in range(charts.count())
                )
                if drawn or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            if not drawn:
                first_line = cell.source.strip().splitlines()[0]
                missing.append(f"cell {cell.index} ({first_line!r}): no chart drawn")
        return missing

    # -- interaction, as a user's hand does it
    def cell_index(self, call: str) -> int:
        """The first code cell whose source contains ``call``."""
        for cell in self.cells():
            if cell.type == "code" and call in cell.source:
                return cell.index
        raise LookupError(f"{self.name}: no cell calls {call!r}")

    def drag_across_first_marks(self, index: int, start: float, end: float) -> None:
        """Press the mouse at fraction ``start`` of the width of cell ``index``'s first chart's
        first marks (an overview strip) and release it at ``end``: a brush, as a hand drags it."""
        self.activate()
        marks = self.charts(index).first.locator('svg .role-mark:not([class*="brush"])').first
        marks.scroll_into_view_if_needed()
        box = marks.bounding_box()
        assert box is not None, f"cell {index}: its chart's marks are not shown"
        y = box["y"] + box["height"] / 2
        mouse = self.page.mouse
        mouse.move(box["x"] + start * box["width"], y)
        mouse.down()
        for step in range(1, 11):  # a drag is many moves, not a jump
            x = start + (end - start) * step / 10
            mouse.move(box["x"] + x * box["width"], y)
        mouse.up()

    def set_slider(self, index: int, value: int) -> None:
        """Type ``value`` into the readout of cell ``index``'s slider and press Enter (what a
        user does to land on one sequence of thousands)."""
        self.activate()
        readout = self.cell(index).locator(".widget-readout").first
        readout.scroll_into_view_if_needed()
        readout.click()
        readout.press("Control+a")
        readout.type(str(value))
        readout.press("Enter")

    def wait_for_text(self, index: int, text: str, timeout_ms: int = STEP_TIMEOUT_MS) -> str:
        """Cell ``index``'s shown text once it contains ``text`` (a widget's Python callback
        answers through the kernel, so not at once)."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            shown = self.shown_text(index)
            if text in shown or time.monotonic() > deadline:
                return shown
            time.sleep(0.25)

    def errors(self) -> list[str]:
        return [f"cell {c.index}: {e}" for c in self.cells() for e in c.errors()]

    def unrun(self) -> list[int]:
        return [c.index for c in self.cells() if c.type == "code" and c.count is None]

    def problems(self, chart_wait_ms: int = STEP_TIMEOUT_MS) -> list[str]:
        """After a run: every error output, every code cell Run All did not reach, every
        chart-making cell without a drawn chart, and the browser's findings."""
        unrun = [f"cell {i}: not run" for i in self.unrun()]
        undrawn = self.undrawn_charts(chart_wait_ms)
        return self.errors() + unrun + undrawn + self.findings.problems()

    def run_and_check(
        self, screenshot: Path | None = None, *, chart_wait_ms: int = STEP_TIMEOUT_MS
    ) -> list[str]:
        """Run All, then ``problems``; with ``screenshot``, the whole notebook goes there."""
        self.run_all()
        problems = self.problems(chart_wait_ms)
        if screenshot is not None:
            self.screenshot(screenshot)
        return problems

    def screenshot(self, path: Path, *, cells: tuple[int, int] | None = None) -> Path:
        """The whole notebook, every cell, as one PNG (the page grown to the notebook's height,
        the side panels folded); with ``cells`` (first, last), only those cells."""
        self.activate()
        page = self.page
        page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
        page.evaluate("() => window.jupyterapp.shell.collapseRight()")
        viewport = page.viewport_size or {"width": 1280, "height": 900}
        extra = int(
            self._eval(
                f"(id) => {{ const s = {_SCROLLER}; return s.scrollHeight - s.clientHeight; }}"
            )
        )
        page.set_viewport_size({"width": viewport["width"], "height": viewport["height"] + extra})
        try:
            self._eval(f"(id) => {{ {_SCROLLER}.scrollTop = 0; }}")
            page.evaluate("() => new Promise(done => requestAnimationFrame(() => done(null)))")
            path.parent.mkdir(parents=True, exist_ok=True)
            if cells is None:
                page.screenshot(path=str(path))
            else:
                top, bottom = self.cell(cells[0]).bounding_box(), self.cell(cells[1]).bounding_box()
                assert top is not None and bottom is not None, f"cells {cells} are not shown"
                height = bottom["y"] + bottom["height"] - top["y"] + 16
                clip = {"x": 0, "y": top["y"] - 8, "width": viewport["width"], "height": height}
                page.screenshot(path=str(path), clip=clip)  # type: ignore[arg-type]
        finally:
            page.set_viewport_size(viewport)
        return path


@dataclass
class NotebookRun:
    """One notebook after Run All in a shared Lab: what it was on opening, what went wrong, its
    cells and outputs as the browser drew them, its screenshot; ``notebook`` is still open."""

    notebook: LabNotebook
    on_opening: list[str]
    problems: list[str]
    cells: list[Cell]
    drawn: list[list[str]]
    screenshot: Path | None


def run_notebooks(
    browser: OfflineBrowser,
    server: LabServer,
    names: list[str],
    *,
    screenshots: Path | None = None,
    say: Callable[[str], None] | None = None,
    side_by_side: int | None = None,
) -> dict[str, NotebookRun]:
    """Each of ``names`` opened in one Lab page (the first by its URL, the rest as tabs beside
    it) with Run All started in it, ``side_by_side`` kernels running at a time (by default one
    per core, at least two), as a user with several tabs runs them; each run, once over, is
    checked, read and screenshot to ``screenshots/NAME.png``. Left open (the caller closes
    them, or the Lab with them).

    Why a bound: with every notebook's kernel at once on two busy cores, a chart's widget could
    take longer than anywidget's 2 s to initialise, and anywidget logs that as an error in the
    page even when the chart then draws.

    ``on_opening`` holds what a user must not meet on opening (a dialog, another kernel, a
    notebook already modified); ``problems`` what ``LabNotebook.problems`` finds after the run,
    the findings of the page (shared by its notebooks) so far included."""
    say = say or (lambda _msg: None)
    window = max(1, side_by_side or max(2, os.cpu_count() or 2))
    first: LabNotebook | None = None
    running: list[LabNotebook] = []
    on_opening: dict[str, list[str]] = {}
    runs: dict[str, NotebookRun] = {}

    def finish(notebook: LabNotebook) -> None:
        notebook.wait_for_run()
        stem = Path(notebook.name).stem
        problems = notebook.problems()
        shot = None if screenshots is None else notebook.screenshot(screenshots / f"{stem}.png")
        say(f"notebook {stem}: " + ("ok" if not problems else f"{len(problems)} problems"))
        runs[stem] = NotebookRun(
            notebook,
            on_opening[notebook.name],
            problems,
            notebook.cells(),
            notebook.drawn_outputs(),
            shot,
        )

    for name in names:  # each opened while those before it run, up to the window
        if len(running) >= window:
            finish(running.pop(0))
        notebook = (
            LabNotebook.open(browser, server, name, idle=False)
            if first is None
            else first.open_beside(name)
        )
        first = first or notebook
        notebook.wait_for_kernel()  # Run All waits for it to start; nothing else need wait
        found = [f"a dialog on opening: {d!r}" for d in notebook.dialogs()]
        if notebook.kernel_name() != KERNELSPEC["name"]:
            found.append(f"kernel {notebook.kernel_name()!r}, not {KERNELSPEC['name']!r}")
        if notebook.is_dirty():
            found.append("marked modified on opening")
        on_opening[name] = found
        say(f"notebook {Path(name).stem}: Run All")
        notebook.start_run_all()
        running.append(notebook)
    for notebook in running:
        finish(notebook)
    return runs


# ---------------------------------------------------------------------------------- the report


#: A report page: every figure and every chart-making code block's outputs hold a drawn chart
#: (vl-convert's SVG carries vega's ``marks`` class too); no error output.
_REPORT_CHECK = f"""() => {{
  const drawn = {_DRAWN_IN};
  const missing = [];
  document.querySelectorAll('figure[data-chart]').forEach(f => {{
    if (!drawn(f)) missing.push('figure ' + f.dataset.chart + ': no chart drawn');
  }});
  const makesChart = new RegExp({CHART_CALL.pattern!r});
  document.querySelectorAll('pre.code').forEach((pre, i) => {{
    if (!makesChart.test(pre.textContent)) return;
    let el = pre.nextElementSibling, ok = false;
    for (; el && !el.matches('pre.code'); el = el.nextElementSibling) ok ||= drawn(el);
    if (!ok) missing.push('code block ' + i + ': no chart drawn');
  }});
  document.querySelectorAll('pre.error').forEach(e => missing.push('error: ' + e.textContent));
  return missing;
}}"""


def check_report_page(browser: OfflineBrowser, page_path: Path) -> list[str]:
    """Open a report page (file://) and list what is wrong: a figure or a chart-making code
    block without a drawn chart, an error output, a request off the machine, a console error."""
    page = browser.new_page()
    try:
        page.goto(page_path.resolve().as_uri())
        page.wait_for_load_state("load")
        return [f"{page_path.name}: {p}" for p in page.evaluate(_REPORT_CHECK)]
    finally:
        page.close()


def screenshot_notebooks(
    notebooks: Path, out: Path, *, say: Callable[[str], None] | None = None
) -> dict[str, NotebookRun]:
    """Every notebook in ``notebooks`` opened in Lab (on a copy), run with Run All and
    screenshot to ``out/NAME.png`` (``run_notebooks``); each one's run, by name."""
    with tempfile.TemporaryDirectory(prefix="cbi1kit-lab-") as scratch:
        token = secrets.token_hex(24)
        with lab_session(notebooks, Path(scratch), token=token) as (server, browser):
            names = [p.name for p in sorted(notebooks.glob("*.ipynb"))]
            return run_notebooks(browser, server, names, screenshots=out, say=say)


@contextmanager
def lab_session(
    notebooks: Path, scratch: Path, *, token: str
) -> Iterator[tuple[LabServer, OfflineBrowser]]:
    """A Lab on a copy of ``notebooks`` and an offline browser to open it with."""
    with running_lab(notebooks, scratch, token=token) as server, OfflineBrowser() as browser:
        yield server, browser
