"""Charts of a frame and of a lane: the CBI1 byte map, occupancy (and the words of a brushed
bucket range), slots per bucket, fingerprint values."""

from __future__ import annotations

from itertools import pairwise
from math import comb
from typing import Any

import altair as alt
import numpy as np
import numpy.typing as npt
import polars as pl

from cbi1kit.analysis._tables import occupancy_table
from cbi1kit.ckf._bucket import lane_slots
from cbi1kit.viz._chart_common import MAX_ROWS, _bounded, _lane, hex64
from cbi1kit.wire._format import HEADER_LEN, IMAGE_BYTES, SLOTS_PER_BUCKET, WORD_BYTES, FrameKind
from cbi1kit.wire._frames import Buffer
from cbi1kit.wire._inspect import Inspection, inspect

_REGION_COLOURS = {
    "header": "#4c78a8",
    "delta": "#f58518",
    "snapshot": "#f58518",
    "images": "#54a24b",
    "words": "#54a24b",
    "trailing": "#e45756",
}
_LABEL_FONT = 8  # px, the byte map's field names
_LABEL_CHAR_PX = 5  # a generous width of one character at that size


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
    step = _LABEL_CHAR_PX * longest + 2 * _LABEL_FONT
    kind = "frame" if ins.kind is None else ins.kind.name.lower().replace("_", " ")
    return alt.vconcat(
        (bars + labels).properties(
            width=width, height=alt.Step(step), title="The header and prefix, byte by byte"
        ),
        _to_scale(table, ins.length, colour, tooltip, width),
    ).properties(title=f"A CBI1 {kind} of {ins.length:,} bytes")


def _to_scale(
    table: pl.DataFrame, length: int, colour: alt.Color, tooltip: list[alt.Tooltip], width: int
) -> alt.Chart:
    """The byte map's strip of the whole frame (``length`` bytes) to scale, a bar per field."""
    chart: alt.Chart = (
        alt.Chart(table)
        .mark_bar(stroke="white", strokeWidth=0.5)
        .encode(
            x=alt.X(
                "start:Q",
                title="byte offset (whole frame, to scale)",
                scale=alt.Scale(domain=[0, length], nice=False),
            ),
            x2="end:Q",
            color=colour,
            tooltip=tooltip,
        )
        .properties(width=width, height=28)
    )
    return chart


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
        "load_factor:Q", scale=alt.Scale(scheme="viridis", domain=[0, 1]), title="slot load"
    )
    tooltip = [
        alt.Tooltip("bucket_start:Q", title="first bucket"),
        alt.Tooltip("bucket_end:Q", title="end bucket"),
        alt.Tooltip("occupied_slots:Q", title="occupied slots"),
        alt.Tooltip("full_buckets:Q", title="full buckets"),
        alt.Tooltip("load_factor:Q", title="slot load", format=".3f"),
    ]

    def strip(title: str, scale: alt.Scale) -> alt.Chart:
        """A strip of the heat map: a rect per bucket range, along an x axis so titled."""
        chart: alt.Chart = (
            alt.Chart(table)
            .mark_rect()
            .encode(
                x=alt.X("bucket_start:Q", title=title, scale=scale),
                x2="bucket_end:Q",
                color=colour,
                tooltip=tooltip,
            )
            .properties(width=width, height=40)
        )
        return chart

    overview = (
        strip("bucket (brush to zoom)", alt.Scale(domain=[0, int(words.shape[0])], nice=False))
        .add_params(brush)
        .properties(title=f"Occupied slots per bucket range ({bins} ranges)")
    )
    # unbrushed, the detail's domain is the data's: [0, bucket_count], not rounded past it
    detail = strip("bucket (the brushed range)", alt.Scale(domain=brush, nice=False, zero=False))
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
                "start:Q", title="fingerprint value", scale=alt.Scale(domain=[0, 65536], nice=False)
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
