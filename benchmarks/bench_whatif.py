"""The what-if explorer's redraw (``ck.viz.what_if``, #41): a slider's value in, the four
charts' data out.

Figure 1: ``w.update(expected_blocks_per_dc=v)`` (the compiled simulation of a 3,000-request
prefix of the Mooncake trace on notebook 06's pools, 4 DCs x 2 workers x 2,048 blocks, CKF
routing, and the headline figures) plus ``w.spec()`` (the four charts' tables and the Vega-Lite
spec with their rows: what the live view is sent), ``v`` toggling between the slider's default
(0: sized for the members, 4,096) and 8,192 so that every call simulates afresh; against the
simulation alone on the same toggle (``Simulator(config).run(prefix)``), the least any redraw
does. Goal: at most 0.5 s by CPU median.

Figure 2: the same at the stop a user reaches first going down, 2,048 (load ~0.96: nearly
every insert kicks, the slowest simulation of the slider); no goal. Beside it, what the
composed altair chart costs (``w.chart().to_dict()``, validated: what assigning a chart to the
widget would cost, and why a redraw sends the spec instead).

Alternating rounds (``_harness``).

    .venv/bin/python benchmarks/bench_whatif.py [--quick] [--rounds N]
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

from _harness import TRACE, Comparison, Report, compare, measure, parser

from cbi1kit.sim._engine import Simulator
from cbi1kit.sim._simulator import SimulatorConfig
from cbi1kit.sim._workload import Workload, read_mooncake
from cbi1kit.viz._whatif import WhatIf, what_if

POOLS = {"dcs": 4, "workers_per_dc": 2, "capacity_blocks": 2048, "policy": "ckf"}


def toggled(values: tuple[int, ...], call: Callable[[int], object]) -> Callable[[], object]:
    """``call`` with the next of ``values`` each time (a slider moved back and forth)."""
    stops = itertools.cycle(values)
    return lambda: call(next(stops))


def redraw(w: WhatIf, values: tuple[int, ...]) -> Callable[[], object]:
    """A slider's move: the run and the figures, then the charts' spec with their rows."""

    def move(v: int) -> object:
        w.update(expected_blocks_per_dc=v)
        return w.spec()

    return toggled(values, move)


def simulate(
    config: SimulatorConfig, prefix: Workload, values: tuple[int, ...]
) -> Callable[[], object]:
    """The same moves' simulations alone."""
    return toggled(
        values,
        lambda v: Simulator(dataclasses.replace(config, expected_blocks_per_dc=v)).run(prefix),
    )


def main() -> None:
    args = parser(__doc__).parse_args()
    report = Report("bench_whatif: a what-if redraw, slider value in, charts' data out", args.quick)
    rounds = args.rounds or (2 if args.quick else 15)
    requests = 500 if args.quick else 3_000
    workload = read_mooncake(TRACE, limit=requests)
    w = what_if(workload, **POOLS)
    prefix = workload.head(requests)
    config = w.config
    for name, values, goal in (
        ("redraw, default <-> 8,192 expected blocks", (0, 8192), 0.5),
        ("redraw, default <-> 2,048 expected blocks", (0, 2048), None),
    ):
        cand, base = compare(
            redraw(w, values), simulate(config, prefix, values), rounds=rounds, min_seconds=0.0
        )
        w.update(expected_blocks_per_dc=values[1])
        tables = {k: v.height for k, v in w.chart_tables().items()}
        load = w.table["mean_load_factor"][0]
        report.figure(
            Comparison(
                f"{name} [{requests:,} requests]",
                cand,
                base,
                "update + spec",
                "the simulation alone",
            ),
            goal_time=goal,
            note=f"at {values[1]:,}: mean load {load:.2f}, the charts' rows {tables} (depth's "
            f"cells are counted in the chart); the redraw adds "
            f"{cand.cpu_median - base.cpu_median:.3f} s to the run",
        )
    composed = measure(lambda: w.chart().to_dict(), rounds=max(2, rounds // 3), min_seconds=0.0)
    spec = measure(w.spec, rounds=max(2, rounds // 3), min_seconds=0.0)
    report.value(
        "the spec, assembled vs composed by altair and validated",
        f"{spec.cpu_median:.3f} s",
        f"{composed.cpu_median:.3f} s",
        composed.cpu_median / spec.cpu_median,
        detail="what a redraw sends vs what assigning the altair chart to the widget costs "
        "(same dict: tests/test_whatif.py)",
    )
    report.done()


if __name__ == "__main__":
    main()
