"""Running ``cbi1kit`` in-process as a user would see it: exit code and stderr."""

from __future__ import annotations

import contextlib
import io

from cbi1kit import cli


def cli_run(*argv: str) -> tuple[int, str, str]:
    """``cbi1kit ARGV`` in-process: (exit code, stdout, stderr). An exception escaping ``main``
    would be a traceback for the user, so it propagates and fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # argparse: usage errors and --help
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def one_line(err: str) -> bool:
    """One line on stderr, no traceback: how every CLI error reads."""
    return len(err.strip().splitlines()) == 1 and "Traceback" not in err


def unwrapped(text: str) -> list[str]:
    """The lines as printed before ``_text.wrapped`` fitted them to the terminal: a line that
    starts with three spaces continues the one above (an item's own lines start with two)."""
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("   ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines
