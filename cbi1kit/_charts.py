"""Altair charts over the toolkit's tables.

Every chart pre-aggregates in polars so no spec carries more than ``MAX_ROWS`` rows, and 64-bit
values reach Vega only as hex strings: Vega numbers are doubles, which cannot hold a u64.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import numpy as np
import numpy.typing as npt
import polars as pl

from cbi1kit._format import HEADER_LEN, IMAGE_BYTES, WORD_BYTES, FrameKind
from cbi1kit._inspect import Inspection, inspect
from cbi1kit._wire import Buffer

__all__ = ["MAX_ROWS", "byte_map_chart", "byte_map_table", "hex64"]

MAX_ROWS = 5_000

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


def _as_inspection(frame: Buffer | Inspection) -> Inspection:
    return frame if isinstance(frame, Inspection) else inspect(frame)


def byte_map_table(frame: Buffer | Inspection) -> pl.DataFrame:
    """One row per header / prefix field and one per body region, from the layout tables."""
    ins = _as_inspection(frame)
    rows: list[dict[str, Any]] = []
    for f in ins.fields:
        region = f.path.split(".", 1)[0]
        rows.append(
            {
                "field": f.path,
                "region": region,
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
        label = f"{whole} x {unit} B" if unit > 1 else f"{size} B"
        rows.append(
            {
                "field": name,
                "region": region,
                "start": body_start,
                "end": body_start + whole * unit,
                "size": whole * unit,
                "value": label,
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
    labels = base.mark_text(angle=270, fontSize=8, color="white", clip=True).encode(
        x=alt.X("mid:Q"), text="name:N"
    )
    labels = labels.transform_calculate(
        mid="(datum.start + datum.end) / 2", name="split(datum.field, '.')[1]"
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
