"""Widgets a learner learns by doing: explore a lane's buckets, scrub through a stream, play with
a small filter (a frame's bytes: ``_bytes``).

Each returns something a notebook cell shows. In a live kernel (``interactive_charts()``) that
is an ipywidgets box wired to Python callbacks; in a static build (the offline report) it is a
static picture of the same thing at a sensible point, so the report still teaches.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from os import PathLike
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from cbi1kit.analysis._replay import ReplayReport
from cbi1kit.analysis._shorthands import images_table, replay
from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._bucket import lane_occupancy
from cbi1kit.ckf._table import CuckooTable, SplitMix64, lane_rng_seed
from cbi1kit.errors import CkfError, LaneError, VizError, VizVariant
from cbi1kit.viz._bytes import byte_explorer
from cbi1kit.viz._chart_common import _lane, full_table, hex64
from cbi1kit.viz._display import interactive_charts
from cbi1kit.viz._lane_charts import bucket_words_table, occupancy_chart
from cbi1kit.viz._report import charted_lane
from cbi1kit.wire._encode import encode_delta
from cbi1kit.wire._format import FilterFormat

#: Rows of bucket words listed under a brushed range (a table of thousands teaches nothing).
LISTED_BUCKETS: Final = 32


def _widgets() -> Any:
    import ipywidgets

    return ipywidgets


def _display(*parts: Any) -> None:
    """Show each part (a chart, a table, a widget; a ``str`` is HTML) in the current output."""
    from IPython.display import HTML, display

    for part in parts:
        display(HTML(part) if isinstance(part, str) else part)  # type: ignore[no-untyped-call]


class _Stack:
    """Static parts shown one under another, as one cell's result."""

    def __init__(self, parts: tuple[Any, ...]) -> None:
        self.parts = parts

    def _ipython_display_(self) -> None:
        _display(*self.parts)


def _static(*parts: Any) -> _Stack:
    return _Stack(parts)


# ------------------------------------------------------------------------ occupancy explorer


def listed_words(lane: npt.ArrayLike, brushed: dict[str, Any] | None) -> pl.DataFrame:
    """The words a brush over ``occupancy_chart`` selects: the first ``LISTED_BUCKETS`` buckets
    of the brushed range (the lane's first buckets when nothing is brushed)."""
    words = _lane(lane)
    span = (brushed or {}).get("bucket_start")
    if not span:
        return bucket_words_table(words, 0, LISTED_BUCKETS)
    start = max(0, int(min(span)))
    end = min(int(words.shape[0]), int(max(span)) + 1)
    return bucket_words_table(words, start, min(end, start + LISTED_BUCKETS))


def occupancy_explorer(lane: npt.ArrayLike, *, bins: int = 512) -> Any:
    """``occupancy_chart`` whose brush lists the brushed buckets' words right under the chart.

    Live: the words go into an ``ipywidgets.Output`` below the chart, replaced at each brush
    (``display()`` inside a selection callback would go to JupyterLab's log console instead).
    Static: the chart and the lane's first buckets.
    """
    words = _lane(lane)
    chart = occupancy_chart(words, bins=bins)
    if not interactive_charts():
        return _static(chart, full_table(listed_words(words, None)))
    import altair as alt

    w = _widgets()
    view = alt.JupyterChart(chart, embed_options={"renderer": "svg"})  # marks a hand can find
    listing = w.Output(layout={"border": "1px solid #ddd"})
    caption = w.HTML()

    def show(brushed: dict[str, Any] | None) -> None:
        table = listed_words(words, brushed)
        first, last = int(table["bucket"][0]), int(table["bucket"][-1])
        caption.value = f"<b>buckets {first}–{last}</b> (brush the top strip to pick others)"
        listing.clear_output(wait=True)
        with listing:
            _display(full_table(table))

    view.selections.observe(lambda change: show(change["new"].value), ["range"])
    show(None)
    return w.VBox([view, caption, listing])


# --------------------------------------------------------------------------- stream scrubber


@dataclass(frozen=True)
class ScrubPoint:
    """What the scrubber shows at one sequence: the lane, its figures, the delta that made it."""

    sequence: int
    lane: npt.NDArray[np.uint64] | None
    figures: pl.DataFrame
    last_delta: pl.DataFrame


def scrub_point(report: ReplayReport, images: pl.DataFrame, sequence: int) -> ScrubPoint:
    """The lane right after ``sequence`` (None between sessions) and the delta's images."""
    try:
        lane = np.asarray(report.lane_at(sequence), dtype=np.uint64)
    except LaneError:  # between sessions: no lane a consumer could use
        lane = None
    delta = images.filter(pl.col("sequence") == sequence)
    delta = delta.select(
        "bucket",
        pl.Series("previous_word", hex64(delta["previous_word"].to_numpy())),
        pl.Series("new_word", hex64(delta["new_word"].to_numpy())),
        "occupied_before",
        "occupied_after",
    )
    if lane is None:
        figures = pl.DataFrame({"sequence": [sequence], "lane": ["none: between sessions"]})
    else:
        occupied = lane_occupancy(lane)
        figures = pl.DataFrame(
            {
                "sequence": [sequence],
                "occupied_slots": [occupied],
                "load_factor": [occupied / (4 * lane.shape[0])],
                "buckets_in_this_delta": [delta.height],
            }
        )
    return ScrubPoint(sequence, lane, figures, delta)


def stream_scrubber(
    capture: str | PathLike[str], *, report: ReplayReport | None = None, bins: int = 256
) -> Any:
    """A slider over the capture's sequences showing the lane, its load and the last delta.

    Static: the same view at the final sequence.
    """
    report = report if report is not None else replay(capture, keep_events=False)
    if report.final_sequence is None or not report.sequence_ranges:
        charted_lane(report)  # says why there is nothing to scrub
        raise VizError(
            VizVariant.Chart, f"{capture}: nothing to scrub"
        )  # several lanes, none ready
    images = images_table(capture)
    first = int(report.sequence_ranges[0][0])
    last = int(report.final_sequence)

    def render(point: ScrubPoint) -> list[Any]:
        parts: list[Any] = [full_table(point.figures)]
        if point.lane is not None:
            parts.append(occupancy_chart(point.lane, bins=bins))
        parts.append(
            f"<b>the delta at sequence {point.sequence}</b>: "
            f"{point.last_delta.height} bucket word(s) written"
        )
        parts.append(full_table(point.last_delta.head(LISTED_BUCKETS)))
        return parts

    if not interactive_charts():
        return _static(*render(scrub_point(report, images, last)))
    w = _widgets()
    slider = w.IntSlider(
        value=last,
        min=first,
        max=last,
        description="sequence",
        continuous_update=False,
        layout={"width": "720px"},
    )
    out = w.Output()

    def show(sequence: int) -> None:
        out.clear_output(wait=True)
        with out:
            _display(*render(scrub_point(report, images, sequence)))

    slider.observe(lambda change: show(int(change["new"])), ["value"])
    show(last)
    return w.VBox([slider, out])


# ---------------------------------------------------------------------------- filter playground


@dataclass(kw_only=True)
class FilterPlayground:
    """A small CKF to insert into and remove from, step by step, as upstream's producer does.

    Each step returns its ``Step``: the item's fingerprint and buckets a/b, the kicks the
    insert took, the buckets written, and the delta frame carrying them (its bytes labelled by
    ``byte_explorer``). ``widget()`` wraps it in buttons for a live kernel.
    """

    seed: int = 0x5EED
    bucket_count: int = 16
    max_kicks: int = 500
    dc_id: int = 1

    def __post_init__(self) -> None:
        self.format = FilterFormat(seed=self.seed, bucket_count=self.bucket_count)
        self.table = CuckooTable(CkfAddressing(seed=self.seed, bucket_count=self.bucket_count))
        self.rng = SplitMix64(lane_rng_seed(self.seed))
        self.epoch = 0
        self.items: list[int] = []
        self._next = SplitMix64(self.seed ^ 0xC0FFEE)  # the playground's own random items

    def random_item(self) -> int:
        return self._next.next()

    def insert(self, item: int) -> PlaygroundStep:
        fp, a, b = self.table.addressing.prepare_ints(item)
        writes = self.table.insert_prepared(fp, a, b, self.rng, self.max_kicks)
        if writes is None:
            return self._step("insert", item, fp, a, b, [], failed=True)
        self.items.append(item)
        return self._step("insert", item, fp, a, b, writes)

    def remove(self, item: int) -> PlaygroundStep:
        fp, a, b = self.table.addressing.prepare_ints(item)
        try:
            write = self.table.delete(item)
        except CkfError:
            return self._step("remove", item, fp, a, b, [], failed=True)
        self.items.remove(item)
        return self._step("remove", item, fp, a, b, [write])

    def _step(
        self,
        action: str,
        item: int,
        fp: int,
        a: int,
        b: int,
        writes: list[tuple[int, int]],
        *,
        failed: bool = False,
    ) -> PlaygroundStep:
        buckets = sorted({bucket for bucket, _ in writes})
        frame = None
        if buckets:
            images = [(bk, self.table.word(bk)) for bk in buckets]
            frame = encode_delta(self.format, self.dc_id, self.epoch, self.epoch + 1, images)
            self.epoch += 1
        kicks = (self.max_kicks if failed else max(0, len(writes) - 1)) if action == "insert" else 0
        return PlaygroundStep(action, item, fp, a, b, kicks, buckets, frame, failed)

    def words(self) -> pl.DataFrame:
        return bucket_words_table(self.table.words(), 0, self.bucket_count)

    def widget(self) -> Any:
        """Buttons (insert random, insert, remove) over the table and the last step."""
        w = _widgets()
        text = w.Text(placeholder="a u64 hash (0x... or decimal), or empty for a random one")
        insert, remove = w.Button(description="insert"), w.Button(description="remove")
        out = w.Output()

        def run(action: Callable[[int], PlaygroundStep], pick_random: bool) -> None:
            raw = text.value.strip()
            out.clear_output(wait=True)
            with out:
                try:
                    item = int(raw, 0) if raw else (self.random_item() if pick_random else None)
                except ValueError:
                    _display(f"<b>{html.escape(raw)}</b> is not an integer")
                    return
                if item is None:
                    item = self.items[-1] if self.items else self.random_item()
                step = action(item)
                _display(*step.parts(self))

        insert.on_click(lambda _: run(self.insert, True))
        remove.on_click(lambda _: run(self.remove, False))
        with out:
            _display(self.words())
        return w.VBox([w.HBox([text, insert, remove]), out])


@dataclass(frozen=True)
class PlaygroundStep:
    """One insert or remove in the playground, and the delta frame it published."""

    action: str
    item: int
    fingerprint: int
    bucket_a: int
    bucket_b: int
    kicks: int
    buckets_written: list[int]
    frame: bytes | None
    failed: bool = False

    def summary(self) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "action": [self.action + (" (failed)" if self.failed else "")],
                "item": [f"0x{self.item:016x}"],
                "fingerprint": [f"{self.fingerprint:04x}"],
                "bucket_a": [self.bucket_a],
                "bucket_b": [self.bucket_b],
                "kicks": [self.kicks],
                "buckets_written": [" ".join(map(str, self.buckets_written)) or "none"],
            }
        )

    def parts(self, playground: FilterPlayground) -> list[Any]:
        parts: list[Any] = [self.summary(), playground.words()]
        if self.frame is not None:
            parts.append(byte_explorer(self.frame))
        return parts


def filter_playground(*, seed: int = 0x5EED, bucket_count: int = 16, fill: int = 0) -> Any:
    """A ``FilterPlayground`` of ``bucket_count`` buckets, ``fill`` random items inserted; its
    widget in a live kernel, else its table and one insert's step as a static picture."""
    playground = FilterPlayground(seed=seed, bucket_count=bucket_count)
    for _ in range(fill):
        playground.insert(playground.random_item())
    if interactive_charts():
        return playground.widget()
    step = playground.insert(playground.random_item())
    return _static(*step.parts(playground))
