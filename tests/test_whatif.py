"""``ck.viz.what_if``: the figures it shows are the simulation's own and move with the knobs;
the knobs are checked; the sliders' debouncer runs the newest value, one run at a time, none
lost (driven by a hand-fired timer and executor, no clock); and without a kernel it is a
static picture."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from errorcheck import raises_variant

import cbi1kit as ck
from cbi1kit.data import mooncake_trace
from cbi1kit.errors import CkfError, SimulationError
from cbi1kit.sim._engine import Simulator
from cbi1kit.viz import _whatif as W
from cbi1kit.viz._chart_common import MAX_ROWS
from cbi1kit.viz._display import STATIC_ENV

ROOT = Path(__file__).parents[1]
TRACE = mooncake_trace()
#: A small fleet on a short prefix: every knob's effect shows, and a run takes milliseconds.
SMALL = {"dcs": 2, "workers_per_dc": 2, "capacity_blocks": 1024, "policy": "ckf"}


@pytest.fixture(scope="module")
def workload() -> ck.Workload:
    return ck.read_mooncake(TRACE, limit=1500)


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STATIC_ENV, raising=False)


@pytest.fixture
def static(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STATIC_ENV, "svg")


# ------------------------------------------------------------------------------------ figures


def test_a_smaller_filter_loads_higher_and_answers_wrong_more_often(workload: ck.Workload) -> None:
    w = ck.viz.what_if(workload, **SMALL)
    sized = w.table
    assert sized["expected_blocks_per_dc"][0] == 0
    smaller = w.update(expected_blocks_per_dc=1024)  # half the members' 2,048 blocks
    assert smaller is w.table and w.config.expected_blocks_per_dc == 1024
    assert smaller["buckets_per_dc"][0] * 2 == sized["buckets_per_dc"][0]
    for column in ("mean_load_factor", "mean_probe_load", "estimated_fpr", "measured_fpr"):
        assert smaller[column][0] > sized[column][0], column
    assert smaller["capacity_failures"][0] > sized["capacity_failures"][0] == 0
    back = w.update(expected_blocks_per_dc=0)
    assert back.equals(sized)  # seeded: the same knobs, the same figures


def test_every_slider_knob_changes_the_run(workload: ck.Workload) -> None:
    w = ck.viz.what_if(workload, **SMALL)
    first = w.table
    moves: dict[str, object] = {
        "max_kicks": 8,
        "publish_every_n_events": 16,
        "verification_window": 1,
        "policy": "round_robin",
        "dcs": 3,
        "requests": 700,
    }
    for name, value in moves.items():
        table = w.update(**{name: value})
        assert table[name][0] == value
        assert w.knobs[name] == value
    assert w.result.requests == 700 and w.result.config.dcs == 3
    assert not w.table.equals(first)


def test_the_figures_are_the_simulations_own(workload: ck.Workload) -> None:
    w = ck.viz.what_if(workload, requests=1200, **SMALL)
    w.update(expected_blocks_per_dc=1536)
    again = Simulator(w.config).run(workload.head(1200))
    mine = {k: v for k, v in w.result.as_dict().items() if k != "wall_seconds"}
    theirs = {k: v for k, v in again.as_dict().items() if k != "wall_seconds"}
    assert mine == theirs
    row = w.table.row(0, named=True)
    fpr = again.fpr
    assert fpr is not None
    assert row["measured_fpr"] == fpr.rate
    assert (row["measured_fpr_low"], row["measured_fpr_high"]) == fpr.interval
    assert row["estimated_fpr"] == again.estimated_fpr
    assert row["mean_probe_load"] == again.mean_probe_load
    assert row["hit_rate"] == again.hit_rate
    assert row["capacity_failures"] == sum(again.capacity_failures)
    assert row["mean_load_factor"] == sum(again.load_factors) / len(again.load_factors)
    seconds = (again.end_ms - again.start_ms) / 1000
    deltas = again.delta_table()
    assert row["simulated_seconds"] == seconds
    assert row["images_per_second"] == pytest.approx(deltas["images"].sum() / seconds)
    assert row["bytes_per_second"] == pytest.approx(deltas["frame_bytes"].sum() / seconds)
    assert row["buckets_per_dc"] == w.config.ckf_config().bucket_count()


def test_the_charts_draw_the_runs_tables(workload: ck.Workload) -> None:
    w = ck.viz.what_if(workload, requests=1200, **SMALL)
    tables = w.chart_tables()
    result = w.result
    assert tables["fpr"]["absent_probes"].sum() == result.absent_probes
    assert tables["fpr"]["false_positives"].sum() == result.false_positives
    assert (tables["fpr"]["measured_fpr_low"] <= tables["fpr"]["measured_fpr"]).all()
    assert tables["load"].height == result.health_table().height
    churn = tables["churn"]
    width = int(churn["bin_seconds"][0])
    assert width == 1  # 1,200 requests span fewer seconds than the bins allow
    assert churn["images_per_second"].sum() * width == result.delta_table()["images"].sum()
    assert churn["seconds"].to_list() == list(range(0, churn.height * width, width))
    assert tables["depth"].equals(result.depth_table())


def _canonical(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with each dataset named by its sorted rows (a chart's polars ``group_by`` may
    list the same rows in another order, and altair names a dataset by its rows' hash)."""
    names = {
        name: json.dumps(sorted(json.dumps(r, sort_keys=True) for r in rows))
        for name, rows in spec["datasets"].items()
    }
    text = json.dumps(spec, sort_keys=True)
    for name, canonical in names.items():
        text = text.replace(json.dumps(name), json.dumps(canonical))
    out: dict[str, Any] = json.loads(text)
    out["datasets"] = sorted(out["datasets"])
    return out


def test_a_redraws_spec_is_the_altair_charts_own(workload: ck.Workload) -> None:
    """What a redraw sends, assembled from the four charts' own specs, is the altair chart
    they compose (whose ``to_dict`` validates it against Vega-Lite's schema)."""
    w = ck.viz.what_if(workload, requests=1200, **SMALL)
    for knobs in ({}, {"dcs": 5, "policy": "exact"}, {"requests": 1}):
        w.update(**knobs)
        spec = w.spec()
        assert _canonical(spec) == _canonical(w.chart().to_dict())
        (brush,) = spec["params"]
        assert brush["name"] == W.WINDOW and brush["select"]["type"] == "interval"
        text = json.dumps(spec)
        for view in brush["views"]:  # the views the brush is drawn in are there
            assert f'"name": "{view}"' in text, view
        assert text.count('{"param": "window"}') == 3  # and each filters by it
        for name, rows in spec["datasets"].items():
            assert len(rows) <= MAX_ROWS, name
            numbers = [v for r in rows for v in r.values() if isinstance(v, int)]
            assert all(abs(v) < 2**53 for v in numbers), name  # no u64 reaches Vega


# ------------------------------------------------------------------------------------- knobs


def test_start_values_are_kept_and_the_rest_are_the_defaults(workload: ck.Workload) -> None:
    start: dict[str, object] = {
        "expected_blocks_per_dc": 2048,
        "max_kicks": 64,
        "publish_every_n_events": 4,
        "verification_window": 3,
        "policy": "random",
        "dcs": 3,
        "requests": 900,
    }
    w = ck.viz.what_if(workload, workers_per_dc=2, capacity_blocks=512, **start)
    assert w.knobs == start
    assert (w.config.workers_per_dc, w.config.capacity_blocks) == (2, 512)  # fixed
    assert w.table.select(list(start)).row(0, named=True) == start
    w.update(dcs=1)
    assert (w.config.workers_per_dc, w.config.capacity_blocks) == (2, 512)  # still
    plain = ck.viz.what_if(workload.head(120))
    defaults = ck.SimulatorConfig()
    assert plain.config == defaults
    assert plain.requests == 120  # the whole trace: shorter than the default prefix
    assert ck.viz.what_if(workload).requests == min(W.DEFAULT_REQUESTS, len(workload))


def test_a_path_reads_the_trace(tmp_path: Path) -> None:
    lines = TRACE.read_text().splitlines()[:40]
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(lines) + "\n")
    w = ck.viz.what_if(short, dcs=2)
    assert len(w.workload) == 40 and w.requests == 40
    assert w.result.requests == 40


@pytest.mark.parametrize(
    ("knobs", "field", "words"),
    [
        ({"expected_blocks": 2048}, "expected_blocks", "did you mean expected_blocks_per_dc"),
        ({"kicks": 3}, "kicks", "not a knob"),
        ({"dcs": 17}, "dcs", "1..=16"),
        ({"requests": 0}, "requests", "1..=1,500"),
        ({"requests": 1501}, "requests", "1..=1,500"),
        ({"requests": 2.5}, "requests", "an integer"),
        ({"policy": "fastest"}, "policy", "must be one of"),
        ({"expected_blocks_per_dc": -1}, "expected_blocks_per_dc", ">= 0"),
    ],
)
def test_a_knob_out_of_range_is_named(
    workload: ck.Workload, knobs: dict[str, object], field: str, words: str
) -> None:
    with raises_variant(SimulationError, "Config", match=words) as info:
        ck.viz.what_if(workload, **knobs)
    assert info.value.field == field
    w = ck.viz.what_if(workload, requests=300, dcs=2)
    before = (w.config, w.requests, w.table)
    with raises_variant(SimulationError, "Config", match=words):
        w.update(**knobs)
    assert (w.config, w.requests, w.table) == before  # nothing half set


def test_a_producer_knob_out_of_range_is_the_producers_error(workload: ck.Workload) -> None:
    with pytest.raises(CkfError, match="max_kicks"):
        ck.viz.what_if(workload, max_kicks=0)
    with pytest.raises(CkfError, match="verification_window"):
        ck.viz.what_if(workload, verification_window=9)


# -------------------------------------------------------------------------------- debouncing


class Timers:
    """``schedule`` for ``LatestWins``: timers that fire only when the test says so."""

    def __init__(self) -> None:
        self.made: list[FakeTimer] = []

    def __call__(self, delay: float, call: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(delay, call)
        self.made.append(timer)
        return timer

    @property
    def live(self) -> list[FakeTimer]:
        return [t for t in self.made if not t.cancelled and not t.fired]

    def fire(self) -> None:
        """Every live timer goes off (as if its delay had passed)."""
        for timer in self.live:
            timer.fire()


@dataclasses.dataclass
class FakeTimer:
    delay: float
    call: Callable[[], None]
    cancelled: bool = False
    fired: bool = False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        self.fired = True
        self.call()


class Jobs:
    """``submit`` for ``LatestWins``: jobs held until the test runs them."""

    def __init__(self) -> None:
        self.queue: list[Callable[[], None]] = []

    def __call__(self, job: Callable[[], None]) -> None:
        self.queue.append(job)

    def run(self) -> None:
        while self.queue:
            self.queue.pop(0)()


class Recorder:
    """The work: records each value run and how many runs overlapped."""

    def __init__(self) -> None:
        self.ran: list[int] = []
        self.running = 0
        self.most = 0
        self.during: Callable[[int], None] = lambda _value: None

    def __call__(self, value: int) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            self.during(value)
            self.ran.append(value)
        finally:
            self.running -= 1


@pytest.fixture
def debounced() -> Iterator[tuple[W.LatestWins[int], Timers, Jobs, Recorder]]:
    timers, jobs, work = Timers(), Jobs(), Recorder()
    yield W.LatestWins(work, delay=0.15, schedule=timers, submit=jobs), timers, jobs, work


def test_a_burst_of_moves_runs_once_with_the_last(
    debounced: tuple[W.LatestWins[int], Timers, Jobs, Recorder],
) -> None:
    runner, timers, jobs, work = debounced
    for value in (1, 2, 3):
        runner.push(value)
    assert [t.delay for t in timers.made] == [0.15] * 3
    assert len(timers.live) == 1  # each move restarts the wait
    assert work.ran == [] and runner.busy
    timers.fire()
    jobs.run()
    assert work.ran == [3]
    assert not runner.busy and not timers.live


def test_a_move_during_a_run_is_run_after_it_never_beside_it(
    debounced: tuple[W.LatestWins[int], Timers, Jobs, Recorder],
) -> None:
    runner, timers, jobs, work = debounced

    def moved_during_the_run(value: int) -> None:
        if value == 1:  # the slider moves twice and settles while 1 runs
            runner.push(2)
            runner.push(3)
            timers.fire()  # its wait is over before the run is
            assert jobs.queue == []  # no second run beside this one

    work.during = moved_during_the_run
    runner.push(1)
    timers.fire()
    jobs.run()
    assert work.ran == [1, 3]  # 3 picked up when 1 ended; 2 was superseded
    assert work.most == 1
    assert not runner.busy


def test_a_move_still_waiting_when_a_run_ends_is_not_lost(
    debounced: tuple[W.LatestWins[int], Timers, Jobs, Recorder],
) -> None:
    runner, timers, jobs, work = debounced
    work.during = lambda value: runner.push(9) if value == 1 else None  # its wait not over
    runner.push(1)
    timers.fire()
    jobs.run()
    assert work.ran == [1] and runner.busy  # 9 waits for its timer, not run early
    timers.fire()
    jobs.run()
    assert work.ran == [1, 9] and not runner.busy


def test_a_timer_called_off_too_late_does_nothing(
    debounced: tuple[W.LatestWins[int], Timers, Jobs, Recorder],
) -> None:
    runner, timers, jobs, work = debounced
    runner.push(1)
    runner.push(2)
    stale, fresh = timers.made
    assert stale.cancelled
    stale.fire()  # a thread timer may go off after cancel() when it was already due
    jobs.run()
    assert work.ran == []
    fresh.fire()
    jobs.run()
    assert work.ran == [2]


def test_a_failed_run_lets_the_next_value_run(
    debounced: tuple[W.LatestWins[int], Timers, Jobs, Recorder],
) -> None:
    runner, timers, jobs, work = debounced

    def fail_on_one(value: int) -> None:
        if value == 1:
            raise RuntimeError("on purpose")

    work.during = fail_on_one
    runner.push(1)
    timers.fire()
    with pytest.raises(RuntimeError, match="on purpose"):
        jobs.run()
    runner.push(2)
    timers.fire()
    jobs.run()
    assert work.ran == [2]


def test_with_real_threads_the_last_of_many_moves_runs_last_and_alone() -> None:
    """Thread timers and runs in the timers' threads, as in a kernel: many moves from several
    threads, and the last value pushed is the last run, with never two runs at once."""
    work = Recorder()
    lock = threading.Lock()
    done = threading.Event()
    work.during = lambda value: done.set() if value == -1 else None
    runner: W.LatestWins[int] = W.LatestWins(work, delay=0.001)

    def move(base: int) -> None:
        for i in range(200):
            with lock:
                runner.push(base + i)

    movers = [threading.Thread(target=move, args=(1000 * k,)) for k in range(4)]
    for t in movers:
        t.start()
    for t in movers:
        t.join()
    runner.push(-1)
    assert done.wait(60)  # a hang guard, not a timing
    for _ in range(6000):  # the run of -1 ends, and nothing after it
        if not runner.busy:
            break
        threading.Event().wait(0.01)
    assert not runner.busy
    assert work.ran[-1] == -1
    assert work.most == 1


# -------------------------------------------------------------------------------- the widget


def _controls(box: Any) -> dict[str, Any]:
    """The explorer's controls by their description (the knob's name)."""
    found: dict[str, Any] = {}
    stack = [box]
    while stack:
        widget = stack.pop()
        stack += list(getattr(widget, "children", ()))
        if getattr(widget, "description", "") in W.SLIDERS:
            found[widget.description] = widget
    return found


def test_the_sliders_start_at_the_knobs_and_move_them(workload: ck.Workload, live: None) -> None:
    timers, jobs = Timers(), Jobs()
    config, requests = W.apply_knobs(ck.SimulatorConfig(), 800, len(workload), SMALL)
    w = W.WhatIf(workload, config, requests, schedule=timers, submit=jobs)
    runs: list[ck.SimulatorConfig] = []
    simulate = w._simulate

    def counted(config: ck.SimulatorConfig, requests: int) -> Any:
        runs.append(config)
        return simulate(config, requests)

    w._simulate = counted  # type: ignore[method-assign]
    box = w.widget()
    assert w.widget() is box
    controls = _controls(box)
    assert set(controls) == set(W.SLIDERS)
    assert {name: c.value for name, c in controls.items()} == w.knobs
    stops = [v for _, v in controls["expected_blocks_per_dc"].options]
    assert stops == [128, 256, 512, 1024, 0, *(2**e for e in range(12, 16))]  # 1/16 to 16x 2,048
    view = box.children[-1]
    drawn = view.spec
    assert drawn == w.spec()

    controls["expected_blocks_per_dc"].value = 1024  # the frontend moves two sliders
    controls["dcs"].value = 3
    assert runs == [] and len(timers.live) == 1  # waiting for the moves to settle
    timers.fire()
    jobs.run()
    assert len(runs) == 1 and (runs[0].expected_blocks_per_dc, runs[0].dcs) == (1024, 3)
    assert w.knobs["expected_blocks_per_dc"] == 1024 and w.knobs["dcs"] == 3
    assert view.spec != drawn and view.spec == w.spec()  # redrawn in place
    headline = box.children[1].value
    assert "3 DCs" in headline and f"{w.table['capacity_failures'][0]:,} capacity" in headline

    table = w.update(expected_blocks_per_dc=4096, requests=600)  # without a browser
    assert controls["expected_blocks_per_dc"].value == 4096
    assert controls["requests"].value == 600
    assert timers.live == [] and len(runs) == 2  # the sliders moved, nothing scheduled
    assert table["requests"][0] == 600 and view.spec == w.spec()


def test_a_slider_value_that_cannot_run_says_why(workload: ck.Workload, live: None) -> None:
    timers, jobs = Timers(), Jobs()
    config, requests = W.apply_knobs(ck.SimulatorConfig(), 300, len(workload), SMALL)
    w = W.WhatIf(workload, config, requests, schedule=timers, submit=jobs)
    box = w.widget()
    w.on_slider()  # a push of the controls as they stand, then one that cannot run
    w._runner.push({**w.knobs, "requests": 10**6})
    timers.fire()
    jobs.run()
    assert "not simulated" in box.children[1].value and "requests" in box.children[1].value
    _controls(box)["dcs"].value = 4
    timers.fire()
    jobs.run()
    assert w.config.dcs == 4 and "4 DCs" in box.children[1].value


def test_without_a_kernel_it_shows_a_static_picture(
    workload: ck.Workload, static: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import altair as alt
    import IPython.display

    shown: list[Any] = []
    monkeypatch.setattr(IPython.display, "display", lambda *parts, **_: shown.extend(parts))
    w = ck.viz.what_if(workload, requests=600, **SMALL)
    w._ipython_display_()
    headline, chart = shown
    assert w.table["hit_rate"][0] > 0
    assert "600 requests, 2 DCs, ckf" in headline.data
    assert isinstance(chart, alt.VConcatChart)
    with alt.renderers.enable("svg"):
        bundle = chart._repr_mimebundle_()
    svg = bundle[0] if isinstance(bundle, tuple) else bundle
    assert "<svg" in svg["image/svg+xml"]
    assert w._box is None  # no widget made
    assert repr(w).startswith("WhatIf(600 of 1,500 requests; expected_blocks_per_dc=0")
    assert "measured FPR" in repr(w)


def test_the_surface_lists_it() -> None:
    assert {"what_if", "WhatIf"} <= set(ck.viz.__all__)
    assert ck.viz.what_if is W.what_if and ck.viz.WhatIf is W.WhatIf
