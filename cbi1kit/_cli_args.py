"""Every numeric option the CLI takes is parsed by one of these: a number outside its range is
a usage error (exit 2) at parse time, before any work is done or any file is created."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Final, NoReturn

__all__ = [
    "U64",
    "U64_MAX",
    "OneLineParser",
    "at_least",
    "ranged",
    "real_above",
    "real_at_least",
]

U64_MAX: Final = (1 << 64) - 1


def ranged(
    lo: float, hi: float | None = None, *, real: bool = False, open_lo: bool = False
) -> Callable[[str], float]:
    """An argparse ``type``: an integer (``0x`` allowed) or, with ``real``, a finite number, in
    ``lo..=hi`` (``lo`` itself excluded with ``open_lo``)."""

    def parse(text: str) -> float:
        try:
            value: float = float(text) if real else int(text, 0)
        except ValueError:
            kind = "a number" if real else "an integer"
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        if real and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value <= lo if open_lo else value < lo:
            bound = f"> {lo}" if open_lo else f">= {lo}"
            raise argparse.ArgumentTypeError(f"{text} must be {bound}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"{text} is outside {lo}..={hi}")
        return value

    parse.__name__ = "number" if real else "integer"  # argparse names the type in errors
    return parse


def at_least(lo: int) -> Callable[[str], float]:
    return ranged(lo)


def real_at_least(lo: float) -> Callable[[str], float]:
    return ranged(lo, real=True)


def real_above(lo: float) -> Callable[[str], float]:
    return ranged(lo, real=True, open_lo=True)


U64: Final = ranged(0, U64_MAX)


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr and exit 2, as every other CLI error (``--help``
    still prints the usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")
