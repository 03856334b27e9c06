"""Altair charts over the toolkit's tables.

Every chart pre-aggregates in polars so no spec carries more than ``MAX_ROWS`` rows, and 64-bit
values reach Vega only as hex strings: Vega numbers are doubles, which cannot hold a u64.
Sequences are plotted as offsets from the first one shown (small, exact), with the full value as
a hex tooltip.
"""

from __future__ import annotations

import os
from itertools import pairwise
from math import comb
from typing import Any

import altair as alt
import numpy as np
import numpy.typing as npt
import polars as pl

from cbi1kit.analysis._replay import ReplayReport
from cbi1kit.analysis._tables import occupancy_table
from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._bucket import lane_slots
from cbi1kit.ckf._stats import estimated_false_positive_rate, measure_false_positive_rate
from cbi1kit.errors import VizError
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
    "fpr_vs_load_chart",
    "hex64",
    "occupancy_chart",
    "prefix_depth_chart",
    "slots_histogram_chart",
]

MAX_ROWS = 5_000

if os.environ.get("CBI1KIT_CHART_RENDERER") == "svg":
    # Report builds execute the notebooks headless: render charts as static SVG (vl-convert),
    # which needs no JavaScript and no CDN. Interactive use keeps altair's default renderer.
    alt.renderers.enable("svg")

Lane = npt.NDArray[np.uint64]

_REGION_COLOURS = {
    "header": "#4c78a8",
    "delta": "#f58518",
    "snapshot": "#f58518",
    "images": "#54a24b",
    "words": "#54a24b",
    "trailing": "#e45756",
}


def hex64(values: npt.ArrayLike) -> list[str]:
    """Exact ``0x`` + 16 hex digits for each unsigned 64-bit value (never through float)."""
    arr = np.asarray(values, dtype=np.uint64)
    return [str(s) for s in np.char.mod("0x%016x", arr)]


def _bounded(df: pl.DataFrame, what: str) -> pl.DataFrame:
    if df.height > MAX_ROWS:
        raise VizError("ChartData", f"{what}: {df.height} rows after aggregation, limit {MAX_ROWS}")
    return df


def _require(df: pl.DataFrame, columns: list[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise VizError("ChartData", f"{what} needs columns {missing}; has {df.columns}")


def _int(value: object) -> int:
    """A polars scalar (min/max of an integer column) as an exact Python int; None is 0."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    raise VizError("ChartData", f"expected an integer, got {value!r}")


def _lane(lane: npt.ArrayLike) -> Lane:
    arr = np.asarray(lane)
    if arr.dtype != np.uint64 or arr.ndim != 1:
        raise VizError("ChartData", f"a lane is a 1-D uint64 array, got {arr.dtype} {arr.shape}")
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
    """The CBI1 byte map: header fields byte by byte, and the whole frame to scale."""
    table = byte_map_table(frame)
    colour = alt.Color(
        "region:N",
        scale=alt.Scale(domain=list(_REGION_COLOURS), range=list(_REGION_COLOURS.values())),
        title="region",
    )
    tooltip = ["field:N", "start:Q", "size:Q", "value:N"]
    detail_end = min(max(table["end"].to_list(), default=HEADER_LEN), HEADER_LEN + 16)
    detail = table.filter(pl.col("start") < detail_end)
    base = alt.Chart(detail).encode(
        x=alt.X("start:Q", title="byte offset", scale=alt.Scale(domain=[0, detail_end])),
        x2="end:Q",
        y=alt.Y("region:N", title=None, sort=list(_REGION_COLOURS)),
    )
    bars = base.mark_bar(stroke="white", strokeWidth=1, clip=True).encode(
        color=colour, tooltip=tooltip
    )
    labels = (
        base.mark_text(angle=270, fontSize=8, color="white", clip=True)
        .encode(x=alt.X("mid:Q"), text="name:N")
        .transform_calculate(mid="(datum.start + datum.end) / 2", name="split(datum.field, '.')[1]")
    )
    whole = (
        alt.Chart(table)
        .mark_bar(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X("start:Q", title="byte offset (whole frame, to scale)"),
            x2="end:Q",
            color=colour,
            tooltip=tooltip,
        )
        .properties(width=width, height=28)
    )
    return alt.vconcat(
        (bars + labels).properties(width=width, height=140, title="CBI1 header, byte by byte"),
        whole,
    )


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
        alt.Tooltip("load_factor:Q", format=".3f"),
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
            x=alt.X("bucket_start:Q", title="bucket", scale=alt.Scale(domain=brush)),
            x2="bucket_end:Q",
            color=colour,
            tooltip=tooltip,
        )
        .properties(width=width, height=40)
    )
    return alt.vconcat(overview, detail)


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
        .encode(x=x, y=alt.Y("buckets:Q", title="buckets"), tooltip=["occupied_slots", "buckets"])
    )
    theory = (
        alt.Chart(table)
        .mark_point(color="#e45756", shape="diamond", size=80, filled=True)
        .encode(x=x, y="binomial:Q", tooltip=[alt.Tooltip("binomial:Q", format=",.1f")])
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
            x=alt.X("start:Q", title="fingerprint value", scale=alt.Scale(domain=[0, 65536])),
            x2="end:Q",
            y=alt.Y("fingerprints:Q", title="slots"),
            tooltip=["label:N", "fingerprints:Q"],
        )
    )
    rule = (
        alt.Chart(pl.DataFrame({"uniform": [uniform]}))
        .mark_rule(color="#e45756", strokeDash=[4, 3])
        .encode(y="uniform:Q")
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
    report: ReplayReport | None = None,
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
    _require(snapshots, ["record_index", "sequence", "occupied_slots", "bucket_count"], "health")
    _require(images, ["record_index", "sequence", "occupied_before", "occupied_after"], "health")
    if snapshots.is_empty():
        raise VizError("ChartData", "filter health needs at least one installed snapshot")
    buckets = int(snapshots["bucket_count"][0])
    bases = snapshots.select(
        pl.col("record_index").alias("snapshot_record"),
        pl.col("sequence"),
        pl.col("occupied_slots").cast(pl.Int64).alias("base"),
    ).sort("snapshot_record")
    changes = (
        images.sort("record_index")
        .join_asof(
            bases.select("snapshot_record", "base"),
            left_on="record_index",
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


def filter_health_chart(health: pl.DataFrame, *, x: str = "sequence") -> alt.FacetChart:
    """Filter health metrics over sequence (or time), one panel per metric.

    Takes any of ``load_factor``, ``resident_items``, ``capacity_failures``, ``estimated_fpr``,
    ``measured_fpr`` (absent columns are skipped); the x axis is the offset from the first
    sequence, with the exact sequence in the tooltip.
    """
    metrics = [
        c
        for c in (
            "load_factor",
            "resident_items",
            "capacity_failures",
            "estimated_fpr",
            "measured_fpr",
        )
        if c in health.columns
    ]
    if not metrics:
        raise VizError("ChartData", f"no filter-health metric among {health.columns}")
    _require(health, [x], "filter health")
    table = health
    if x == "sequence":
        first = _int(table["sequence"].min())
        table = table.with_columns((pl.col("sequence") - first).cast(pl.Int64).alias("position"))
        if "sequence_hex" not in table.columns:
            table = table.with_columns(
                pl.Series("sequence_hex", hex64(table["sequence"].to_numpy()))
            )
        x_enc = alt.X("position:Q", title=f"sequence - {first}")
        tip = ["sequence_hex:N"]
    else:
        kind = "T" if table.schema[x].is_temporal() else "Q"
        x_enc = alt.X(f"{x}:{kind}", title=x)
        tip = [f"{x}:{kind}"]
    long = _bounded(
        table.select(
            [*(c for c in ("position", x, "sequence_hex") if c in table.columns), *metrics]
        )
        .unpivot(
            on=metrics, index=[c for c in ("position", x, "sequence_hex") if c in table.columns]
        )
        .drop_nulls("value")
        .with_columns(  # estimated and measured FPR share one panel, to be compared
            pl.when(pl.col("variable").str.ends_with("_fpr"))
            .then(pl.lit("false-positive rate"))
            .otherwise(pl.col("variable"))
            .alias("panel")
        ),
        "filter health",
    )
    chart: alt.FacetChart = (
        alt.Chart(long)
        .mark_line(point=alt.OverlayMarkDef(size=12))
        .encode(
            x=x_enc,
            y=alt.Y("value:Q", title=None),
            color=alt.Color("variable:N", title="metric"),
            tooltip=[*tip, "variable:N", alt.Tooltip("value:Q", format=".4g")],
        )
        .properties(width=560, height=110)
        .facet(row=alt.Row("panel:N", title=None))
        .resolve_scale(y="independent")
    )
    return chart


# ------------------------------------------------------------------------------------ churn


def churn_chart(
    frames: pl.DataFrame, images: pl.DataFrame, *, bucket_count: int, bins: int = 128
) -> alt.VConcatChart:
    """Delta churn: images per delta, bytes per second by kind, rewrites per bucket range,
    snapshot bytes against delta bytes."""
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
    if time_col is not None and timed[time_col].null_count() < timed.height:
        start = timed[time_col].min()
        rate = (
            timed.drop_nulls(time_col)
            .with_columns(
                ((pl.col(time_col) - start).dt.total_seconds())
                .floor()
                .cast(pl.Int64)
                .alias("second"),
                pl.col("kind").cast(pl.String),
            )
            .group_by("second", "kind")
            .agg(pl.col("raw_len").sum().alias("bytes"))
        )
        if rate.height > MAX_ROWS:
            width_s = -(-_int(rate["second"].max()) // (MAX_ROWS // 3))
            rate = (
                rate.with_columns((pl.col("second") // width_s * width_s).alias("second"))
                .group_by("second", "kind")
                .agg(pl.col("bytes").sum())
            )
        x_title = f"seconds since {start!s}"
    else:
        first = _int(timed["sequence"].min())
        rate = (
            timed.with_columns(
                ((pl.col("sequence") - first) // max(1, (timed.height // 500) or 1))
                .cast(pl.Int64)
                .alias("second"),
                pl.col("kind").cast(pl.String),
            )
            .group_by("second", "kind")
            .agg(pl.col("raw_len").sum().alias("bytes"))
        )
        x_title = "sequence bucket (no receive times)"
    c2 = (
        alt.Chart(_bounded(rate, "bytes per second"))
        .mark_area(opacity=0.8)
        .encode(
            x=alt.X("second:Q", title=x_title),
            y=alt.Y("bytes:Q", stack=True, title="bytes"),
            color=alt.Color("kind:N", title="kind"),
            tooltip=["second:Q", "kind:N", "bytes:Q"],
        )
        .properties(title="Bytes on the wire per second", width=300, height=180)
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
            x=alt.X("bucket_start:Q", title="bucket", scale=alt.Scale(domain=[0, bucket_count])),
            x2="bucket_end:Q",
            y=alt.Y("rewrites:Q", title="images"),
            tooltip=["bucket_start:Q", "rewrites:Q"],
        )
        .properties(title=f"Rewrites per bucket range ({bins} ranges)", width=300, height=180)
    )
    totals = (
        frames.filter(pl.col("kind").is_in(["DELTA", "SNAPSHOT_CHUNK", "HEARTBEAT"]))
        .with_columns(pl.col("kind").cast(pl.String))
        .group_by("kind")
        .agg(pl.col("raw_len").sum().alias("bytes"), pl.len().alias("messages"))
    )
    c4 = (
        alt.Chart(totals)
        .mark_bar()
        .encode(
            y=alt.Y("kind:N", title=None),
            x=alt.X("bytes:Q", title="bytes in the capture"),
            color=alt.Color("kind:N", legend=None),
            tooltip=["kind:N", "bytes:Q", "messages:Q"],
        )
        .properties(title="Snapshot bytes against delta bytes", width=300, height=180)
    )
    return alt.vconcat(alt.hconcat(c1, c2), alt.hconcat(c3, c4))


# ------------------------------------------------------------------------------- prefix depth


def prefix_depth_chart(depths: pl.DataFrame) -> alt.LayerChart:
    """CKF prefix depth against exact prefix depth: counts per (exact, ckf) cell + the diagonal.

    Cells above the diagonal are false-positive over-matches; below it would be misses (the
    CKF has no false negatives for resident items, so they signal evictions racing the stream).
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
    heat = (
        alt.Chart(cells)
        .mark_square(size=14, opacity=0.9)
        .encode(
            x=alt.X("exact_depth:Q", title="exact prefix depth (blocks)", scale=scale),
            y=alt.Y("ckf_depth:Q", title="CKF prefix depth (blocks)", scale=scale),
            color=alt.Color("queries:Q", scale=alt.Scale(type="log", scheme="viridis")),
            shape=alt.Shape("outcome:N", title="outcome"),
            tooltip=["exact_depth:Q", "ckf_depth:Q", "queries:Q", "outcome:N"],
        )
    )
    diagonal = (
        alt.Chart(pl.DataFrame({"d": [0, top + 1]}))
        .mark_line(color="#e45756", strokeDash=[4, 3], opacity=0.7)
        .encode(x="d:Q", y="d:Q")
    )
    chart: alt.LayerChart = (heat + diagonal).properties(
        title="CKF vs exact prefix depth", width=420, height=420
    )
    return chart


# ------------------------------------------------------------------------------ parameter sweeps


def compare_runs_chart(
    table: pl.DataFrame, *, x: str, metrics: list[str], by: str, max_points: int = 400
) -> alt.FacetChart:
    """Several runs of a sweep on shared axes: one panel per metric, one line per ``by`` value."""
    _require(table, [x, by, *metrics], "compare runs")
    runs = table[by].n_unique()
    per_run = max(2, max_points // max(1, runs))
    thinned = (
        table.sort(by, x)
        .with_columns(pl.int_range(pl.len()).over(by).alias("_i"), pl.len().over(by).alias("_n"))
        .filter((pl.col("_i") % ((pl.col("_n") // per_run) + 1)) == 0)
        .drop("_i", "_n")
    )
    long = _bounded(
        thinned.select(x, by, *metrics)
        .with_columns(pl.col(by).cast(pl.String))
        .unpivot(on=metrics, index=[x, by]),
        "compare runs",
    )
    chart: alt.FacetChart = (
        alt.Chart(long)
        .mark_line()
        .encode(
            x=alt.X(f"{x}:Q", title=x),
            y=alt.Y("value:Q", title=None),
            color=alt.Color(f"{by}:N", title=by, sort=None),
            tooltip=[f"{by}:N", f"{x}:Q", "variable:N", alt.Tooltip("value:Q", format=".4g")],
        )
        .properties(width=520, height=130)
        .facet(row=alt.Row("variable:N", title=None))
        .resolve_scale(y="independent")
    )
    return chart


def fpr_vs_load_chart(runs: pl.DataFrame) -> alt.LayerChart:
    """Measured per-probe false-positive rate of each run against its load, beside 8α/65534."""
    _require(runs, ["load_factor", "measured_fpr"], "false-positive rate")
    points = _bounded(runs.drop_nulls("measured_fpr"), "false-positive rate")
    top = max(float(points["load_factor"].max() or 0.0), 0.05)  # type: ignore[arg-type]
    alphas = np.linspace(0.0, min(1.0, top * 1.1), 50)
    theory = pl.DataFrame(
        {"load_factor": alphas, "estimate": [estimated_false_positive_rate(a) for a in alphas]}
    )
    tooltip = [
        alt.Tooltip(c, format=".4g") if points.schema[c].is_numeric() else c for c in points.columns
    ]
    measured = (
        alt.Chart(points)
        .mark_point(filled=True, size=70, color="#4c78a8")
        .encode(
            x=alt.X("load_factor:Q", title="slot load factor α"),
            y=alt.Y("measured_fpr:Q", title="false positives per probe"),
            tooltip=tooltip,
        )
    )
    line = (
        alt.Chart(theory)
        .mark_line(color="#e45756", strokeDash=[5, 3])
        .encode(x="load_factor:Q", y="estimate:Q")
    )
    chart: alt.LayerChart = (line + measured).properties(
        title="Measured false-positive rate (points) vs 8α/65534 (dashed)", width=480, height=300
    )
    return chart
