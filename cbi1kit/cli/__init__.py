"""The ``cbi1kit`` command line: one entry point, one module per command.

Each command's module has ``register(sub)``, which adds its parser, and ``run(args)``, which
returns the exit code: 0 success; 1 the input was read but is invalid (a frame with problems, a
stream with violations, a damaged capture); 2 usage errors (argparse, bad knobs, an output that
exists); 3 the input could not be read at all (missing, not a capture or trace); 130 Ctrl-C.
Errors are one line on stderr; long work shows a progress bar on stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from cbi1kit._extras import COMMAND_EXTRAS, missing_extra, require
from cbi1kit._version import __version__
from cbi1kit.cli import (
    _data,
    _demo,
    _diff,
    _explain,
    _export,
    _fleet,
    _inspect,
    _lab,
    _layout,
    _record,
    _replay,
    _report,
    _serve,
    _simulate,
    _stats,
    _view,
    _watch,
)
from cbi1kit.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    OneLineParser,
    exit_code,
)
from cbi1kit.cli._demo import DemoReport
from cbi1kit.cli._lanes import moments_joined
from cbi1kit.errors import Cbi1kitError, CliError, one_line

__all__ = ["DemoReport", "build_parser", "main"]

#: the commands in the order ``cbi1kit --help`` lists them
COMMANDS = (
    _simulate,
    _inspect,
    _replay,
    _export,
    _stats,
    _view,
    _explain,
    _diff,
    _record,
    _serve,
    _watch,
    _fleet,
    _layout,
    _data,
    _demo,
    _lab,
    _report,
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="cbi1kit",
        description="See inside NVIDIA Dynamo's KV-cache filter stream (CBI1 frames).",
        epilog="exit codes: 0 ok, 1 invalid input, 2 usage error, 3 unreadable input or output",
    )
    parser.add_argument("--version", action="version", version=f"cbi1kit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, demo_report: type[DemoReport] | None = None) -> int:
    """The ``cbi1kit`` command; ``demo_report`` replaces the demo's step 4 (``tools/demo.py``)."""
    # gRPC core logs its own failures to stderr (a port in use, a name that does not resolve)
    # beside the one line an error gets here; GRPC_VERBOSITY set by the user still wins
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    parser = build_parser()
    words = sys.argv[1:] if argv is None else list(argv)
    if not words:  # `cbi1kit` alone: what it can do
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(moments_joined(words))
    if demo_report is not None:
        args.demo_report = demo_report
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        if args.command in COMMAND_EXTRAS:
            require(COMMAND_EXTRAS[args.command])
        return handler(args)
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's convention, no traceback
        print(f"cbi1kit {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (CliError, Cbi1kitError) as exc:
        print(f"cbi1kit {args.command}: error: {exc}", file=sys.stderr)
        return exit_code(exc)
    except ModuleNotFoundError as exc:  # a module of an extra that is not installed
        if (needs := missing_extra(exc)) is None:
            raise
        print(f"cbi1kit {args.command}: error: {needs}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"cbi1kit {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return exit_code(exc)
    except MemoryError as exc:  # an input that claims more than this machine holds
        why = one_line(str(exc)) or "no memory left"
        print(f"cbi1kit {args.command}: error: out of memory: {why}", file=sys.stderr)
        return EXIT_UNREADABLE
