"""Altair charts over the toolkit's tables.

Every chart pre-aggregates in polars so no spec carries more than ``MAX_ROWS`` rows, and 64-bit
values reach Vega only as hex strings: Vega numbers are doubles, which cannot hold a u64.
Sequences are plotted as offsets from the first one shown (small, exact), with the full value as
a hex tooltip.

Every chart has a title, axis titles in words (``_label``), runs and panels in numeric or given
order (never as sorted strings), and scales that end at the data: a reader should not have to
know the column names, nor wonder what lies in the empty band past the last bucket.
"""

from __future__ import annotations

from datetime import datetime
from itertools import pairwise
from math import comb
from typing import Any

import altair as alt
import numpy as np
import numpy.typing as npt
import polars as pl

from cbi1kit.analysis._replay import LaneReport, ReplayReport
from cbi1kit.analysis._tables import occupancy_table
from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._bucket import lane_slots
from cbi1kit.ckf._stats import estimated_false_positive_rate, measure_false_positive_rate
from cbi1kit.errors import VizError, VizVariant
from cbi1kit.wire._codec import Buffer
from cbi1kit.wire._format import HEADER_LEN, IMAGE_BYTES, SLOTS_PER_BUCKET, WORD_BYTES, FrameKind
from cbi1kit.wire._inspect import Inspection, inspect

__all__ = [
    "MAX_ROWS",
    "bucket_words_table",
    "byte_map_chart",
    "byte_map_table",
    "churn_chart",
    "compare_runs_chart",
    "filter_health_chart",
    "filter_health_table",
    "fingerprint_chart",
    "fleet_churn_chart",
    "fpr_vs_load_chart",
    "full_table",
    "hex64",
    "lanes_over_time_chart",
    "occupancy_chart",
    "prefix_depth_chart",
    "slots_histogram_chart",
]

MAX_ROWS = 5_000

Lane = npt.NDArray[np.uint64]

_REGION_COLOURS = {
    "header": "#4c78a8",
    "delta": "#f58518",
    "snapshot": "#f58518",
    "images": "#54a24b",
    "words": "#54a24b",
    "trailing": "#e45756",
}


# Words for the columns charts put on an axis, a legend or a panel; others lose their underscores.
_LABELS = {
    "load_factor": "slot load factor α",
    "occupied_slots": "occupied slots",
    "resident_items": "resident items",
    "capacity_failures": "capacity failures",
    "estimated_fpr": "estimated FPR (8α/65534)",
    "measured_fpr": "measured FPR (95 % interval)",
    "request": "requests routed",
    "capacity_blocks": "cache capacity per worker (blocks)",
    "expected_blocks_per_dc": "expected blocks per DC",
    "publish_every_n_events": "events per publication",
    "deltas": "delta messages",
    "delta_bytes": "delta bytes",
    "snapshot_bytes": "snapshot bytes",
    "images_per_delta": "images per delta",
}
_FPR_PANEL = "false-positive rate"
_LABEL_FONT = 8  # px, the byte map's field names
_LABEL_CHAR_PX = 5  # a generous width of one character at that size
# Elapsed-time units for time axes: (seconds per unit, singular, plural), the first whose
# 120 units cover the span.
_TIME_UNITS = ((1, "second", "seconds"), (60, "minute", "minutes"), (3600, "hour", "hours"))
# Bin widths (seconds) for rates over time: round ones, the first giving at most _TIME_BINS bins.
_BIN_SECONDS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200)
_TIME_BINS = 600


def _label(column: str) -> str:
    """A column's name in words, for axis, legend and panel titles."""
    return _LABELS.get(column, column.replace("_", " "))


def _time_unit(span_seconds: float) -> tuple[int, str, str]:
    """The unit a time axis of this span reads best in (seconds, minutes or hours)."""
    return next((u for u in _TIME_UNITS if span_seconds <= 120 * u[0]), _TIME_UNITS[-1])


def _since(start: object) -> str:
    """The start of a time axis: a clock time, or a millisecond count (simulated time)."""
    if isinstance(start, datetime):
        return f"{start:%Y-%m-%d %H:%M:%S}"
    return f"t = {_int(start):,} ms"


def _run_order(values: pl.Series) -> list[str]:
    """Runs in numeric order when they are numbers, else in the order they first appear;
    as the strings the legend shows."""
    unique = values.unique(maintain_order=True)
    if unique.dtype.is_numeric():
        unique = unique.sort()
    return [str(v) for v in unique.to_list()]


def hex64(values: npt.ArrayLike) -> list[str]:
    """Exact ``0x`` + 16 hex digits for each unsigned 64-bit value (never through float)."""
    arr = np.asarray(values, dtype=np.uint64)
    return [str(s) for s in np.char.mod("0x%016x", arr)]


def _bounded(df: pl.DataFrame, what: str) -> pl.DataFrame:
    if df.height > MAX_ROWS:
        raise VizError(
            VizVariant.ChartData, f"{what}: {df.height} rows after aggregation, limit {MAX_ROWS}"
        )
    return df


def _require(df: pl.DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise VizError(VizVariant.ChartData, f"{what} needs columns {missing}; has {df.columns}")


def _int(value: object) -> int:
    """A polars scalar (min/max of an integer column) as an exact Python int; None is 0."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    raise VizError(VizVariant.ChartData, f"expected an integer, got {value!r}")


def _lane(lane: npt.ArrayLike) -> Lane:
    arr = np.asarray(lane)
    if arr.dtype != np.uint64 or arr.ndim != 1:
        raise VizError(
            VizVariant.ChartData, f"a lane is a 1-D uint64 array, got {arr.dtype} {arr.shape}"
        )
    return arr


# ------------------------------------------------------------------------------------ byte map


def _as_inspection(frame: Buffer | Inspection) -> Inspection:
    return frame if isinstance(frame, Inspection) else inspect(frame)


def byte_map_table(frame: Buffer | Inspection) -> pl.DataFrame:
    """One row per header / prefix field and one per body region, from the layout tables."""
    ins = _as_inspection(frame)
    rows: list[dict[str, Any]] = []
    for f in ins.fields:
        rows.append(
            {
                "field": f.path,
                "region": f.path.split(".", 1)[0],
                "start": f.offset,
                "end": f.offset + len(f.raw),
                "size": len(f.raw),
                "value": f.display,
            }
        )
    body_start = max((r["end"] for r in rows), default=0)
    if ins.length > body_start:
        if ins.kind is FrameKind.DELTA:
            name, unit, region = "delta.images", IMAGE_BYTES, "images"
        elif ins.kind is FrameKind.SNAPSHOT_CHUNK:
            name, unit, region = "snapshot.words", WORD_BYTES, "words"
        else:
            name, unit, region = "body", 1, "trailing"
        size = ins.length - body_start
        whole, rest = divmod(size, unit)
        rows.append(
            {
                "field": name,
                "region": region,
                "start": body_start,
                "end": body_start + whole * unit,
                "size": whole * unit,
                "value": f"{whole} x {unit} B" if unit > 1 else f"{size} B",
            }
        )
        if rest:
            rows.append(
                {
                    "field": f"{name} (partial)",
                    "region": "trailing",
                    "start": body_start + whole * unit,
                    "end": ins.length,
                    "size": rest,
                    "value": f"{rest} stray bytes",
                }
            )
    return pl.DataFrame(rows)


def byte_map_chart(frame: Buffer | Inspection, *, width: int = 720) -> alt.VConcatChart:
    """The CBI1 byte map: header fields byte by byte, and the whole frame to scale.

    Field names run up the bars; each region's band is as tall as its longest name, so none is
    cut. The legend lists only the regions this frame has.
    """
    ins = _as_inspection(frame)
    table = byte_map_table(ins).with_columns(
        pl.col("field").str.split(".").list.last().alias("name")
    )
    present = [r for r in _REGION_COLOURS if r in set(table["region"].to_list())]
    colour = alt.Color(
        "region:N",
        scale=alt.Scale(domain=present, range=[_REGION_COLOURS[r] for r in present]),
        title="region",
    )
    tooltip = [
        alt.Tooltip("field:N", title="field"),
        alt.Tooltip("start:Q", title="offset"),
        alt.Tooltip("size:Q", title="bytes"),
        alt.Tooltip("value:N", title="value"),
    ]
    detail_end = min(max(table["end"].to_list(), default=HEADER_LEN), HEADER_LEN + 16)
    detail = table.filter(pl.col("start") < detail_end)
    longest = max((len(n) for n in detail["name"].to_list()), default=0)
    base = alt.Chart(detail).encode(
        x=alt.X(
            "start:Q", title="byte offset", scale=alt.Scale(domain=[0, detail_end], nice=False)
        ),
        x2="end:Q",
        y=alt.Y("region:N", title=None, sort=present),
    )
    bars = base.mark_bar(stroke="white", strokeWidth=1, clip=True).encode(
        color=colour, tooltip=tooltip
    )
    labels = (
        base.mark_text(angle=270, fontSize=_LABEL_FONT, color="white", clip=True)
        .encode(x=alt.X("mid:Q"), text="name:N")
        .transform_calculate(mid="(datum.start + datum.end) / 2")
    )
    whole = (
        alt.Chart(table)
        .mark_bar(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X(
                "start:Q",
                title="byte offset (whole frame, to scale)",
                scale=alt.Scale(domain=[0, ins.length], nice=False),
            ),
            x2="end:Q",
            color=colour,
            tooltip=tooltip,
        )
        .properties(width=width, height=28)
    )
    step = _LABEL_CHAR_PX * longest + 2 * _LABEL_FONT
    kind = "frame" if ins.kind is None else ins.kind.name.lower().replace("_", " ")
    return alt.vconcat(
        (bars + labels).properties(
            width=width, height=alt.Step(step), title="The header and prefix, byte by byte"
        ),
        whole,
    ).properties(title=f"A CBI1 {kind} of {ins.length:,} bytes")


# ------------------------------------------------------------------------------------ occupancy


def occupancy_chart(lane: npt.ArrayLike, *, bins: int = 512, width: int = 720) -> alt.VConcatChart:
    """A heat strip of occupied slots per bucket range; brush the overview to zoom the detail.

    The brush is a named selection (``range``), so a ``JupyterChart`` can read the brushed
    bucket range back and list its words with ``bucket_words_table``; without a live frontend
    the static chart still shows the whole lane.
    """
    words = _lane(lane)
    table = _bounded(occupancy_table(words, bins=bins), "occupancy")
    table = table.with_columns(
        pl.col("bucket_start").cast(pl.Int64), pl.col("bucket_end").cast(pl.Int64)
    )
    brush = alt.selection_interval(encodings=["x"], name="range")
    colour = alt.Color(
        "load_factor:Q",
        scale=alt.Scale(scheme="viridis", domain=[0, 1]),
        title="slot load",
    )
    tooltip = [
        alt.Tooltip("bucket_start:Q", title="first bucket"),
        alt.Tooltip("bucket_end:Q", title="end bucket"),
        alt.Tooltip("occupied_slots:Q", title="occupied slots"),
        alt.Tooltip("full_buckets:Q", title="full buckets"),
        alt.Tooltip("load_factor:Q", title="slot load", format=".3f"),
    ]
    overview = (
        alt.Chart(table)
        .mark_rect()
        .encode(
            x=alt.X(
                "bucket_start:Q",
                title="bucket (brush to zoom)",
                scale=alt.Scale(domain=[0, int(words.shape[0])], nice=False),
            ),
            x2="bucket_end:Q",
            color=colour,
            tooltip=tooltip,
        )
        .add_params(brush)
        .properties(
            width=width, height=40, title=f"Occupied slots per bucket range ({bins} ranges)"
        )
    )
    detail = (
        alt.Chart(table)
        .mark_rect()
        .encode(
            # unbrushed, the domain is the data's: [0, bucket_count], not rounded past it
            x=alt.X(
                "bucket_start:Q",
                title="bucket (the brushed range)",
                scale=alt.Scale(domain=brush, nice=False, zero=False),
            ),
            x2="bucket_end:Q",
            color=colour,
            tooltip=tooltip,
        )
        .properties(width=width, height=40)
    )
    return alt.vconcat(overview, detail).properties(
        title=f"Occupancy of a lane of {int(words.shape[0]):,} buckets"
    )


def bucket_words_table(lane: npt.ArrayLike, start: int, end: int) -> pl.DataFrame:
    """The words of buckets ``[start, end)`` (at most ``MAX_ROWS``): what a brushed range holds."""
    words = _lane(lane)
    start, end = max(0, int(start)), min(int(end), words.shape[0])
    end = min(end, start + MAX_ROWS)
    chunk = words[start:end]
    slots = lane_slots(chunk)
    return pl.DataFrame(
        {
            "bucket": np.arange(start, end, dtype=np.uint32),
            "word": hex64(chunk),
            "occupied_slots": (slots != 0).sum(axis=1).astype(np.uint8),
            "fingerprints": [
                " ".join(f"{v:04x}" if v else "----" for v in row) for row in slots.tolist()
            ],
        }
    )


class FullTable:
    """A table that displays whole: every row, every column, every string uncut.

    polars shows 10 rows, and strings to 30 characters, which cuts the parts of a teaching
    table that teach (the layout's meanings, a decoder's error). Made by ``full_table``.
    """

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame = frame

    def _config(self) -> pl.Config:
        strings = [
            _int(self.frame[c].str.len_chars().max())
            for c, t in self.frame.schema.items()
            if t == pl.String
        ]
        return pl.Config(
            tbl_rows=self.frame.height,
            tbl_cols=self.frame.width,
            fmt_str_lengths=max([30, *strings]),
            tbl_width_chars=10_000,  # a wide text table scrolls; it is not cut
        )

    def _repr_html_(self) -> str:
        with self._config():
            html: str = self.frame._repr_html_()
            return html

    def __repr__(self) -> str:
        with self._config():
            return repr(self.frame)


def full_table(frame: pl.DataFrame, *, max_rows: int = 200) -> FullTable:
    """``frame`` shown whole in a notebook (``FullTable``); refused past ``max_rows`` rows,
    which no reader reads whole: ``head`` or filter it first."""
    if frame.height > max_rows:
        raise VizError(
            VizVariant.ChartData,
            f"{frame.height} rows are too many to show whole (limit {max_rows})",
        )
    return FullTable(frame)


def slots_histogram_chart(lane: npt.ArrayLike) -> alt.LayerChart:
    """Buckets by occupied slots (0-4) beside the binomial expectation at the measured load."""
    words = _lane(lane)
    occupied = (lane_slots(words) != 0).sum(axis=1)
    counts = np.bincount(occupied, minlength=SLOTS_PER_BUCKET + 1)
    n = int(words.shape[0])
    alpha = float(occupied.sum()) / (SLOTS_PER_BUCKET * n) if n else 0.0
    expected = [
        n * comb(SLOTS_PER_BUCKET, k) * alpha**k * (1 - alpha) ** (SLOTS_PER_BUCKET - k)
        for k in range(SLOTS_PER_BUCKET + 1)
    ]
    table = pl.DataFrame(
        {
            "occupied_slots": np.arange(SLOTS_PER_BUCKET + 1),
            "buckets": counts.astype(np.int64),
            "binomial": expected,
        }
    )
    x = alt.X("occupied_slots:O", title="occupied slots in the bucket")
    bars = (
        alt.Chart(table)
        .mark_bar(color="#4c78a8")
        .encode(
            x=x,
            y=alt.Y("buckets:Q", title="buckets"),
            tooltip=[
                alt.Tooltip("occupied_slots:O", title="occupied slots"),
                alt.Tooltip("buckets:Q", title="buckets"),
            ],
        )
    )
    theory = (
        alt.Chart(table)
        .mark_point(color="#e45756", shape="diamond", size=80, filled=True)
        .encode(
            x=x,
            y=alt.Y("binomial:Q", title="buckets"),
            tooltip=[alt.Tooltip("binomial:Q", title="binomial expectation", format=",.1f")],
        )
    )
    chart: alt.LayerChart = (bars + theory).properties(
        title=f"Slots per bucket at load {alpha:.3f} (bars) vs Binomial(4, {alpha:.3f}) (diamonds)",
        width=360,
    )
    return chart


def fingerprint_chart(lane: npt.ArrayLike, *, bins: int = 64) -> alt.LayerChart:
    """Stored 16-bit fingerprints by value range, against the uniform expectation."""
    slots = lane_slots(_lane(lane)).reshape(-1)
    fps = slots[slots != 0].astype(np.int64)
    edges = np.linspace(1, 65536, bins + 1)
    counts, _ = np.histogram(fps, bins=edges)
    table = pl.DataFrame(
        {
            "start": edges[:-1].astype(np.int64),
            "end": edges[1:].astype(np.int64),
            "fingerprints": counts.astype(np.int64),
            "label": [f"0x{int(a):04x}-0x{int(b) - 1:04x}" for a, b in pairwise(edges)],
        }
    )
    uniform = fps.size / bins if bins else 0.0
    bars = (
        alt.Chart(table)
        .mark_rect(color="#72b7b2")
        .encode(
            x=alt.X(
                "start:Q",
                title="fingerprint value",
                scale=alt.Scale(domain=[0, 65536], nice=False),
            ),
            x2="end:Q",
            y=alt.Y("fingerprints:Q", title="slots"),
            tooltip=[
                alt.Tooltip("label:N", title="values"),
                alt.Tooltip("fingerprints:Q", title="slots"),
            ],
        )
    )
    rule = (
        alt.Chart(pl.DataFrame({"uniform": [uniform]}))
        .mark_rule(color="#e45756", strokeDash=[4, 3])
        .encode(y=alt.Y("uniform:Q", title="slots"))
    )
    chart: alt.LayerChart = (bars + rule).properties(
        title=f"Fingerprint values of {fps.size:,} stored slots (dashed: uniform)", width=560
    )
    return chart


# -------------------------------------------------------------------------------- filter health


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
    every applied delta's change in occupied slots, rebased at every snapshot.

    Returns one row per sampled sequence: ``sequence`` (UInt64), ``sequence_hex``,
    ``occupied_slots``, ``load_factor`` and ``estimated_fpr`` (8α/65534). With the replay
    ``report`` and the lane's CKF ``seed``, the measurement's columns (``measured_fpr``, its
    95 % interval ``measured_fpr_low``/``_high``, ``false_positives``, ``fpr_probes``) are
    filled at ``fpr_points`` sequences: ``fpr_probes`` distinct random (seeded) hashes probed
    in the lane at that sequence.
    """
    _require(snapshots, ["frame_index", "sequence", "occupied_slots", "bucket_count"], "health")
    _require(images, ["frame_index", "sequence", "occupied_before", "occupied_after"], "health")
    if snapshots.is_empty():
        raise VizError(VizVariant.ChartData, "filter health needs at least one installed snapshot")
    buckets = int(snapshots["bucket_count"][0])
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
    series = (
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
    addressing = CkfAddressing(buckets, seed)
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
    """Filter health metrics over sequence, time or requests, one panel per metric.

    Takes any of ``load_factor``, ``resident_items``, ``capacity_failures`` (a panel each, in
    that order) and ``estimated_fpr``, ``measured_fpr`` (one panel, to be compared; the measured
    points with their 95 % interval when ``measured_fpr_low``/``_high`` are there). Absent
    columns are skipped; a ``dc`` column draws a line per DC.
    """
    metrics = [c for c in (*_HEALTH_METRICS, *_FPR_METRICS) if c in health.columns]
    if not metrics:
        raise VizError(VizVariant.ChartData, f"no filter-health metric among {health.columns}")
    _require(health, [x], "filter health")
    table, x_title, tip = _position(health, x)
    has_interval = {"measured_fpr_low", "measured_fpr_high"} <= set(table.columns)
    if not has_interval:
        table = table.with_columns(
            pl.lit(None, pl.Float64).alias("measured_fpr_low"),
            pl.lit(None, pl.Float64).alias("measured_fpr_high"),
        )
    keep = [c for c in ("sequence_hex", x, "dc") if c in table.columns and c != "_x"]
    measured = pl.col("variable") == "measured_fpr"
    long = _bounded(
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
    panels = [_label(m) for m in metrics if m not in _FPR_METRICS]
    panels += [_FPR_PANEL] if any(m in _FPR_METRICS for m in metrics) else []
    x_enc = alt.X("_x:Q", title=x_title, scale=alt.Scale(nice=False, zero=False))
    colour = alt.Color("metric:N", title="metric", sort=[_label(m) for m in metrics])
    tooltip = [
        *tip,
        *([alt.Tooltip("dc:N", title="DC")] if "dc" in keep else []),
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
            **({"detail": alt.Detail("dc:N")} if "dc" in keep else {}),
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
    chart: alt.FacetChart = (
        alt.layer(lines, intervals, data=long)
        .properties(width=560, height=110)
        .facet(
            row=alt.Row(
                "panel:N",
                title=None,
                sort=panels,
                header=alt.Header(labelAngle=0, labelOrient="top", labelAnchor="start"),
            )
        )
        .resolve_scale(y="independent")
        .properties(title=title or f"Filter health: {', '.join(panels)}")
    )
    return chart


# ------------------------------------------------------------------------------------ churn


def _duration(seconds: int) -> str:
    """``seconds`` in the largest whole unit: "10 seconds", "2 minutes", "1 hour"."""
    size, one, many = next(u for u in reversed(_TIME_UNITS) if seconds % u[0] == 0)
    count = seconds // size
    return f"{count} {one if count == 1 else many}"


def _wire_rate(timed: pl.DataFrame, time_col: str | None) -> tuple[pl.DataFrame, str, str]:
    """Bytes per second by kind in round time bins (at most ``_TIME_BINS``), every bin present
    (zero where nothing was sent); the x title in time units and the chart title. Without
    receive times, bytes per bin of sequence numbers instead."""
    kinds = sorted(set(timed["kind"].to_list()))
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


def churn_chart(
    frames: pl.DataFrame, images: pl.DataFrame, *, bucket_count: int, bins: int = 128
) -> alt.VConcatChart:
    """Delta churn: images per delta, bytes per second by kind (in round time bins, named in
    the title), rewrites per bucket range, snapshot bytes against delta bytes."""
    _require(frames, ["kind", "sequence", "raw_len", "image_count"], "churn")
    _require(images, ["bucket"], "churn")
    deltas = frames.filter(pl.col("kind") == "DELTA")
    per_delta = _bounded(
        deltas.group_by("image_count").agg(pl.len().alias("deltas")).sort("image_count"),
        "images per delta",
    )
    c1 = (
        alt.Chart(per_delta)
        .mark_bar(color="#f58518")
        .encode(
            x=alt.X("image_count:Q", bin=alt.Bin(maxbins=40), title="images in the delta"),
            y=alt.Y("sum(deltas):Q", title="deltas"),
        )
        .properties(title="Images per delta", width=300, height=180)
    )
    time_col = next((c for c in ("recv_time", "send_time") if c in frames.columns), None)
    timed = frames.filter(pl.col("kind").is_in(["DELTA", "SNAPSHOT_CHUNK", "HEARTBEAT"]))
    timed = timed.with_columns(pl.col("kind").cast(pl.String))
    rate, x_title, rate_title = _wire_rate(timed, time_col)
    kinds = sorted(set(timed["kind"].to_list()))
    y_title = "bytes per second" if time_col is not None else "bytes"
    c2 = (
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
    c3 = (
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
    totals = timed.group_by("kind").agg(
        pl.col("raw_len").sum().alias("bytes"), pl.len().alias("messages")
    )
    c4 = (
        alt.Chart(totals)
        .mark_bar()
        .encode(
            y=alt.Y("kind:N", title=None, sort=kinds),
            x=alt.X("bytes:Q", title="bytes in the capture"),
            color=alt.Color("kind:N", title="message kind", sort=kinds),  # the legend c2 shares
            tooltip=[
                alt.Tooltip("kind:N", title="kind"),
                alt.Tooltip("bytes:Q", title="bytes", format=","),
                alt.Tooltip("messages:Q", title="messages", format=","),
            ],
        )
        .properties(title="Snapshot bytes against delta bytes", width=300, height=180)
    )
    return alt.vconcat(alt.hconcat(c1, c2), alt.hconcat(c3, c4)).properties(
        title=f"Delta churn: {deltas.height:,} deltas over {bucket_count:,} buckets"
    )


# ------------------------------------------------------------------------------- prefix depth


def prefix_depth_chart(depths: pl.DataFrame, *, subtitle: str | None = None) -> alt.LayerChart:
    """CKF prefix depth against exact prefix depth: counts per (exact, ckf) cell + the diagonal.

    Cells above the diagonal are false-positive over-matches; below it would be misses (the
    CKF has no false negatives for resident items, so they signal evictions racing the stream).
    ``subtitle`` says where the depths come from (a simulation is not a capture).
    """
    _require(depths, ["exact_depth", "ckf_depth"], "prefix depth")
    cells = _bounded(
        depths.group_by("exact_depth", "ckf_depth").agg(pl.len().alias("queries")),
        "prefix depth",
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


# ------------------------------------------------------------------------------ parameter sweeps


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
    chart: alt.FacetChart = (
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
        .facet(
            row=alt.Row(
                "panel:N",
                title=None,
                sort=panels,
                header=alt.Header(labelAngle=0, labelOrient="top", labelAnchor="start"),
            )
        )
        .resolve_scale(y="independent")
        .properties(
            title=title or f"{', '.join(panels)} against {_label(x)}, one line per {_label(by)}"
        )
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


# -------------------------------------------------------------------------------- fleet churn


def fleet_churn_chart(
    churn: pl.DataFrame,
    *,
    names: dict[str, str] | None = None,
    bin_words: str = "hour",
) -> alt.Chart:
    """Images sent per pool and time bin across a fleet of captures: ``fleet.churn_per_pool_per
    _hour`` (``hour`` is each bin's start, ``bin_words`` its length in words). A pool is its
    indexer domain (``names`` maps a ``cache_semantics`` digest to a model name; otherwise its
    first 8 hex digits) and its DC (as hex), one line each; the tooltip has deltas and bytes."""
    _require(
        churn, ["cache_semantics", "dc_id", "hour", "deltas", "images", "delta_bytes"], "churn"
    )
    rows = churn.drop_nulls("hour")
    known = names or {}
    domains = [known.get(cs, f"{cs[:8]}…") for cs in rows["cache_semantics"].to_list()]
    dcs = hex64(rows["dc_id"].to_numpy())
    rows = _bounded(
        rows.select("hour", "deltas", "images", "delta_bytes").with_columns(
            pl.Series("dc", dcs),
            pl.Series("pool", [f"{d} · DC {dc}" for d, dc in zip(domains, dcs, strict=True)]),
        ),
        "fleet churn",
    )
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
