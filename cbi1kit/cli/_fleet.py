"""``cbi1kit fleet``: many captures into the partitioned dataset as Dask tasks, and fleet
queries over it as Dask computations, on a local cluster (the default) or an existing one
(``--scheduler tcp://HOST:8786``)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cbi1kit._json import dumps as to_json
from cbi1kit._text import table
from cbi1kit.cli._common import (
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    at_least,
    check_dataset_inputs,
    dataset_damage,
    progress_bar,
    ranged,
    seconds,
)
from cbi1kit.errors import CliError

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands

_DEFAULT_WORKERS = 2


#: a local cluster's largest: four worker processes per core (each a Python process of its
#: own; 2**64 of them took the machine's memory)
_MAX_WORKERS = 4 * (os.cpu_count() or 1)


def _client(args: argparse.Namespace) -> AbstractContextManager[Any]:
    """The Dask client the options ask for, closed (with its local cluster) after the command;
    an unreachable scheduler is exit 3 (``ConnectionError``, an ``OSError``)."""
    from cbi1kit.fleet._cluster import client, dashboard_link

    if args.scheduler is not None and args.workers is not None:
        raise CliError("--workers sizes the local cluster: not with --scheduler", EXIT_USAGE)
    try:
        c = client(
            args.scheduler, workers=args.workers or _DEFAULT_WORKERS, timeout=args.connect_timeout
        )
    except ValueError as exc:  # not an address: a usage error (unreachable: ConnectionError)
        raise CliError(f"--scheduler: {exc}", EXIT_USAGE) from None
    where = args.scheduler or f"a local cluster of {args.workers or _DEFAULT_WORKERS} workers"
    link = dashboard_link(c)
    if not args.quiet:
        print(f"dask: {where}" + (f", dashboard {link}" if link else ""), file=sys.stderr)
    return c  # type: ignore[no-any-return]


@contextmanager
def _workers_that_die(what: str) -> Iterator[None]:
    """A worker that died running a task (the OOM killer, a signal) on every worker Dask tried
    is one line, exit 3, not distributed's traceback."""
    try:
        yield
    except Exception as exc:  # distributed's KilledWorker, without importing it (--local)
        kind = type(exc)
        if kind.__name__ != "KilledWorker" or not kind.__module__.startswith("distributed"):
            raise
        task = getattr(exc, "task", "a task")
        raise CliError(
            f"{what}: a Dask worker died running {task} on every worker that tried it (out of "
            "memory, or killed)",
            EXIT_UNREADABLE,
        ) from None


def run_convert(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._dataset import capture_files
    from cbi1kit.fleet._convert import convert

    check_dataset_inputs(args.captures, args.output)  # before any cluster starts
    files = sum(len(f) for f in capture_files(args.captures))  # a task a file
    bar = progress_bar("fleet convert", files, not args.quiet)
    with _client(args) as c, _workers_that_die(f"fleet convert into {args.output}"), bar as done:
        results = convert(args.captures, args.output, client=c, progress=done)  # all or none
    written = [r for r in results if not r.skipped]
    rows = sum(r.rows.get("frames", 0) for r in written)
    if not args.quiet:
        print(
            f"{len(written)} capture file(s) converted ({rows} frames), "
            f"{len(results) - len(written)} already in {args.output}"
        )
    dataset_damage(results)
    return EXIT_OK


_EVERY = re.compile(r"[1-9]\d{0,5}(s|m|h|d)")


def _every(text: str) -> str:
    """A bin length: a whole number of seconds, minutes, hours or days (``30s``, ``1m``,
    ``1h``, ``1d``)."""
    if not _EVERY.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a bin length such as 30s, 1m, 1h or 1d")
    return text


def _plain(column: str, value: Any) -> Any:
    """A cell as text shows it: a time in ISO 8601, a 64-bit id or word as hex."""
    from cbi1kit.analysis._schema import HEX_TEXT

    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if column in HEX_TEXT and isinstance(value, int):
        return HEX_TEXT[column].format(value)
    return value


def run_query(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._dataset import open_dataset
    from cbi1kit.fleet._queries import run_query

    open_dataset(args.dataset)  # not a dataset: exit 3 before any cluster starts
    params = (
        {} if args.every is None or args.query not in ("churn", "load") else {"every": args.every}
    )
    ctx: AbstractContextManager[Any] = nullcontext(None) if args.local else _client(args)
    with ctx as c, _workers_that_die(f"fleet query {args.query}"):
        if c is None:
            from cbi1kit.fleet._queries import run_local

            result = run_local(args.query, args.dataset, **params)
        else:
            result = run_query(args.query, args.dataset, client=c, **params)
    if args.json:
        rows = [{k: _plain(k, v) for k, v in row.items()} for row in result.iter_rows(named=True)]
        print(to_json({"query": args.query, "rows": rows}, indent=2))
    else:
        shown = [
            [_plain(k, v) for k, v in zip(result.columns, row, strict=True)]
            for row in result.head(args.rows).iter_rows()
        ]
        print(table(shown, result.columns))
        if result.height > len(shown):
            print(f"… {result.height - len(shown)} more rows (--rows)")
    return EXIT_OK


def register(sub: Commands) -> None:
    """Add ``fleet convert`` and ``fleet query`` to ``cbi1kit``'s subcommands."""
    from cbi1kit.fleet._menu import QUERY_DOCS  # names only: no polars or Dask for --help

    fleet = sub.add_parser(
        "fleet",
        help="many captures → the partitioned dataset, and fleet queries, on Dask",
        description="Convert many captures into the partitioned Parquet dataset as Dask tasks "
        "(one per capture file) and run fleet queries over it as Dask computations. A local "
        "cluster of worker processes on 127.0.0.1 by default; --scheduler tcp://HOST:8786 "
        "uses an existing cluster, whose workers need this cbi1kit and the same paths.",
    )
    commands = fleet.add_subparsers(dest="fleet_command", required=True, metavar="COMMAND")

    p = commands.add_parser(
        "convert",
        help="captures → the partitioned dataset (appends; a file already in it is skipped)",
        description="Append captures to the partitioned dataset at -o DIR, one Dask task per "
        "capture file (a rotated recording's segments in order). Nothing in DIR is rewritten.",
    )
    p.add_argument(
        "captures",
        type=Path,
        nargs="+",
        help="kvrcap captures (a rotated recording: its first segment)",
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="dataset directory")
    _cluster_args(p)
    p.set_defaults(handler=run_convert)

    p = commands.add_parser(
        "query",
        help="a fleet query over the dataset: " + ", ".join(QUERY_DOCS),
        description="Run a fleet query over the dataset as a Dask computation: "
        + "; ".join(f"{name}: {doc}" for name, doc in QUERY_DOCS.items())
        + ". --local runs it in this process (the same result).",
    )
    p.add_argument("query", choices=list(QUERY_DOCS), help="which query")
    p.add_argument("dataset", type=Path, help="dataset directory")
    p.add_argument("--json", action="store_true", help="the rows as JSON")
    p.add_argument("--rows", type=at_least(1), default=40, help="rows shown (not with --json)")
    p.add_argument("--local", action="store_true", help="in this process, no Dask")
    p.add_argument(
        "--every",
        type=_every,
        metavar="BIN",
        help="churn and load: the time bin (30s, 1m, 1h, 1d; churn 1h, load 1m by default)",
    )
    _cluster_args(p)
    p.set_defaults(handler=run_query)


def _cluster_args(p: argparse.ArgumentParser) -> None:
    """Which Dask cluster: a local one of ``--workers``, or ``--scheduler``'s."""
    p.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="an existing Dask cluster's scheduler, e.g. tcp://HOST:8786",
    )
    p.add_argument(
        "--workers",
        type=ranged(1, _MAX_WORKERS),
        help=f"worker processes of the local cluster (default {_DEFAULT_WORKERS}; at most "
        f"4 per core, {_MAX_WORKERS} here)",
    )
    p.add_argument(
        "--connect-timeout",
        type=seconds(),
        default=10.0,
        metavar="S",
        help="give up on --scheduler after this many seconds (exit 3)",
    )
    p.add_argument("--quiet", action="store_true", help="no cluster line on stderr")
