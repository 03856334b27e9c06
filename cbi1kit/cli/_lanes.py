"""Replaying a source for a command, and picking its lane and moment: what ``stats``,
``view``, ``explain``, ``diff`` and ``report`` share, with one answer for a question a capture
cannot answer."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from cbi1kit.cli._common import EXIT_INVALID, EXIT_USAGE, check_source, progress_bar, seconds
from cbi1kit.errors import (
    Cbi1kitError,
    CliError,
    IdentityError,
    IdentityVariant,
    LaneError,
    LaneVariant,
)
from cbi1kit.wire._format import FilterFormat
from cbi1kit.wire._rules import SOURCE_DAMAGED


def replay_source(
    path: Path | Any, fmt: FilterFormat | None, progress: bool, *, history: bool = False
) -> Any:
    """Replay any frame source (a path, or a ``Capture`` already open) as the library does: a
    capture's damage is reported where it is and reading goes on after it; unreadable sources
    raise CliError (exit 3). Per-record events are counted, not kept, and the history
    ``lane_at`` reads is kept only for ``stats --at``."""
    from cbi1kit.analysis._capture import Capture, open_capture

    if not isinstance(path, Capture):
        check_source(path)
    capture = path if isinstance(path, Capture) else open_capture(path, keep_tables=False)
    name = Path(str(getattr(capture.source, "name", capture.source))).name
    with progress_bar(f"replay {name}", capture.size(), progress, unit="bytes") as advance:
        return capture.replay(
            expected_format=fmt, keep_history=history, keep_events=False, progress=advance
        )


#: the options that take a moment (``moment``)
MOMENT_OPTIONS: Final = ("--at", "--at-a", "--at-b")


def moments_joined(argv: Sequence[str]) -> list[str]:
    """``--at -5s`` as ``--at=-5s``: argparse takes a value that starts with ``-`` and a digit
    for an option (a negative number alone it lets through), so the moment's own parser never
    saw it to say what it is."""
    out: list[str] = []
    for word in argv:
        if out and out[-1] in MOMENT_OPTIONS and word[:1] == "-" and word[1:2].isdigit():
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


def moment(text: str) -> Any:
    """``--at``: a sequence, an ISO 8601 time with a zone, or +offset (checked at parse time)."""
    from cbi1kit.analysis._global import parse_at

    try:
        return parse_at(text)
    except LaneError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def at_arg(p: argparse.ArgumentParser) -> None:
    """``--at``: the moment of the lane a command reads."""
    p.add_argument(
        "--at", type=moment, metavar="SEQ|ISO|+90s", help="a sequence, a time or an offset"
    )


def max_age_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-age",
        type=seconds(),
        metavar="SECONDS",
        help="the router's overlap_max_age: mark a ready lane stale (the scorer gives it no "
        "score) when its last snapshot, delta or heartbeat is older than this at the moment",
    )


def lane_args(p: argparse.ArgumentParser) -> None:
    """``--dc`` and ``--model``: how every command that reads one lane is told which."""
    p.add_argument(
        "--dc",
        metavar="DC|POOL",
        help="the lane of this DC (its id in hex or its name) or pool (its key, as printed)",
    )
    p.add_argument(
        "--model", metavar="M", help="among the pools the capture's catalog advertises for M"
    )


def pick_lane(report: Any, path: Path, dc: str | None, model: str | None = None) -> Any:
    """The lane ``--dc`` names (a DC's id in hex or name, or a pool key) among ``--model``'s
    pools, or the only one; a usage error naming the lanes otherwise."""
    from cbi1kit.analysis._global import model_pools

    if not report.lanes:
        raise never_installed(path, report.violations)
    try:
        pools = None if model is None else model_pools(report, model)
        return report.lane(dc, pools=pools)
    except (LaneError, IdentityError) as exc:
        several = len(report.lanes) > 1
        raise lane_choice(path, exc, several=several, asked={path: report}) from None


def never_installed(path: Path, violations: Sequence[Any]) -> CliError:
    """Exit 1 for a lane with no snapshot, naming the first violation that kept it out (a
    wrong --seed or --buckets, damage): 'never installed' alone sent the user looking."""
    from cbi1kit.analysis._events import never_installed

    return CliError(f"{path}: {never_installed(violations)}", EXIT_INVALID)


def lane_choice(
    path: Path,
    exc: LaneError | IdentityError,
    *,
    several: bool,
    asked: Mapping[Path, Any] | None = None,
) -> CliError:
    """The usage error of a lane ``--dc`` did not pick (out of ``several``, a hint)."""
    hint = " (--dc, --model); `cbi1kit view` shows every lane" if several else ""
    return unanswerable(f"{path}: {exc}{hint}", asked or {})


def unanswerable(message: str, asked: Mapping[Path, Any]) -> CliError:
    """A question the captures ``asked`` (path: replay report) cannot answer (no such lane, no
    catalog, a moment not replayed): a usage error (exit 2), unless one of them is damaged,
    which may be why: then exit 1 naming it and its first damage (the lane, the catalog or the
    moment may be what it took)."""
    for path, report in asked.items():
        damage = [v for v in report.violations if v.rule == SOURCE_DAMAGED]
        if not damage:
            continue
        first = damage[0]
        return CliError(
            f"{message}; {path} is damaged ({len(damage)} damaged range(s), first: "
            f"{first.describe()}), which may be why",
            EXIT_INVALID,
        )
    return CliError(message, EXIT_USAGE)


#: what a capture cannot answer (exit 2, as for ``view``): the model, its catalog, its domain
UNANSWERABLE: Final[Mapping[type[Cbi1kitError], frozenset[StrEnum]]] = {
    IdentityError: frozenset({IdentityVariant.UnknownModel, IdentityVariant.NotALora}),
    LaneError: frozenset(
        {
            LaneVariant.NoCatalog,
            LaneVariant.TimeNotRecorded,
            LaneVariant.SeveralDomains,
            LaneVariant.NoSuchLane,
            LaneVariant.SeveralLanes,
        }
    ),
}


def usage_if_unanswerable(exc: Cbi1kitError, asked: Mapping[Path, Any]) -> None:
    if exc.variant in UNANSWERABLE.get(exc.family(), frozenset()):
        raise unanswerable(str(exc), asked) from None
