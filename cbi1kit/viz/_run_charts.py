"""Charts of runs side by side: a sweep's runs on shared axes, measured false-positive rate
against load, CKF against exact prefix depth (a simulation's), a fleet's churn per pool."""

from __future__ import annotations

from datetime import datetime

import altair as alt
import numpy as np
import polars as pl

from cbi1kit.ckf._stats import estimated_false_positive_rate
from cbi1kit.viz._chart_common import (
    _bounded,
    _int,
    _label,
    _panel_rows,
    _require,
    _run_order,
    hex64,
)


def prefix_depth_chart(depths: pl.DataFrame, *, subtitle: str | None = None) -> alt.LayerChart:
    """CKF prefix depth against exact prefix depth: counts per (exact, ckf) cell + the diagonal.

    Cells above the diagonal are false-positive over-matches; below it would be misses (the
    CKF has no false negatives for resident items, so they signal evictions racing the stream).
    ``subtitle`` says where the depths come from (a simulation is not a capture).
    """
    _require(depths, ["exact_depth", "ckf_depth"], "prefix depth")
    cells = _bounded(
        depths.group_by("exact_depth", "ckf_depth").agg(pl.len().alias("queries")), "prefix depth"
    ).with_columns(
        pl.when(pl.col("ckf_depth") > pl.col("exact_depth"))
        .then(pl.lit("over (false positive)"))
        .when(pl.col("ckf_depth") < pl.col("exact_depth"))
        .then(pl.lit("under"))
        .otherwise(pl.lit("exact"))
        .alias("outcome")
    )
    top = max(_int(cells["exact_depth"].max()), _int(cells["ckf_depth"].max()))
    scale = alt.Scale(domain=[0, top + 1], nice=False)
    x_title, y_title = "exact prefix depth (blocks)", "CKF prefix depth (blocks)"
    heat = (
        alt.Chart(cells)
        .mark_point(size=24, filled=True, opacity=0.9)
        .encode(
            x=alt.X("exact_depth:Q", title=x_title, scale=scale),
            y=alt.Y("ckf_depth:Q", title=y_title, scale=scale),
            color=alt.Color(
                "queries:Q",
                title="queries (log scale)",
                scale=alt.Scale(type="log", scheme="viridis"),
            ),
            shape=alt.Shape("outcome:N", title="outcome"),
            tooltip=[
                alt.Tooltip("exact_depth:Q", title="exact depth"),
                alt.Tooltip("ckf_depth:Q", title="CKF depth"),
                alt.Tooltip("queries:Q", title="queries", format=","),
                alt.Tooltip("outcome:N", title="outcome"),
            ],
        )
    )
    diagonal = (
        alt.Chart(pl.DataFrame({"d": [0, top + 1]}))
        .mark_line(color="#e45756", strokeDash=[4, 3], opacity=0.7)
        .encode(
            x=alt.X("d:Q", title=x_title, scale=scale), y=alt.Y("d:Q", title=y_title, scale=scale)
        )
    )
    chart: alt.LayerChart = (heat + diagonal).properties(
        title=alt.TitleParams("CKF vs exact prefix depth", subtitle=subtitle or ""),
        width=420,
        height=420,
    )
    return chart


def compare_runs_chart(
    table: pl.DataFrame,
    *,
    x: str,
    metrics: list[str],
    by: str,
    max_points: int = 400,
    title: str | None = None,
) -> alt.FacetChart:
    """Several runs of a sweep on shared axes: one panel per metric (in the order given), one
    line per ``by`` value (in numeric order when numbers, else in the order they appear)."""
    _require(table, [x, by, *metrics], "compare runs")
    runs = _run_order(table[by])
    per_run = max(2, max_points // max(1, len(runs)))
    thinned = (
        table.sort(x, maintain_order=True)
        .with_columns(pl.int_range(pl.len()).over(by).alias("_i"), pl.len().over(by).alias("_n"))
        .filter((pl.col("_i") % ((pl.col("_n") // per_run) + 1)) == 0)
        .drop("_i", "_n")
    )
    panels = [_label(m) for m in metrics]
    long = _bounded(
        thinned.select(x, by, *metrics)
        .with_columns(pl.col(by).cast(pl.String))
        .unpivot(on=metrics, index=[x, by])
        .with_columns(
            pl.col("variable")
            .replace_strict(dict(zip(metrics, panels, strict=True)))
            .alias("panel")
        ),
        "compare runs",
    )
    lines = (
        alt.Chart(long)
        .mark_line(point=alt.OverlayMarkDef(size=10) if thinned.height <= 60 else False)
        .encode(
            x=alt.X(f"{x}:Q", title=_label(x), scale=alt.Scale(nice=False)),
            y=alt.Y("value:Q", title=None),
            color=alt.Color(f"{by}:N", title=_label(by), sort=runs),
            tooltip=[
                alt.Tooltip(f"{by}:N", title=_label(by)),
                alt.Tooltip(f"{x}:Q", title=_label(x)),
                alt.Tooltip("panel:N", title="metric"),
                alt.Tooltip("value:Q", title="value", format=".4g"),
            ],
        )
        .properties(width=520, height=130)
    )
    chart: alt.FacetChart = _panel_rows(lines, panels).properties(
        title=title or f"{', '.join(panels)} against {_label(x)}, one line per {_label(by)}"
    )
    return chart


def fpr_vs_load_chart(runs: pl.DataFrame, *, subtitle: str | None = None) -> alt.LayerChart:
    """Measured per-probe false-positive rate of each run (or lane) against its load, beside
    8α/65534; with ``measured_fpr_low``/``_high`` (``FprMeasurement.columns``) each point
    carries its 95 % interval. ``subtitle`` says where the points come from."""
    _require(runs, ["load_factor", "measured_fpr"], "false-positive rate")
    points = _bounded(runs.drop_nulls("measured_fpr"), "false-positive rate")
    points = points.with_columns(  # every column is in the tooltip: a u64 only as hex
        pl.Series(c, hex64(points[c].to_numpy()))
        for c in points.columns
        if points[c].dtype == pl.UInt64
    )
    top = max(float(points["load_factor"].max() or 0.0), 0.05)  # type: ignore[arg-type]
    x_end = min(1.0, top * 1.1)
    alphas = np.linspace(0.0, x_end, 50)
    theory = pl.DataFrame(
        {"load_factor": alphas, "estimate": [estimated_false_positive_rate(a) for a in alphas]}
    )
    x = alt.X(
        "load_factor:Q", title="slot load factor α", scale=alt.Scale(domain=[0, x_end], nice=False)
    )
    y_title = "false positives per probe"
    tooltip = [
        alt.Tooltip(c, title=_label(c), format=".4g")
        if points.schema[c].is_numeric()
        else alt.Tooltip(c, title=_label(c))
        for c in points.columns
    ]
    measured = (
        alt.Chart(points)
        .mark_point(filled=True, size=70, color="#4c78a8")
        .encode(x=x, y=alt.Y("measured_fpr:Q", title=y_title), tooltip=tooltip)
    )
    line = (
        alt.Chart(theory)
        .mark_line(color="#e45756", strokeDash=[5, 3])
        .encode(x=x, y=alt.Y("estimate:Q", title=y_title))
    )
    layers: list[alt.Chart] = [line, measured]
    what = "points"
    if {"measured_fpr_low", "measured_fpr_high"} <= set(points.columns):
        layers.insert(
            1,
            alt.Chart(points)
            .mark_rule(color="#4c78a8", strokeWidth=1.5)
            .encode(x=x, y=alt.Y("measured_fpr_low:Q", title=y_title), y2="measured_fpr_high:Q"),
        )
        what = "points, with 95 % Wilson intervals"
    return alt.LayerChart(
        layer=layers,
        title=alt.TitleParams(
            f"Measured false-positive rate ({what}) vs 8α/65534 (dashed)", subtitle=subtitle or ""
        ),
        width=480,
        height=300,
    )


def fleet_churn_chart(
    churn: pl.DataFrame, *, names: dict[str, str] | None = None, bin_words: str = "hour"
) -> alt.Chart:
    """Images sent per pool and time bin across a fleet of captures: ``fleet.churn_per_pool_per
    _hour`` (``hour`` is each bin's start, ``bin_words`` its length in words). A pool is its
    indexer domain (``names`` maps a ``cache_semantics`` digest to a model name; otherwise its
    first 8 hex digits) and its DC (as hex), one line each; the tooltip has deltas and bytes."""
    _require(
        churn, ["cache_semantics", "dc_id", "hour", "deltas", "images", "delta_bytes"], "churn"
    )
    rows = _pool_rows(churn.drop_nulls("hour"), names or {})
    pools = sorted(set(rows["pool"].to_list()))
    starts = sorted(set(rows["hour"].to_list()))
    step = max(1, -(-len(starts) // 24))  # at most 24 ticks
    ticks = [round(t.timestamp() * 1000) for t in starts[::step]]
    first, last = rows["hour"].min(), rows["hour"].max()
    span = (
        f"{first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC"
        if isinstance(first, datetime) and isinstance(last, datetime)
        else "no deltas"
    )
    chart: alt.Chart = (
        alt.Chart(rows)
        .mark_line(point=True)
        .encode(
            x=alt.X(
                "hour:T",
                title=f"receive time (UTC), per {bin_words}",
                scale=alt.Scale(type="utc", nice=False),
                # a tick at each bin's start (ms since the epoch: Vega's time), UTC as labelled
                axis=alt.Axis(format="%H:%M", labelOverlap=True, values=ticks),
            ),
            y=alt.Y("images:Q", title=f"images sent per {bin_words}"),
            color=alt.Color(
                "pool:N",
                title="pool (indexer domain · DC id)",
                sort=pools,
                legend=alt.Legend(labelLimit=400),
            ),
            tooltip=[
                alt.Tooltip("pool:N", title="pool"),
                alt.Tooltip("utcyearmonthdatehoursminutes(hour):T", title="from (UTC)"),
                alt.Tooltip("images:Q", title="images", format=","),
                alt.Tooltip("deltas:Q", title="deltas", format=","),
                alt.Tooltip("delta_bytes:Q", title="delta bytes", format=","),
            ],
        )
        .properties(
            title=alt.TitleParams(
                f"Delta churn per pool: images sent per {bin_words}",
                subtitle=f"{len(pools)} pools, {span}",
            ),
            width=640,
            height=240,
        )
    )
    return chart


def _pool_rows(churn: pl.DataFrame, names: dict[str, str]) -> pl.DataFrame:
    """Each bin's counts with its pool in words (``pool``: the domain's name or first 8 hex
    digits, and the DC) and its DC as hex (``dc``)."""
    domains = [names.get(cs, f"{cs[:8]}…") for cs in churn["cache_semantics"].to_list()]
    dcs = hex64(churn["dc_id"].to_numpy())
    return _bounded(
        churn.select("hour", "deltas", "images", "delta_bytes").with_columns(
            pl.Series("dc", dcs),
            pl.Series("pool", [f"{d} · DC {dc}" for d, dc in zip(domains, dcs, strict=True)]),
        ),
        "fleet churn",
    )
