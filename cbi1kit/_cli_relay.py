"""``cbi1kit record`` and ``cbi1kit serve``: the gRPC ends of the relay transport.

``register(subparsers)`` adds both subcommands to the main parser (``cbi1kit.cli``); each
handler returns the CLI exit code (0 ok, 1 invalid, 2 usage, 3 unreachable) and prints one-line
errors on stderr. ``python -m cbi1kit._cli_relay {record,serve} ...`` runs them standalone
(the tests start a killable server that way).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cbi1kit._cli_common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    U64,
    OneLineParser,
    at_least,
    check_regular_file,
    exit_code,
    ranged,
    seconds,
    wrapped,
)
from cbi1kit._files import unwritable
from cbi1kit.errors import (
    CaptureError,
    Cbi1kitError,
    CkfError,
    CkfVariant,
    RelayWireError,
    TransportError,
)
from cbi1kit.relay._transport import parse_authority, parse_header, parse_target

__all__ = ["main", "register"]


def _err(command: str, message: str) -> None:
    print(f"cbi1kit {command}: error: {message}", file=sys.stderr)


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


def _on_signals(stop: Any) -> None:
    """Ctrl-C / SIGTERM stop the session cleanly (only possible from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop())


# ---------------------------------------------------------------------------------- record


def _client_tls(args: argparse.Namespace) -> Any:
    """The TLS settings the options ask for (``None``: plaintext), every file read and checked
    now: an unusable one is a usage error before anything else happens."""
    from cbi1kit.relay._transport import ClientTls

    files = (args.ca_cert, args.client_cert, args.client_key)
    if not args.tls and all(f is None for f in files):
        return None
    return ClientTls.from_files(ca=args.ca_cert, cert=args.client_cert, key=args.client_key)


def cmd_record(args: argparse.Namespace) -> int:
    try:
        tls = _client_tls(args)
    except Cbi1kitError as exc:
        _err("record", str(exc))
        return exit_code(exc)
    if not args.list and args.output is None:
        _err("record", "an output capture (-o/--output) is needed unless --list is given")
        return EXIT_USAGE
    if args.output is not None and args.output.exists() and not args.output.is_file():
        _err(
            "record",
            f"{args.output} is not a regular file (a directory or device): write to a file",
        )
        return EXIT_UNREADABLE
    if args.output is not None and args.output.exists() and not args.append:
        _err("record", f"{args.output} exists (use --append to add to it)")
        return EXIT_USAGE
    capture = args.output
    scratch = None
    if args.list and capture is None:  # the catalog is recorded somewhere, then thrown away
        import tempfile

        scratch = tempfile.TemporaryDirectory(prefix="cbi1kit-list-")
        capture = Path(scratch.name) / "catalog.kvrcap"
    try:
        return _record(args, capture, tls)
    finally:
        if scratch is not None:
            scratch.cleanup()


def _record(args: argparse.Namespace, capture: Path, tls: Any) -> int:
    from cbi1kit.relay._recorder import (
        Recorder,
        describe_pool,
    )

    try:
        config = _record_config(args, capture, tls)
    except RelayWireError as exc:  # a subscriber id upstream's consumer would refuse
        _err("record", f"--subscriber-id: {exc}")
        return EXIT_USAGE
    recorder = Recorder(config)
    _on_signals(lambda: recorder.stop("interrupted"))
    try:
        report = recorder.run(list_only=args.list)
    except OSError as exc:
        _err("record", str(unwritable([capture], exc)))
        return EXIT_UNREADABLE
    except CaptureError as exc:  # --append to a file that is no capture: nothing to append to
        _err("record", f"cannot append to {capture}: {exc.detail}")
        return EXIT_UNREADABLE
    except Cbi1kitError as exc:
        _err("record", str(exc))
        return exit_code(exc)
    if args.list:
        catalog = recorder.catalog()
        if catalog is not None:
            print(f"catalog revision {catalog.revision}: {len(catalog.snapshot.pools)} pool(s)")
            for i, desc in enumerate(catalog.snapshot.pools):
                print(wrapped(f"[{i}] {describe_pool(desc)}", "    "))
    if report.recovered is not None:
        print(f"note: {capture}: {report.recovered}", file=sys.stderr)
    unkept = f"; no message arrived: nothing was written to {capture}" if report.removed else ""
    if report.exit_code != EXIT_OK:
        _err("record", report.stop_reason + unkept)
        return report.exit_code
    if report.removed and not args.list:
        print(f"note: {report.stop_reason}{unkept}", file=sys.stderr)
        return EXIT_OK
    if not args.list and not args.quiet:
        _print_recorded(report, recorder.paths, capture)
    if report.violations:
        print(f"{len(report.violations)} validation failure(s):", file=sys.stderr)
        for pool in report.pools:
            for v in pool.violations:
                print(
                    f"  - {pool.label}: {v}" if len(report.pools) > 1 else f"  - {v}",
                    file=sys.stderr,
                )
        return EXIT_INVALID
    return EXIT_OK


def _record_config(args: argparse.Namespace, capture: Path, tls: Any) -> Any:
    """The recorder's settings from the command line."""
    from cbi1kit.relay._recorder import PoolSelector, RecorderConfig

    return RecorderConfig(
        target=args.target,
        capture=capture,
        selector=PoolSelector(tuple(args.model), tuple(args.dc), tuple(args.producer)),
        subscriber_id=args.subscriber_id,
        tls=tls,
        authority=args.authority,
        metadata=tuple(args.header),
        duration=args.duration,
        max_frames=args.frames,
        validate=args.validate,
        status=False if args.quiet else None,
        rpc_timeout=args.timeout,
        stall_timeout=args.stall_timeout,
        give_up_after=args.give_up_after,
        append=args.append,
        rotate_bytes=None if args.rotate_size is None else int(args.rotate_size * (1 << 20)),
        rotate_seconds=args.rotate_time,
    )


def _print_recorded(report: Any, paths: list[Path], capture: Path) -> None:
    """What a recording holds, on stderr: frames, subscriptions, planes; a line per pool."""
    from cbi1kit.relay._recorder import PLANES

    several = len(report.pools) > 1
    planes = ", ".join(f"{report.plane_messages.get(p.name, 0)} {p.name}" for p in PLANES)
    unserved = "".join(f"; not served: {u}" for u in report.unserved)
    pools = f" of {len(report.pools)} pools" if several else ""
    files = len(paths)
    segments = f" ({files} segments, {paths[-1].name} the last)" if files > 1 else ""
    print(
        f"recorded {report.messages} frames ({report.payload_bytes} payload bytes) in "
        f"{report.subscriptions} subscription(s){pools} and {planes} message(s) to "
        f"{capture}{segments}; stopped: {report.stop_reason}{unserved}",
        file=sys.stderr,
    )
    if several:  # a line per pool: what it recorded, and why it ended if it failed
        for i, pool in enumerate(report.pools):
            seq = "-" if pool.last_sequence is None else str(pool.last_sequence)
            ended = "" if pool.ended is None else f"; failed: {pool.ended}"
            print(
                f"  [{i}] {pool.label}: {pool.messages} frames in {pool.subscriptions} "
                f"subscription(s), last sequence {seq}{ended}",
                file=sys.stderr,
            )


# ---------------------------------------------------------------------------------- serve


#: ``serve``'s CKF capacity when neither ``--expected-blocks`` nor ``--like`` says otherwise
SERVE_EXPECTED_BLOCKS = 4096


def expected_blocks(config: Any) -> int:
    """The feeds' CKF capacity when not given: the release's, else a small one."""
    return SERVE_EXPECTED_BLOCKS if config.release is None else int(config.release.expected_blocks)


def cmd_serve(args: argparse.Namespace) -> int:
    from cbi1kit.relay._transport import ServerTls
    from cbi1kit.sim._server import FaultPlan, ProducerFeed, RelayServer, ServerConfig

    try:
        tls = ServerTls.from_files(cert=args.tls_cert, key=args.tls_key, client_ca=args.client_ca)
    except Cbi1kitError as exc:
        _err("serve", str(exc))
        return exit_code(exc)
    config = ServerConfig(
        host=args.host,
        port=args.port,
        pace=args.pace,
        heartbeat_interval=args.heartbeat,
        readiness_heartbeat_interval=args.readiness_heartbeat,
        load_window=args.load_window,
        tls=tls,
        like=args.like,
    )
    faults = FaultPlan(
        drop_after_chunks=args.drop_after_chunks,
        corrupt_delta=args.corrupt_delta,
        stall_after=args.stall_after,
        change_generation_after=args.change_generation_after,
    )
    if args.trace is not None:
        check_regular_file(args.trace)
    if args.trace is not None and not args.trace.is_file():
        what = "no such file" if not args.trace.exists() else "not a regular file"
        _err("serve", f"cannot read {args.trace}: {what}")
        return EXIT_UNREADABLE
    try:
        if args.trace is not None:
            server = RelayServer.from_simulation(
                args.trace,
                pace=args.pace,
                limit=args.limit,
                server_config=config,
                faults=faults,
            )
        else:  # a pool per DC and model, each with its own events (seed, seed + 1, ...)
            models = dict.fromkeys(args.model or ["sim/model"])  # each once, in order
            pairs = [(m, d) for m in models for d in dict.fromkeys(args.dc or ["dc-sim"])]
            feeds = [
                ProducerFeed(
                    expected_blocks=args.expected_blocks or expected_blocks(config),
                    seed=(args.seed + i) % (1 << 64),
                    events_per_step=args.events_per_step,
                    steps=args.steps,
                    model=model,
                    dc=dc,
                )
                for i, (model, dc) in enumerate(pairs)
            ]
            server = RelayServer(feeds, config, faults=faults)
        server.start()
    except FileNotFoundError as exc:
        _err("serve", f"cannot read {exc.filename}: {exc.strerror}")
        return EXIT_UNREADABLE
    except (OSError, RuntimeError) as exc:
        _err("serve", f"cannot serve on {args.host}:{args.port}: {exc}")
        return EXIT_UNREADABLE
    except CkfError as exc:  # the feed's CkfConfig, from --expected-blocks: the option's fault
        _err("serve", str(exc))
        return EXIT_USAGE if exc.variant is CkfVariant.Config else exit_code(exc)
    except (Cbi1kitError, ValueError) as exc:
        _err("serve", str(exc))
        return exit_code(exc) if isinstance(exc, Cbi1kitError) else EXIT_INVALID
    over = "" if tls is None else " over mTLS" if tls.client_ca is not None else " over TLS"
    print(f"serving a SIMULATED relay on {server.address}{over} (Ctrl-C stops)", flush=True)
    _on_signals(server._stopping.set)
    try:
        server.wait(args.duration)
    finally:
        server.stop()
    return EXIT_OK


# ---------------------------------------------------------------------------------- parser


def register(subparsers: Any) -> None:
    """Add ``record`` and ``serve`` to ``cbi1kit``'s subcommands."""
    p = subparsers.add_parser(
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
    p.set_defaults(handler=cmd_record)

    p = subparsers.add_parser(
        "serve",
        help="run a SIMULATED relay (for demos, teaching and tests)",
        description="A simulated dynamo.kvrelay.v1 relay on loopback: synthetic or trace-driven "
        "CKF frames with upstream's stream lifecycle. Not a relay; never expose it.",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    p.add_argument("--port", type=ranged(0, 65535), default=0, help="port (0 picks a free one)")
    p.add_argument("--trace", type=Path, help="drive the simulator with this Mooncake trace")
    p.add_argument("--limit", type=at_least(1), help="read only this many trace requests")
    p.add_argument(
        "--pace", type=seconds(zero=True), default=0.01, help="seconds between producer steps"
    )
    p.add_argument("--heartbeat", type=seconds(), default=10.0, help="heartbeat interval, s")
    p.add_argument(
        "--readiness-heartbeat",
        type=seconds(),
        default=10.0,
        help="readiness snapshot repeat interval, s",
    )
    p.add_argument(
        "--load-window", type=seconds(), default=1.0, help="load and serving-load window, s"
    )
    p.add_argument("--tls-cert", type=Path, help="serve TLS with this PEM certificate chain")
    p.add_argument("--tls-key", type=Path, help="and this unencrypted PEM private key")
    p.add_argument(
        "--client-ca", type=Path, help="require client certificates signed by these (mTLS)"
    )
    p.add_argument("--steps", type=at_least(1), help="producer steps before going quiet")
    p.add_argument("--events-per-step", type=at_least(1), default=8, help="events per step")
    p.add_argument(
        "--expected-blocks",
        type=at_least(1),
        default=None,
        help=f"CKF capacity (default: {SERVE_EXPECTED_BLOCKS}; with --like, the release's)",
    )
    p.add_argument(
        "--like",
        choices=["1.6.1"],
        default=None,
        help="behave like that released relay where ours differs (ai-dynamo-runtime 1.6.1: "
        "no SubscribeServingLoad, load with expected ranks only, upstream's readiness "
        "revisions and filter size, streams dropped on shutdown)",
    )
    p.add_argument("--seed", type=U64, default=0, help="event RNG seed (the i-th pool's: seed + i)")
    p.add_argument(
        "--model",
        action="append",
        help="model name in the catalog (default sim/model; repeatable: a pool per model and DC)",
    )
    p.add_argument(
        "--dc",
        action="append",
        help="DC name, hashed into the pool id (default dc-sim; repeatable: a pool per model "
        "and DC)",
    )
    p.add_argument("--duration", type=seconds(), help="stop after this many seconds")
    p.add_argument(
        "--drop-after-chunks", type=at_least(1), help="fault: drop a stream mid-snapshot"
    )
    p.add_argument("--corrupt-delta", type=at_least(1), help="fault: corrupt the n-th delta")
    p.add_argument("--stall-after", type=at_least(1), help="fault: stall a stream after n messages")
    p.add_argument(
        "--change-generation-after", type=at_least(1), help="fault: new generation after n deltas"
    )
    p.set_defaults(handler=cmd_serve)


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="cbi1kit")
    register(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
