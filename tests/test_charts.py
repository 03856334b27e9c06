"""Chart specs, checked through ``to_dict()``: fields, encodings, row caps and exact u64s."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from errorcheck import raises_variant

from cbi1kit import viz as C
from cbi1kit.analysis._shorthands import (
    frames_table,
    global_timeline,
    images_table,
    replay,
    snapshots_table,
)
from cbi1kit.capture._readers import read_capture
from cbi1kit.data import mooncake_trace, sample_capture
from cbi1kit.errors import VizError
from cbi1kit.viz._chart_common import MAX_ROWS
from cbi1kit.viz._lane_charts import byte_map_table
from cbi1kit.wire._encode import encode_delta
from cbi1kit.wire._format import FilterFormat

SAMPLE = sample_capture()


@pytest.fixture(scope="module")
def stream() -> dict[str, Any]:
    report = replay(SAMPLE)
    assert report.final_lane is not None
    return {
        "lane": report.final_lane,
        "frames": frames_table(SAMPLE).collect(),
        "images": images_table(SAMPLE),
        "snapshots": snapshots_table(SAMPLE),
        "report": report,
    }


def _nodes(spec: Any) -> list[dict[str, Any]]:
    """Every dict in a Vega-Lite spec, depth first."""
    if isinstance(spec, dict):
        return [spec, *(n for v in spec.values() for n in _nodes(v))]
    if isinstance(spec, list):
        return [n for v in spec for n in _nodes(v)]
    return []


def _datasets(spec: dict[str, Any]) -> list[list[dict[str, Any]]]:
    inline = [
        n["data"]["values"]
        for n in _nodes(spec)
        if isinstance(n.get("data"), dict) and isinstance(n["data"].get("values"), list)
    ]
    return list(spec.get("datasets", {}).values()) + inline


def _encodings(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [n["encoding"] for n in _nodes(spec) if "encoding" in n]


def _check_bounded_and_exact(spec: dict[str, Any]) -> None:
    datasets = _datasets(spec)
    assert datasets, "a chart with no data"
    for rows in datasets:
        assert len(rows) <= MAX_ROWS
        for row in rows:
            for value in row.values():
                # Vega numbers are doubles: no integer beyond 2**53 may reach the spec.
                if isinstance(value, int) and not isinstance(value, bool):
                    assert abs(value) <= 2**53, value


def _fields(spec: dict[str, Any]) -> set[str]:
    return {
        ch["field"]
        for enc in _encodings(spec)
        for ch in enc.values()
        if isinstance(ch, dict) and "field" in ch
    }


def test_byte_map_spec() -> None:
    frame = encode_delta(
        FilterFormat(seed=0x5EED, bucket_count=1024), 2**64 - 1, 4, 5, [(3, 2**64 - 1)]
    )
    spec = C.byte_map_chart(frame).to_dict()
    _check_bounded_and_exact(spec)
    assert {"start", "end", "region"} <= _fields(spec)
    table = byte_map_table(frame)
    assert table["field"].to_list()[:11][-1] == "header.body_checksum"
    assert table.filter(pl.col("field") == "header.dc_id")["value"][0].startswith(
        "0xffffffffffffffff"
    )


def test_occupancy_spec_has_a_named_brush(stream: dict[str, Any]) -> None:
    spec = C.occupancy_chart(stream["lane"], bins=512).to_dict()
    _check_bounded_and_exact(spec)
    params = spec.get("params", []) + [p for v in spec["vconcat"] for p in v.get("params", [])]
    assert [p["name"] for p in params] == ["range"]
    assert params[0]["select"]["encodings"] == ["x"]
    assert {"bucket_start", "bucket_end", "load_factor"} <= _fields(spec)


def test_bucket_words_are_exact_hex(stream: dict[str, Any]) -> None:
    lane = stream["lane"]
    table = C.bucket_words_table(lane, 10, 20)
    assert table["bucket"].to_list() == list(range(10, 20))
    assert [int(w, 16) for w in table["word"]] == [int(w) for w in lane[10:20]]
    assert C.bucket_words_table(lane, 0, 10**9).height == min(lane.shape[0], MAX_ROWS)
    big = np.arange(20_000, dtype=np.uint64)
    assert C.bucket_words_table(big, 0, 10**9).height == MAX_ROWS


def test_slots_histogram_matches_the_lane(stream: dict[str, Any]) -> None:
    spec = C.slots_histogram_chart(stream["lane"]).to_dict()
    _check_bounded_and_exact(spec)
    rows = _datasets(spec)[0]
    assert sum(r["buckets"] for r in rows) == stream["lane"].shape[0]
    assert sum(r["binomial"] for r in rows) == pytest.approx(stream["lane"].shape[0])


def test_fingerprint_chart(stream: dict[str, Any]) -> None:
    spec = C.fingerprint_chart(stream["lane"]).to_dict()
    _check_bounded_and_exact(spec)
    assert {"start", "end", "fingerprints"} <= _fields(spec)


def test_filter_health_from_the_stream(stream: dict[str, Any]) -> None:
    health = C.filter_health_table(stream["snapshots"], stream["images"])
    assert health["sequence"].dtype == pl.UInt64
    assert health["sequence_hex"][0] == f"0x{int(health['sequence'][0]):016x}"
    spec = C.filter_health_chart(health).to_dict()
    _check_bounded_and_exact(spec)
    assert spec["facet"]["row"]["field"] == "panel"


def test_filter_health_measured_fpr_tracks_the_estimate(stream: dict[str, Any]) -> None:
    seed = int(stream["frames"]["cbi1_seed"].drop_nulls()[0])
    health = C.filter_health_table(
        stream["snapshots"], stream["images"], report=replay(SAMPLE), seed=seed, fpr_points=4
    )
    measured = health.drop_nulls("measured_fpr")
    assert measured.height == 4
    loaded = measured.filter(pl.col("load_factor") > 0.3)
    assert loaded.height >= 2
    ratio = loaded["measured_fpr"].sum() / loaded["estimated_fpr"].sum()
    assert 1 / 3 < ratio < 3
    spec = C.filter_health_chart(health).to_dict()
    panels = {r["panel"] for r in _datasets(spec)[0]}
    assert panels == {"slot load factor α", "false-positive rate"}


def test_filter_health_over_a_simulation() -> None:
    from cbi1kit.sim._engine import Simulator
    from cbi1kit.sim._simulator import SimulatorConfig
    from cbi1kit.sim._workload import read_mooncake

    trace = mooncake_trace()
    cfg = SimulatorConfig(workers_per_dc=2, capacity_blocks=2048, expected_blocks_per_dc=512)
    result = Simulator(cfg).run(read_mooncake(trace, limit=600), health_every=16)
    health = result.health_table()
    assert health["capacity_failures"].max() > 0  # a too-small filter fails inserts
    spec = C.filter_health_chart(health, x="request").to_dict()
    _check_bounded_and_exact(spec)
    panels = {r["panel"] for r in _datasets(spec)[0]}
    assert {"resident items", "capacity failures", "slot load factor α"} <= panels


def test_filter_health_refuses_a_table_without_metrics() -> None:
    with raises_variant(VizError, "ChartData", match="no filter-health metric"):
        C.filter_health_chart(pl.DataFrame({"sequence": [1, 2]}))


def test_churn_spec(stream: dict[str, Any]) -> None:
    spec = C.churn_chart(
        stream["frames"], stream["images"], bucket_count=int(stream["lane"].shape[0])
    ).to_dict()
    _check_bounded_and_exact(spec)
    assert {"image_count", "bytes", "rewrites", "kind"} <= _fields(spec)


def test_prefix_depth_spec() -> None:
    rng = np.random.default_rng(5)
    exact = rng.integers(0, 40, 20_000)
    ckf = exact + (rng.random(20_000) < 0.01)
    spec = C.prefix_depth_chart(pl.DataFrame({"exact_depth": exact, "ckf_depth": ckf})).to_dict()
    _check_bounded_and_exact(spec)
    rows = _datasets(spec)[0]
    assert sum(r["queries"] for r in rows) == 20_000
    assert {r["outcome"] for r in rows} == {"exact", "over (false positive)"}


def test_fpr_vs_load_spec() -> None:
    runs = pl.DataFrame({"load_factor": [0.1, 0.4], "measured_fpr": [1.3e-5, 5.1e-5]})
    spec = C.fpr_vs_load_chart(runs).to_dict()
    _check_bounded_and_exact(spec)
    assert {"load_factor", "measured_fpr", "estimate"} <= _fields(spec)


def test_compare_runs_thins_each_run() -> None:
    table = pl.DataFrame(
        {"request": list(range(3000)) * 3, "run": ["a"] * 3000 + ["b"] * 3000 + ["c"] * 3000}
    ).with_columns(pl.col("request").alias("load"))
    spec = C.compare_runs_chart(table, x="request", metrics=["load"], by="run").to_dict()
    _check_bounded_and_exact(spec)
    assert len(_datasets(spec)[0]) < 3 * 3000


def test_too_many_rows_is_refused() -> None:
    depths = pl.DataFrame({"exact_depth": range(6000), "ckf_depth": range(6000)})
    with raises_variant(VizError, "ChartData", match="limit 5000"):
        C.prefix_depth_chart(depths)


def test_hex64_is_exact_at_the_top() -> None:
    assert C.hex64(np.array([0, 2**64 - 1], dtype=np.uint64)) == [
        "0x0000000000000000",
        "0xffffffffffffffff",
    ]


# ------------------------------------------------------------- how charts display in a notebook


@pytest.fixture
def renderer_restored() -> Any:
    import altair as alt

    yield
    alt.JupyterChart.enable_offline(False)
    alt.renderers.enable("default")


def test_setup_notebook_draws_charts_offline_in_a_live_kernel(
    monkeypatch: pytest.MonkeyPatch, renderer_restored: Any
) -> None:
    """The widget's JavaScript is inlined (vl-convert's bundle), not imported from a CDN."""
    import altair as alt

    from cbi1kit.viz._display import STATIC_ENV, setup_notebook

    monkeypatch.delenv(STATIC_ENV, raising=False)
    assert setup_notebook() == "cbi1kit-jupyter"
    esm = alt.JupyterChart._esm
    assert "esm.sh" not in esm and "cdn.jsdelivr" not in esm and len(esm) > 100_000
    bundle = C.byte_map_chart(encode_delta(FilterFormat(seed=1, bucket_count=8), 0, 0, 1, [(0, 1)]))
    data = bundle._repr_mimebundle_()
    shown = data[0] if isinstance(data, tuple) else data
    assert "application/vnd.jupyter.widget-view+json" in shown  # a JupyterChart


def test_the_offline_bundle_is_cached_on_disk_and_a_bad_cache_is_a_miss(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, renderer_restored: Any
) -> None:
    """The bundle a kernel reads from the cache is altair's own; a cache entry that does not
    read is bundled again and rewritten; a cache that cannot be written still yields it."""
    import altair as alt

    from cbi1kit.viz import _display

    alt.JupyterChart.enable_offline(False)
    alt.JupyterChart.enable_offline()
    altairs = alt.JupyterChart._esm
    alt.JupyterChart.enable_offline(False)

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert _display.offline_bundle() == altairs
    (entry,) = (tmp_path / "cache" / "cbi1kit").iterdir()
    assert entry.read_text() == altairs
    entry.write_text("// what the cache holds is what a kernel gets")
    assert _display.offline_bundle() == "// what the cache holds is what a kernel gets"
    entry.write_bytes(b"\xff\xfe not utf-8")
    assert _display.offline_bundle() == altairs and entry.read_text() == altairs
    assert alt.JupyterChart._esm != altairs  # looking it up did not turn offline mode on

    (tmp_path / "ro").write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "ro"))
    assert _display.offline_bundle() == altairs


def test_setup_notebook_in_a_report_build_is_static_svg(
    monkeypatch: pytest.MonkeyPatch, renderer_restored: Any
) -> None:
    from cbi1kit.viz._display import STATIC_ENV, interactive_charts, setup_notebook

    monkeypatch.setenv(STATIC_ENV, "svg")
    assert not interactive_charts()
    assert setup_notebook() == "svg"
    data = C.byte_map_chart(
        encode_delta(FilterFormat(seed=1, bucket_count=8), 0, 0, 1, [(0, 1)])
    )._repr_mimebundle_()
    shown = data[0] if isinstance(data, tuple) else data
    assert set(shown) == {"image/svg+xml"}


# ------------------------------------------------------------ what a reader sees (issue #14)
#
# These render through vl-convert's scenegraph: the axes, legends and titles Vega lays out, not
# what the spec asks for (a layer without an explicit domain still rounds a shared axis up).


def _texts(node: Any, role: str) -> list[str]:
    """Every text item under ``node`` whose mark has ``role``."""
    found = []
    for n in _nodes(node):
        if n.get("role") == role and n.get("marktype") == "text":
            found += [str(i.get("text", "")) for i in n.get("items", [])]
    return found


def _rendered(chart: Any) -> dict[str, Any]:
    """Axes as (title, tick labels), legends as (title, labels), and every chart title."""
    import vl_convert as vlc

    scene = vlc.vegalite_to_scenegraph(chart.to_json())
    axes, legends = [], []
    for n in _nodes(scene):
        for role, out, title_role, label_role in (
            ("axis", axes, "axis-title", "axis-label"),
            ("legend", legends, "legend-title", "legend-label"),
        ):
            if n.get("role") == role and n.get("marktype") == "group":
                for item in n.get("items", []):
                    title = _texts(item, title_role)
                    out.append((title[0] if title else None, _texts(item, label_role)))
    return {"axes": axes, "legends": legends, "titles": _texts(scene, "title-text")}


def _number(label: str) -> float:
    return float(label.replace(",", ""))


def _charts(stream: dict[str, Any]) -> dict[str, Any]:
    frame = encode_delta(FilterFormat(seed=0x5EED, bucket_count=1024), 7, 4, 5, [(3, 9), (8, 10)])
    health = C.filter_health_table(stream["snapshots"], stream["images"])
    rng = np.random.default_rng(3)
    exact = rng.integers(0, 30, 2000)
    runs = pl.DataFrame(
        {
            "expected_blocks_per_dc": [4096, 1024],
            "load_factor": [0.2, 0.8],
            "measured_fpr": [2e-5, 1e-4],
        }
    )
    sweep = pl.DataFrame(
        {"request": [1, 2, 1, 2], "run": [2048, 2048, 512, 512], "capacity_failures": [0, 1, 2, 3]}
    )
    return {
        "byte_map": C.byte_map_chart(frame),
        "occupancy": C.occupancy_chart(stream["lane"]),
        "slots_histogram": C.slots_histogram_chart(stream["lane"]),
        "fingerprints": C.fingerprint_chart(stream["lane"]),
        "filter_health": C.filter_health_chart(health),
        "churn": C.churn_chart(
            stream["frames"], stream["images"], bucket_count=int(stream["lane"].shape[0])
        ),
        "prefix_depth": C.prefix_depth_chart(
            pl.DataFrame({"exact_depth": exact, "ckf_depth": exact + (rng.random(2000) < 0.05)})
        ),
        "fpr_vs_load": C.fpr_vs_load_chart(runs),
        "lanes": C.lanes_over_time_chart(global_timeline(stream["report"], points=6)),
        "compare_runs": C.compare_runs_chart(
            sweep, x="request", metrics=["capacity_failures"], by="run"
        ),
        "fleet_churn": C.fleet_churn_chart(fleet_churn(), bin_words="minute"),
    }


def fleet_churn() -> pl.DataFrame:
    """What ``fleet.churn_per_pool_per_hour(..., every="1m")`` gives: two pools, three bins."""
    start = datetime(2026, 11, 30, 12, tzinfo=UTC)
    return pl.DataFrame(
        {
            "cache_semantics": ["ab" * 32] * 3 + ["cd" * 32] * 3,
            "routing_scope": ["ef" * 32] * 6,
            "dc_id": [2**64 - 1] * 3 + [7] * 3,
            "hour": [start + timedelta(minutes=m) for m in (0, 1, 2)] * 2,
            "deltas": [3, 4, 5, 6, 7, 8],
            "images": [30, 40, 50, 60, 70, 80],
            "delta_bytes": [300, 400, 500, 600, 700, 800],
        },
        schema_overrides={c: pl.UInt64 for c in ("dc_id", "deltas", "images", "delta_bytes")},
    )


def test_fleet_churn_names_pools_with_hex_dc_ids() -> None:
    spec = C.fleet_churn_chart(fleet_churn(), names={"ab" * 32: "model-a"}).to_dict()
    rows = next(iter(spec["datasets"].values()))
    assert {r["pool"] for r in rows} == {
        "model-a · DC 0xffffffffffffffff",
        "cdcdcdcd… · DC 0x0000000000000007",
    }
    assert all(isinstance(r["dc"], str) for r in rows)  # u64 reaches Vega as hex only


def test_every_chart_has_a_title_and_axes_titled_in_words(stream: dict[str, Any]) -> None:
    for name, chart in _charts(stream).items():
        spec = chart.to_dict()
        assert spec.get("title"), f"{name} has no title"
        seen = _rendered(chart)
        for title, labels in seen["axes"] + seen["legends"]:
            if title is None:
                # a grid, a nominal axis whose labels say it all (region, kind), or a panel's
                # value axis, which the panel's header names
                assert "facet" in spec or not any(_number_like(t) for t in labels), (name, labels)
                continue
            assert "_" not in title, f"{name}: a column name as a title: {title!r}"
            assert not re.search(r"\w - \d", title), f"{name}: arithmetic as a title: {title!r}"
        for title in seen["titles"]:  # chart, panel and header titles
            assert "_" not in title, f"{name}: a column name as a title: {title!r}"


def _mark(node: dict[str, Any]) -> str | None:
    mark = node.get("mark")
    return mark.get("type") if isinstance(mark, dict) else mark


def _number_like(text: str) -> bool:
    return bool(re.fullmatch(r"[-\d.,e]+", text))


def test_byte_map_legend_lists_only_the_regions_of_the_frame(stream: dict[str, Any]) -> None:
    delta = encode_delta(FilterFormat(seed=0x5EED, bucket_count=1024), 7, 4, 5, [(3, 9)])
    snapshot = next(r for r in read_capture(SAMPLE) if r.update is not None and r.payload).payload
    for frame, regions in ((delta, ["header", "delta", "images"]), (snapshot, None)):
        legend = _rendered(C.byte_map_chart(frame))["legends"]
        expected = regions or ["header", "snapshot", "words"]
        assert legend == [("region", expected)]


def test_byte_map_field_names_fit_their_bars() -> None:
    """A field name runs up its bar; the bar must be at least as tall as the name is long
    (0.6 em a character bounds a sans-serif lowercase name; "slots_per_bucket" was cut)."""
    import vl_convert as vlc

    frame = encode_delta(FilterFormat(seed=0x5EED, bucket_count=1024), 7, 4, 5, [(3, 9)])
    scene = vlc.vegalite_to_scenegraph(C.byte_map_chart(frame).to_json())
    marks = [n for n in _nodes(scene) if n.get("role") == "mark"]
    bars = {
        i["description"].split("field: ")[1].split(";")[0].rsplit(".", 1)[-1]: i["height"]
        for m in marks
        if m.get("marktype") == "rect"
        for i in m["items"]
        if "byte offset:" in i.get("description", "")
    }
    labels = [i for m in marks if m.get("marktype") == "text" for i in m["items"]]
    assert {i["text"] for i in labels} >= {"slots_per_bucket", "wire_version", "base_epoch"}
    for item in labels:
        length = 0.6 * item["fontSize"] * len(item["text"])
        assert length <= bars[item["text"]], (item["text"], length, bars[item["text"]])


@pytest.mark.parametrize("copies", [1, 2])
def test_bucket_axes_end_at_the_last_bucket(stream: dict[str, Any], copies: int) -> None:
    lane = np.tile(stream["lane"], copies)  # 4,096 and 8,192 buckets
    buckets = lane.shape[0]
    charts = [
        C.occupancy_chart(lane),
        C.churn_chart(stream["frames"], stream["images"], bucket_count=buckets),
    ]
    for chart in charts:
        axes = [labels for title, labels in _rendered(chart)["axes"] if title and "bucket" in title]
        assert axes
        for labels in axes:
            assert max(_number(t) for t in labels) <= buckets, labels


def test_churn_rate_is_per_second_in_round_time_bins(stream: dict[str, Any]) -> None:
    frames = stream["frames"]
    chart = C.churn_chart(frames, stream["images"], bucket_count=int(stream["lane"].shape[0]))
    seen = _rendered(chart)
    (rate_title,) = [t for t in seen["titles"] if t.startswith("Bytes on the wire")]
    match = re.fullmatch(r"Bytes on the wire per second, mean over (\d+) seconds", rate_title)
    assert match, rate_title
    width = int(match.group(1))
    timed = frames.filter(pl.col("kind").is_in(["DELTA", "SNAPSHOT_CHUNK", "HEARTBEAT"]))
    span = (timed["recv_time"].max() - timed["recv_time"].min()).total_seconds()
    assert span / width <= 600 < span / (width / 2)  # the finest round bin within the limit
    (rows,) = [r for r in _datasets(chart.to_dict()) if r and "rate" in r[0]]
    assert sum(r["rate"] for r in rows) * width == pytest.approx(timed["raw_len"].sum())
    (labels,) = [ls for t, ls in seen["axes"] if t and t.startswith("minutes since 2025-01-01")]
    assert max(_number(t) for t in labels) <= span / 60


def test_runs_and_panels_keep_their_order() -> None:
    rows = [
        (run, request, metric)
        for run in ("8192 expected", "2048 expected", "512 expected", "1024 expected")
        for request, metric in ((1, 0.1), (2, 0.2))
    ]
    table = pl.DataFrame(rows, schema=["filter", "request", "load_factor"], orient="row")
    table = table.with_columns(pl.col("load_factor").alias("capacity_failures"))
    chart = C.compare_runs_chart(
        table, x="request", metrics=["load_factor", "capacity_failures"], by="filter"
    )
    legend = _rendered(chart)["legends"]
    assert legend == [
        ("filter", ["8192 expected", "2048 expected", "512 expected", "1024 expected"])
    ]
    assert chart.to_dict()["facet"]["row"]["sort"] == ["slot load factor α", "capacity failures"]
    numeric = table.with_columns(pl.col("filter").str.extract(r"(\d+)").cast(pl.Int64))
    chart = C.compare_runs_chart(numeric, x="request", metrics=["load_factor"], by="filter")
    assert _rendered(chart)["legends"] == [("filter", ["512", "1024", "2048", "8192"])]


def test_filter_health_shows_the_measured_interval(stream: dict[str, Any]) -> None:
    seed = int(stream["frames"]["cbi1_seed"].drop_nulls()[0])
    health = C.filter_health_table(
        stream["snapshots"],
        stream["images"],
        report=replay(SAMPLE),
        seed=seed,
        fpr_points=3,
        fpr_probes=20_000,
    )
    measured = health.drop_nulls("measured_fpr")
    assert measured["fpr_probes"].to_list() == [20_000] * 3
    assert (measured["measured_fpr_low"] <= measured["measured_fpr"]).all()
    assert (measured["measured_fpr"] <= measured["measured_fpr_high"]).all()
    spec = C.filter_health_chart(health).to_dict()
    rows = [r for r in _datasets(spec)[0] if r.get("low") is not None]
    assert sorted(r["low"] for r in rows) == sorted(measured["measured_fpr_low"].to_list())
    rules = [n for n in _nodes(spec) if _mark(n) == "rule"]
    assert any(r["encoding"]["y2"]["field"] == "high" for r in rules)
    assert spec["facet"]["row"]["sort"] == ["slot load factor α", "false-positive rate"]


def test_fpr_vs_load_draws_intervals_and_says_where_points_come_from() -> None:
    from cbi1kit.ckf._stats import FprMeasurement

    runs = pl.DataFrame(
        [
            {"load_factor": a} | FprMeasurement(k, 200_000).columns()
            for a, k in ((0.2, 5), (0.8, 20))
        ]
    )
    chart = C.fpr_vs_load_chart(runs, subtitle="the lane of x.kvrcap at 2 sequences")
    spec = chart.to_dict()
    assert spec["title"]["subtitle"] == "the lane of x.kvrcap at 2 sequences"
    rules = [n for n in _nodes(spec) if _mark(n) == "rule"]
    assert [r["encoding"]["y2"]["field"] for r in rules] == ["measured_fpr_high"]
    assert "Wilson" in spec["title"]["text"]


def test_full_table_shows_every_row_column_and_string() -> None:
    """The layout table has 18 rows and meanings past 30 characters: polars alone cuts both."""
    from cbi1kit.wire._layout import layout_rows

    frame = pl.DataFrame(layout_rows()).with_columns(pl.lit(None).alias("validation_error"))
    for show in (repr, lambda t: html.unescape(t._repr_html_())):
        cut, whole = show(frame), show(C.full_table(frame))
        for row in layout_rows():
            assert str(row["field"]) in whole and str(row["meaning"]) in whole
        assert "validation_error" in whole
        assert not all(str(r["meaning"]) in cut for r in layout_rows())  # what it fixes
    assert "tbl_rows" not in str(pl.Config.state(if_set=True))  # the setting did not leak
    with raises_variant(VizError, "ChartData", match="too many to show whole"):
        C.full_table(pl.DataFrame({"n": range(201)}))


def test_lanes_over_time_shows_every_lane_and_when_it_was_not_ready(tmp_path: Path) -> None:
    """A fleet capture: each DC a line; the first moment (before any snapshot) a cross each."""
    from cbi1kit.sim import RelayConfig, SimRelayConfig, SimulatorConfig, simulate_capture
    from cbi1kit.sim._workload import synthetic_chat

    out = tmp_path / "fleet.kvrcap"
    sim = SimulatorConfig(dcs=3, workers_per_dc=1, capacity_blocks=256, policy="ckf")
    simulate_capture(synthetic_chat(20, seed=2), out, SimRelayConfig(sim, RelayConfig()))
    timeline = global_timeline(out, points=5)
    assert timeline.height == 15 and timeline["dc_id"].n_unique() == 3
    first = timeline.filter(pl.col("offset_s") == 0)
    assert not first["ready"].any()  # nothing installed at the first message yet
    assert timeline.filter(pl.col("offset_s") > 0)["ready"].all()
    spec = C.lanes_over_time_chart(timeline).to_dict()
    (rows,) = [r for r in _datasets(spec) if r and "state" in r[0]]
    assert sorted({r["dc_id"] for r in rows if r["state"] == "ready"}) == sorted(
        set(timeline["dc_id"])
    )
    assert sum(r["state"] == "not ready" for r in rows) == 3


def test_the_live_renderer_rebuilds_each_view_kind_as_altair_does() -> None:
    """Every top-level view kind comes back from its spec as the class altair's validating
    ``Chart.from_dict`` finds, with the same spec: the widget draws what altair's would."""
    import altair as alt
    import polars as pl

    from cbi1kit.viz._display import chart_from_spec

    data = pl.DataFrame({"x": [1, 2, 3], "y": [3, 1, 2], "k": ["a", "b", "a"]})
    base = alt.Chart(data).mark_line().encode(x="x:Q", y="y:Q")
    kinds = [
        base,
        base + base.mark_point(),
        base | base,
        base & base,
        alt.concat(base, base),
        base.facet(column="k:N"),
        alt.Chart(data)
        .mark_point()
        .encode(x=alt.X(alt.repeat(), type="quantitative"), y="y:Q")
        .repeat(["x", "y"]),
    ]
    for chart in kinds:
        spec = chart.to_dict()
        rebuilt = chart_from_spec(spec)
        assert type(rebuilt) is type(alt.Chart.from_dict(spec)) is type(chart)
        assert rebuilt.to_dict() == spec
