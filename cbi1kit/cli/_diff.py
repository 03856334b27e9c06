"""``cbi1kit diff``: two lanes bucket by bucket."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cbi1kit._json import dumps as to_json
from cbi1kit._text import wrapped
from cbi1kit.cli._common import (
    EXIT_USAGE,
    answer_args,
    at_least,
    cannot_read,
    check_source,
    reading,
    verdict,
)
from cbi1kit.cli._lanes import moment, replay_source, unanswerable, usage_if_unanswerable
from cbi1kit.errors import CaptureError, Cbi1kitError, CliError, LaneVariant

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def _lane_input(path: Path) -> Any:
    """A diff side given on the command line, checked before any replay: a ``.npy`` lane
    (loaded; unreadable: exit 3, no lane: exit 1) or a readable capture (its path)."""
    from cbi1kit.analysis._diff import NPY_MAGIC, load_lane

    with reading(path), open(path, "rb") as f:
        npy = path.suffix == ".npy" or f.read(len(NPY_MAGIC)) == NPY_MAGIC
    if not npy:
        check_source(path)
        return path
    try:
        return load_lane(path)
    except CaptureError as exc:
        raise cannot_read(path, exc) from None


def run(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._shorthands import diff

    b_path: Path = args.b if args.b is not None else args.a
    sides = [_lane_input(args.a), _lane_input(b_path)]
    picks = {
        "--dc": args.dc,
        "--dc-a": args.dc_a,
        "--dc-b": args.dc_b,
        "--model": args.model,
        "--at": args.at,
        "--at-a": args.at_a,
        "--at-b": args.at_b,
    }
    if not any(isinstance(side, Path) for side in sides) and (
        given := [flag for flag, value in picks.items() if value is not None]
    ):  # two .npy lanes: nothing to pick a lane or a moment in
        raise CliError(
            f"{', '.join(given)}: picks a lane or a moment of a capture, and both sides are .npy",
            EXIT_USAGE,
        )
    reports: dict[Path, Any] = {}
    for i, side in enumerate(sides):
        if isinstance(side, Path):
            if side not in reports:
                reports[side] = replay_source(side, None, not args.no_progress, history=True)
            sides[i] = reports[side]
    try:
        result = diff(
            sides[0],
            sides[1],
            dc=args.dc,
            dc_a=args.dc_a,
            dc_b=args.dc_b,
            model=args.model,
            at=args.at,
            at_a=args.at_a,
            at_b=args.at_b,
            labels=(args.a.name, b_path.name),
        )
    except Cbi1kitError as exc:
        usage_if_unanswerable(exc, reports)
        if (
            exc.variant is LaneVariant.NotReady
        ):  # nothing held then: a moment this lane cannot answer
            raise unanswerable(str(exc), reports) from None
        raise
    ok = all(r.ok for r in reports.values())
    if args.json:
        print(to_json({**result.to_dict(args.limit), "ok": ok}, indent=2))
    else:
        print(wrapped(result.text(args.limit), " " * 9))
        if not ok:
            print("note: a capture has violations; see `cbi1kit replay`")
    return verdict(ok)


def register(sub: Commands) -> None:
    """``cbi1kit diff``."""
    p = sub.add_parser(
        "diff",
        help="two lanes bucket by bucket: captures, DCs, moments, .npy words",
        description="Compare two lanes: two captures, two DCs of one capture (--dc-a/--dc-b), "
        "one lane at two moments (--at-a/--at-b), or a lane's words saved as .npy (a producer's "
        "lane against the consumer's). Lists the buckets whose words differ, each word in hex "
        "and the fingerprints removed and added, with the counts.",
        epilog="B defaults to A. --dc and --at set both sides; --dc-a/--dc-b and --at-a/--at-b "
        "one side. --at as for `cbi1kit view`: a sequence aligns each lane at its own sequence, "
        "a time or +offset at what it had received by then. Lanes of different formats cannot "
        "be compared (exit 1).",
    )
    p.add_argument("a", type=Path, metavar="A", help="a capture (or CBI1 frames) or a .npy lane")
    p.add_argument("b", type=Path, nargs="?", metavar="B", help="another (default: A again)")
    p.add_argument(
        "--dc",
        metavar="DC|POOL",
        help="the lane of both sides: a DC (its id in hex or its name) or a pool (its key)",
    )
    p.add_argument("--dc-a", metavar="DC|POOL", help="the lane of side A")
    p.add_argument("--dc-b", metavar="DC|POOL", help="the lane of side B")
    p.add_argument("--model", metavar="M", help="among the pools the catalog advertises for M")
    p.add_argument("--at", type=moment, metavar="SEQ|ISO|+90s", help="the moment of both sides")
    p.add_argument("--at-a", type=moment, metavar="X", help="the moment of side A")
    p.add_argument("--at-b", type=moment, metavar="Y", help="the moment of side B")
    p.add_argument(
        "--limit", type=at_least(0), default=20, metavar="N", help="buckets listed (default 20)"
    )
    answer_args(p, "diff")
    p.set_defaults(handler=run)
