"""``cbi1kit watch``: every lane of a relay, or of a capture still being written, as it moves."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cbi1kit._json import dumps as to_json
from cbi1kit.ckf._limits import DEFAULT_MAX_AGE_S
from cbi1kit.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    check_regular_file,
    on_signals,
    seconds,
    verdict,
)
from cbi1kit.cli._record import _checked, _connection, _connection_args
from cbi1kit.errors import CliError, RelayWireError
from cbi1kit.relay._transport import names_a_relay, parse_listen

if TYPE_CHECKING:
    from cbi1kit.analysis._watch import Watch, WatchState
    from cbi1kit.cli._common import Commands


def _check_capture(path: Path) -> None:
    """A capture to follow: a file that begins as a kvrcap does, or none yet (or an empty one)
    in a folder that exists, since a recorder is about to write it; else exit 3 naming it."""
    from cbi1kit.capture._layout import FILE_MAGIC

    if not path.exists():
        if not path.parent.is_dir():
            raise CliError(f"cannot read {path}: no such folder {path.parent}", EXIT_UNREADABLE)
        return
    check_regular_file(path)
    with path.open("rb") as f:
        head = f.read(len(FILE_MAGIC))
    if head and not FILE_MAGIC.startswith(head):
        why = "not a kvrcap capture (watch follows the capture a recorder writes)"
        raise CliError(f"cannot read {path}: {why}", EXIT_UNREADABLE)


def _recording(args: argparse.Namespace, stack: ExitStack) -> tuple[Path, Any]:
    """Record the relay at ``args.target`` in a thread, into ``-o`` or a scratch capture."""
    from cbi1kit._files import claim_outputs
    from cbi1kit.relay._recorder import BackgroundRecorder

    connection = _connection(args)
    if args.output is not None:
        claim_outputs([args.output], overwrite=args.force)
        args.output.unlink(missing_ok=True)  # --force: the recording starts afresh
    try:
        recording = BackgroundRecorder(
            args.output, "cbi1kit-watch", target=args.target, **connection
        )
    except RelayWireError as exc:
        raise CliError(f"--subscriber-id: {exc}", EXIT_USAGE) from None
    stack.callback(recording.stop, "watch ended")
    return recording.path, recording


def _show(state: WatchState, args: argparse.Namespace) -> None:
    if args.json:
        print(to_json(state.to_dict(), indent=2))
    else:
        print(state)


def _check_read(args: argparse.Namespace, watch: Watch, recorder: Any) -> None:
    """Exit 3 at the end of a watch that read nothing: a relay that never sent a frame, a
    capture that never appeared or stayed empty (an empty table is no answer)."""
    after = f"after {args.duration:g} s"
    if recorder is not None:
        waiting = recorder.recorder.waiting
        if waiting is not None:
            raise CliError(f"{args.target}: still waiting for {waiting} {after}", EXIT_UNREADABLE)
    elif not watch.path.exists():
        raise CliError(f"cannot read {watch.path}: no such file {after}", EXIT_UNREADABLE)
    elif watch.path.stat().st_size == 0:
        raise CliError(f"cannot read {watch.path}: empty input {after}", EXIT_UNREADABLE)


def _follow(args: argparse.Namespace, watch: Watch, stack: ExitStack, recorder: Any) -> int:
    """Poll until the duration, Ctrl-C or the recorder's end; the exit code."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    stopped = threading.Event()
    on_signals(stopped.set)
    collector = None
    if args.metrics is not None:
        from cbi1kit.analysis._metrics import MetricsServer, WatchCollector

        collector = WatchCollector()
        server = MetricsServer(collector, *args.metrics)
        stack.callback(server.close)
        print(f"metrics at {server.url}", file=sys.stderr)
    console = Console(width=80, stderr=True)
    live = stack.enter_context(Live(console=console, auto_refresh=False, transient=True))
    ends = None if args.duration is None else time.monotonic() + args.duration
    while True:
        state = watch.poll()
        if collector is not None:
            collector.update(state)
        if console.is_terminal:
            live.update(Text(str(state)), refresh=True)
        if recorder is not None and recorder.report.exit_code not in (0, None):
            raise CliError(recorder.report.stop_reason, recorder.report.exit_code)
        if stopped.is_set() or (ends is not None and time.monotonic() >= ends):
            break
        stopped.wait(args.interval if ends is None else min(args.interval, ends - time.monotonic()))
    live.stop()
    if not stopped.is_set():
        _check_read(args, watch, recorder)
    _show(state, args)
    if stopped.is_set():
        return EXIT_INTERRUPTED
    broken = state.recent or any(lane.violations for lane in state.lanes)
    return verdict(not broken)


def run(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._watch import Watch

    with ExitStack() as stack:
        recorder = None
        if names_a_relay(args.target):
            capture, recorder = _recording(args, stack)
        else:
            capture = Path(args.target)
            _check_capture(capture)
        watch = Watch(capture, max_age_s=args.max_age, name=args.target)
        stack.callback(watch.close)
        return _follow(args, watch, stack, recorder)


def register(sub: Commands) -> None:
    """``cbi1kit watch``."""
    p = sub.add_parser(
        "watch",
        help="every lane of a relay, or of a capture being written, as it moves",
        description="Follow a relay (host:port: recorded as `record` would, into -o or a "
        "scratch file) or a capture still being written: each lane's sequence, load factor, "
        "churn, the age of its last message (stale past --max-age) and the rules broken. "
        "Ends at --duration or Ctrl-C; prints the last state (--json: as JSON).",
    )
    p.add_argument("target", help="relay address host:port, or a capture file")
    p.add_argument("--duration", type=seconds(), help="stop after this many seconds")
    p.add_argument("--interval", type=seconds(), default=0.5, help="seconds between looks")
    p.add_argument(
        "--max-age",
        type=seconds(),
        default=DEFAULT_MAX_AGE_S,
        help="a ready lane silent this long is stale (the router's overlap_max_age), seconds",
    )
    p.add_argument(
        "--metrics",
        type=_checked(parse_listen),
        metavar="HOST:PORT",
        help="serve Prometheus metrics here (':9464' is loopback's port 9464)",
    )
    p.add_argument("--json", action="store_true", help="print the last state as JSON")
    p.add_argument("-o", "--output", type=Path, help="keep a relay's recording in this capture")
    p.add_argument("--force", action="store_true", help="replace -o if it exists")
    _connection_args(p.add_argument_group("connection (a relay target)"))
    p.set_defaults(handler=run)
