"""Charts of a stream over time: filter health (load and false-positive rate over sequence,
time or requests), delta churn, every lane's load over a capture."""

from __future__ import annotations

import altair as alt
import numpy as np
import polars as pl

from cbi1kit.analysis._replay import LaneReport, ReplayReport
from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._stats import estimated_false_positive_rate, measure_false_positive_rate
from cbi1kit.errors import VizError, VizVariant
from cbi1kit.viz._chart_common import (
    _BIN_SECONDS,
    _LABELS,
    _TIME_BINS,
    _bounded,
    _duration,
    _int,
    _label,
    _panel_rows,
    _require,
    _since,
    _time_unit,
    hex64,
)
from cbi1kit.wire._format import SLOTS_PER_BUCKET

_FPR_PANEL = "false-positive rate"


def filter_health_table(
    snapshots: pl.DataFrame,
    images: pl.DataFrame,
    *,
    max_points: int = 1000,
    report: ReplayReport | LaneReport | None = None,
    seed: int | None = None,
    fpr_points: int = 12,
    fpr_probes: int = 200_000,
    rng_seed: int = 0,
) -> pl.DataFrame:
    """Load over sequence from the stream alone: each installed snapshot's occupied slots, then
    every applied delta's change, rebased at every snapshot; a row per sampled sequence
    (``sequence``, ``sequence_hex``, ``occupied_slots``, ``load_factor``, ``estimated_fpr``:
    8α/65534). With the replay ``report`` and the lane's CKF ``seed``, ``measured_fpr`` (95 %
    interval ``measured_fpr_low``/``_high``), ``false_positives`` and ``fpr_probes`` come at
    ``fpr_points`` sequences, from ``fpr_probes`` distinct seeded random hashes probed there."""
    _require(snapshots, ["frame_index", "sequence", "occupied_slots", "bucket_count"], "health")
    _require(images, ["frame_index", "sequence", "occupied_before", "occupied_after"], "health")
    if snapshots.is_empty():
        raise VizError(VizVariant.ChartData, "filter health needs at least one installed snapshot")
    buckets = int(snapshots["bucket_count"][0])
    series = _occupied_slots(snapshots, images)
    if series.height > max_points:
        series = series.gather_every(-(-series.height // max_points))
    table = series.with_columns(
        (pl.col("occupied_slots") / (SLOTS_PER_BUCKET * buckets)).alias("load_factor"),
        pl.Series("sequence_hex", hex64(series["sequence"].to_numpy())),
    ).with_columns(
        (pl.col("load_factor") * estimated_false_positive_rate(1.0)).alias("estimated_fpr")
    )
    if report is None or seed is None:
        return table
    addressing = CkfAddressing(seed=seed, bucket_count=buckets)
    picks = np.unique(np.linspace(0, table.height - 1, min(fpr_points, table.height)).astype(int))
    measured = pl.DataFrame(
        [
            {"_row": i}
            | measure_false_positive_rate(
                report.lane_at(int(table["sequence"][i])), addressing, fpr_probes, rng_seed
            ).columns()
            for i in picks.tolist()
        ]
    )
    return (
        table.with_row_index("_row")
        .join(measured.with_columns(pl.col("_row").cast(pl.UInt32)), on="_row", how="left")
        .drop("_row")
    )


def _occupied_slots(snapshots: pl.DataFrame, images: pl.DataFrame) -> pl.DataFrame:
    """``sequence`` and ``occupied_slots`` at each installed snapshot (its count) and each delta
    applied after it (the snapshot's count plus the changes of the deltas up to it)."""
    bases = snapshots.select(
        pl.col("frame_index").alias("snapshot_record"),
        pl.col("sequence"),
        pl.col("occupied_slots").cast(pl.Int64).alias("base"),
    ).sort("snapshot_record")
    changes = (
        images.sort("frame_index")
        .join_asof(
            bases.select("snapshot_record", "base"),
            left_on="frame_index",
            right_on="snapshot_record",
            strategy="backward",
        )
        .drop_nulls("snapshot_record")
        .group_by("snapshot_record", "sequence", "base")
        .agg(
            (pl.col("occupied_after").cast(pl.Int64) - pl.col("occupied_before").cast(pl.Int64))
            .sum()
            .alias("change")
        )
    )
    return (
        pl.concat(
            [
                bases.select(
                    "snapshot_record", "sequence", "base", pl.lit(0, pl.Int64).alias("change")
                ),
                changes.select("snapshot_record", "sequence", "base", "change"),
            ]
        )
        .sort("snapshot_record", "sequence")
        .with_columns(
            (pl.col("base") + pl.col("change").cum_sum().over("snapshot_record")).alias(
                "occupied_slots"
            )
        )
        .select("sequence", "occupied_slots")
    )


def _position(table: pl.DataFrame, x: str) -> tuple[pl.DataFrame, str, list[alt.Tooltip]]:
    """``table`` with ``_x``, the x position to plot, its axis title in words and the tooltip
    that names the exact value: sequences as offsets from the first (hex in the tooltip),
    times as elapsed seconds, minutes or hours (``time_ms`` is milliseconds), else the column."""
    if x == "sequence":
        first = _int(table["sequence"].min())
        if "sequence_hex" not in table.columns:
            table = table.with_columns(
                pl.Series("sequence_hex", hex64(table["sequence"].to_numpy()))
            )
        table = table.with_columns((pl.col("sequence") - first).cast(pl.Int64).alias("_x"))
        return (
            table,
            f"sequence number, counted from {first:,}",
            [alt.Tooltip("sequence_hex:N", title="sequence")],
        )
    if table.schema[x].is_temporal() or x == "time_ms":
        seconds = (
            (pl.col(x) - pl.col(x).min()).dt.total_microseconds() / 1e6
            if table.schema[x].is_temporal()
            else (pl.col(x) - pl.col(x).min()) / 1000
        )
        table = table.with_columns(seconds.alias("_x"))
        size, _, unit = _time_unit(float(table["_x"].max() or 0))  # type: ignore[arg-type]
        table = table.with_columns(pl.col("_x") / size)
        kind = "T" if table.schema[x].is_temporal() else "Q"
        since = _since(table[x].min())
        return table, f"{unit} since {since}", [alt.Tooltip(f"{x}:{kind}", title=_label(x))]
    table = table.with_columns(pl.col(x).alias("_x"))
    return table, _label(x), [alt.Tooltip(f"{x}:Q", title=_label(x))]


_HEALTH_METRICS = ("load_factor", "resident_items", "capacity_failures")
_FPR_METRICS = ("estimated_fpr", "measured_fpr")


def filter_health_chart(
    health: pl.DataFrame, *, x: str = "sequence", title: str | None = None
) -> alt.FacetChart:
    """Filter health metrics over sequence, time or requests, one panel per metric: any of
    ``load_factor``, ``resident_items``, ``capacity_failures`` (in that order), then
    ``estimated_fpr`` and ``measured_fpr`` sharing one panel (measured points with their 95 %
    interval when ``measured_fpr_low``/``_high`` are there). Absent columns are skipped; a ``dc``
    column draws a line per DC."""
    metrics = [c for c in (*_HEALTH_METRICS, *_FPR_METRICS) if c in health.columns]
    if not metrics:
        raise VizError(VizVariant.ChartData, f"no filter-health metric among {health.columns}")
    _require(health, [x], "filter health")
    table, x_title, tip = _position(health, x)
    long = _health_rows(table, x, metrics)
    panels = [_label(m) for m in metrics if m not in _FPR_METRICS]
    panels += [_FPR_PANEL] if any(m in _FPR_METRICS for m in metrics) else []
    layers = _health_layers(long, x_title, tip, metrics).properties(width=560, height=110)
    chart: alt.FacetChart = _panel_rows(layers, panels).properties(
        title=title or f"Filter health: {', '.join(panels)}"
    )
    return chart


def _health_rows(table: pl.DataFrame, x: str, metrics: list[str]) -> pl.DataFrame:
    """One row per position and metric with a value: its panel, the metric in words, and the
    measured FPR's 95 % interval (``low``, ``high``: null for every other metric)."""
    if not {"measured_fpr_low", "measured_fpr_high"} <= set(table.columns):
        table = table.with_columns(
            pl.lit(None, pl.Float64).alias("measured_fpr_low"),
            pl.lit(None, pl.Float64).alias("measured_fpr_high"),
        )
    keep = [c for c in ("sequence_hex", x, "dc") if c in table.columns and c != "_x"]
    measured = pl.col("variable") == "measured_fpr"
    return _bounded(
        table.select("_x", *keep, "measured_fpr_low", "measured_fpr_high", *metrics)
        .unpivot(on=metrics, index=["_x", *keep, "measured_fpr_low", "measured_fpr_high"])
        .drop_nulls("value")
        .with_columns(
            pl.when(pl.col("variable").is_in(_FPR_METRICS))
            .then(pl.lit(_FPR_PANEL))
            .otherwise(pl.col("variable").replace_strict(_LABELS, default=pl.col("variable")))
            .alias("panel"),
            pl.col("variable").replace_strict(_LABELS, default=pl.col("variable")).alias("metric"),
            pl.when(measured).then(pl.col("measured_fpr_low")).alias("low"),
            pl.when(measured).then(pl.col("measured_fpr_high")).alias("high"),
        )
        .drop("measured_fpr_low", "measured_fpr_high"),
        "filter health",
    )


def _health_layers(
    long: pl.DataFrame, x_title: str, tip: list[alt.Tooltip], metrics: list[str]
) -> alt.LayerChart:
    """The metrics' lines (one per DC with a ``dc`` column) and the measured FPR's intervals."""
    by_dc = "dc" in long.columns
    x_enc = alt.X("_x:Q", title=x_title, scale=alt.Scale(nice=False, zero=False))
    colour = alt.Color("metric:N", title="metric", sort=[_label(m) for m in metrics])
    tooltip = [
        *tip,
        *([alt.Tooltip("dc:N", title="DC")] if by_dc else []),
        alt.Tooltip("metric:N", title="metric"),
        alt.Tooltip("value:Q", title="value", format=".4g"),
    ]
    lines = (
        alt.Chart()
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=x_enc,
            y=alt.Y("value:Q", title=None),
            color=colour,
            tooltip=tooltip,
            **({"detail": alt.Detail("dc:N")} if by_dc else {}),
        )
    )
    intervals = (
        alt.Chart()
        .mark_rule(strokeWidth=2)
        .encode(
            x=x_enc,
            y=alt.Y("low:Q", title=None),
            y2="high:Q",
            color=colour,
            tooltip=[
                *tip,
                alt.Tooltip("low:Q", title="95 % interval, low", format=".3g"),
                alt.Tooltip("high:Q", title="95 % interval, high", format=".3g"),
            ],
        )
        .transform_filter("isValid(datum.low)")
    )
    return alt.LayerChart(layer=[lines, intervals], data=long)


def churn_chart(
    frames: pl.DataFrame, images: pl.DataFrame, *, bucket_count: int, bins: int = 128
) -> alt.VConcatChart:
    """Delta churn: images per delta, bytes per second by kind (in round time bins, named in
    the title), rewrites per bucket range, snapshot bytes against delta bytes."""
    _require(frames, ["kind", "sequence", "raw_len", "image_count"], "churn")
    _require(images, ["bucket"], "churn")
    deltas = frames.filter(pl.col("kind") == "DELTA")
    time_col = next((c for c in ("recv_time", "send_time") if c in frames.columns), None)
    timed = frames.filter(pl.col("kind").is_in(["DELTA", "SNAPSHOT_CHUNK", "HEARTBEAT"]))
    timed = timed.with_columns(pl.col("kind").cast(pl.String))
    kinds = sorted(set(timed["kind"].to_list()))
    return alt.vconcat(
        alt.hconcat(_images_per_delta(deltas), _rate_chart(timed, time_col, kinds)),
        alt.hconcat(_rewrites_chart(images, bucket_count, bins), _bytes_by_kind(timed, kinds)),
    ).properties(title=f"Delta churn: {deltas.height:,} deltas over {bucket_count:,} buckets")


def _images_per_delta(deltas: pl.DataFrame) -> alt.Chart:
    """How many deltas carry how many images."""
    per_delta = _bounded(
        deltas.group_by("image_count").agg(pl.len().alias("deltas")).sort("image_count"),
        "images per delta",
    )
    chart: alt.Chart = (
        alt.Chart(per_delta)
        .mark_bar(color="#f58518")
        .encode(
            x=alt.X("image_count:Q", bin=alt.Bin(maxbins=40), title="images in the delta"),
            y=alt.Y("sum(deltas):Q", title="deltas"),
        )
        .properties(title="Images per delta", width=300, height=180)
    )
    return chart


def _rate_chart(timed: pl.DataFrame, time_col: str | None, kinds: list[str]) -> alt.Chart:
    """Bytes on the wire by message kind, stacked, over time (or sequence: ``_wire_rate``)."""
    rate, x_title, rate_title = _wire_rate(timed, time_col, kinds)
    y_title = "bytes per second" if time_col is not None else "bytes"
    chart: alt.Chart = (
        alt.Chart(_bounded(rate.select("at", "kind", "rate"), "bytes per second"))
        .mark_area(opacity=0.8)
        .encode(
            x=alt.X("at:Q", title=x_title, scale=alt.Scale(nice=False)),
            y=alt.Y("rate:Q", stack=True, title=y_title),
            color=alt.Color("kind:N", title="message kind", sort=kinds),
            tooltip=[
                alt.Tooltip("at:Q", title=x_title, format=",.2f"),
                alt.Tooltip("kind:N", title="kind"),
                alt.Tooltip("rate:Q", title=y_title, format=",.0f"),
            ],
        )
        .properties(title=rate_title, width=300, height=180)
    )
    return chart


def _wire_rate(
    timed: pl.DataFrame, time_col: str | None, kinds: list[str]
) -> tuple[pl.DataFrame, str, str]:
    """Bytes per second by kind in round time bins (at most ``_TIME_BINS``), every bin present
    (zero where nothing was sent); the x title in time units and the chart title. Without
    receive times, bytes per bin of sequence numbers instead."""
    if time_col is not None and timed[time_col].null_count() < timed.height:
        timed = timed.drop_nulls(time_col)
        start = timed[time_col].min()
        timed = timed.with_columns(
            ((pl.col(time_col) - start).dt.total_microseconds() // 1_000_000).alias("_s")
        )
        span = _int(timed["_s"].max())
        width = next((w for w in _BIN_SECONDS if span // w < _TIME_BINS), _BIN_SECONDS[-1])
        size, _, unit = _time_unit(span)
        per = "per second" if width == 1 else f"per second, mean over {_duration(width)}"
        x_title = f"{unit} since {_since(start)}"
        title = f"Bytes on the wire {per}"
    else:
        first = _int(timed["sequence"].min())
        timed = timed.with_columns((pl.col("sequence") - first).cast(pl.Int64).alias("_s"))
        span = _int(timed["_s"].max())
        width, size = max(1, -(-(span + 1) // _TIME_BINS)), 1
        x_title = f"sequence number, counted from {first:,} (no receive times)"
        title = f"Bytes on the wire per {width:,} sequence numbers"
    grid = pl.DataFrame({"_bin": range(0, span // width * width + 1, width)}).join(
        pl.DataFrame({"kind": kinds}), how="cross"
    )
    sent = (
        timed.with_columns(pl.col("_s") // width * width)
        .group_by(pl.col("_s").alias("_bin"), "kind")
        .agg(pl.col("raw_len").sum().alias("bytes"))
    )
    rate = (
        grid.join(sent, on=["_bin", "kind"], how="left")
        .with_columns(pl.col("bytes").fill_null(0))
        .with_columns(
            (pl.col("_bin") / size).alias("at"),
            (pl.col("bytes") / (width if time_col is not None else 1)).alias("rate"),
        )
    )
    return rate, x_title, title


def _rewrites_chart(images: pl.DataFrame, bucket_count: int, bins: int) -> alt.Chart:
    """Images written per bucket range, over the whole lane."""
    width = max(1, -(-bucket_count // bins))
    rewrites = _bounded(
        images.with_columns(
            (pl.col("bucket").cast(pl.Int64) // width * width).alias("bucket_start")
        )
        .group_by("bucket_start")
        .agg(pl.len().alias("rewrites"))
        .with_columns((pl.col("bucket_start") + width).alias("bucket_end"))
        .sort("bucket_start"),
        "rewrites",
    )
    chart: alt.Chart = (
        alt.Chart(rewrites)
        .mark_rect(color="#54a24b")
        .encode(
            x=alt.X(
                "bucket_start:Q",
                title="bucket",
                scale=alt.Scale(domain=[0, bucket_count], nice=False),
            ),
            x2="bucket_end:Q",
            y=alt.Y("rewrites:Q", title="images written"),
            tooltip=[
                alt.Tooltip("bucket_start:Q", title="first bucket"),
                alt.Tooltip("rewrites:Q", title="images written"),
            ],
        )
        .properties(title=f"Rewrites per bucket range ({bins} ranges)", width=300, height=180)
    )
    return chart


def _bytes_by_kind(timed: pl.DataFrame, kinds: list[str]) -> alt.Chart:
    """The capture's bytes and messages by kind: snapshots against deltas."""
    totals = timed.group_by("kind").agg(
        pl.col("raw_len").sum().alias("bytes"), pl.len().alias("messages")
    )
    chart: alt.Chart = (
        alt.Chart(totals)
        .mark_bar()
        .encode(
            y=alt.Y("kind:N", title=None, sort=kinds),
            x=alt.X("bytes:Q", title="bytes in the capture"),
            color=alt.Color("kind:N", title="message kind", sort=kinds),  # the rate's legend
            tooltip=[
                alt.Tooltip("kind:N", title="kind"),
                alt.Tooltip("bytes:Q", title="bytes", format=","),
                alt.Tooltip("messages:Q", title="messages", format=","),
            ],
        )
        .properties(title="Snapshot bytes against delta bytes", width=300, height=180)
    )
    return chart


def lanes_over_time_chart(timeline: pl.DataFrame, *, by: str = "domain") -> alt.FacetChart:
    """Each DC lane's slot load over a capture, one panel per ``by`` (an indexer domain, or a
    model column a caller added): ``analysis.global_timeline``'s moments. A moment where a lane
    was not ready (between sessions: a violation, its stream closed, a new one not installed)
    is a red cross on the time axis: a router could not use it then."""
    _require(timeline, ["offset_s", "dc_id", "ready", "load_factor", by], "lanes over time")
    rows = _bounded(timeline, "lanes over time").with_columns(
        pl.when(pl.col("ready"))
        .then(pl.lit("ready"))
        .otherwise(pl.lit("not ready"))
        .alias("state"),
        pl.col("load_factor").fill_null(0.0).alias("shown_load"),
    )
    span = float(rows["offset_s"].max() or 0.0)  # type: ignore[arg-type]
    size, _, unit = _time_unit(span)
    rows = rows.with_columns((pl.col("offset_s") / size).alias("since"))
    x = alt.X(
        "since:Q",
        title=f"{unit} since the capture's first message",
        scale=alt.Scale(domain=[0, span / size], nice=False),
    )
    y = alt.Y("shown_load:Q", title="slot load factor α")
    tooltip = [
        alt.Tooltip("at:N", title="moment") if "at" in rows.columns else alt.Tooltip("offset_s:Q"),
        alt.Tooltip("dc_id:N", title="DC id"),
        alt.Tooltip("state:N", title="lane"),
        alt.Tooltip("load_factor:Q", title="slot load", format=".3f"),
        alt.Tooltip("sequence:Q", title="sequence"),
        alt.Tooltip("why:N", title="why not ready"),
    ]
    colour = alt.Color("dc_id:N", title="DC id")
    base = alt.Chart(rows)
    lines = (
        base.transform_filter(alt.datum.state == "ready")
        .mark_line(point=True)
        .encode(x=x, y=y, color=colour, tooltip=tooltip)
    )
    gaps = (
        base.transform_filter(alt.datum.state == "not ready")
        .mark_point(shape="cross", color="#e45756", size=80, filled=True)
        .encode(x=x, y=y, detail="dc_id:N", tooltip=tooltip)
    )
    panel = alt.layer(lines, gaps).properties(width=640, height=160)
    header = alt.Header(labelAngle=0, labelAlign="left", labelOrient="top", labelFontWeight="bold")
    title = "indexer domain" if by == "domain" else _label(by)
    return panel.facet(row=alt.Row(f"{by}:N", title=title, header=header)).properties(
        title=alt.TitleParams(
            "Every DC lane's slot load over the capture (red cross: lane not ready)",
            subtitle=f"the global view at {rows['offset_s'].n_unique()} moments",
        )
    )
