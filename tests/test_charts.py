"""Chart specs, checked through ``to_dict()``: fields, encodings, row caps and exact u64s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from errorcheck import raises_variant

from cbi1kit.analysis._frames import frames_table
from cbi1kit.analysis._replay import replay
from cbi1kit.analysis._tables import images_table, snapshots_table
from cbi1kit.errors import VizError
from cbi1kit.viz import _charts as C
from cbi1kit.wire._codec import encode_delta
from cbi1kit.wire._format import FilterFormat

SAMPLE = Path(__file__).parents[1] / "data" / "sample.kvrcap"


@pytest.fixture(scope="module")
def stream() -> dict[str, Any]:
    report = replay(SAMPLE)
    assert report.final_lane is not None
    return {
        "lane": report.final_lane,
        "frames": frames_table(SAMPLE).collect(),
        "images": images_table(SAMPLE),
        "snapshots": snapshots_table(SAMPLE),
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
        assert len(rows) <= C.MAX_ROWS
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
    frame = encode_delta(FilterFormat(0x5EED, 1024), 2**64 - 1, 4, 5, [(3, 2**64 - 1)])
    spec = C.byte_map_chart(frame).to_dict()
    _check_bounded_and_exact(spec)
    assert {"start", "end", "region"} <= _fields(spec)
    table = C.byte_map_table(frame)
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
    assert C.bucket_words_table(lane, 0, 10**9).height == min(lane.shape[0], C.MAX_ROWS)
    big = np.arange(20_000, dtype=np.uint64)
    assert C.bucket_words_table(big, 0, 10**9).height == C.MAX_ROWS


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
    assert panels == {"load_factor", "false-positive rate"}


def test_filter_health_over_a_simulation() -> None:
    from cbi1kit.sim._simulator import Simulator, SimulatorConfig
    from cbi1kit.sim._workload import read_mooncake

    trace = Path(__file__).parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"
    cfg = SimulatorConfig(workers_per_dc=2, capacity_blocks=2048, expected_blocks_per_dc=512)
    result = Simulator(cfg).run(read_mooncake(trace, limit=600), health_every=16)
    health = result.health_table()
    assert health["capacity_failures"].max() > 0  # a too-small filter fails inserts
    spec = C.filter_health_chart(health, x="request").to_dict()
    _check_bounded_and_exact(spec)
    panels = {r["panel"] for r in _datasets(spec)[0]}
    assert {"resident_items", "capacity_failures", "load_factor"} <= panels


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
    assert setup_notebook() == "jupyter"
    esm = alt.JupyterChart._esm
    assert "esm.sh" not in esm and "cdn.jsdelivr" not in esm and len(esm) > 100_000
    bundle = C.byte_map_chart(encode_delta(FilterFormat(1, 8), 0, 0, 1, [(0, 1)]))
    data = bundle._repr_mimebundle_()
    shown = data[0] if isinstance(data, tuple) else data
    assert "application/vnd.jupyter.widget-view+json" in shown  # a JupyterChart


def test_setup_notebook_in_a_report_build_is_static_svg(
    monkeypatch: pytest.MonkeyPatch, renderer_restored: Any
) -> None:
    from cbi1kit.viz._display import STATIC_ENV, interactive_charts, setup_notebook

    monkeypatch.setenv(STATIC_ENV, "svg")
    assert not interactive_charts()
    assert setup_notebook() == "svg"
    data = C.byte_map_chart(encode_delta(FilterFormat(1, 8), 0, 0, 1, [(0, 1)]))._repr_mimebundle_()
    shown = data[0] if isinstance(data, tuple) else data
    assert set(shown) == {"image/svg+xml"}
