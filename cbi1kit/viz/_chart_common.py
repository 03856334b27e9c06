"""What every chart shares: the row limit, u64 values as hex, columns named in words, time axes, the
checks of a chart's data, and a table shown whole.

No spec carries more than ``MAX_ROWS`` rows (charts pre-aggregate in polars), and 64-bit values
reach Vega only as hex strings (Vega numbers are doubles); sequences are plotted as offsets from the
first one shown, the full value in a hex tooltip. Every chart has a title, axis titles in words
(``_label``), runs and panels in numeric or given order (never as sorted strings), and scales that
end at the data.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import polars as pl

from cbi1kit.errors import VizError, VizVariant

if TYPE_CHECKING:
    import altair as alt

MAX_ROWS = 5_000

Lane = npt.NDArray[np.uint64]

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


def word_changes(before: npt.ArrayLike, images: list[tuple[int, int]]) -> pl.DataFrame:
    """A delta's images against the lane words they land on: each bucket's word before and
    after (absolute: the image is the new word) and what that did to the bucket."""
    words = np.asarray(before, dtype=np.uint64)
    was = [int(words[b]) for b, _ in images]
    now = [w for _, w in images]
    what = [
        "unchanged" if x == y else "emptied" if y == 0 else "filled" if x == 0 else "overwritten"
        for x, y in zip(was, now, strict=True)
    ]
    return pl.DataFrame(
        {"bucket": [b for b, _ in images], "before": hex64(was), "after": hex64(now), "what": what}
    )


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


def _panel_rows(chart: alt.Chart | alt.LayerChart, panels: list[str]) -> alt.FacetChart:
    """``chart`` as a row per value of its ``panel`` column, in the order of ``panels``: each
    panel's own y scale, its name above it on the left."""
    import altair as alt  # loaded already by every chart; not by ``full_table``

    header = alt.Header(labelAngle=0, labelOrient="top", labelAnchor="start")
    facet = chart.facet(row=alt.Row("panel:N", title=None, sort=panels, header=header))
    panelled: alt.FacetChart = facet.resolve_scale(y="independent")
    return panelled


def _duration(seconds: int) -> str:
    """``seconds`` in the largest whole unit: "10 seconds", "2 minutes", "1 hour"."""
    size, one, many = next(u for u in reversed(_TIME_UNITS) if seconds % u[0] == 0)
    count = seconds // size
    return f"{count} {one if count == 1 else many}"


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
