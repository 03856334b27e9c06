"""``cbi1kit replay``: a capture replayed with the consumer's rules, per lane."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from cbi1kit._json import dumps as to_json
from cbi1kit._text import wrapped
from cbi1kit.cli._common import answer_args, at_least, expected_format, format_args, verdict
from cbi1kit.cli._lanes import replay_source

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def run(args: argparse.Namespace) -> int:
    fmt = expected_format(args)
    report = replay_source(args.capture, fmt, not args.no_progress)
    if args.json:
        print(to_json(report.to_dict(), indent=2))
    else:
        print(wrapped(f"== {args.capture}"))
        print(report.text(args.max_violations))
    return verdict(report.ok)


def register(sub: Commands) -> None:
    """``cbi1kit replay``."""
    p = sub.add_parser(
        "replay",
        help="capture → validation report with the consumer's rules, per lane",
        description="Replay a capture (or grpcurl JSON, or bare frames) with the Global View "
        "consumer's rules: a lane per pool, a session per stream, results per lane; exit 1 if "
        "any rule is broken or the source is damaged.",
    )
    p.add_argument("capture", type=Path, help="kvrcap capture, grpcurl JSON or CBI1 frames")
    format_args(p)
    p.add_argument("--max-violations", type=at_least(0), default=20, help="violations listed")
    answer_args(p, "report")
    p.set_defaults(handler=run)
