"""What every command shares: the exit codes, the one-line error, the numeric option parsers
(a number outside its range is a usage error at parse time, before any work is done or any file
is created), the options several commands take, the progress bar, and the opening of inputs, so
one kind of bad input gets one exit code everywhere."""

from __future__ import annotations

import argparse
import math
import signal
import stat
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from cbi1kit._json import dumps as to_json
from cbi1kit.errors import (
    CLI_EXIT_CODES,
    CaptureError,
    Cbi1kitError,
    CliError,
    CliVariant,
    DatasetError,
    OutputError,
    OutputVariant,
    SimulationError,
    SimulationVariant,
    TransportError,
)
from cbi1kit.wire._format import FilterFormat

if TYPE_CHECKING:  # the CLI's start loads no table code
    from cbi1kit.analysis._dataset import SegmentResult

#: The README's exit codes (``errors.CLI_EXIT_CODES``).
EXIT_OK: Final = 0
#: a recognised input that breaks a rule: problems, violations, damage
EXIT_INVALID: Final = CLI_EXIT_CODES[CliVariant.Invalid]
#: bad arguments, an output that exists, a TLS file or header unusable
EXIT_USAGE: Final = CLI_EXIT_CODES[CliVariant.Usage]
#: missing, a directory, empty, unrecognised, denied, unwritable
EXIT_UNREADABLE: Final = CLI_EXIT_CODES[CliVariant.Unreadable]
#: Ctrl-C, as a shell reports SIGINT
EXIT_INTERRUPTED: Final = CLI_EXIT_CODES[CliVariant.Interrupted]

U64_MAX: Final = (1 << 64) - 1
I64_MAX: Final = (1 << 63) - 1


def check_regular_file(path: Path) -> None:
    """Exit 3 for an input that is not a regular file (a pipe, socket or device), before it is
    opened: inputs are told apart by their first bytes and then read again from the start, or
    mapped, which a pipe cannot do (its first bytes would be lost, and opening a pipe with no
    writer waits for one). Missing and denied paths are left to the reader, which names them."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        kind = (
            "a pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        )
        raise CliError(
            f"cannot read {path}: not a regular file ({kind}); cbi1kit reads its inputs from "
            "files: save it to one first"
        )


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """An input read after ``check_regular_file``: an error reading it is exit 3 naming it."""
    check_regular_file(path)
    try:
        yield
    except (OSError, CaptureError) as exc:
        raise cannot_read(path, exc) from None


def input_bytes(path: Path) -> bytes:
    """A whole input file, or exit 3 naming it (``reading``), or when it is empty."""
    with reading(path):
        data = path.read_bytes()
    if not data:
        raise CliError(f"cannot read {path}: empty input (no bytes)")
    return data


def check_source(path: Path) -> None:
    """A capture, grpcurl dump or bare frames that can be opened and is of a format cbi1kit
    reads, or exit 3 naming the path: missing, a directory, a pipe or device, empty,
    unrecognised, denied."""
    from cbi1kit.capture._readers import read_grpcurl_json, source_format

    with reading(path):
        # JSON is a grpcurl dump only if its first object is a FilterUpdate: other JSON is a
        # file cbi1kit does not read, where damage further on is the dump's (exit 1)
        if source_format(path) == "json":
            next(read_grpcurl_json(path), None)


def cannot_read(path: Path, exc: OSError | CaptureError) -> CliError:
    """``cannot read PATH: WHY`` (exit 3), the path once (a capture error names it first)."""
    if isinstance(exc, OSError):
        return CliError(f"cannot read {path}: {exc.strerror or exc}")
    text = str(exc)
    return CliError(f"cannot read {text if text.startswith(f'{path}: ') else f'{path}: {text}'}")


def check_dataset_inputs(captures: Sequence[Path], dataset: Path) -> None:
    """``check_source``, and what a dataset takes (``capture_files``' rule: kvrcap captures):
    exit 3 for any other source; then ``dataset`` prepared: before anything is written."""
    from cbi1kit.analysis._dataset import capture_files, prepare_dataset

    for path in captures:
        check_source(path)
        try:
            capture_files([path])
        except CaptureError as exc:
            raise CliError(f"cannot read {path}: {exc.reason}") from None
    prepare_dataset(dataset)


def damaged_input(ranges: int, first: str, holder: str) -> CliError:
    """Exit 1 after a conversion that read past damage: what it wrote holds every intact
    record (``holder``: the tables, the dataset), but the input was not whole."""
    return CliError(
        f"damaged input ({ranges} damaged range(s)), first: {first}; {holder} every intact record",
        EXIT_INVALID,
    )


def dataset_damage(results: Sequence[SegmentResult]) -> None:
    """``damaged_input`` for the converted capture files that had damage, if any."""
    hit = [r for r in results if r.damaged]
    if hit:
        ranges = sum(r.damaged for r in hit)
        raise damaged_input(
            ranges, f"{hit[0].first_damage} ({len(hit)} capture file(s))", "the dataset holds"
        )


def exit_code(exc: BaseException) -> int:
    """The README's exit code for an error that reached the command line."""
    if isinstance(exc, CliError):
        return exc.code
    if isinstance(exc, DatasetError):  # not a dataset: unreadable; another schema: unusable
        return {
            "NotADataset": EXIT_UNREADABLE,
            "Unreadable": EXIT_UNREADABLE,
            "SchemaVersion": EXIT_USAGE,
            "Busy": EXIT_USAGE,
        }.get(exc.variant, EXIT_INVALID)
    if isinstance(exc, OutputError) and exc.variant in (
        OutputVariant.NotAFile,
        OutputVariant.Unwritable,
    ):
        return EXIT_UNREADABLE  # an output that cannot be written (as a file, or at all)
    if isinstance(exc, OutputError | TransportError):  # an output that exists, holds the
        return EXIT_USAGE  # inputs; a certificate, key, header or authority that cannot be used
    if isinstance(exc, SimulationError) and exc.variant is SimulationVariant.Workload:
        # a trace that cannot be opened or holds no request, or one naming its bad line
        return EXIT_UNREADABLE if exc.context.get("line") is None else EXIT_INVALID
    if isinstance(exc, Cbi1kitError):
        return EXIT_INVALID
    return EXIT_UNREADABLE  # OSError: denied, missing, unwritable


def verdict(ok: bool) -> int:
    """Exit 0 for an input that keeps every rule, 1 for one that breaks any."""
    return EXIT_OK if ok else EXIT_INVALID


def violations_note(report: Any, of: str = "capture", *, gap: str = "") -> int:
    """After a command's text, a note if the replay broke rules (``of``: what broke them)."""
    if not report.ok:
        print(
            f"{gap}note: the {of} has {len(report.violations)} violation(s); see `cbi1kit replay`"
        )
    return verdict(report.ok)


def json_answer(answer: Mapping[str, Any], report: Any) -> int:
    """A command's answer as JSON, with the exit code's reason in it too: the replay's rules."""
    print(to_json({**answer, "ok": report.ok, "violations": len(report.violations)}, indent=2))
    return verdict(report.ok)


@dataclass(frozen=True, slots=True)
class Number:
    """An argparse ``type``: an integer (``0x`` allowed) or, with ``real``, a finite number, in
    ``lo..=hi`` (``lo`` itself excluded with ``open_lo``). Its bounds are data, so a test can
    walk every option of the parser and try the numbers just outside them."""

    lo: float
    hi: float | None = None
    real: bool = False
    open_lo: bool = False

    @property
    def __name__(self) -> str:  # argparse names the type in its errors
        return "number" if self.real else "integer"

    def __call__(self, text: str) -> float:
        try:
            value: float = float(text) if self.real else int(text, 0)
        except ValueError:
            kind = "a number" if self.real else "an integer"
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        if self.real and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        lo, hi = self.lo, self.hi
        if value <= lo if self.open_lo else value < lo:
            bound = f"> {lo}" if self.open_lo else f">= {lo}"
            raise argparse.ArgumentTypeError(f"{text} must be {bound}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"{text} is outside {lo}..={hi}")
        return value


def ranged(
    lo: float, hi: float | None = None, *, real: bool = False, open_lo: bool = False
) -> Number:
    return Number(lo, hi, real, open_lo)


def at_least(lo: int) -> Number:
    """A count from ``lo``: at most ``I64_MAX``, the most numpy and polars take as a count (a
    larger one was a traceback deep in polars, not a usage error)."""
    return ranged(lo, I64_MAX)


def real_at_least(lo: float) -> Number:
    return ranged(lo, real=True)


U64: Final = ranged(0, U64_MAX)

#: the longest time any option takes, in seconds: about 31 years (a wait beyond what time_t and
#: threading take was a traceback in a background thread, and the limit was lost)
SECONDS_MAX: Final = 1e9


def seconds(*, zero: bool = False) -> Number:
    """A time in seconds: above 0 (or from 0 with ``zero``), at most ``SECONDS_MAX``."""
    return ranged(0, SECONDS_MAX, real=True, open_lo=not zero)


class DefaultsFormatter(argparse.HelpFormatter):
    """Help that ends each option's line with its default, where it has one the line does not
    already say (a flag's ``False`` and an unset ``None`` are not defaults to show)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if not action.option_strings or "default" in text or default in (None, False):
            return text
        if default is argparse.SUPPRESS:
            return text
        return f"{text} (default: %(default)s)"


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr and exit 2, as every other CLI error (``--help``
    still prints the usage, and each option's default)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def format_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=U64, help="expected CKF seed (checks the format)")
    p.add_argument("--buckets", type=U64, help="expected bucket count (with --seed)")


def quiet_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def answer_args(p: argparse.ArgumentParser, what: str) -> None:
    """What a command that answers ends with: ``--json`` (``what`` as JSON), ``--no-progress``."""
    p.add_argument("--json", action="store_true", help=f"print the {what} as JSON")
    quiet_arg(p)


@contextmanager
def progress_bar(
    description: str, total: int | None, enabled: bool = True, *, unit: str = "items"
) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (only on a terminal), to ``total`` where it is known, of
    ``unit`` ``items`` or ``bytes`` (shown as MB); yields ``advance(n)``."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield lambda n: None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn() if unit == "bytes" else MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def checkout(instead: str) -> str:
    """Where the notebooks and the bundled data are (a checkout of the repository), and what
    to do ``instead``."""
    return f" (a cbi1kit checkout has it: run there, or {instead})"


def no_notebooks(folder: Path, instead: str) -> CliError:
    """Exit 3: ``folder`` is no notebooks folder; where one is, and what to do ``instead``."""
    return CliError(f"{folder}: no notebooks folder{checkout(instead)}", EXIT_UNREADABLE)


def expected_format(args: argparse.Namespace) -> FilterFormat | None:
    if args.seed is None and args.buckets is None:
        return None
    if args.seed is None or args.buckets is None:
        raise CliError("--seed and --buckets go together", EXIT_USAGE)
    try:
        return FilterFormat(seed=args.seed, bucket_count=args.buckets)
    except Cbi1kitError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def on_signals(stop: Any) -> None:
    """Ctrl-C / SIGTERM stop the session cleanly (only possible from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop())


if TYPE_CHECKING:  # the subparsers of ``cbi1kit``: each command's ``register`` adds one
    Commands = argparse._SubParsersAction[OneLineParser]
