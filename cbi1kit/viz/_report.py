"""The offline report: every chart kind from a capture (and its trace), plus the executed notebooks.

Everything is embedded — charts as inline SVG rendered by vl-convert, notebook outputs as their
own HTML/SVG/PNG — so the report opens with no network and no CDN. Key charts are also written as
PNGs. A notebook's page comes from one execution: either a run the caller already made in
JupyterLab (``executed``: the demo's browser run, whose outputs are what chromium drew), or, for
the rest, papermill with the capture as their parameter and ``CBI1KIT_CHART_RENDERER=svg``, which
makes their ``ck.setup_notebook()`` render charts statically.
"""

from __future__ import annotations

import contextlib
import html
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import altair as alt
import polars as pl

from cbi1kit._files import claim_outputs
from cbi1kit.analysis._events import never_installed
from cbi1kit.analysis._global import model_pools
from cbi1kit.analysis._replay import LaneReport, ReplayReport
from cbi1kit.analysis._shorthands import (
    frames_table,
    global_timeline,
    images_table,
    replay,
    snapshots_table,
)
from cbi1kit.capture._items import FrameRecord
from cbi1kit.capture._readers import read_capture
from cbi1kit.ckf._stats import lane_stats
from cbi1kit.errors import OutputError, OutputVariant, VizError, VizVariant, one_line
from cbi1kit.hashing._dc_names import dc_text
from cbi1kit.sim._engine import Simulator
from cbi1kit.sim._simulator import SimulatorConfig
from cbi1kit.sim._workload import Workload, read_mooncake
from cbi1kit.viz._display import STATIC_ENV
from cbi1kit.viz._lane_charts import (
    byte_map_chart,
    fingerprint_chart,
    occupancy_chart,
    slots_histogram_chart,
)
from cbi1kit.viz._run_charts import fpr_vs_load_chart, prefix_depth_chart
from cbi1kit.viz._stream_charts import (
    churn_chart,
    filter_health_chart,
    filter_health_table,
    lanes_over_time_chart,
)

#: Every chart kind the toolkit draws, in the order the report shows them.
# Drawn only with a trace: exact prefix depths need the caches' contents, which a capture of
# the filter stream does not hold, so that chart comes from a separate simulation (and says so).
TRACE_CHART_KINDS = ("prefix_depth",)
CHART_KINDS = (
    "byte_map",
    "occupancy",
    "slots_histogram",
    "fingerprints",
    "filter_health",
    "fpr_vs_load",
    "churn",
    "lanes",
    *TRACE_CHART_KINDS,
)
#: The separate simulation behind the trace charts.
TRACE_SIMULATION = {"dcs": 4, "workers_per_dc": 2, "capacity_blocks": 2048, "policy": "ckf"}
NOTEBOOKS = (
    "01_wire_format_tour",
    "02_load_captured_frames",
    "03_bucket_occupancy",
    "04_delta_churn",
    "05_hash_space_round_trips",
    "06_filter_accuracy",
    "07_fleet_view",
)


@dataclass
class ReportResult:
    """Where everything went and how long it took."""

    index: Path
    pngs: dict[str, Path] = field(default_factory=dict)
    notebooks: dict[str, Path] = field(default_factory=dict)
    seconds: float = 0.0
    #: the capture's violations (damage included), and the first of them: a report of a
    #: capture that is not whole says so, as replay does
    violations: int = 0
    first_violation: str | None = None


@dataclass(frozen=True)
class ShownCell:
    """A notebook cell as its report page shows it: each output already static HTML."""

    type: str
    source: str
    outputs: tuple[str, ...] = ()


class _RunCell(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def outputs(self) -> list[dict[str, Any]]: ...


_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: Notebooks already run, by name: each one's cells as its page shows them.
Executed = Mapping[str, Sequence[ShownCell]]


# ----------------------------------------------------------------------------------- charts


def charted_lane(
    source: str | os.PathLike[str] | ReplayReport,
    dc: int | str | None = None,
    model: str | None = None,
) -> LaneReport:
    """The lane a chart of ``source`` (a capture, or its replay) draws: DC ``dc``'s (an id, its
    hex, a DC name or a pool key) among ``model``'s pools, or the only one (``LaneError``
    ``SeveralLanes`` or ``NoSuchLane`` otherwise). ``VizError`` ``Chart`` when no snapshot
    was ever installed, naming the first violation that kept it out: a notebook given a
    capture it cannot chart (empty, foreign, damaged before its first snapshot) says why at
    its first cell, not with a ``TypeError`` further down."""
    report = source if isinstance(source, ReplayReport) else replay(source, keep_events=False)
    pools = None if model is None else model_pools(report, model)
    one = report.lane(dc, pools=pools) if report.lanes else None
    if one is None or one.final_lane is None:
        name = "the capture" if isinstance(source, ReplayReport) else str(source)
        broken = (one.violations if one is not None else []) or report.violations
        raise VizError(VizVariant.Chart, f"{name}: nothing to chart: {never_installed(broken)}")
    return one


def _chosen_lane(
    capture: Path, dc: int | str | None, model: str | None = None
) -> tuple[ReplayReport, LaneReport]:
    """The capture's replay (the lanes and counts; no per-record events) and the lane the
    report charts (``charted_lane``)."""
    report = replay(capture, keep_events=False)
    return report, charted_lane(report, dc, model)


def report_charts(
    capture: Path, workload: Workload | None, *, dc: int | str | None = None
) -> Iterator[tuple[str, str, alt.TopLevelMixin]]:
    """(kind, caption, chart) for every chart kind: all from the capture (of a capture of
    several lanes, DC ``dc``'s; the lanes chart shows every one), but for the trace charts,
    which come from a separate simulation of ``workload`` and are labelled so."""
    return _charts(capture, workload, *_chosen_lane(capture, dc))


def _charts(
    capture: Path, workload: Workload | None, report: ReplayReport, one: LaneReport
) -> Iterator[tuple[str, str, alt.TopLevelMixin]]:
    """``report_charts``: of the lane ``one`` of ``report``, then of ``workload``'s simulation."""
    lane = one.final_lane
    assert lane is not None  # _chosen_lane's
    frames, images, snapshots = _lane_tables(capture, report, one)
    first = next(
        r
        for r in read_capture(capture, damage="report")  # damage is the summary's to tell
        if isinstance(r, FrameRecord)
        and r.update is not None
        and r.payload
        and (len(report.lanes) == 1 or r.stream_id in one.streams)
    )
    yield "byte_map", "The first frame of the lane, byte by byte", byte_map_chart(first.payload)
    yield "occupancy", "Occupied slots per bucket range of the final lane", occupancy_chart(lane)
    yield "slots_histogram", "Slots per bucket against Binomial(4, α)", slots_histogram_chart(lane)
    yield "fingerprints", "Stored fingerprint values", fingerprint_chart(lane)
    seed = int(frames["cbi1_seed"].drop_nulls()[0])
    yield from _fpr_charts(capture, filter_health_table(snapshots, images, report=one, seed=seed))
    bucket_count = int(lane.shape[0])
    yield "churn", "Delta churn", churn_chart(frames, images, bucket_count=bucket_count)
    yield (
        "lanes",
        "Every lane's load over the capture, and when a router could not use it",
        lanes_over_time_chart(global_timeline(report)),
    )
    if workload is not None:
        yield _trace_chart(capture, workload)


def _lane_tables(
    capture: Path, report: ReplayReport, one: LaneReport
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The capture's frames, images and snapshots tables: the rows of lane ``one`` only."""
    frames = frames_table(capture).collect()
    images, snapshots = images_table(capture), snapshots_table(capture)
    if len(report.lanes) > 1:  # the tables hold every lane's rows: the chosen one's only
        frames = frames.filter(pl.col("stream_id").is_in(sorted(set(one.streams))))
        ours = frames.select("frame_index")
        images = images.join(ours, on="frame_index", how="semi")
        snapshots = snapshots.join(ours, on="frame_index", how="semi")
    return frames, images, snapshots


def _fpr_charts(
    capture: Path, health: pl.DataFrame
) -> Iterator[tuple[str, str, alt.TopLevelMixin]]:
    """The lane's health over the stream (``filter_health_table``'s ``health``), and its
    measured false-positive rate against its load."""
    yield (
        "filter_health",
        "Load over the stream; estimated and measured FPR (95 % Wilson intervals)",
        filter_health_chart(health),
    )
    measured = health.drop_nulls("measured_fpr")
    probes = sorted(set(measured["fpr_probes"].to_list()))
    each = f"{probes[0]:,}" if len(probes) == 1 else f"{probes[0]:,} to {probes[-1]:,}"
    yield (
        "fpr_vs_load",
        "Measured FPR of the capture's lane against its load",
        fpr_vs_load_chart(
            measured.select(
                "sequence_hex",
                "load_factor",
                *(c for c in measured.columns if c.startswith("measured_fpr")),
                "false_positives",
                "fpr_probes",
            ),
            subtitle=f"{capture.name}: the replayed lane at {measured.height} sequences, "
            f"{each} distinct random probes each",
        ),
    )


def _trace_chart(capture: Path, workload: Workload) -> tuple[str, str, alt.TopLevelMixin]:
    """CKF against exact prefix depth, from a separate simulation of ``workload``."""
    run = Simulator(SimulatorConfig(**TRACE_SIMULATION)).run(workload)  # type: ignore[arg-type]
    where = (
        f"a separate simulation, not {capture.name}: {len(workload):,} requests of "
        f"{Path(workload.source).name or 'the trace'}, {TRACE_SIMULATION['dcs']} DCs × "
        f"{TRACE_SIMULATION['workers_per_dc']} workers × {TRACE_SIMULATION['capacity_blocks']:,} "
        "blocks, CKF routing"
    )
    return (
        "prefix_depth",
        f"CKF vs exact prefix depth, from {where}",
        prefix_depth_chart(run.depth_table(), subtitle=f"from {where}"),
    )


def _summary(capture: Path, report: ReplayReport, one: LaneReport) -> list[tuple[str, str]]:
    counts = report.counts
    rows = [("capture", capture.name), ("violations", str(len(report.violations)))]
    if report.violations:
        rows.append(("first violation", report.violations[0].describe()))
    rows += [(k, str(v)) for k, v in sorted(counts.items())]
    if len(report.lanes) > 1:
        rows += [("lanes", str(len(report.lanes))), ("charted lane", f"DC {dc_text(one.dc_id)}")]
    if one.final_lane is not None:
        stats = lane_stats(one.final_lane)
        rows += [
            ("final sequence", str(one.final_sequence)),
            ("buckets", str(stats.buckets)),
            ("load factor", f"{stats.load_factor:.4f}"),
            ("estimated FPR", f"{stats.estimated_fpr:.3e}"),
        ]
    return rows


# -------------------------------------------------------------------------------- notebooks


def _execute_notebook(source: Path, out: Path, parameters: dict[str, Any]) -> None:
    import papermill

    env = os.environ.copy()
    os.environ[STATIC_ENV] = "svg"
    # The kernel spec says `python`: put this interpreter first so it runs in this environment.
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    try:
        papermill.execute_notebook(
            str(source),
            str(out),
            parameters=parameters,
            cwd=str(source.parent),
            kernel_name="python3",
            language="python",
            progress_bar=False,
            log_output=False,
            # the kernel's own log (not the notebook's warnings, which are cell outputs): its one
            # warning is ipykernel's about TCP on loopback, printed over the report's progress
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
        )
    except Exception as exc:  # papermill raises its own PapermillExecutionError
        cell = getattr(exc, "exec_count", None)
        what = (
            f"{exc.ename}: {exc.evalue}"  # type: ignore[attr-defined]
            if hasattr(exc, "ename")
            else str(exc)
        )
        where = f" in cell [{cell}]" if cell is not None else ""
        raise VizError(VizVariant.Report, f"{source.name} failed{where}: {one_line(what)}") from exc
    finally:
        os.environ.clear()
        os.environ.update(env)


def _render_output(output: dict[str, Any]) -> str:
    kind = output.get("output_type")
    if kind == "stream":
        return f"<pre class='stream'>{html.escape(''.join(output.get('text', '')))}</pre>"
    if kind == "error":
        return f"<pre class='error'>{html.escape(output.get('ename', ''))}</pre>"
    data = output.get("data", {})
    if "image/svg+xml" in data:
        return "".join(data["image/svg+xml"])
    if "text/html" in data:
        return "".join(data["text/html"])
    if "image/png" in data:
        return f"<img src='data:image/png;base64,{''.join(data['image/png']).strip()}'>"
    if "text/plain" in data:
        return f"<pre>{html.escape(''.join(data['text/plain']))}</pre>"
    return ""


def _executed_cells(path: Path) -> list[ShownCell]:
    """A notebook papermill executed, its outputs rendered from their mime bundles."""
    import nbformat

    nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    return [
        ShownCell(
            cell.cell_type, cell.source, tuple(_render_output(o) for o in cell.get("outputs", []))
        )
        for cell in nb.cells
    ]


def drawn_cells(cells: Sequence[_RunCell], drawn: Sequence[Sequence[str]]) -> list[ShownCell]:
    """A notebook run in JupyterLab: its cells with their outputs (nbformat JSON), each widget's
    output (a chart, a brushed table: only a model id in the notebook) replaced by what the
    browser drew for it, ``drawn[cell][output]``."""
    shown = []
    for cell, pictures in zip(cells, drawn, strict=True):
        outputs = tuple(
            pictures[k]
            if _WIDGET_VIEW in o.get("data", {}) and k < len(pictures)
            else _render_output(o)
            for k, o in enumerate(cell.outputs)
        )
        shown.append(ShownCell(cell.type, cell.source, outputs))
    return shown


def _render_notebook(cells: Sequence[ShownCell], title: str) -> str:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    parts = [_page_head(title), "<p><a href='../index.html'>← report</a></p>"]
    for cell in cells:
        if cell.type == "markdown":
            parts.append(f"<div class='md'>{md.render(cell.source)}</div>")
        elif cell.type == "code":
            parts.append(f"<pre class='code'><code>{html.escape(cell.source)}</code></pre>")
            parts += [f"<div class='out'>{o}</div>" for o in cell.outputs]
    parts.append("</body></html>")
    return "\n".join(parts)


# ----------------------------------------------------------------------------------- the page

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; font-size: 12px; }
pre.code { border-left: 3px solid #4c78a8; }
pre.error { color: #b00; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: right; }
figure { margin: 2em 0; } figcaption { font-weight: 600; margin-bottom: .5em; }
.out { overflow-x: auto; margin: .4em 0 1.2em; }
"""


def _page_head(title: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
    )


def report_outputs(out: Path, *, trace: bool, notebooks: Sequence[str] = ()) -> list[Path]:
    """Every file ``build_report`` writes into ``out`` (with a trace or not, and the pages of
    ``notebooks``)."""
    kinds = [k for k in CHART_KINDS if trace or k not in TRACE_CHART_KINDS]
    return [
        out / "index.html",
        *(out / "png" / f"{kind}.png" for kind in kinds),
        *(out / "notebooks" / f"{n}.html" for n in notebooks),
    ]


def build_report(
    capture: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    trace: str | os.PathLike[str] | None = None,
    notebooks_dir: str | os.PathLike[str] | None = None,
    requests: int = 2000,
    progress: Callable[[str], None] | None = None,
    overwrite: bool = False,
    executed: Executed | Callable[[], Executed | None] | None = None,
    notebooks: Sequence[str] = NOTEBOOKS,
    dc: int | str | None = None,
    model: str | None = None,
) -> ReportResult:
    """Write ``out_dir/index.html`` (every chart kind, inline SVG), ``out_dir/png/*.png`` and, with
    ``notebooks_dir``, each of ``notebooks`` executed as ``out_dir/notebooks/NAME.html``: taken from
    ``executed`` (by name, ``drawn_cells``; a callable is called once the charts are drawn) or run
    by papermill in a temporary folder. Of several lanes, charts ``dc`` among ``model``'s pools
    (``LaneError`` without them), no notebooks (``VizError``). Refuses existing files unless
    ``overwrite`` (``OutputError`` ``Exists``, before any write) and the notebooks' folder
    (``SourceInside``)."""
    import vl_convert as vlc  # an extra: missing, it stops the report before any output

    started = time.perf_counter()
    cap = Path(capture).resolve()
    if not cap.exists():
        raise VizError(VizVariant.Report, f"{cap}: no such capture")
    # the inputs first: a trace that does not read stops the report before any output
    workload = None if trace is None else read_mooncake(Path(trace).resolve(), limit=requests)
    out = Path(out_dir)
    names = _known_notebooks(notebooks)
    source_dir = None if notebooks_dir is None else Path(notebooks_dir).resolve()
    _claim(out, source_dir, names, trace=trace is not None, overwrite=overwrite)
    report, one = _chosen_lane(cap, dc, model)  # a capture that cannot be charted: no output
    if source_dir is not None and names and len(report.lanes) > 1:
        raise VizError(VizVariant.Report, f"{cap}: {len(report.lanes)} lanes; {_ONE_LANE}")
    with _undone_on_failure(out) as written:  # each file added before it is written
        (out / "png").mkdir(parents=True, exist_ok=True)
        say = progress or (lambda _msg: None)
        result = ReportResult(out / "index.html")
        figures = []
        for kind, caption, chart in _charts(cap, workload, report, one):
            say(f"chart {kind}")
            figures.append(_figure(vlc, kind, caption, chart.to_json(), result, written))
        executed = executed() if callable(executed) else executed
        links = []
        if source_dir is not None:
            pages = _Pages(out, source_dir, cap, trace, executed, written, say)
            links = [pages.write(name, result) for name in names]
        _finish(result, report, started)
        written.append(result.index)
        result.index.write_text(_index_page(cap, report, one, figures, links), encoding="utf-8")
        return result


#: why the notebooks refuse a capture of several lanes, and what to do instead
_ONE_LANE: Final = (
    "the notebooks chart a capture of one lane "
    "(make the charts alone: no notebooks folder, --no-notebooks)"
)


def _known_notebooks(asked: Sequence[str]) -> list[str]:
    """The report's notebooks among ``asked``, in the report's order; ``VizError`` for a name
    it does not know."""
    if unknown := sorted(set(asked) - set(NOTEBOOKS)):
        raise VizError(VizVariant.Report, f"no such notebook: {', '.join(unknown)}")
    return [n for n in NOTEBOOKS if n in asked]


def _finish(result: ReportResult, report: ReplayReport, started: float) -> None:
    """The result's summary figures: the capture's violations (it is charted all the same)
    and the time taken."""
    if report.violations:
        result.violations = len(report.violations)
        result.first_violation = report.violations[0].describe()
    result.seconds = time.perf_counter() - started


def _index_page(
    cap: Path, report: ReplayReport, one: LaneReport, figures: list[str], links: list[str]
) -> str:
    """The report's ``index.html``: the replay's summary, the charts' ``figures``, the
    ``links`` to the notebooks' pages."""
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in _summary(cap, report, one)
    )
    parts = [
        _page_head("cbi1kit report"),
        f"<p>Generated from <code>{html.escape(cap.name)}</code>; every chart is embedded, "
        "nothing is fetched.</p>",
        f"<h2>Replay</h2><table>{rows}</table>",
        "<h2>Charts</h2>",
        *figures,
    ]
    if links:
        parts += ["<h2>Notebooks (executed)</h2><ul>", *links, "</ul>"]
    parts.append("</body></html>")
    return "\n".join(parts)


def _claim(
    out: Path, source_dir: Path | None, names: list[str], *, trace: bool, overwrite: bool
) -> None:
    """Refuse, before anything is written, an output that exists (unless ``overwrite``), a
    notebooks/ output that is the notebooks' own folder, and a notebook that is missing."""
    if source_dir is not None and (out / "notebooks").resolve() == source_dir:
        raise OutputError(
            OutputVariant.SourceInside,
            f"{out}: its notebooks/ folder is {source_dir}, the notebooks this report runs; "
            "choose another output folder",
            field=str(out),
        )
    claim_outputs(
        report_outputs(out, trace=trace, notebooks=names if source_dir else ()), overwrite=overwrite
    )
    if source_dir is not None:  # every notebook it runs is there, before any output
        for name in names:
            if not (source_dir / f"{name}.ipynb").exists():
                raise VizError(VizVariant.Report, f"{source_dir / name}.ipynb: notebook missing")


def _figure(
    vlc: Any, kind: str, caption: str, spec: Any, result: ReportResult, written: list[Path]
) -> str:
    """A chart's PNG written (added to ``written`` first, then to ``result.pngs``) and its
    ``<figure>`` with the inline SVG (``vlc``: ``vl_convert``)."""
    png = result.index.parent / "png" / f"{kind}.png"
    written.append(png)
    svg = vlc.vegalite_to_svg(spec)
    png.write_bytes(vlc.vegalite_to_png(spec, scale=1.5))
    result.pngs[kind] = png
    return (
        f"<figure id='{kind}' data-chart='{kind}'><figcaption>{html.escape(caption)}"
        f"</figcaption>{svg}</figure>"
    )


class _Pages:
    """The report's notebook pages: each notebook's run (``executed``'s, or papermill's in a
    scratch folder, given the capture and the trace) rendered to ``out/notebooks/NAME.html``."""

    def __init__(
        self,
        out: Path,
        source_dir: Path,
        capture: Path,
        trace: str | os.PathLike[str] | None,
        executed: Executed | None,
        written: list[Path],
        say: Callable[[str], None],
    ) -> None:
        self.out, self.source_dir = out / "notebooks", source_dir
        self.executed, self.written, self.say = executed, written, say
        # relative to the notebooks (their working folder): the pages show no home folder
        self.params = {"capture": os.path.relpath(capture, source_dir)}
        if trace:
            self.params["trace"] = os.path.relpath(Path(trace).resolve(), source_dir)
        self.out.mkdir(exist_ok=True)

    def write(self, name: str, result: ReportResult) -> str:
        """Write notebook ``name``'s page; its link for the index."""
        source = self.source_dir / f"{name}.ipynb"
        if self.executed is not None and name in self.executed:
            cells = list(self.executed[name])
        else:
            self.say(f"notebook {name}")
            with tempfile.TemporaryDirectory(prefix="cbi1kit-report-") as scratch:
                ran = Path(scratch) / f"{name}.ipynb"
                params = {k: v for k, v in self.params.items() if _has_parameter(source, k)}
                _execute_notebook(source, ran, params)
                cells = _executed_cells(ran)
        page = self.out / f"{name}.html"
        self.written.append(page)
        page.write_text(_render_notebook(cells, name.replace("_", " ")), encoding="utf-8")
        result.notebooks[name] = page
        return f"<li><a href='notebooks/{name}.html'>{name}</a></li>"


@contextlib.contextmanager
def _undone_on_failure(out: Path) -> Iterator[list[Path]]:
    """The files a report run writes, which the run adds before writing each: on failure they
    go, with the folders the run made (the output's missing parents too), and nothing of a
    half report is left behind; files it did not write stay."""
    made = [d for d in (out / "notebooks", out / "png", out, *out.parents) if not d.exists()]
    written: list[Path] = []
    try:
        yield written
    except BaseException:
        for path in written:
            with contextlib.suppress(OSError):
                path.unlink()
        for d in made:  # deepest first
            with contextlib.suppress(OSError):
                d.rmdir()  # only if empty
        raise


def _has_parameter(notebook: Path, name: str) -> bool:
    import nbformat

    nb = nbformat.read(notebook, as_version=4)  # type: ignore[no-untyped-call]
    for cell in nb.cells:
        if "parameters" in cell.metadata.get("tags", []):
            return any(line.split("=")[0].strip() == name for line in cell.source.splitlines())
    return False
