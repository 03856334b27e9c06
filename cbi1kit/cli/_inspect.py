"""``cbi1kit inspect``: frame files and captures, field by field."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cbi1kit._text import terminal_width, wrapped
from cbi1kit.cli._common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    at_least,
    cannot_read,
    check_source,
    expected_format,
    format_args,
    input_bytes,
    quiet_arg,
    reading,
    verdict,
)
from cbi1kit.cli._lanes import replay_source
from cbi1kit.errors import CaptureError, CliError
from cbi1kit.wire._format import FRAME_HEAD_BYTES, IMAGES_MAX_FRAME_BYTES, FilterFormat

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands
    from cbi1kit.wire._inspect import Inspection


def _is_capture(path: Path) -> bool:
    from cbi1kit.capture._file import is_capture_file

    with reading(path):
        return is_capture_file(path)


def _inspect_frame_file(path: Path, fmt: FilterFormat | None) -> Inspection:
    """A file as one CBI1 frame; a file too large to be one is answered from its header
    alone, without reading the rest."""
    from cbi1kit.wire._inspect import inspect  # numpy loads here, not for --help

    with reading(path):
        size = path.stat().st_size
        if size > IMAGES_MAX_FRAME_BYTES:
            with open(path, "rb") as f:
                return inspect(f.read(FRAME_HEAD_BYTES), fmt, length=size)
    return inspect(input_bytes(path), fmt)


def run(args: argparse.Namespace) -> int:
    fmt = expected_format(args)
    worst = EXIT_OK
    for path in args.files:
        try:  # a file that cannot be read is said and skipped: the others are still inspected
            if _is_capture(path):
                worst = max(worst, _inspect_capture(path, fmt, args))
                continue
            why = _sniffed(path)
            report = _inspect_frame_file(path, fmt)
        except CliError as exc:
            if len(args.files) == 1:
                raise
            print(f"cbi1kit inspect: error: {exc}", file=sys.stderr)
            worst = max(worst, exc.code)
            continue
        print(wrapped(f"== {path}"))
        print(report.hexdump(head=args.head, tail=args.tail).text(terminal_width()))
        print(wrapped(report.verdict, "  "))
        for problem in report.problems:
            print(wrapped(f"  - {problem}", "    "))
        if report.problems:
            worst = EXIT_INVALID
        if why is not None:  # shown, and refused as replay refuses it
            print(f"cbi1kit inspect: error: {why}", file=sys.stderr)
            worst = EXIT_UNREADABLE
    return worst


def _sniffed(path: Path) -> str | None:
    """A file that is no capture, by its first bytes (read once): why no reader takes it (the
    bytes are still shown, then refused as ``replay`` refuses them), or None. JSON is no CBI1
    frame to annotate: other JSON (a Mooncake trace) is exit 3 as ``replay`` says it, a grpcurl
    dump of FilterUpdates a usage error naming who reads it."""
    from cbi1kit.capture._readers import source_format

    try:
        kind = source_format(path)
    except CaptureError as exc:
        return str(cannot_read(path, exc))
    except OSError:
        return None  # the frame reader names it
    if kind == "json":
        check_source(path)
        raise CliError(
            f"{path}: a grpcurl JSON dump of FilterUpdates, no CBI1 frame: `cbi1kit replay` or "
            "`cbi1kit export` read it",
            EXIT_USAGE,
        )
    return None


def _inspect_capture(path: Path, fmt: FilterFormat | None, args: argparse.Namespace) -> int:
    """A capture's overview (``Capture.overview``), one frame annotated, then its replay: one
    scan serves all three."""
    from cbi1kit.analysis._capture import Capture

    print(wrapped(f"== {path} (kvrcap capture)"))
    capture = Capture(path)
    view = capture.overview(rows=args.rows, frame=args.frame)
    print(view)
    count = view.frame_count
    if count:
        if view.picked is None:
            raise CliError(f"--frame {args.frame} is outside 0..{count - 1}", EXIT_USAGE)
        k, kind, payload = view.picked
        print(f"\n-- frame {k}: annotated CBI1 payload ({kind})")
        if payload:
            from cbi1kit.wire._inspect import inspect

            dump = inspect(payload, fmt).hexdump(head=args.head, tail=args.tail)
            print(dump.text(terminal_width()))
        else:
            print("(empty payload: a heartbeat)")
    print("\n-- validation (replay with the consumer's rules)")
    report = replay_source(capture, fmt, not args.no_progress)
    print(report.text(args.max_violations))
    return verdict(report.ok and not view.damage and not view.unreadable)


def register(sub: Commands) -> None:
    """``cbi1kit inspect``."""
    p = sub.add_parser(
        "inspect",
        help="frame files or a capture: header table, annotated hexdump, validation summary",
        description="Bare CBI1 frames: every field with its offset and every problem. A kvrcap "
        "capture: its header and streams, a frame table, one frame's annotated hexdump and a "
        "replay summary.",
    )
    p.add_argument("files", nargs="+", type=Path, help="bare CBI1 frame files or kvrcap captures")
    format_args(p)
    p.add_argument("--head", type=at_least(0), default=8, help="body rows shown before the gap")
    p.add_argument("--tail", type=at_least(0), default=4, help="body rows shown after the gap")
    p.add_argument(
        "--rows", type=at_least(0), default=20, help="capture: frames listed in the table"
    )
    p.add_argument(
        "--frame", type=at_least(0), help="capture: frame to hexdump (default: first delta)"
    )
    p.add_argument("--max-violations", type=at_least(0), default=20, help="violations listed")
    quiet_arg(p)
    p.set_defaults(handler=run)
