"""``cbi1kit view``: the global view, a consumer table per indexer domain."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from cbi1kit._text import wrapped
from cbi1kit.cli._common import (
    EXIT_USAGE,
    answer_args,
    expected_format,
    format_args,
    json_answer,
    violations_note,
)
from cbi1kit.cli._lanes import max_age_arg, moment, replay_source, unanswerable
from cbi1kit.errors import CliError, IdentityError, LaneError, LaneVariant

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def run(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._global import build_global_view

    fmt = expected_format(args)
    report = replay_source(args.capture, fmt, not args.no_progress, history=True)
    try:
        view = build_global_view(report, model=args.model, at=args.at, max_age=args.max_age)
    except IdentityError as exc:  # a model no pool of the catalog serves
        raise CliError(str(exc), EXIT_USAGE) from None
    except LaneError as exc:
        if exc.variant in (
            LaneVariant.NoCatalog,
            LaneVariant.TimeNotRecorded,
        ):  # a question this capture can't answer
            raise unanswerable(str(exc), {args.capture: report}) from None
        raise  # the manifest's rules: invalid input (exit 1)
    if args.json:
        return json_answer({"capture": str(args.capture), **view.to_dict()}, report)
    print(wrapped(f"== {args.capture}"))
    print(view.text())
    return violations_note(report, gap="\n")


def register(sub: Commands) -> None:
    """``cbi1kit view``."""
    p = sub.add_parser(
        "view",
        help="the global view: the consumer table per indexer domain at a sequence or a time",
        description="Replay a capture, then build what a global router consults at one moment: "
        "for the model (every pool without --model) the pools the capture's catalog advertised "
        "then, one consumer table per indexer domain (at most 16 DC lanes each, as upstream's "
        "manifest rules require), each lane ready with the words its session held or not, and "
        "where they came from (producer incarnation.generation, sequence, receive time, "
        "stream). Without --at: every lane's final words.",
        epilog="--at takes a sequence (each lane right after its own sequence N), an ISO 8601 "
        "time with a zone (2026-11-30T12:00:00Z) or an offset after the capture's first "
        "message (+90s; ns, us, ms, s, m, h). At a time, every message received by then is "
        "applied, and a lane whose session had ended (a violation, its stream closed, a new "
        "stream not yet installed) is not ready.",
    )
    p.add_argument("capture", type=Path, help="kvrcap capture (or grpcurl JSON, CBI1 frames)")
    p.add_argument("--model", help="a model or alias the catalog's pools register")
    p.add_argument("--at", type=moment, help="a sequence, 2026-11-30T12:00:00Z or +90s")
    max_age_arg(p)
    format_args(p)
    answer_args(p, "view")
    p.set_defaults(handler=run)
