"""Chromium, offline, on the notebooks in JupyterLab and on the report: what a user sees.

Debian's chromium is driven through Playwright (whose own browser download needs a network this
project does not assume). Every request that would leave the machine — any host but loopback — is
aborted and recorded, and so is every console error; a notebook is opened, run with Run All and
checked for error outputs and for charts that did not draw. The browser test and ``cbi1kit demo``'s
screenshots both run through here; later checks (drag a brush, move a slider, read what a cell
lists) are written with ``LabNotebook``'s helpers.
"""

from __future__ import annotations

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

from cbi1kit.viz._lab import LabServer

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page, Playwright, Route, WebSocketRoute

__all__ = [
    "CHART_CALL",
    "Findings",
    "LabNotebook",
    "OfflineBrowser",
    "check_report_page",
    "find_chromium",
    "lab_session",
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

_PANEL = "window.jupyterapp.shell.currentWidget"

#: The element the notebook scrolls in.
_SCROLLER = (
    f"({_PANEL}.content.node.querySelector('.jp-WindowedPanel-outer') ?? {_PANEL}.content.node)"
)

_KERNEL_IDLE = f"() => {_PANEL}?.sessionContext?.session?.kernel?.status === 'idle'"

#: Run All is over: the kernel idle, no cell queued or running, and every code cell run unless
#: one raised (Run All stops there).
_RUN_OVER = f"""() => {{
  const panel = {_PANEL};
  if (panel?.sessionContext?.session?.kernel?.status !== 'idle') return false;
  const prompts = [...panel.node.querySelectorAll('.jp-InputArea-prompt')];
  if (prompts.some(p => p.textContent.includes('*'))) return false;
  const code = panel.content.widgets.filter(c => c.model.type === 'code');
  const raised = code.some(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'));
  return raised || code.every(c => c.model.executionCount !== null);
}}"""

#: Every cell: its type, source, execution count and outputs (nbformat JSON).
_CELLS = f"""() => {_PANEL}.content.widgets.map(c => ({{
  type: c.model.type,
  source: c.model.sharedModel.getSource(),
  count: c.model.type === 'code' ? c.model.executionCount : null,
  outputs: c.model.type === 'code' ? c.model.outputs.toJSON() : [],
}}))"""

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
    """One notebook open in JupyterLab, in its own page: run it, read it, look at it."""

    def __init__(self, page: Page, name: str, findings: Findings) -> None:
        self.page = page
        self.name = name
        self.findings = findings  # the browser's: what this page did off the machine, its errors

    @classmethod
    def open(cls, browser: OfflineBrowser, server: LabServer, name: str) -> LabNotebook:
        """``name`` opened the way a user opens it (its URL, in a fresh workspace), once its kernel
        is up and idle."""
        page = browser.new_page()
        page.goto(server.notebook_url(name))
        page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
        notebook = cls(page, name, browser.findings)
        notebook.wait_for_kernel_idle()
        return notebook

    # -- state
    def wait_for_kernel_idle(self) -> None:
        self.page.wait_for_function(_KERNEL_IDLE, timeout=STEP_TIMEOUT_MS)

    def kernel_name(self) -> str:
        return str(self.page.evaluate(f"() => {_PANEL}.sessionContext.session.kernel.name"))

    def dialogs(self) -> list[str]:
        """The text of every dialog on screen (a "Select Kernel" would be one)."""
        return self.page.locator(".jp-Dialog").all_inner_texts()

    def is_dirty(self) -> bool:
        """Whether Lab marks the notebook modified (its tab's dot)."""
        return self.page.locator(".lm-TabBar-tab.jp-mod-dirty").count() > 0

    def cells(self) -> list[Cell]:
        return [Cell(i, **c) for i, c in enumerate(self.page.evaluate(_CELLS))]

    # -- actions, through the menus as a user clicks them
    def menu(self, menu: str, item: str) -> None:
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu}$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$")).click()

    def run_all(self) -> None:
        """Run → Run All Cells, then wait until the run is over (stopped at an error or not)."""
        self.menu("Run", "Run All Cells")
        self.page.wait_for_function(_RUN_OVER, timeout=RUN_TIMEOUT_MS, polling=500)

    def save(self) -> None:
        """File → Save Notebook (what autosave does), then wait until Lab has written it."""
        self.menu("File", "Save Notebook")
        self.page.wait_for_function(f"() => !{_PANEL}.context.model.dirty")
        self.page.wait_for_function(
            f"() => !{_PANEL}.context.isDisposed && {_PANEL}.context.contentsModel !== null"
        )

    def close(self) -> None:
        """Shut its kernel down and close its page."""
        self.page.evaluate(f"async () => {{ await {_PANEL}.sessionContext.shutdown(); }}")
        self.page.close()

    # -- what it shows
    def cell(self, index: int) -> Locator:
        return self.page.locator(".jp-NotebookPanel .jp-Cell").nth(index)

    def outputs(self, index: int) -> Locator:
        """The output areas of cell ``index`` (a widget, a table, a chart each)."""
        return self.cell(index).locator(".jp-OutputArea-output")

    def shown_text(self, index: int) -> str:
        """The text cell ``index`` shows under it, as rendered: tables, streams, and what a widget
        (an ``ipywidgets.Output`` a brush fills) holds, which the cell's own outputs do not."""
        return "\n".join(self.outputs(index).all_inner_texts())

    def charts(self, index: int | None = None) -> Locator:
        """vega-embed's containers in cell ``index`` (all cells: None): a chart each."""
        scope = self.page.locator(".jp-NotebookPanel") if index is None else self.cell(index)
        return scope.locator(".vega-embed")

    def chart_cells(self) -> list[Cell]:
        """The code cells that make a chart (``CHART_CALL``)."""
        return [c for c in self.cells() if c.type == "code" and CHART_CALL.search(c.source)]

    def undrawn_charts(self, wait_ms: int = STEP_TIMEOUT_MS) -> list[str]:
        """Each chart-making cell without a chart vega drew, after up to ``wait_ms`` for the
        charts to draw (they draw once their widget's JavaScript has loaded)."""
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
        page = self.page
        page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
        page.evaluate("() => window.jupyterapp.shell.collapseRight()")
        viewport = page.viewport_size or {"width": 1280, "height": 900}
        extra = int(
            page.evaluate(
                f"() => {{ const s = {_SCROLLER}; return s.scrollHeight - s.clientHeight; }}"
            )
        )
        page.set_viewport_size({"width": viewport["width"], "height": viewport["height"] + extra})
        try:
            page.evaluate(f"() => {{ {_SCROLLER}.scrollTop = 0; }}")
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
) -> dict[str, list[str]]:
    """Every notebook in ``notebooks`` opened in Lab (on a copy), run with Run All and
    screenshot to ``out/NAME.png``; the problems found in each, by name."""
    say = say or (lambda _msg: None)
    found: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="cbi1kit-lab-") as scratch:
        token = secrets.token_hex(24)
        with lab_session(notebooks, Path(scratch), token=token) as (server, browser):
            for path in sorted(notebooks.glob("*.ipynb")):
                say(f"notebook {path.stem}")
                browser.findings.clear()
                notebook = LabNotebook.open(browser, server, path.name)
                found[path.stem] = notebook.run_and_check(out / f"{path.stem}.png")
                notebook.close()
    return found


@contextmanager
def lab_session(
    notebooks: Path, scratch: Path, *, token: str
) -> Iterator[tuple[LabServer, OfflineBrowser]]:
    """A Lab on a copy of ``notebooks`` and an offline browser to open it with."""
    from cbi1kit.viz._lab import running_lab

    with running_lab(notebooks, scratch, token=token) as server, OfflineBrowser() as browser:
        yield server, browser
