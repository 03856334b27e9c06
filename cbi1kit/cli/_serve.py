"""``cbi1kit serve``: a SIMULATED relay on loopback, for demos, teaching and tests."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cbi1kit.cli._common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    U64,
    at_least,
    check_regular_file,
    on_signals,
    ranged,
    seconds,
)
from cbi1kit.errors import Cbi1kitError, CkfError, CkfVariant, CliError

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands


#: ``serve``'s CKF capacity when neither ``--expected-blocks`` nor ``--like`` says otherwise
SERVE_EXPECTED_BLOCKS = 4096


def expected_blocks(config: Any) -> int:
    """The feeds' CKF capacity when not given: the release's, else a small one."""
    return SERVE_EXPECTED_BLOCKS if config.release is None else int(config.release.expected_blocks)


def run(args: argparse.Namespace) -> int:
    from cbi1kit.relay._transport import ServerTls

    tls = ServerTls.from_files(cert=args.tls_cert, key=args.tls_key, client_ca=args.client_ca)
    if args.trace is not None:
        check_regular_file(args.trace)
        if not args.trace.is_file():
            what = "no such file" if not args.trace.exists() else "not a regular file"
            raise CliError(f"cannot read {args.trace}: {what}", EXIT_UNREADABLE)
    try:
        server = _server(args, tls)
        server.start()
    except FileNotFoundError as exc:
        raise CliError(f"cannot read {exc.filename}: {exc.strerror}", EXIT_UNREADABLE) from None
    except (OSError, RuntimeError) as exc:
        raise CliError(f"cannot serve on {args.host}:{args.port}: {exc}", EXIT_UNREADABLE) from None
    except CkfError as exc:  # the feed's CkfConfig, from --expected-blocks: the option's fault
        if exc.variant is CkfVariant.Config:
            raise CliError(str(exc), EXIT_USAGE) from None
        raise
    except ValueError as exc:
        if isinstance(exc, Cbi1kitError):
            raise
        raise CliError(str(exc), EXIT_INVALID) from None
    over = "" if tls is None else " over mTLS" if tls.client_ca is not None else " over TLS"
    print(f"serving a SIMULATED relay on {server.address}{over} (Ctrl-C stops)", flush=True)
    on_signals(server._stopping.set)
    try:
        server.wait(args.duration)
    finally:
        server.stop()
    return EXIT_OK


def _server(args: argparse.Namespace, tls: Any) -> Any:
    """The simulated relay the options describe: a trace's simulation, or a synthetic pool per
    DC and model, each with its own events (seed, seed + 1, ...)."""
    from cbi1kit.sim._feeds import ProducerFeed
    from cbi1kit.sim._hub import FaultPlan, ServerConfig
    from cbi1kit.sim._server import RelayServer

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
        return RelayServer.from_simulation(
            args.trace, pace=args.pace, limit=args.limit, server_config=config, faults=faults
        )
    from cbi1kit.hashing._dc_names import DEFAULT_SIM_DC

    models = dict.fromkeys(args.model or ["sim/model"])  # each once, in order
    pairs = [(m, d) for m in models for d in dict.fromkeys(args.dc or [DEFAULT_SIM_DC])]
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
    return RelayServer(feeds, config, faults=faults)


def register(sub: Commands) -> None:
    """``cbi1kit serve``."""
    p = sub.add_parser(
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
    _tls_args(p.add_argument_group("TLS"))
    _fault_args(p.add_argument_group("faults (for tests)"))
    p.set_defaults(handler=run)


def _tls_args(p: argparse._ArgumentGroup) -> None:
    """``serve`` over TLS or mTLS."""
    p.add_argument("--tls-cert", type=Path, help="serve TLS with this PEM certificate chain")
    p.add_argument("--tls-key", type=Path, help="and this unencrypted PEM private key")
    p.add_argument(
        "--client-ca", type=Path, help="require client certificates signed by these (mTLS)"
    )


def _fault_args(p: argparse._ArgumentGroup) -> None:
    """The faults ``serve`` injects (``FaultPlan``)."""
    p.add_argument(
        "--drop-after-chunks", type=at_least(1), help="fault: drop a stream mid-snapshot"
    )
    p.add_argument("--corrupt-delta", type=at_least(1), help="fault: corrupt the n-th delta")
    p.add_argument("--stall-after", type=at_least(1), help="fault: stall a stream after n messages")
    p.add_argument(
        "--change-generation-after", type=at_least(1), help="fault: new generation after n deltas"
    )
