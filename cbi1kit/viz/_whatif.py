"""``what_if``: what the filter does when a knob moves.

Sliders over the simulator's knobs (``SimulatorConfig``'s field names, and ``requests``: the trace
prefix simulated) re-run the compiled :class:`Simulator` and redraw four linked charts in place:
measured false-positive rate against load beside 8α/65534, each DC's load over time, the churn
published (images and bytes per second), and CKF against exact prefix depth; a brush over either
time chart picks a window in both. :meth:`WhatIf.update` takes the same step without a browser. A
move runs ``DEBOUNCE_SECONDS`` after the last (``LatestWins``): one simulation at a time, the
newest value winning, a move made during a run picked up when it ends.
"""

from __future__ import annotations

import dataclasses
import difflib
import html
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, Protocol, TypeVar

import altair as alt
import polars as pl

from cbi1kit.ckf._limits import MAX_VERIFICATION_WINDOW
from cbi1kit.ckf._table import MAX_KICKS
from cbi1kit.errors import SimulationError, SimulationVariant, one_line
from cbi1kit.hashing._identity import MAX_LANES
from cbi1kit.sim._engine import Simulator
from cbi1kit.sim._policies import POLICIES
from cbi1kit.sim._simulator import SimulationResult, SimulatorConfig, config_error
from cbi1kit.sim._workload import Workload, read_mooncake
from cbi1kit.viz._chart_common import _BIN_SECONDS, _bounded, _duration
from cbi1kit.viz._display import interactive_charts
from cbi1kit.viz._run_charts import fpr_vs_load_chart, prefix_depth_chart

#: The knobs a slider moves: ``SimulatorConfig`` fields, and ``requests`` (the trace prefix).
SLIDERS: Final = (
    "expected_blocks_per_dc",
    "max_kicks",
    "publish_every_n_events",
    "verification_window",
    "policy",
    "dcs",
    "requests",
)
#: The prefix simulated unless told (the whole trace when it is shorter).
DEFAULT_REQUESTS: Final = 3_000
#: How long after a slider's last move the simulation runs.
DEBOUNCE_SECONDS: Final = 0.15
#: At most this many bins of simulated time in the churn chart (1 s wide while they fit).
CHURN_BINS: Final = 1_200
_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(SimulatorConfig))
_TIME_TITLE: Final = "seconds of simulated time"

T = TypeVar("T")


# ---------------------------------------------------------------------------------- the knobs


def check_knob_names(knobs: Mapping[str, object]) -> None:
    """Every name a ``SimulatorConfig`` field or ``requests``; else ``SimulationError``
    ``Config`` naming the first unknown one (and the knob it most resembles)."""
    for name in sorted(set(knobs) - _FIELDS - {"requests"}):
        close = difflib.get_close_matches(name, [*_FIELDS, "requests"], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise config_error(
            name,
            knobs[name],
            f"not a knob: a SimulatorConfig field or requests{hint}",
            what="what-if knob",
        )


def apply_knobs(
    config: SimulatorConfig, requests: int, available: int, knobs: Mapping[str, object]
) -> tuple[SimulatorConfig, int]:
    """``config`` and ``requests`` with ``knobs`` set: ``SimulatorConfig`` checks its fields,
    ``requests`` must be in ``1..=available`` (the trace's requests)."""
    check_knob_names(knobs)
    fields = {k: v for k, v in knobs.items() if k != "requests"}
    config = dataclasses.replace(config, **fields)  # type: ignore[arg-type]
    chosen = knobs.get("requests", requests)
    if not isinstance(chosen, int) or isinstance(chosen, bool) or not 1 <= chosen <= available:
        raise config_error(
            "requests", chosen, f"must be an integer in 1..={available:,}", what="what-if knob"
        )
    return config, chosen


def knob_values(config: SimulatorConfig, requests: int) -> dict[str, object]:
    """The sliders' knobs as they stand."""
    values: dict[str, object] = {k: getattr(config, k) for k in SLIDERS if k != "requests"}
    return values | {"requests": requests}


# -------------------------------------------------------------------------------- the figures

_FIGURES: Final = {
    "requests": pl.Int64,
    "dcs": pl.Int64,
    "workers_per_dc": pl.Int64,
    "capacity_blocks": pl.Int64,
    "policy": pl.String,
    "expected_blocks_per_dc": pl.Int64,
    "buckets_per_dc": pl.Int64,
    "max_kicks": pl.Int64,
    "publish_every_n_events": pl.Int64,
    "verification_window": pl.Int64,
    "absent_probes": pl.Int64,
    "false_positives": pl.Int64,
    "measured_fpr": pl.Float64,
    "measured_fpr_low": pl.Float64,
    "measured_fpr_high": pl.Float64,
    "estimated_fpr": pl.Float64,
    "mean_probe_load": pl.Float64,
    "mean_load_factor": pl.Float64,
    "hit_rate": pl.Float64,
    "capacity_failures": pl.Int64,
    "deltas_per_second": pl.Float64,
    "images_per_second": pl.Float64,
    "bytes_per_second": pl.Float64,
    "simulated_seconds": pl.Float64,
}


def headline_table(result: SimulationResult, requests: int) -> pl.DataFrame:
    """A run's headline figures, one row: its knobs and pools, the measured FPR (false
    positives among the distinct absent probes) with its 95 % interval beside 8α/65534 at the
    probes' mean load, the mean final load of the DCs, hit rate, capacity failures, and the
    deltas, images and bytes the DCs published per second of simulated time."""
    cfg = result.config
    deltas = result.delta_table()
    seconds = (result.end_ms - result.start_ms) / 1000
    fpr = result.fpr
    low, high = (None, None) if fpr is None else fpr.interval
    loads = result.load_factors

    def per_second(total: int) -> float | None:
        return total / seconds if seconds > 0 else None

    row: dict[str, object] = {
        **knob_values(cfg, requests),
        "workers_per_dc": cfg.workers_per_dc,
        "capacity_blocks": cfg.capacity_blocks,
        "buckets_per_dc": cfg.ckf_config().bucket_count(),
        "absent_probes": result.absent_probes,
        "false_positives": result.false_positives,
        "measured_fpr": result.measured_fpr,
        "measured_fpr_low": low,
        "measured_fpr_high": high,
        "estimated_fpr": result.estimated_fpr,
        "mean_probe_load": result.mean_probe_load,
        "mean_load_factor": sum(loads) / len(loads) if loads else None,
        "hit_rate": result.hit_rate,
        "capacity_failures": sum(result.capacity_failures),
        "deltas_per_second": per_second(deltas.height),
        "images_per_second": per_second(int(deltas["images"].sum())),
        "bytes_per_second": per_second(int(deltas["frame_bytes"].sum())),
        "simulated_seconds": seconds,
    }
    return pl.DataFrame({k: [row[k]] for k in _FIGURES}, schema=_FIGURES)


def headline_text(table: pl.DataFrame) -> str:
    """The headline figures as one line of text."""
    r = table.row(0, named=True)
    if r["measured_fpr"] is None:
        fpr = "no absent block probed"
    else:
        fpr = (
            f"measured FPR {r['measured_fpr']:.2e} ({r['false_positives']:,} in "
            f"{r['absent_probes']:,} absent probes; 95 % {r['measured_fpr_low']:.1e} to "
            f"{r['measured_fpr_high']:.1e}) vs 8α/65534 {r['estimated_fpr']:.2e} at α "
            f"{r['mean_probe_load']:.3f}"
        )
    rates = (
        "no simulated time"
        if r["images_per_second"] is None
        else f"{r['images_per_second']:,.1f} images/s, {r['bytes_per_second']:,.0f} bytes/s"
    )
    return (
        f"{r['requests']:,} requests, {r['dcs']} DC{'s' if r['dcs'] > 1 else ''}, "
        f"{r['policy']}: {fpr} · mean load {r['mean_load_factor']:.3f} · hit rate "
        f"{r['hit_rate']:.1%} · {r['capacity_failures']:,} capacity failures · {rates}"
    )


# --------------------------------------------------------------------------------- the charts


def chart_tables(result: SimulationResult) -> dict[str, pl.DataFrame]:
    """The four charts' rows: ``fpr`` (per bin of load, with each rate's 95 % interval),
    ``load`` (each DC's load factor over simulated seconds), ``churn`` (images and bytes per
    second, in bins of simulated seconds, every bin present) and ``depth`` (exact and CKF
    depth of every request and DC; the chart counts its cells)."""
    from cbi1kit.ckf._stats import FprMeasurement

    fpr = result.fpr_table()
    bounds = [
        FprMeasurement(int(k), int(n)).interval
        for k, n in zip(fpr["false_positives"], fpr["absent_probes"], strict=True)
    ]
    fpr = fpr.with_columns(
        pl.col("absent_probes", "false_positives").cast(pl.Int64),  # counts, not u64 values
        pl.Series("measured_fpr_low", [b[0] for b in bounds], pl.Float64),
        pl.Series("measured_fpr_high", [b[1] for b in bounds], pl.Float64),
    )
    start = result.start_ms
    load = result.health_table().select(
        ((pl.col("time_ms") - start) / 1000).alias("seconds"),
        pl.col("dc").cast(pl.Int64),
        pl.col("request").cast(pl.Int64),
        "load_factor",
    )
    return {
        "fpr": fpr,
        "load": load,
        "churn": _churn_rates(result.delta_table(), start, result.end_ms),
        "depth": result.depth_table(),
    }


def _churn_rates(deltas: pl.DataFrame, start_ms: int, end_ms: int) -> pl.DataFrame:
    """Images and bytes per second in bins of simulated time (1 s wide while at most
    ``CHURN_BINS`` fit, else the first round width that does), zero where nothing was sent."""
    span = max(0, (end_ms - start_ms) // 1000)
    width = next((w for w in _BIN_SECONDS if span // w < CHURN_BINS), _BIN_SECONDS[-1])
    grid = pl.DataFrame(
        {"seconds": range(0, span // width * width + 1, width)}, schema={"seconds": pl.Int64}
    )
    sent = (
        deltas.with_columns(
            ((pl.col("time_ms") - start_ms) // 1000 // width * width).alias("seconds")
        )
        .group_by("seconds")
        .agg(
            pl.col("images").cast(pl.Int64).sum().alias("images"),
            pl.col("frame_bytes").sum().alias("bytes"),
        )
    )
    return (
        grid.join(sent, on="seconds", how="left")
        .with_columns(pl.col("images", "bytes").fill_null(0))
        .with_columns(
            (pl.col("seconds") + width).alias("seconds_end"),
            (pl.col("images") / width).alias("images_per_second"),
            (pl.col("bytes") / width).alias("bytes_per_second"),
            pl.lit(width).alias("bin_seconds"),
        )
    )


#: The time window brushed in the load or the churn charts: one selection over those views,
#: named as altair's concatenation names them (a layer's first view: its place in its concat).
WINDOW: Final = "window"
_WINDOW_VIEWS: Final = ("what_if_load_0", "what_if_images_0", "what_if_bytes_1")


def _window_param() -> alt.TopLevelSelectionParameter:
    """The brush, declared once at the top over the three time views that draw it (altair's
    lifting of one param from several views copies every subchart at every level, and warns)."""
    return alt.TopLevelSelectionParameter(
        name=WINDOW,
        select=alt.IntervalSelectionConfig(type="interval", encodings=["x"]),
        views=list(_WINDOW_VIEWS),
    )


def _brushed(base: alt.Chart, view: str) -> list[alt.Chart]:
    """``base`` faded (the view the brush is drawn in), and over it ``base`` in the window."""
    return [
        base.encode(opacity=alt.value(0.25)).properties(name=view),
        base.transform_filter(alt.ParameterPredicate(param=WINDOW)),
    ]


def _time_axis(span: float) -> alt.X:
    return alt.X("seconds:Q", title=_TIME_TITLE, scale=alt.Scale(domain=[0, span], nice=False))


def _load_view(load: pl.DataFrame, span: float) -> alt.LayerChart:
    """Each DC's slot load over simulated time, faded outside the brushed window."""
    dcs = [str(d) for d in sorted(set(load["dc"].to_list()))]
    base = (
        alt.Chart()
        .mark_line(point=alt.OverlayMarkDef(size=10))
        .encode(
            x=_time_axis(span),
            y=alt.Y("load_factor:Q", title="slot load factor α", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color(
                "dc:N",
                title="DC",
                sort=dcs,
                legend=alt.Legend(orient="top", columns=8, symbolOpacity=1),
            ),
            tooltip=[
                alt.Tooltip("dc:N", title="DC"),
                alt.Tooltip("seconds:Q", title=_TIME_TITLE, format=",.0f"),
                alt.Tooltip("request:Q", title="requests routed", format=","),
                alt.Tooltip("load_factor:Q", title="slot load factor α", format=".3f"),
            ],
        )
    )
    return alt.LayerChart(
        layer=_brushed(base, _WINDOW_VIEWS[0]),
        data=_bounded(load, "load"),
        title="Each DC's filter load over time (brush a window)",
        width=380,
        height=170,
    )


def _churn_view(span: float, column: str, words: str, view: str) -> alt.LayerChart:
    """One churn rate over simulated time, faded outside the brushed window (its data is
    the churn table, given once to both rates' views). A stepped area, one mark per layer: a
    bar per bin was thousands of SVG elements for the browser to redraw at every move."""
    base = (
        alt.Chart()
        .mark_area(color="#f58518", interpolate="step-after")
        .encode(x=_time_axis(span), y=alt.Y(f"{column}:Q", title=words))
    )
    return alt.LayerChart(layer=_brushed(base, view), width=380, height=70)


def _views(result: SimulationResult, requests: int) -> tuple[list[Any], alt.TitleParams]:
    """The explorer's four charts, each an altair chart: the measured FPR against load, the
    prefix depths, each DC's load over time and the churn's two rates; and the title."""
    tables = chart_tables(result)
    span = max(1.0, (result.end_ms - result.start_ms) / 1000)
    churn = tables["churn"]
    width = int(churn["bin_seconds"][0])
    per = "per second" if width == 1 else f"per second, mean over {_duration(width)}"
    fpr = fpr_vs_load_chart(
        tables["fpr"].drop("estimated_fpr"),
        subtitle="distinct absent blocks probed, by the lane's load at the probe",
    ).properties(width=380, height=220, name="what_if_fpr")
    depth = prefix_depth_chart(
        tables["depth"], subtitle="every request and DC, under this policy"
    ).properties(width=240, height=220)
    rates = alt.vconcat(
        _churn_view(span, "images_per_second", "images per second", _WINDOW_VIEWS[1]),
        _churn_view(span, "bytes_per_second", "bytes per second", _WINDOW_VIEWS[2]),
        data=_bounded(churn.select("seconds", "images_per_second", "bytes_per_second"), "churn"),
    ).properties(title=f"Churn the DCs publish: images and bytes {per}")
    cfg = result.config
    title = alt.TitleParams(
        "What if: the filter under these knobs",
        subtitle=f"{requests:,} requests, {cfg.dcs} DC{'s' if cfg.dcs > 1 else ''} × "
        f"{cfg.members_per_dc} members of {cfg.capacity_blocks:,} blocks, {cfg.policy} "
        f"routing, {cfg.ckf_config().bucket_count():,} buckets per DC",
    )
    return [fpr, depth, _load_view(tables["load"], span), rates], title


def what_if_chart(result: SimulationResult, requests: int) -> alt.VConcatChart:
    """The explorer's four charts as one altair chart: the measured FPR against load and the
    prefix depths above; each DC's load and the churn over simulated time below, linked by a
    brush over either."""
    (fpr, depth, load, rates), title = _views(result, requests)
    chart = alt.vconcat(alt.hconcat(fpr, depth), alt.hconcat(load, rates)).properties(title=title)
    chart.params = [_window_param()]
    return chart


def what_if_spec(result: SimulationResult, requests: int) -> dict[str, Any]:
    """``what_if_chart(...).to_dict()``, assembled from the four charts' own specs: what a
    redraw sends. Composing altair charts copies every subchart at every level and validates
    the whole spec again, which took most of a redraw's time; the parts are the same charts,
    and a test holds the two to the same dict."""
    views, title = _views(result, requests)
    parts = [view.to_dict(validate=False) for view in views]
    top = {"$schema": parts[0]["$schema"], "config": parts[0].get("config")}
    datasets: dict[str, Any] = {}
    for part in parts:
        datasets |= part.pop("datasets", {})
        part.pop("$schema", None)
        part.pop("config", None)
    fpr, depth, load, rates = parts
    return {
        **top,
        "vconcat": [{"hconcat": [fpr, depth]}, {"hconcat": [load, rates]}],
        "params": [_window_param().to_dict()],
        "title": title.to_dict(),
        "datasets": datasets,
    }


# ------------------------------------------------------------------------------ the debouncer


class Cancellable(Protocol):
    """A scheduled call that can be called off (``threading.Timer``)."""

    def cancel(self) -> None:
        """Call it off (a no-op once it ran)."""


Schedule = Callable[[float, Callable[[], None]], Cancellable]
Submit = Callable[[Callable[[], None]], object]


def thread_timer(delay: float, call: Callable[[], None]) -> threading.Timer:
    """``call`` after ``delay`` seconds on a daemon thread of its own."""
    timer = threading.Timer(delay, call)
    timer.daemon = True
    timer.start()
    return timer


class LatestWins(Generic[T]):
    """Runs ``work`` on the newest value pushed, ``delay`` seconds after the last push, one run
    at a time: a value pushed during a run waits for it to end (only the newest of them runs),
    and none is lost.

    ``schedule(delay, call)`` starts a timer (a daemon thread by default) and ``submit(job)``
    runs a job (by default at once, in the timer's thread); tests give their own."""

    def __init__(
        self,
        work: Callable[[T], None],
        *,
        delay: float = DEBOUNCE_SECONDS,
        schedule: Schedule | None = None,
        submit: Submit | None = None,
    ) -> None:
        self._work = work
        self._delay = delay
        self._schedule: Schedule = schedule or thread_timer
        self._submit: Submit = submit or (lambda job: job())
        self._lock = threading.Lock()
        self._pending: list[T] = []  # at most one: the newest value not yet run
        self._timer: Cancellable | None = None
        self._generation = 0  # which timer is the live one
        self._running = False

    @property
    def busy(self) -> bool:
        """Whether a value waits for its timer or a run is going on."""
        with self._lock:
            return self._running or self._timer is not None or bool(self._pending)

    def push(self, value: T) -> None:
        """``value`` is the newest: run it ``delay`` after now, unless another comes first."""
        with self._lock:
            self._pending[:] = [value]
            if self._timer is not None:
                self._timer.cancel()
            self._generation += 1
            generation = self._generation
            self._timer = self._schedule(self._delay, lambda: self._due(generation))

    def _due(self, generation: int) -> None:
        with self._lock:
            if generation != self._generation:  # called off, too late to stop its thread
                return
            self._timer = None
            if self._running or not self._pending:  # the run going on takes it when it ends
                return
            value = self._pending.pop()
            self._running = True
        self._submit(lambda: self._drain(value))

    def _drain(self, value: T) -> None:
        """Run ``value``, then each value that came due during the run."""
        while True:
            try:
                self._work(value)
            except BaseException:
                with self._lock:
                    self._running = False
                raise
            with self._lock:
                if not self._pending or self._timer is not None:  # none due yet
                    self._running = False
                    return
                value = self._pending.pop()


# -------------------------------------------------------------------------------- the explorer


def _ipywidgets() -> Any:
    import ipywidgets

    return ipywidgets


def expected_choices(config: SimulatorConfig) -> list[tuple[str, int]]:
    """The expected-blocks slider's stops, smallest filter first: the powers of two from 1/16
    to 16 times the members' capacity, that capacity itself as 0 (sized for the members, the
    default), and the current value."""
    members = config.members_per_dc * config.capacity_blocks
    middle = max(members, 1).bit_length() - 1
    stops = {1 << e for e in range(max(6, middle - 4), middle + 5)} - {members}
    stops |= {0, config.expected_blocks_per_dc}

    def size(value: int) -> tuple[int, int]:
        return (value or members, value)  # 0 where its size is, before an explicit equal

    return [(f"0: {members:,}" if v == 0 else f"{v:,}", v) for v in sorted(stops, key=size)]


def _controls(config: SimulatorConfig, requests: int, available: int) -> dict[str, Any]:
    """A control per knob in ``SLIDERS``, each at the knob's value."""
    w = _ipywidgets()
    common: dict[str, Any] = {"style": {"description_width": "170px"}, "layout": {"width": "440px"}}
    slider = {**common, "continuous_update": True}

    def ints(name: str, value: int, low: int, high: int) -> Any:
        return w.IntSlider(value=value, min=low, max=max(high, value), description=name, **slider)

    return {
        "expected_blocks_per_dc": w.SelectionSlider(
            options=expected_choices(config),
            value=config.expected_blocks_per_dc,
            description="expected_blocks_per_dc",
            **slider,
        ),
        "max_kicks": ints("max_kicks", config.max_kicks, 1, MAX_KICKS),
        "publish_every_n_events": ints(
            "publish_every_n_events", config.publish_every_n_events, 1, 256
        ),
        "verification_window": ints(
            "verification_window", config.verification_window, 1, MAX_VERIFICATION_WINDOW
        ),
        "policy": w.Dropdown(
            options=list(POLICIES), value=config.policy, description="policy", **common
        ),
        "dcs": ints("dcs", config.dcs, 1, MAX_LANES),
        "requests": ints("requests", requests, 1, available),
    }


def _live_view(spec: dict[str, Any]) -> alt.JupyterChart:
    """A ``JupyterChart`` drawing ``spec`` (as SVG: marks a hand or a test can find), each
    redraw setting its spec in place. It is made from a chart holding nothing but the brush,
    the selection the widget keeps in step with Python: made from the composed chart, it
    cost a composition and a validation more than the spec it then drew (a third of a second
    at 3,000 requests)."""
    holder = alt.LayerChart(layer=[], params=[_window_param()])
    view = alt.JupyterChart(holder, embed_options={"renderer": "svg"})
    view.spec = spec
    return view


class WhatIf:
    """A trace prefix simulated under a set of knobs; moving a knob (:meth:`update`, or a slider of
    :meth:`widget`) simulates it again and redraws in place. ``table``: the headline figures
    (``headline_table``); ``result``: the :class:`SimulationResult`; ``config``, ``requests``:
    the knobs; ``schedule``, ``submit``: the sliders' debouncer's (``LatestWins``)."""

    def __init__(
        self,
        workload: Workload,
        config: SimulatorConfig,
        requests: int,
        *,
        schedule: Schedule | None = None,
        submit: Submit | None = None,
    ) -> None:
        self.workload = workload
        self.config, self.requests = apply_knobs(config, requests, len(workload), {})
        self._lock = threading.Lock()  # one simulation at a time, whoever asks
        self.result = self._simulate(self.config, self.requests)
        self.table = headline_table(self.result, self.requests)
        self._controls: dict[str, Any] = {}
        self._view: Any = None
        self._headline: Any = None
        self._box: Any = None
        self._quiet = False  # set while update() moves the sliders itself
        self._runner: LatestWins[dict[str, object]] = LatestWins(
            self._from_sliders, schedule=schedule, submit=submit
        )

    def _simulate(self, config: SimulatorConfig, requests: int) -> SimulationResult:
        return Simulator(config).run(self.workload.head(requests))

    @property
    def knobs(self) -> dict[str, object]:
        """The sliders' knobs as they stand."""
        return knob_values(self.config, self.requests)

    def update(self, **knobs: object) -> pl.DataFrame:
        """Set ``knobs`` (``SimulatorConfig`` fields, ``requests``), simulate the prefix again
        (unless nothing changed), redraw, and return the new headline figures."""
        with self._lock:
            self._set(*apply_knobs(self.config, self.requests, len(self.workload), knobs))
        self._show_knobs()
        return self.table

    def _set(self, config: SimulatorConfig, requests: int) -> None:
        """Simulate ``config`` on ``requests`` requests and redraw (under ``_lock``)."""
        if (config, requests) == (self.config, self.requests):
            return
        result = self._simulate(config, requests)
        self.config, self.requests, self.result = config, requests, result
        self.table = headline_table(result, requests)
        if self._view is not None:  # in place: the widget's spec, re-embedded where it is
            self._view.spec = self.spec()
            self._headline.value = self._headline_html()

    def chart(self) -> alt.VConcatChart:
        """The four linked charts of the current run, as an altair chart."""
        return what_if_chart(self.result, self.requests)

    def spec(self) -> dict[str, Any]:
        """The same charts' Vega-Lite spec, with their data: what a redraw draws."""
        return what_if_spec(self.result, self.requests)

    def chart_tables(self) -> dict[str, pl.DataFrame]:
        """The rows the four charts draw (:func:`chart_tables`)."""
        return chart_tables(self.result)

    # -- the live explorer
    def _from_sliders(self, knobs: dict[str, object]) -> None:
        """The debouncer's work: the sliders' values simulated, or why not in the headline."""
        try:
            with self._lock:
                self._set(*apply_knobs(self.config, self.requests, len(self.workload), knobs))
        except Exception as exc:  # shown where the figures go: a slider must not kill the loop
            if self._headline is not None:
                self._headline.value = f"<b>not simulated</b>: {html.escape(one_line(str(exc)))}"

    def on_slider(self, _change: object = None) -> None:
        """A control moved: its knobs go to the debouncer (not while ``update`` moves them)."""
        if self._quiet:
            return
        self._runner.push({name: c.value for name, c in self._controls.items()})

    def _show_knobs(self) -> None:
        """Move the controls to the knobs ``update`` set, without simulating again."""
        if not self._controls:
            return
        self._quiet = True
        try:
            choices = expected_choices(self.config)
            slider = self._controls["expected_blocks_per_dc"]
            if list(slider.options) != choices:
                slider.options = choices
            for name, value in self.knobs.items():
                control = self._controls[name]
                if hasattr(control, "max") and value > control.max:
                    control.max = value
                control.value = value
        finally:
            self._quiet = False

    def _headline_html(self) -> str:
        return f"<div class='cbi1kit-what-if'>{html.escape(headline_text(self.table))}</div>"

    def widget(self) -> Any:
        """The live explorer (built once): the sliders, the headline and the four charts."""
        if self._box is not None:
            return self._box
        w = _ipywidgets()
        self._controls = _controls(self.config, self.requests, len(self.workload))
        for control in self._controls.values():
            control.observe(self.on_slider, ["value"])
        self._headline = w.HTML(self._headline_html())
        self._view = _live_view(self.spec())
        names = list(self._controls)
        left = w.VBox([self._controls[n] for n in names[:4]])
        right = w.VBox([self._controls[n] for n in names[4:]])
        self._box = w.VBox([w.HBox([left, right]), self._headline, self._view])
        return self._box

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k}={v!r}" for k, v in self.knobs.items() if k != "requests")
        return (
            f"WhatIf({self.requests:,} of {len(self.workload):,} requests; {knobs}): "
            f"{headline_text(self.table)}"
        )

    def _ipython_display_(self) -> None:
        """Live sliders in a kernel whose charts are widgets, else a static picture."""
        from IPython.display import HTML, display

        if interactive_charts():
            display(self.widget())  # type: ignore[no-untyped-call]
        else:
            display(HTML(self._headline_html()), self.chart())  # type: ignore[no-untyped-call]


def what_if(trace: str | os.PathLike[str] | Workload, **start: object) -> WhatIf:
    """An explorer of "what if" questions about the filter: sliders over ``expected_blocks_per_dc``,
    ``max_kicks``, ``publish_every_n_events``, ``verification_window``, ``policy``, ``dcs`` and
    ``requests`` (the prefix of ``trace``: a Mooncake trace's path or a :class:`Workload`) redraw
    four linked charts. A knob starts at ``start[name]``, else ``SimulatorConfig``'s default
    (``requests``: ``DEFAULT_REQUESTS``, or the whole trace when shorter); other ``SimulatorConfig``
    fields in ``start`` stay as given. An unknown name or a value out of range is a
    ``SimulationError`` ``Config``. ``update(**knobs)`` moves knobs without a browser and returns
    the new figures."""
    check_knob_names(start)
    workload = trace if isinstance(trace, Workload) else read_mooncake(trace)
    if len(workload) == 0:
        raise SimulationError(SimulationVariant.Workload, "what_if needs at least one request")
    default = min(DEFAULT_REQUESTS, len(workload))
    config, requests = apply_knobs(SimulatorConfig(), default, len(workload), start)
    return WhatIf(workload, config, requests)
