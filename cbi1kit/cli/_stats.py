"""``cbi1kit stats``: CF.INFO-style figures of one replayed lane."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from cbi1kit._text import table, wrapped
from cbi1kit.cli._common import (
    U64,
    answer_args,
    expected_format,
    format_args,
    json_answer,
    ranged,
    violations_note,
)
from cbi1kit.cli._lanes import (
    at_arg,
    lane_args,
    never_installed,
    pick_lane,
    replay_source,
    unanswerable,
)
from cbi1kit.errors import LaneError, LaneVariant

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def run(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._global import lane_at_moment
    from cbi1kit.ckf._addressing import CkfAddressing
    from cbi1kit.ckf._stats import lane_stats
    from cbi1kit.hashing._dc_names import dc_fields

    fmt = expected_format(args)
    report = replay_source(args.capture, fmt, not args.no_progress, history=args.at is not None)
    lane = pick_lane(report, args.capture, args.dc, args.model)
    if lane.final_lane is None:
        raise never_installed(args.capture, lane.violations or report.violations)
    lane_fmt = fmt or lane.format
    try:
        sequence, words, why = lane_at_moment(report, lane, args.at)
        if words is None:
            raise LaneError(LaneVariant.NotReady, message=f"at {args.at} the lane was {why}")
    except LaneError as exc:
        raise unanswerable(str(exc), {args.capture: report}) from None
    stats = lane_stats(
        words,
        addressing=CkfAddressing(seed=lane_fmt.seed, bucket_count=lane_fmt.bucket_count),
        fpr_probes=args.fpr_probes,
        seed=args.probe_seed,
    )
    figures = {
        "sequence": sequence,
        **dc_fields(lane.dc_id),
        "seed": f"0x{lane_fmt.seed:016x}",
        **{k: v for k, v in stats.as_dict().items() if v is not None},
    }
    if args.json:
        if stats.fpr is not None:
            figures["measured_fpr_interval"] = stats.fpr.INTERVAL
        return json_answer(figures, report)
    # the measurement as one line: rate, counts and interval read together
    fpr_columns = {} if stats.fpr is None else stats.fpr.columns()
    measured: list[tuple[str, object]] = (
        [] if stats.fpr is None else [("measured_fpr", str(stats.fpr))]
    )
    rows = [(k, v) for k, v in figures.items() if k not in fpr_columns]
    print(wrapped(f"== {args.capture} at sequence {sequence}"))
    print(table(rows + measured, ("stat", "value")))
    return violations_note(report, "stream")


def register(sub: Commands) -> None:
    """``cbi1kit stats``."""
    p = sub.add_parser(
        "stats",
        help="filter stats (load, FPR, ...) of the replayed lane at the end or at a sequence",
        description="Replay, then report CF.INFO-style figures of one lane (--dc and --model "
        "pick it in a capture of several; `cbi1kit view` shows every lane at a time).",
    )
    p.add_argument("capture", type=Path, help="kvrcap capture, grpcurl JSON or CBI1 frames")
    at_arg(p)
    lane_args(p)
    p.add_argument(
        "--fpr-probes",
        type=ranged(0, 10_000_000),
        default=100_000,
        help="random probes for the measured FPR, made distinct (0..=10^7)",
    )
    p.add_argument("--probe-seed", type=U64, default=0, help="seed of the FPR probes")
    format_args(p)
    answer_args(p, "figures")
    p.set_defaults(handler=run)
