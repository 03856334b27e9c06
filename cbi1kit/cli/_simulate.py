"""``cbi1kit simulate``: a trace through simulated DC pools into a capture."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from cbi1kit._json import dumps as to_json
from cbi1kit.cli._common import (
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    I64_MAX,
    U64,
    U64_MAX,
    answer_args,
    at_least,
    check_regular_file,
    progress_bar,
    ranged,
    real_at_least,
)
from cbi1kit.errors import Cbi1kitError, CliError
from cbi1kit.wire._format import FilterFormat, max_delta_images

if TYPE_CHECKING:
    from cbi1kit.cli._common import Commands

_DAY_MS: Final = 86_400_000


_SIM_KNOBS: tuple[tuple[str, str, Any, str], ...] = (
    ("--dcs", "dcs", ranged(1, 16), "DC pools, one CKF lane each (1..16)"),
    ("--workers", "workers_per_dc", ranged(1, 1 << 16), "workers per DC"),
    ("--dp-ranks", "dp_ranks", ranged(1, 1 << 16), "data-parallel ranks per worker"),
    ("--capacity", "capacity_blocks", ranged(1, 1 << 32), "KV blocks per worker, LRU evicted"),
    ("--seed", "seed", U64, "simulator seed (random routing, engine ids)"),
    ("--overlap-weight", "overlap_weight", real_at_least(0), "router weight of prefill blocks"),
    ("--decode-ms-per-token", "decode_ms_per_token", real_at_least(0), "ms in flight per token"),
    ("--clear-every-ms", "clear_every_ms", ranged(1, _DAY_MS), "restart a worker every N ms"),
    ("--publish-delay-ms", "publish_delay_ms", ranged(0, _DAY_MS), "drain a window after N ms"),
    ("--expected-blocks", "expected_blocks_per_dc", U64, "CkfConfig.expected_blocks_per_dc"),
    ("--ckf-seed", "ckf_seed", U64, "CkfConfig.seed (addressing and RNG)"),
    ("--max-kicks", "max_kicks", ranged(1, 4096), "CkfConfig.max_kicks (1..4096)"),
    ("--verification-window", "verification_window", at_least(0), "CkfConfig window"),
    ("--publish-every", "publish_every_n_events", at_least(1), "CkfConfig.publish_every_n_events"),
    ("--producer-incarnation", "producer_incarnation", U64, "ProducerIdentity incarnation"),
    ("--layout-generation", "layout_generation", ranged(1, U64_MAX), "layout generation (>= 1)"),
)


_RELAY_KNOBS: tuple[tuple[str, str, Any, str], ...] = (
    ("--heartbeat-ms", "heartbeat_interval_ms", ranged(1, _DAY_MS), "heartbeat interval, ms"),
    ("--max-delta-images", "max_delta_images", ranged(1, max_delta_images()), "bigger: a snapshot"),
    (
        "--resubscribe-every-ms",
        "resubscribe_every_ms",
        ranged(1, _DAY_MS),
        "resubscribe every N ms",
    ),
    (
        "--epoch-unix-ns",
        "epoch_unix_ns",
        ranged(0, I64_MAX),  # RelayConfig holds it to the simulated clock's half
        "wall clock at simulated time 0",
    ),
)


class _KnobDefault:
    """A simulation knob's default, read from the configuration when help is printed (its
    import is too slow for every start)."""

    def __init__(self, dest: str) -> None:
        self.dest = dest

    def __str__(self) -> str:
        from cbi1kit.sim._simrelay import SimRelayConfig

        base = SimRelayConfig()
        part = base.simulator if hasattr(base.simulator, self.dest) else base.relay
        value = getattr(part, self.dest)
        if value is None:
            return "off"
        return hex(value) if self.dest.endswith("seed") and value else str(value)


def _sim_config(args: argparse.Namespace) -> Any:
    import dataclasses

    from cbi1kit.sim._simrelay import SimRelayConfig, sample_config

    base = sample_config() if args.sample else SimRelayConfig()
    sim_kw = {f: getattr(args, f) for _, f, _, _ in _SIM_KNOBS if getattr(args, f) is not None}
    if args.policy is not None:
        sim_kw["policy"] = args.policy
    relay_kw: dict[str, Any] = {
        f: getattr(args, f) for _, f, _, _ in _RELAY_KNOBS if getattr(args, f) is not None
    }
    if args.record_dc is not None:
        relay_kw["record_dc"] = args.record_dc
    try:
        config = SimRelayConfig(
            dataclasses.replace(base.simulator, **sim_kw),
            dataclasses.replace(base.relay, **relay_kw),
        )
        ckf = config.simulator.ckf_config()
        FilterFormat(
            seed=ckf.seed, bucket_count=ckf.bucket_count()
        )  # a lane CBI1 carries, or a usage error now
        return config
    except (Cbi1kitError, ValueError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def run_simulation(
    trace: Path, out: Path, config: Any, *, limit: int | None, force: bool, progress: bool
) -> Any:
    from cbi1kit._files import claim_outputs
    from cbi1kit.sim._simrelay import simulate_capture
    from cbi1kit.sim._workload import read_mooncake

    if not out.parent.is_dir():  # a typo in -o is said, not made into folders
        raise CliError(f"cannot write {out}: no such folder {out.parent}", EXIT_UNREADABLE)
    claim_outputs([out], overwrite=force)
    check_regular_file(trace)
    workload = read_mooncake(trace, limit=limit)  # a bad trace: exit_code's answer
    with progress_bar(f"simulate {trace.name}", len(workload), progress) as advance:
        return simulate_capture(workload, out, config, overwrite=force, progress=advance)


def run(args: argparse.Namespace) -> int:
    config = _sim_config(args)
    result = run_simulation(
        args.trace,
        args.output,
        config,
        limit=args.limit,
        force=args.force,
        progress=not args.no_progress,
    )
    if args.json:
        print(to_json(result.as_dict(), indent=2, default=str))
    else:
        print(result)
    return EXIT_OK


def register(sub: Commands) -> None:
    """``cbi1kit simulate``."""
    from cbi1kit.sim._policies import POLICIES

    p = sub.add_parser(
        "simulate",
        help="trace → capture: simulate workers, CKF producers and a relay",
        description="Run a Mooncake trace through simulated DC pools (LRU KV caches, a router, "
        "CKF producers) and record what a global consumer receives into a kvrcap capture: a "
        "catalog stream describing every pool, then every DC's pool stream (--record-dc: one).",
    )
    p.add_argument("trace", type=Path, help="Mooncake JSONL trace")
    p.add_argument("-o", "--output", type=Path, required=True, help="capture file to write")
    p.add_argument("--limit", type=at_least(1), help="only the first N requests")
    p.add_argument("--force", action="store_true", help="overwrite an existing capture")
    p.add_argument("--sample", action="store_true", help="start from the bundled sample's knobs")
    p.add_argument("--policy", choices=POLICIES, help="routing policy (default exact)")
    for flag, dest, typ, text in _SIM_KNOBS + _RELAY_KNOBS:
        knob = p.add_argument(flag, dest=dest, type=typ, help=text)
        # set after adding: argparse (3.14) expands a help string as it is added
        knob.knob = _KnobDefault(dest)  # type: ignore[attr-defined]
        knob.help = f"{text} (default: %(knob)s)"
    p.add_argument(
        "--record-dc",
        type=ranged(0, 15),
        help="record this DC's pool stream alone (default: every DC's, with a catalog stream)",
    )
    answer_args(p, "figures")
    p.set_defaults(handler=run)
