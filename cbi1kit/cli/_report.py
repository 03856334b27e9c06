"""``cbi1kit report``: a capture's offline HTML report."""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from cbi1kit._extras import missing
from cbi1kit._files import unwritable
from cbi1kit.cli._common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    check_regular_file,
    check_source,
    no_notebooks,
    quiet_arg,
)
from cbi1kit.cli._lanes import lane_args, lane_choice
from cbi1kit.errors import CliError, IdentityError, LaneError, LaneVariant

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def build(
    capture: Path,
    out: Path,
    trace: Path | None,
    notebooks: Path | None,
    quiet: bool,
    *,
    force: bool,
    executed: Any = None,
    dc: str | None = None,
    model: str | None = None,
) -> Any:
    from cbi1kit.viz._report import build_report

    check_source(capture)
    if trace is not None:
        check_regular_file(trace)
    # vl-convert draws the charts; the rest of the extra runs the notebooks
    needs = missing("notebooks", None if notebooks is not None else ("vl_convert",))
    problems = [needs] if needs else []
    if notebooks is not None and not notebooks.is_dir():
        problems.append(str(no_notebooks(notebooks, "give --notebooks DIR; or --no-notebooks")))
    if problems:  # everything that stands in the way, at once
        raise CliError("; ".join(problems), EXIT_USAGE if needs else EXIT_UNREADABLE)

    def say(msg: str) -> None:
        if not quiet:
            print(f"   {msg}", file=sys.stderr, flush=True)

    try:
        return build_report(
            capture,
            out,
            trace=trace,
            notebooks_dir=notebooks,
            progress=say,
            overwrite=force,
            executed=executed,
            dc=dc,
            model=model,
        )
    except (LaneError, IdentityError) as exc:
        several = isinstance(exc, LaneError) and exc.variant is LaneVariant.SeveralLanes
        raise lane_choice(capture, exc, several=several) from None
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        raise unwritable([out], exc) from None


#: what a write that fails for want of room or rights says: the output is named
_WRITE_ERRNOS: Final = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def run(args: argparse.Namespace) -> int:
    notebooks = None if args.no_notebooks else args.notebooks
    built = build(
        args.capture,
        args.output,
        args.trace,
        notebooks,
        args.no_progress,
        force=args.force,
        dc=args.dc,
        model=args.model,
    )
    print(f"{built.index}: {len(built.pngs)} charts, {len(built.notebooks)} notebooks")
    for kind, png in built.pngs.items():
        print(f"  {kind:<16} {png}")
    if built.violations:  # charted all the same; the capture is not whole, as replay says
        print(
            f"note: the capture has {built.violations} violation(s), first: "
            f"{built.first_violation}; see `cbi1kit replay`",
            file=sys.stderr,
        )
        return EXIT_INVALID
    return EXIT_OK


def register(sub: Commands) -> None:
    """``cbi1kit report``."""
    p = sub.add_parser(
        "report",
        help="capture → offline HTML report: every chart kind, PNGs, the executed notebooks",
        description="Write an offline HTML report of a capture: every chart kind as SVG and "
        "PNG, and the notebooks run with the capture as their parameter (--no-notebooks: "
        "the charts alone). It opens without a network.",
    )
    p.add_argument("capture", type=Path, help="kvrcap capture")
    p.add_argument("-o", "--output", type=Path, default=Path("reports"), help="report folder")
    p.add_argument(
        "--trace",
        type=Path,
        help="Mooncake trace for the prefix-depth chart (a separate simulation of it)",
    )
    p.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="notebooks folder")
    p.add_argument("--no-notebooks", action="store_true", help="charts only, no notebooks")
    lane_args(p)  # of a capture of several lanes (charts only: a notebook charts one lane)
    p.add_argument("--force", action="store_true", help="overwrite an existing report")
    quiet_arg(p)
    p.set_defaults(handler=run)
