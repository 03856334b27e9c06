"""``cbi1kit record``: a live relay's pool streams into a capture."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cbi1kit._files import unwritable
from cbi1kit._text import wrapped
from cbi1kit.cli._common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    at_least,
    on_signals,
    ranged,
    seconds,
)
from cbi1kit.errors import CaptureError, CliError, RelayWireError, TransportError
from cbi1kit.relay._transport import parse_authority, parse_header, parse_target

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


def _checked(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse ``type`` from a parser raising ``TransportError``: a usage error at parse
    time, worded by the parser."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except TransportError as exc:
            raise argparse.ArgumentTypeError(exc.detail or str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


def _connection(args: argparse.Namespace) -> dict[str, Any]:
    """The recorder's settings ``_connection_args`` give, the TLS ones (``None``: plaintext)
    with every file read and checked now: an unusable one is a usage error before anything
    else happens."""
    from cbi1kit.relay._transport import ClientTls

    tls = None
    if args.tls or any(f is not None for f in (args.ca_cert, args.client_cert, args.client_key)):
        tls = ClientTls.from_files(ca=args.ca_cert, cert=args.client_cert, key=args.client_key)
    return {
        "subscriber_id": args.subscriber_id,
        "tls": tls,
        "authority": args.authority,
        "metadata": tuple(args.header),
    }


def run(args: argparse.Namespace) -> int:
    connection = _connection(args)  # an unusable TLS file: its error, before anything else
    _check_output(args)
    capture = args.output
    scratch = None
    if args.list and capture is None:  # the catalog is recorded somewhere, then thrown away
        import tempfile

        scratch = tempfile.TemporaryDirectory(prefix="cbi1kit-list-")
        capture = Path(scratch.name) / "catalog.kvrcap"
    try:
        return _record(args, capture, connection)
    finally:
        if scratch is not None:
            scratch.cleanup()


def _check_output(args: argparse.Namespace) -> None:
    """The capture to write: needed unless ``--list``, a regular file, new unless ``--append``."""
    out: Path | None = args.output
    if out is None:
        if not args.list:
            raise CliError(
                "an output capture (-o/--output) is needed unless --list is given", EXIT_USAGE
            )
        return
    if out.exists() and not out.is_file():
        raise CliError(
            f"{out} is not a regular file (a directory or device): write to a file", EXIT_UNREADABLE
        )
    if out.exists() and not args.append:
        raise CliError(f"{out} exists (use --append to add to it)", EXIT_USAGE)


def _record(args: argparse.Namespace, capture: Path, connection: dict[str, Any]) -> int:
    from cbi1kit.relay._recorder import Recorder

    try:
        config = _record_config(args, capture, connection)
    except RelayWireError as exc:  # a subscriber id upstream's consumer would refuse
        raise CliError(f"--subscriber-id: {exc}", EXIT_USAGE) from None
    recorder = Recorder(config)
    on_signals(lambda: recorder.stop("interrupted"))
    try:
        report = recorder.run(list_only=args.list)
    except OSError as exc:
        raise unwritable([capture], exc) from None
    except CaptureError as exc:  # --append to a file that is no capture: nothing to append to
        raise CliError(f"cannot append to {capture}: {exc.detail}", EXIT_UNREADABLE) from None
    if args.list:
        _print_catalog(recorder)
    if report.recovered is not None:
        print(f"note: {capture}: {report.recovered}", file=sys.stderr)
    unkept = f"; no message arrived: nothing was written to {capture}" if report.removed else ""
    if report.exit_code != EXIT_OK:
        raise CliError(report.stop_reason + unkept, report.exit_code)
    if report.removed and not args.list:
        print(f"note: {report.stop_reason}{unkept}", file=sys.stderr)
        return EXIT_OK
    if not args.list and not args.quiet:
        _print_recorded(report, recorder.paths, capture)
    return _print_violations(report)


def _print_catalog(recorder: Any) -> None:
    """``--list``: the catalog's pools, one per line."""
    from cbi1kit.relay._session import describe_pool

    catalog = recorder.catalog()
    if catalog is not None:
        print(f"catalog revision {catalog.revision}: {len(catalog.snapshot.pools)} pool(s)")
        for i, desc in enumerate(catalog.snapshot.pools):
            print(wrapped(f"[{i}] {describe_pool(desc)}", "    "))


def _print_violations(report: Any) -> int:
    """``--validate``'s failures on stderr, a line each; exit 1 when there are any."""
    if not report.violations:
        return EXIT_OK
    print(f"{len(report.violations)} validation failure(s):", file=sys.stderr)
    for pool in report.pools:
        for v in pool.violations:
            line = f"  - {pool.label}: {v}" if len(report.pools) > 1 else f"  - {v}"
            print(wrapped(line, "    "), file=sys.stderr)
    return EXIT_INVALID


def _record_config(args: argparse.Namespace, capture: Path, connection: dict[str, Any]) -> Any:
    """The recorder's settings from the command line."""
    from cbi1kit.relay._session import PoolSelector, RecorderConfig

    return RecorderConfig(
        target=args.target,
        capture=capture,
        selector=PoolSelector(tuple(args.model), tuple(args.dc), tuple(args.producer)),
        **connection,
        duration=args.duration,
        max_frames=args.frames,
        validate=args.validate,
        status=False if args.quiet else None,
        rpc_timeout=args.timeout,
        stall_timeout=args.stall_timeout,
        give_up_after=args.give_up_after,
        append=args.append,
        rotate_bytes=None
        if args.rotate_size is None
        else max(1, int(args.rotate_size * (1 << 20))),
        rotate_seconds=args.rotate_time,
    )


def _print_recorded(report: Any, paths: list[Path], capture: Path) -> None:
    """What a recording holds, on stderr: frames, subscriptions, planes; a line per pool."""
    from cbi1kit.relay._session import PLANES

    several = len(report.pools) > 1
    planes = ", ".join(f"{report.plane_messages.get(p.name, 0)} {p.name}" for p in PLANES)
    unserved = "".join(f"; not served: {u}" for u in report.unserved)
    pools = f" of {len(report.pools)} pools" if several else ""
    files = len(paths)
    segments = f" ({files} segments, {paths[-1].name} the last)" if files > 1 else ""
    print(
        wrapped(
            f"recorded {report.messages} frames ({report.payload_bytes} payload bytes) in "
            f"{report.subscriptions} subscription(s){pools} and {planes} message(s) to "
            f"{capture}{segments}; stopped: {report.stop_reason}{unserved}"
        ),
        file=sys.stderr,
    )
    if several:  # a line per pool: what it recorded, and why it ended if it failed
        for i, pool in enumerate(report.pools):
            seq = "-" if pool.last_sequence is None else str(pool.last_sequence)
            ended = "" if pool.ended is None else f"; failed: {pool.ended}"
            print(
                wrapped(
                    f"  [{i}] {pool.label}: {pool.messages} frames in {pool.subscriptions} "
                    f"subscription(s), last sequence {seq}{ended}",
                    "      ",
                ),
                file=sys.stderr,
            )


def register(sub: Commands) -> None:
    """``cbi1kit record``."""
    p = sub.add_parser(
        "record",
        help="record a live relay's pool streams into a capture file",
        description="Connect to a KV DC relay and record every pool of its catalog, or those "
        "chosen with --model, --dc and --producer (each repeatable: any of them; kinds of "
        "criteria combined: all of them), each pool's stream resubscribing on its own, pools "
        "that join the catalog later included: every message, raw, into a kvrcap capture, "
        "with the catalog, readiness and load planes and every stream's end.",
    )
    p.add_argument("target", type=_checked(parse_target), help="relay address, host:port")
    p.add_argument("-o", "--output", type=Path, help="capture file to write")
    p.add_argument("--append", action="store_true", help="append to an existing capture")
    p.add_argument(
        "--rotate-size",
        type=ranged(0, 1 << 40, real=True, open_lo=True),
        metavar="MiB",
        help="start a new segment (OUT.0001.kvrcap, ...) once the current one holds this many "
        "MiB; every reader takes OUT.kvrcap for the whole recording",
    )
    p.add_argument(
        "--rotate-time",
        type=seconds(),
        metavar="S",
        help="start a new segment once the current one has been written this many seconds",
    )
    p.add_argument("--list", action="store_true", help="print the pool catalog and exit")
    p.add_argument(
        "--model",
        action="append",
        default=[],
        help="record the pools serving this model name or alias (repeatable: any of them)",
    )
    p.add_argument(
        "--dc",
        action="append",
        default=[],
        help="record the pools of this DC, a name or 16-hex-digit id (repeatable: any of them)",
    )
    p.add_argument(
        "--producer",
        action="append",
        default=[],
        help="record the pools whose producer key starts with this (repeatable: any of them)",
    )
    _connection_args(p.add_argument_group("connection"))
    _stop_args(p.add_argument_group("when to stop"))
    p.set_defaults(handler=run)


def _connection_args(p: argparse._ArgumentGroup) -> None:
    """How ``record`` reaches the relay: who it says it is, TLS, authority, headers."""
    p.add_argument("--subscriber-id", default="cbi1kit-recorder", help="subscriber id sent")
    p.add_argument("--tls", action="store_true", help="use TLS (system roots)")
    p.add_argument("--ca-cert", type=Path, help="PEM root certificates for TLS (implies --tls)")
    p.add_argument(
        "--client-cert", type=Path, help="PEM client certificate chain for mTLS (with --client-key)"
    )
    p.add_argument("--client-key", type=Path, help="its unencrypted PEM private key")
    p.add_argument(
        "--authority",
        type=_checked(parse_authority),
        help="the :authority to send and, over TLS, the name the server certificate must carry "
        "(default: the target's host)",
    )
    p.add_argument(
        "--header",
        type=_checked(parse_header),
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="metadata sent with every call, e.g. an auth header (repeatable; the capture "
        "keeps only its name)",
    )


def _stop_args(p: argparse._ArgumentGroup) -> None:
    """When ``record`` stops, checks, and gives up."""
    p.add_argument("--duration", type=seconds(), help="stop after this many seconds")
    p.add_argument(
        "--frames", type=at_least(1), help="stop after this many pool messages (all pools')"
    )
    p.add_argument("--validate", action="store_true", help="check every frame as it arrives")
    p.add_argument("--quiet", action="store_true", help="no status line or summary")
    p.add_argument("--timeout", type=seconds(), default=10.0, help="RPC deadline, seconds")
    p.add_argument(
        "--stall-timeout",
        type=seconds(),
        default=30.0,
        help="resubscribe when a stream is silent this long (seconds)",
    )
    p.add_argument(
        "--give-up-after",
        type=seconds(),
        default=60.0,
        help="exit 3 when the relay stays unreachable this long (seconds); a pool that cannot "
        "be subscribed to, or stays out of the catalog, this long ends its own stream (exit 3 "
        "once every pool's has)",
    )
