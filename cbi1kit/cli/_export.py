"""``cbi1kit export``: a capture's tables as Parquet, or many captures into the dataset."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from cbi1kit._text import wrapped
from cbi1kit.cli._common import (
    EXIT_OK,
    EXIT_USAGE,
    check_dataset_inputs,
    check_source,
    damaged_input,
    dataset_damage,
    progress_bar,
    quiet_arg,
)
from cbi1kit.errors import CliError

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def _export_dataset(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._dataset import export_dataset

    if args.force:
        raise CliError(
            "--dataset appends and never rewrites: --force is for the flat export", EXIT_USAGE
        )
    check_dataset_inputs(args.capture, args.output)
    with progress_bar("export --dataset", None, not args.no_progress):
        results = export_dataset(args.capture, args.output)
    written = [r for r in results if not r.skipped]
    for r in results:
        what = "already in the dataset" if r.skipped else f"{r.rows.get('frames', 0)} frames"
        print(wrapped(f"{r.path}: {what}"))
    print(wrapped(f"{len(written)} capture file(s) added to {args.output}"))
    dataset_damage(results)
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    if args.dataset:
        return _export_dataset(args)
    from cbi1kit.analysis._capture import open_capture  # polars and numpy: on first use

    if len(args.capture) > 1:
        raise CliError(
            "the flat export writes one source's tables: give one, or --dataset for several",
            EXIT_USAGE,
        )
    (source,) = args.capture
    check_source(source)
    capture = open_capture(source, keep_tables=False)
    bar = progress_bar(f"export {source.name}", capture.size(), not args.no_progress, unit="bytes")
    with bar as advance:
        written = capture.export(args.output, overwrite=args.force, progress=advance)
    for name, where in written.items():
        print(wrapped(f"{name}: {where}"))
    import polars as pl

    damaged = (
        pl.scan_parquet(written["frames"])
        .filter(pl.col("kind") == "SOURCE_ERROR")
        .select("validation_error")
        .collect()
    )
    if damaged.height:  # any source: a damaged capture, a dump that stops parsing, ...
        raise damaged_input(damaged.height, damaged.item(0, 0), "the tables hold")
    return EXIT_OK


def register(sub: Commands) -> None:
    """``cbi1kit export``."""
    p = sub.add_parser(
        "export",
        help="capture → Parquet tables (frames, images, snapshots); --dataset: many captures",
        description="Write the capture's frames, images and snapshots tables as Parquet files "
        "into a directory; with --dataset, append captures to a hive-partitioned dataset "
        "(frames, images, snapshots, violations) that cbi1kit.open_dataset reads lazily.",
    )
    p.add_argument(
        "capture",
        type=Path,
        nargs="+",
        help="kvrcap capture, grpcurl JSON or CBI1 frames (--dataset: kvrcap captures, a "
        "rotated recording by its first segment)",
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="output directory")
    p.add_argument(
        "--dataset",
        action="store_true",
        help="append the captures to the partitioned dataset at -o (dc=/producer=/date=; a "
        "capture file already in it is skipped, nothing is rewritten)",
    )
    p.add_argument(
        "--force", action="store_true", help="overwrite existing table files (not --dataset)"
    )
    quiet_arg(p)
    p.set_defaults(handler=run)
