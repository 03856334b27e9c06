"""The offline report: every chart kind embedded, PNGs that decode, notebooks executed, no CDN."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import pytest
from checkout import copy_tracked
from errorcheck import raises_variant

from cbi1kit.data import mooncake_trace, sample_capture
from cbi1kit.errors import OutputError, VizError
from cbi1kit.viz._report import CHART_KINDS, build_report
from conftest import HEADLESS_NOTEBOOK

ROOT = Path(__file__).parents[1]
SAMPLE = sample_capture()
TRACE = mooncake_trace()
NOT_OFFLINE = re.compile(r"<script|<link|src=['\"]https?:|href=['\"]https?:", re.IGNORECASE)


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


def _check_charts(out: Path) -> str:
    index = (out / "index.html").read_text()
    for kind in CHART_KINDS:
        figure = re.search(rf"<figure id='{kind}' data-chart='{kind}'>(.*?)</figure>", index, re.S)
        assert figure and "<svg" in figure.group(1), f"{kind} missing from the report"
        width, height = _png_size(out / "png" / f"{kind}.png")
        assert width > 200 and height > 100
    assert not NOT_OFFLINE.search(index), "the report must not fetch anything"
    return index


def test_report_has_every_chart_offline(full_report: Path) -> None:
    index = _check_charts(full_report)
    assert "violations" in index
    for page in [index, *(p.read_text() for p in (full_report / "notebooks").iterdir())]:
        assert str(ROOT) not in page  # no absolute path: the capture is named, not located


def test_report_runs_a_notebook_headless_with_papermill(full_report: Path) -> None:
    """Without a run made in JupyterLab, a notebook's page comes from papermill, its charts
    rendered statically as inline SVG (every notebook's page, from Lab: test_browser)."""
    index = (full_report / "index.html").read_text()
    assert f"notebooks/{HEADLESS_NOTEBOOK}.html" in index
    assert [p.stem for p in (full_report / "notebooks").iterdir()] == [HEADLESS_NOTEBOOK]
    page = (full_report / "notebooks" / f"{HEADLESS_NOTEBOOK}.html").read_text()
    assert "<pre class='code'>" in page and "ck.viz.byte_map_chart" in page
    assert "class='error'" not in page, f"{HEADLESS_NOTEBOOK} raised"
    assert not NOT_OFFLINE.search(page), f"{HEADLESS_NOTEBOOK} fetches something"
    assert "<svg" in page and 'class="marks"' in page


def test_a_notebook_the_report_does_not_know_is_a_report_error(tmp_path: Path) -> None:
    with raises_variant(VizError, "Report", match="no such notebook: 99_nope"):
        build_report(SAMPLE, tmp_path, notebooks_dir=ROOT / "notebooks", notebooks=["99_nope"])
    assert not (tmp_path / "index.html").exists()


def test_a_notebook_run_elsewhere_is_its_page_and_not_run_again(tmp_path: Path) -> None:
    """``executed``: a run already made (the demo's JupyterLab run) is the page, widget outputs
    as the browser drew them; given as a callable, it is asked for once the charts are drawn."""
    from cbi1kit.viz._report import ShownCell, drawn_cells

    class Run:
        def __init__(self, type: str, source: str, outputs: list[dict[str, object]]) -> None:
            self.type, self.source, self.outputs = type, source, outputs

    widget = {"data": {"application/vnd.jupyter.widget-view+json": {"model_id": "m"}}}
    printed = {"output_type": "stream", "name": "stdout", "text": "hello <there>"}
    cells = drawn_cells(
        [Run("markdown", "# Title", []), Run("code", "ck.viz.churn_chart(x)", [widget, printed])],
        [[], ["<svg class='marks'><g/></svg>", "<ignored>"]],
    )
    assert cells[1] == ShownCell(
        "code",
        "ck.viz.churn_chart(x)",
        ("<svg class='marks'><g/></svg>", "<pre class='stream'>hello &lt;there&gt;</pre>"),
    )
    asked: list[bool] = []

    def executed() -> dict[str, list[ShownCell]]:
        asked.append((tmp_path / "png" / "churn.png").exists())  # the charts came first
        return {HEADLESS_NOTEBOOK: cells}

    result = build_report(
        SAMPLE,
        tmp_path,
        notebooks_dir=ROOT / "notebooks",
        notebooks=[HEADLESS_NOTEBOOK],
        executed=executed,
    )
    assert asked == [True]
    page = result.notebooks[HEADLESS_NOTEBOOK].read_text()
    assert "<h1>Title</h1>" in page and "<svg class='marks'><g/></svg>" in page
    assert "byte_map_chart" not in page  # not run again: the page is the run given


def test_charts_only_without_a_trace_skips_the_routing_charts(tmp_path: Path) -> None:
    result = build_report(SAMPLE, tmp_path)
    assert set(result.pngs) == set(CHART_KINDS) - {"prefix_depth"}
    assert result.notebooks == {}
    index = (tmp_path / "index.html").read_text()
    assert str(SAMPLE.parent) not in index  # the capture by name, not where it lives
    assert "<th>capture</th><td>sample.kvrcap</td>" in index


def test_report_charts_describe_the_capture_they_are_drawn_from() -> None:
    """FPR against load is the capture's own lane, measured at the sequences the filter-health
    chart shows; the prefix-depth chart, which needs a trace, says it is a separate simulation."""
    from cbi1kit.sim._workload import read_mooncake
    from cbi1kit.viz._report import report_charts

    charts = {kind: (caption, chart) for kind, caption, chart in report_charts(SAMPLE, None)}
    assert "prefix_depth" not in charts
    health = charts["filter_health"][1].to_dict()
    measured = sorted(
        (r["_x"], r["value"])
        for r in next(iter(health["datasets"].values()))
        if r["variable"] == "measured_fpr"
    )
    fpr = charts["fpr_vs_load"][1].to_dict()
    assert "sample.kvrcap" in fpr["title"]["subtitle"]
    (points,) = [d for d in fpr["datasets"].values() if "measured_fpr" in d[0]]
    assert sorted(r["measured_fpr"] for r in points) == sorted(v for _, v in measured)
    assert all(r["fpr_probes"] > 0 and isinstance(r["sequence_hex"], str) for r in points)

    workload = read_mooncake(TRACE, limit=300)
    caption, chart = next(
        (c, ch) for k, c, ch in report_charts(SAMPLE, workload) if k == "prefix_depth"
    )
    for text in (caption, chart.to_dict()["title"]["subtitle"]):
        assert "separate simulation, not sample.kvrcap" in text
        assert "300 requests of conversation_trace.jsonl" in text


def test_missing_capture_is_a_report_error(tmp_path: Path) -> None:
    with raises_variant(VizError, "Report", match="no such capture"):
        build_report(tmp_path / "nope.kvrcap", tmp_path / "out")


def _digests(folder: Path) -> dict[str, str]:
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_report_refuses_the_folder_of_the_notebooks_it_runs(tmp_path: Path) -> None:
    """``report -o .`` in a checkout: out/notebooks would be the sources. Refused before
    anything is written; the notebooks are untouched."""
    copy_tracked(ROOT / "notebooks", tmp_path / "notebooks")
    before = _digests(tmp_path / "notebooks")
    with raises_variant(OutputError, "SourceInside", match="notebooks"):
        build_report(SAMPLE, tmp_path, notebooks_dir=tmp_path / "notebooks", overwrite=True)
    assert _digests(tmp_path / "notebooks") == before
    assert not (tmp_path / "index.html").exists() and not (tmp_path / "png").exists()


def test_a_notebook_runs_from_a_folder_outside_the_checkout(tmp_path: Path) -> None:
    """The notebooks read the bundled data from the package (``ck.data``), not ``../data``:
    copied anywhere, notebook 02 (the sample, the bare frames, the real recording) runs (#47)."""
    notebooks = copy_tracked(ROOT / "notebooks", tmp_path / "elsewhere" / "notebooks")
    result = build_report(
        SAMPLE, tmp_path / "out", notebooks_dir=notebooks, notebooks=["02_load_captured_frames"]
    )
    (page,) = result.notebooks.values()
    assert page.exists() and "Traceback" not in page.read_text()


def test_report_never_writes_over_an_existing_file_unasked(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("mine")
    with raises_variant(OutputError, "Exists", match="use --force"):
        build_report(SAMPLE, tmp_path)
    assert (tmp_path / "index.html").read_text() == "mine"
    assert not (tmp_path / "png").exists()  # refused before anything was written


def test_a_report_of_a_capture_that_is_not_whole_says_so(tmp_path: Path) -> None:
    """A capture cut short, or damaged in its first record, is charted all the same; the
    summary names the first violation, the result counts them and the CLI exits 1 with a note
    (it was exit 0 and no word of the damage; damage in the first record was an error after
    the png/ folder was made)."""
    from cliutil import cli_run, one_line

    data = SAMPLE.read_bytes()
    cut = tmp_path / "cut.kvrcap"
    cut.write_bytes(data[: len(data) * 2 // 3])
    flipped = tmp_path / "flipped.kvrcap"
    first_body = 32 + 48  # the first record's body, past the file and record headers
    flipped.write_bytes(data[:first_body] + bytes([data[first_body] ^ 1]) + data[first_body + 1 :])
    for capture, expected in ((cut, "Truncated"), (flipped, "body checksum mismatch")):
        result = build_report(capture, tmp_path / f"py-{capture.stem}")
        assert result.violations >= 1 and expected in (result.first_violation or "")
        index = result.index.read_text()
        assert "<th>first violation</th>" in index and expected in index
        out = tmp_path / f"cli-{capture.stem}"
        code, _, err = cli_run(
            "report", str(capture), "-o", str(out), "--no-progress", "--no-notebooks"
        )
        assert code == 1 and one_line(err) and expected in err, err
        assert (out / "index.html").exists()


def test_a_report_that_fails_leaves_nothing_behind(tmp_path: Path, monkeypatch: Any) -> None:
    """Every notebook the report runs is looked for before any output; a failure while the
    charts are drawn takes what the run wrote with it (a report missing a notebook left its
    charts, which then blocked the next run without --force)."""
    import vl_convert

    empty = tmp_path / "notebooks"
    empty.mkdir()
    out = tmp_path / "report"
    with raises_variant(VizError, "Report", match="notebook missing"):
        build_report(SAMPLE, out, notebooks_dir=empty)
    assert not out.exists()
    calls = 0

    def failing(spec: Any, **kw: Any) -> bytes:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise RuntimeError("disk full")
        return real(spec, **kw)

    real = vl_convert.vegalite_to_png
    monkeypatch.setattr(vl_convert, "vegalite_to_png", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        build_report(SAMPLE, out)
    assert not out.exists()
    # a folder with the user's files, a page of an earlier report among them (not this run's
    # to claim: it writes no notebook pages): they stay, whatever the run wrote goes
    (out / "notebooks").mkdir(parents=True)
    (out / "keep.txt").write_text("mine")
    page = out / "notebooks" / "01_wire_format_tour.html"
    page.write_text("an earlier report's page")
    with pytest.raises(RuntimeError, match="disk full"):
        calls = 0
        build_report(SAMPLE, out)
    assert sorted(p.name for p in out.rglob("*")) == sorted(["keep.txt", "notebooks", page.name])
    assert page.read_text() == "an earlier report's page"
    # parents this run made go too
    deep = tmp_path / "a" / "b" / "report"
    with pytest.raises(RuntimeError, match="disk full"):
        calls = 0
        build_report(SAMPLE, deep)
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    "name", ["02_load_captured_frames", "03_bucket_occupancy", "04_delta_churn"]
)
def test_a_notebook_given_a_capture_it_cannot_chart_says_why(name: str, tmp_path: Path) -> None:
    """A trace file passed as the capture (a plausible slip): the notebook stops at the first
    cell that needs a lane, with charted_lane's VizError naming the first violation (it was a
    TypeError or an IndexError from deep inside)."""
    from cbi1kit.viz import charted_lane
    from cbi1kit.viz._report import _execute_notebook

    with raises_variant(VizError, "Chart", match="no snapshot was ever installed"):
        charted_lane(TRACE)
    assert charted_lane(SAMPLE).final_lane is not None
    source = ROOT / "notebooks" / f"{name}.ipynb"
    with pytest.raises(VizError) as info:
        _execute_notebook(source, tmp_path / "ran.ipynb", {"capture": str(TRACE)})
    message = str(info.value)
    assert "VizError: " in message and "not a FilterUpdate" in message, message
    assert "\n" not in message
