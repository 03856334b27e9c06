"""The ``cbi1kit`` command line: one entry point, one subcommand per job.

Exit codes: 0 success; 1 the input was read but is invalid (a frame with problems, a stream with
violations); 2 usage errors (argparse); 3 the input could not be read at all. Errors are one line
on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from cbi1kit._format import FilterFormat
from cbi1kit._inspect import inspect
from cbi1kit._layout import DELTA_IMAGE, DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX, layout_markdown
from cbi1kit.errors import Cbi1kitError

__all__ = ["main"]

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_UNREADABLE = 3

Handler = Callable[[argparse.Namespace], int]


class CliError(Exception):
    """A one-line, user-facing failure with its exit code."""

    def __init__(self, message: str, code: int = EXIT_UNREADABLE) -> None:
        super().__init__(message)
        self.code = code


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None


def _u64(text: str) -> int:
    value = int(text, 0)
    if not 0 <= value < 1 << 64:
        raise argparse.ArgumentTypeError(f"{text} is outside the unsigned 64-bit range")
    return value


def _expected_format(args: argparse.Namespace) -> FilterFormat | None:
    if args.seed is None and args.buckets is None:
        return None
    if args.seed is None or args.buckets is None:
        raise CliError("--seed and --buckets go together", EXIT_USAGE)
    try:
        return FilterFormat(args.seed, args.buckets)
    except Cbi1kitError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def cmd_inspect(args: argparse.Namespace) -> int:
    fmt = _expected_format(args)
    worst = EXIT_OK
    for path in args.files:
        report = inspect(_read(path), fmt)
        print(f"== {path}")
        print(report.hexdump(head=args.head, tail=args.tail))
        if report.problems:
            worst = EXIT_INVALID
            print(f"{len(report.problems)} problem(s):")
            for problem in report.problems:
                print(f"  - {problem}")
        else:
            print("valid: decodes cleanly")
    return worst


def cmd_layout(args: argparse.Namespace) -> int:
    for title, layout in (
        ("header (both kinds)", HEADER),
        ("delta body prefix", DELTA_PREFIX),
        ("delta image (12 bytes, packed)", DELTA_IMAGE),
        ("snapshot chunk body prefix", SNAPSHOT_PREFIX),
    ):
        print(f"### {title}\n")
        if args.markdown:
            print(layout_markdown(layout))
        else:
            for f in layout:
                print(f"  {f.offset:>3}  {f.size:>2}  {f.path:<26} {f.kind:<5}  {f.doc}")
        print()
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    frames = sorted(args.data.glob("*.cbi1"))
    if not frames:
        raise CliError(f"no .cbi1 sample frames under {args.data}")
    print("cbi1kit demo: the bundled sample frames, decoded and laid out byte by byte\n")
    ns = argparse.Namespace(files=frames, seed=None, buckets=None, head=6, tail=2)
    return cmd_inspect(ns)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cbi1kit",
        description="See inside NVIDIA Dynamo's KV-cache filter stream (CBI1 frames).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("inspect", help="annotated hexdump and every problem of CBI1 frame files")
    p.add_argument("files", nargs="+", type=Path, help="bare CBI1 frame files")
    p.add_argument("--seed", type=_u64, help="expected CKF seed (checks the format)")
    p.add_argument("--buckets", type=_u64, help="expected bucket count (with --seed)")
    p.add_argument("--head", type=int, default=8, help="body rows shown before the gap")
    p.add_argument("--tail", type=int, default=4, help="body rows shown after the gap")
    p.set_defaults(handler=cmd_inspect)

    p = sub.add_parser("layout", help="the CBI1 byte layout, from the layout tables")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.set_defaults(handler=cmd_layout)

    p = sub.add_parser("demo", help="the main job on the bundled data")
    p.add_argument("--data", type=Path, default=Path("data/frames"), help="sample frames folder")
    p.set_defaults(handler=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except CliError as exc:
        print(f"cbi1kit {args.command}: error: {exc}", file=sys.stderr)
        return exc.code
    except Cbi1kitError as exc:
        print(f"cbi1kit {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:
        return EXIT_OK
