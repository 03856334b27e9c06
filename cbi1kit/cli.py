"""The ``cbi1kit`` command line: one entry point, one subcommand per job.

Exit codes: 0 success; 1 the input was read but is invalid (a frame with problems, a stream with
violations, a damaged capture); 2 usage errors (argparse, bad knobs, an output that exists); 3 the
input could not be read at all (missing, not a capture or trace). Errors are one line on stderr;
long work shows a progress bar on stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from cbi1kit._cli_common import (
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_UNREADABLE,
    EXIT_USAGE,
    I64_MAX,
    U64,
    U64_MAX,
    CliError,
    OneLineParser,
    at_least,
    cannot_read,
    check_capture,
    check_regular_file,
    check_source,
    damaged_input,
    dataset_damage,
    exit_code,
    ranged,
    real_at_least,
    seconds,
    table,
    terminal_width,
    wrapped,
)
from cbi1kit._cli_fleet import register as register_fleet
from cbi1kit._cli_relay import register as register_relay
from cbi1kit._extras import COMMAND_EXTRAS, missing_extra, require
from cbi1kit._files import unwritable
from cbi1kit._json import dumps as to_json
from cbi1kit._version import __version__
from cbi1kit.errors import (
    CaptureError,
    Cbi1kitError,
    IdentityError,
    IdentityVariant,
    LaneError,
    LaneVariant,
    error_name,
    one_line,
)
from cbi1kit.wire._format import (
    FRAME_HEAD_BYTES,
    IMAGES_MAX_FRAME_BYTES,
    FilterFormat,
    max_delta_images,
)
from cbi1kit.wire._layout import DELTA_IMAGE, DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX, layout_markdown

if TYPE_CHECKING:
    from cbi1kit.wire._inspect import Inspection

__all__ = ["main"]

Handler = Callable[[argparse.Namespace], int]


def _expected_format(args: argparse.Namespace) -> FilterFormat | None:
    if args.seed is None and args.buckets is None:
        return None
    if args.seed is None or args.buckets is None:
        raise CliError("--seed and --buckets go together", EXIT_USAGE)
    try:
        return FilterFormat(args.seed, args.buckets)
    except Cbi1kitError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _is_capture(path: Path) -> bool:
    from cbi1kit.capture._file import is_capture_file

    check_regular_file(path)
    try:
        return is_capture_file(path)
    except OSError as exc:
        raise cannot_read(path, exc) from None


def _inspect_frame_file(path: Path, fmt: FilterFormat | None) -> Inspection:
    """A file as one CBI1 frame; a file too large to be one is answered from its header
    alone, without reading the rest."""
    from cbi1kit.wire._inspect import inspect  # numpy loads here, not for --help

    try:
        size = path.stat().st_size
        if size > IMAGES_MAX_FRAME_BYTES:
            with open(path, "rb") as f:
                return inspect(f.read(FRAME_HEAD_BYTES), fmt, length=size)
        data = path.read_bytes()
    except OSError as exc:
        raise cannot_read(path, exc) from None
    if not data:
        raise CliError(f"cannot read {path}: empty input (no bytes)")
    return inspect(data, fmt)


def cmd_inspect(args: argparse.Namespace) -> int:
    fmt = _expected_format(args)
    worst = EXIT_OK
    for path in args.files:
        try:  # a file that cannot be read is said and skipped: the others are still inspected
            if _is_capture(path):
                worst = max(worst, _inspect_capture(path, fmt, args))
                continue
            report = _inspect_frame_file(path, fmt)
        except CliError as exc:
            if len(args.files) == 1:
                raise
            print(f"cbi1kit inspect: error: {exc}", file=sys.stderr)
            worst = max(worst, exc.code)
            continue
        print(wrapped(f"== {path}"))
        print(report.hexdump(head=args.head, tail=args.tail).text(terminal_width()))
        if report.problems:
            worst = EXIT_INVALID
            print(f"{len(report.problems)} problem(s):")
            for problem in report.problems:
                print(f"  - {problem}")
        else:
            print("valid: decodes cleanly")
        if (why := _unrecognised(path)) is not None:  # shown, and refused as replay refuses it
            print(f"cbi1kit inspect: error: {why}", file=sys.stderr)
            worst = EXIT_UNREADABLE
    return worst


def _unrecognised(path: Path) -> str | None:
    """Why ``path`` is no input any reader takes (its first bytes), or None when one does."""
    from cbi1kit.capture._readers import source_format

    try:
        source_format(path)
    except CaptureError as exc:
        return str(cannot_read(path, exc))
    except OSError:
        return None  # already read once: the view above stands
    return None


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


# ------------------------------------------------------------------------------ progress bars


@contextmanager
def _progress(
    description: str, total: int | None, enabled: bool = True
) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (only on a terminal); yields ``advance(n)``."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
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
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def _export_dataset(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._dataset import export_dataset, prepare_dataset

    if args.force:
        raise CliError(
            "--dataset appends and never rewrites: --force is for the flat export", EXIT_USAGE
        )
    for capture in args.capture:
        check_capture(capture)
    prepare_dataset(args.output)
    with _progress("export --dataset", None, not args.no_progress):
        results = export_dataset(args.capture, args.output)
    written = [r for r in results if not r.skipped]
    for r in results:
        what = "already in the dataset" if r.skipped else f"{r.rows.get('frames', 0)} frames"
        print(f"{r.path}: {what}")
    print(f"{len(written)} capture file(s) added to {args.output}")
    dataset_damage(results)
    return EXIT_OK


# ------------------------------------------------------------------------------------ helpers


def _replay(
    path: Path | Any,
    fmt: FilterFormat | None,
    progress: bool,
    *,
    history: bool = False,
) -> Any:
    """Replay any frame source (a path, or a ``Capture`` already open) as the library does: a
    capture's damage is reported where it is and reading goes on after it; unreadable sources
    raise CliError (exit 3). Per-record events are counted, not kept, and the history
    ``lane_at`` reads is kept only for ``stats --at``."""
    from cbi1kit.analysis._capture import Capture, open_capture

    if not isinstance(path, Capture):
        check_source(path)
    capture = path if isinstance(path, Capture) else open_capture(path, keep_tables=False)
    name = Path(str(getattr(capture.source, "name", capture.source))).name
    with _progress(f"replay {name}", None, progress) as advance:
        return capture.replay(
            expected_format=fmt, keep_history=history, keep_events=False, progress=advance
        )


def _violation_lines(report: Any, limit: int) -> list[str]:
    out = []
    for v in report.violations[:limit]:
        out.append(f"  - {v.describe()} [{v.action}]")
    more = len(report.violations) - limit
    if more > 0:
        out.append(f"  … {more} more")
    return out


def _spans(ranges: Sequence[tuple[int, int]], most: int = 4) -> str:
    shown = [f"{a}..={b}" for a, b in ranges]
    if len(shown) > most:
        shown = [*shown[: most - 1], f"… ({len(shown) - most} more)", shown[-1]]
    return ", ".join(shown) or "none"


def _hex(value: int | None) -> str:
    return "-" if value is None else f"{value:016x}"


def _lane_rows(report: Any) -> list[tuple[object, ...]]:
    """One row per lane: its DC, pool domain, streams, sessions, final sequence, violations."""
    rows: list[tuple[object, ...]] = []
    for lane in report.lanes:
        pool = lane.pool
        domain = "-" if pool is None else str(pool.indexer_domain)[:17]
        rows.append(
            (
                _hex(lane.dc_id),
                domain,
                len(lane.streams),
                _spans(lane.sequence_ranges, 3),
                "-" if lane.final_sequence is None else lane.final_sequence,
                len(lane.violations),
            )
        )
    return rows


def _print_replay_summary(report: Any, limit: int) -> None:
    counts = report.counts
    print(f"frames: {report.frames}")
    print(table(sorted(counts.items()), ("event", "count")))
    if len(report.lanes) <= 1:
        print(f"snapshot sessions (sequence ranges): {_spans(report.sequence_ranges, 10**9)}")
        print(f"final sequence: {report.final_sequence}")
    else:
        print(f"lanes: {len(report.lanes)} (one per pool; a session per stream)")
        print(
            table(
                _lane_rows(report),
                ("dc", "indexer domain", "streams", "sessions", "final seq", "violations"),
            )
        )
    if report.ok:
        print("valid: no violations")
    else:
        print(f"{len(report.violations)} violation(s):")
        for line in _violation_lines(report, limit):
            print(line)
    if report.plane_damage:  # the catalog's and readiness records: no frame's violation
        first = report.plane_damage[0].error
        print(
            f"planes: {len(report.plane_damage)} catalog or readiness update(s) that do not "
            f"decode, first: {error_name(first)}: {first}"
        )
    broken = report.plane_violations  # the catalog and readiness rules (coordinator.rs)
    if broken:
        print(f"planes: {len(broken)} rule break(s), first: {broken[0].describe()}")


# -------------------------------------------------------------------------- inspect (capture)


def _inspect_capture(path: Path, fmt: FilterFormat | None, args: argparse.Namespace) -> int:
    """A capture's overview (``Capture.overview``), one frame annotated, then its replay: one
    scan serves all three."""
    from cbi1kit.analysis._capture import Capture
    from cbi1kit.capture._streams import KV_EVENT_RELAY

    print(wrapped(f"== {path} (kvrcap capture)"))
    capture = Capture(path)
    view = capture.overview(rows=args.rows, frame=args.frame)
    first = view.damage[0] if view.damage else None
    print(
        table(
            [
                ("magic", "KVRCAP\\r\\n"),
                ("size", f"{view.size} bytes"),
                ("created_unix_ns", view.created_unix_ns),
                ("records", sum(view.records.values())),
                *((f"records.{k}", v) for k, v in view.records.items()),
                ("damage", "none" if first is None else str(first)),
                *((f"damage {i + 1}", str(d)) for i, d in enumerate(view.damage[1:8], start=1)),
                ("damaged ranges", len(view.damage)),
                *((f"unreadable {e.context.get('record_index')}", str(e)) for e in view.unreadable),
            ],
            ("field", "value"),
        )
    )
    print()
    streams = [
        (r.stream, r.method.removeprefix(KV_EVENT_RELAY), r.messages, r.status, r.reason)
        for r in view.streams.values()
    ]
    print(table(streams, ("stream", "method", "messages", "status", "reason")))
    print()
    shown = [
        (f.frame, f.record, f.offset, f.stream, f.kind, f"{f.base_sequence}→{f.sequence}",
         f.payload_len, f.send_ts_us)
        for f in view.frames
    ]  # fmt: skip
    header = ("frame", "record", "offset", "stream", "kind", "base→seq", "bytes", "send_ts_us")
    print(table(shown, header))
    count = view.frame_count
    if count > len(shown):
        print(f"… {count - len(shown)} more frames (--rows)")
    if count:
        if view.picked is None:
            raise CliError(f"--frame {args.frame} is outside 0..{count - 1}", EXIT_USAGE)
        k, kind, payload = view.picked
        print(f"\n-- frame {k}: annotated CBI1 payload ({kind})")
        if payload:
            from cbi1kit.wire._inspect import inspect

            dump = inspect(payload, fmt).hexdump(head=args.head, tail=args.tail)
            print(dump.text(terminal_width()))
        else:
            print("(empty payload: a heartbeat)")
    print("\n-- validation (replay with the consumer's rules)")
    report = _replay(capture, fmt, not args.no_progress)
    _print_replay_summary(report, args.max_violations)
    clean = report.ok and first is None and not view.unreadable
    return EXIT_OK if clean else EXIT_INVALID


# ---------------------------------------------------------------------------------- simulate

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
        FilterFormat(ckf.seed, ckf.bucket_count())  # a lane CBI1 carries, or a usage error now
        return config
    except (Cbi1kitError, ValueError) as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def _run_simulation(
    trace: Path, out: Path, config: Any, *, limit: int | None, force: bool, progress: bool
) -> Any:
    from cbi1kit._files import claim_outputs
    from cbi1kit.sim._simrelay import simulate_capture
    from cbi1kit.sim._workload import read_mooncake

    claim_outputs([out], overwrite=force)
    check_regular_file(trace)
    workload = read_mooncake(trace, limit=limit)  # a bad trace: exit_code's answer
    out.parent.mkdir(parents=True, exist_ok=True)
    with _progress(f"simulate {trace.name}", len(workload), progress) as advance:
        return simulate_capture(workload, out, config, overwrite=force, progress=advance)


def _print_sim(result: Any) -> None:
    sim = result.simulation
    print(
        table(
            [
                ("requests", sim.requests),
                ("events (stored/removed/cleared)", "/".join(map(str, sim.events.values()))),
                ("event errors", sim.event_errors or "none"),
                ("hit rate", f"{sim.hit_rate:.4f}"),
                ("requests per DC", sim.requests_per_dc),
                ("deltas per DC", sim.deltas),
                ("load factor per DC", [round(a, 4) for a in sim.load_factors]),
                ("capacity failures per DC", sim.capacity_failures),
                ("simulated time", f"{(sim.end_ms - sim.start_ms) / 1000:.1f} s"),
                ("wall time", f"{sim.wall_seconds:.2f} s"),
                ("capture", f"{result.path} ({result.capture_bytes} bytes)"),
                ("messages", result.messages),
                (
                    "snapshot frames / delta frames",
                    f"{result.snapshot_frames} / {result.delta_frames}",
                ),
                ("heartbeats", result.heartbeats),
                ("catalog updates", result.catalog_updates),
                (
                    "streams (forced snapshots, resubscriptions)",
                    f"{result.streams} ({result.forced_snapshots}, {result.resubscriptions})",
                ),
                ("final sequence per recorded DC", result.final_sequence),
            ]
            + (
                [
                    ("distinct absent probes", sim.absent_probes),
                    (
                        "false positives (expected 8α/65534)",
                        f"{sim.false_positives} ({sim.expected_false_positives:.1f})",
                    ),
                    ("measured FPR", str(sim.fpr)),
                    ("estimated FPR 8α/65534", f"{sim.estimated_fpr:.2e}"),
                ]
                if sim.fpr is not None
                else []
            ),
            ("figure", "value"),
        )
    )


def cmd_simulate(args: argparse.Namespace) -> int:
    config = _sim_config(args)
    result = _run_simulation(
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
        _print_sim(result)
    return EXIT_OK


# -------------------------------------------------------------------------------- replay etc.


def _lane_json(lane: Any) -> dict[str, object]:
    pool = lane.pool
    return {
        "dc_id": _hex(lane.dc_id),
        "pool": None if pool is None else str(pool),
        "streams": lane.streams,
        "sequence_ranges": lane.sequence_ranges,
        "final_sequence": lane.final_sequence,
        "counts": lane.counts,
        "violations": len(lane.violations),
    }


def cmd_replay(args: argparse.Namespace) -> int:
    fmt = _expected_format(args)
    report = _replay(args.capture, fmt, not args.no_progress)
    if args.json:
        only = len(report.lanes) <= 1
        print(
            to_json(
                {
                    "frames": report.frames,
                    "counts": report.counts,
                    "sequence_ranges": report.sequence_ranges if only else None,
                    "final_sequence": report.final_sequence if only else None,
                    "lanes": [_lane_json(lane) for lane in report.lanes],
                    "ok": report.ok,
                    "violations": [
                        {
                            "frame_index": v.frame_index,
                            "stream_id": v.stream_id,
                            "sequence": v.sequence,
                            "rule": v.rule,
                            "reason": v.reason,
                            "action": v.action,
                        }
                        for v in report.violations
                    ],
                    "plane_damage": [
                        {
                            "record_index": d.error.record_index,
                            "error": f"{error_name(d.error)}: {d.error}",
                        }
                        for d in report.plane_damage
                    ],
                    "plane_violations": [v.to_dict() for v in report.plane_violations],
                },
                indent=2,
            )
        )
    else:
        print(wrapped(f"== {args.capture}"))
        _print_replay_summary(report, args.max_violations)
    return EXIT_OK if report.ok else EXIT_INVALID


def cmd_export(args: argparse.Namespace) -> int:
    if args.dataset:
        return _export_dataset(args)
    try:
        from cbi1kit.analysis._shorthands import export_parquet
    except ImportError:  # pragma: no cover - _tables is part of the package
        raise CliError("Parquet export is not available in this build", EXIT_UNREADABLE) from None
    if len(args.capture) > 1:
        raise CliError(
            "the flat export writes one source's tables: give one, or --dataset for several",
            EXIT_USAGE,
        )
    (source,) = args.capture
    check_source(source)
    with _progress(f"export {source.name}", None, not args.no_progress):
        written = export_parquet(source, args.output, overwrite=args.force)
    for name, where in written.items():
        print(f"{name}: {where}")
    import polars as pl

    damaged = (
        pl.scan_parquet(written["frames"])
        .filter(pl.col("kind") == "SOURCE_ERROR")
        .select("validation_error")
        .collect()
    )
    if damaged.height:  # any source: a damaged capture, a dump that stops parsing, ...
        raise damaged_input(damaged.height, damaged.item(0, 0), "the tables hold")
    return EXIT_OK


def _pick_lane(report: Any, path: Path, dc: str | None) -> Any:
    """The lane ``--dc`` names (an id in hex or a DC name), or the only one; a usage error
    naming the lanes otherwise."""
    if not report.lanes:
        raise _never_installed(path, report.violations)
    try:
        return report.lane(dc)
    except LaneError as exc:
        several = len(report.lanes) > 1
        raise _lane_choice(path, exc, several=several, asked={path: report}) from None


def _never_installed(path: Path, violations: Sequence[Any]) -> CliError:
    """Exit 1 for a lane with no snapshot, naming the first violation that kept it out (a
    wrong --seed or --buckets, damage): 'never installed' alone sent the user looking."""
    from cbi1kit.analysis._events import never_installed

    return CliError(f"{path}: {never_installed(violations)}", EXIT_INVALID)


def _lane_choice(
    path: Path, exc: LaneError, *, several: bool, asked: Mapping[Path, Any] | None = None
) -> CliError:
    """The usage error of a lane ``--dc`` did not pick (out of ``several``, a hint)."""
    hint = " (--dc); `cbi1kit view` shows every lane" if several else ""
    return _unanswerable(f"{path}: {exc}{hint}", asked or {})


def _unanswerable(message: str, asked: Mapping[Path, Any]) -> CliError:
    """A question the captures ``asked`` (path: replay report) cannot answer (no such lane, no
    catalog, a moment not replayed): a usage error (exit 2), unless one of them is damaged,
    which may be why: then exit 1 naming it and its first damage (the lane, the catalog or the
    moment may be what it took)."""
    for path, report in asked.items():
        damage = [v for v in report.violations if v.rule == "SourceDamaged"]
        if not damage:
            continue
        first = damage[0]
        return CliError(
            f"{message}; {path} is damaged ({len(damage)} damaged range(s), first: "
            f"{first.describe()}), which may be why",
            EXIT_INVALID,
        )
    return CliError(message, EXIT_USAGE)


def cmd_stats(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._global import lane_at_moment
    from cbi1kit.ckf._addressing import CkfAddressing
    from cbi1kit.ckf._stats import lane_stats

    fmt = _expected_format(args)
    report = _replay(args.capture, fmt, not args.no_progress, history=args.at is not None)
    lane = _pick_lane(report, args.capture, args.dc)
    if lane.final_lane is None:
        raise _never_installed(args.capture, lane.violations or report.violations)
    lane_fmt = fmt or lane.format
    try:
        sequence, words = lane_at_moment(report, lane, args.at)
        if words is None:
            raise LaneError(LaneVariant.NotReady, message=f"the lane was not ready at {args.at}")
    except LaneError as exc:
        raise _unanswerable(str(exc), {args.capture: report}) from None
    stats = lane_stats(
        words,
        addressing=CkfAddressing(lane_fmt.bucket_count, lane_fmt.seed),
        fpr_probes=args.fpr_probes,
        seed=args.probe_seed,
    )
    figures = {
        "sequence": sequence,
        "dc_id": _hex(lane.dc_id),
        "seed": f"0x{lane_fmt.seed:016x}",
        **{k: v for k, v in stats.as_dict().items() if v is not None},
    }
    if args.json:
        if stats.fpr is not None:
            figures["measured_fpr_interval"] = stats.fpr.INTERVAL
        # the exit code's reason, in the answer too
        figures |= {"ok": report.ok, "violations": len(report.violations)}
        print(to_json(figures, indent=2))
    else:
        # the measurement as one line: rate, counts and interval read together
        fpr_columns = {} if stats.fpr is None else stats.fpr.columns()
        measured: list[tuple[str, object]] = (
            [] if stats.fpr is None else [("measured_fpr", str(stats.fpr))]
        )
        rows = [(k, v) for k, v in figures.items() if k not in fpr_columns]
        print(wrapped(f"== {args.capture} at sequence {sequence}"))
        print(table(rows + measured, ("stat", "value")))
        if not report.ok:
            print(
                f"note: the stream has {len(report.violations)} violation(s); see `cbi1kit replay`"
            )
    return EXIT_OK if report.ok else EXIT_INVALID


def _moment(text: str) -> Any:
    """``--at``: a sequence, an ISO 8601 time with a zone, or +offset (checked at parse time)."""
    from cbi1kit.analysis._global import parse_at

    try:
        return parse_at(text)
    except LaneError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _max_age_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-age",
        type=seconds(),
        metavar="SECONDS",
        help="the router's overlap_max_age: mark a ready lane stale (the scorer gives it no "
        "score) when its last snapshot, delta or heartbeat is older than this at the moment",
    )


def _view_lane_rows(domain: Any, now: int | None = None) -> list[tuple[object, ...]]:
    from cbi1kit.analysis._global import format_unix_ns
    from cbi1kit.ckf._bucket import lane_occupancy

    rows: list[tuple[object, ...]] = []
    for n in domain.lanes:
        p = n.producer
        words = domain.table.lane_words(n.lane)
        rows.append(
            (
                n.lane,
                _hex(n.pool.dc_id.value),
                "-" if p is None else f"{p.producer_incarnation:x}.{p.layout_generation}",
                "yes" if n.ready else "no",
                "-" if n.sequence is None else n.sequence,
                "-" if n.time_unix_ns is None else format_unix_ns(n.time_unix_ns),
                "-" if n.stream_id is None else n.stream_id,
                f"{lane_occupancy(words) / (4 * words.shape[0]):.4f}" if n.ready else "-",
                _lane_why(n, now),
            )
        )
    return rows


def _lane_why(n: Any, now: int | None) -> str:
    """A view lane's note: why it is not ready, or that it is stale (and since when)."""
    if not n.ready:
        return str(n.why).removeprefix("not ready: ")
    if n.stale and now is not None and n.touched_unix_ns is not None:
        return f"stale: last message {(now - n.touched_unix_ns) / 1e9:.1f} s before"
    return ""


def _view_json(view: Any, report: Any, path: Path) -> dict[str, object]:
    from cbi1kit.analysis._global import format_unix_ns

    def lane(n: Any) -> dict[str, object]:
        p = n.producer
        return {
            "lane": n.lane,
            "pool": str(n.pool),
            "dc_id": _hex(n.pool.dc_id.value),
            "producer": None
            if p is None
            else {
                "producer_incarnation": f"0x{p.producer_incarnation:016x}",
                "layout_generation": p.layout_generation,
            },
            "ready": n.ready,
            "sequence": n.sequence,
            "time_unix_ns": n.time_unix_ns,
            "time": None if n.time_unix_ns is None else format_unix_ns(n.time_unix_ns),
            "stream_id": n.stream_id,
            "session": n.session,
            "why": n.why,
            "last_message_unix_ns": n.touched_unix_ns,
            "stale": n.stale,
        }

    return {
        "capture": str(path),
        "model": view.model,
        "at": None if view.at is None else str(view.at),
        "unix_ns": view.unix_ns,
        "max_age_ns": view.max_age_ns,
        "catalog_revisions": [c.revision for c in view.catalogs],
        "domains": [
            {
                "indexer_domain": str(d.indexer_domain),
                "seed": f"0x{d.table.format.seed:016x}",
                "bucket_count": d.table.format.bucket_count,
                "configured_lanes": d.table.configured_lanes,
                "ready_lanes": d.table.ready_mask(),
                "lanes": [lane(n) for n in d.lanes],
            }
            for d in view.domains
        ],
        "skipped": [[None if pool is None else str(pool), why] for pool, why in view.skipped],
        "ok": report.ok,
        "violations": len(report.violations),
    }


def cmd_view(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._global import build_global_view, format_unix_ns
    from cbi1kit.errors import IdentityError

    fmt = _expected_format(args)
    report = _replay(args.capture, fmt, not args.no_progress, history=True)
    try:
        view = build_global_view(report, model=args.model, at=args.at, max_age=args.max_age)
    except IdentityError as exc:  # a model no pool of the catalog serves
        raise CliError(str(exc), EXIT_USAGE) from None
    except LaneError as exc:
        if exc.variant in (
            LaneVariant.NoCatalog,
            LaneVariant.TimeNotRecorded,
        ):  # a question this capture can't answer
            raise _unanswerable(str(exc), {args.capture: report}) from None
        raise  # the manifest's rules: invalid input (exit 1)
    if args.json:
        print(to_json(_view_json(view, report, args.capture), indent=2))
        return EXIT_OK if report.ok else EXIT_INVALID
    when = "at the end of every lane" if view.at is None else f"at {view.at}"
    if view.unix_ns is not None and view.at is not None and view.at.unix_ns is None:
        when += f" ({format_unix_ns(view.unix_ns)})"
    what = "every pool" if view.model is None else f"model {view.model!r}"
    print(wrapped(f"== {args.capture}: the global view of {what} {when}"))
    for catalog in view.catalogs:
        print(f"catalog revision {catalog.revision}: {len(catalog.pools)} pool(s)")
    if not view.domains:  # no pool at all, or none placeable at this moment (skipped below)
        print(
            f"no lane: none of its {len(view.skipped)} pool(s) can be placed {when}"
            if view.skipped
            else "no lane: the capture holds no pool"
        )
    for d in view.domains:
        t = d.table
        print()
        print(
            wrapped(
                f"-- indexer domain {d.indexer_domain}: seed 0x{t.format.seed:016x}, "
                f"{t.format.bucket_count} buckets, {len(d.lanes)} lane(s), "
                f"ready {t.ready_mask():#06x} of {t.configured_lanes:#06x}"
            )
        )
        header = ("lane", "dc", "producer", "ready", "sequence", "time", "stream", "load", "why")
        print(table(_view_lane_rows(d, view.now_unix_ns), header))
    for pool, why in view.skipped:
        print(f"skipped {'a lane' if pool is None else pool}: {why}")
    if not report.ok:
        print(
            f"\nnote: the capture has {len(report.violations)} violation(s); see `cbi1kit replay`"
        )
    return EXIT_OK if report.ok else EXIT_INVALID


# ---------------------------------------------------------------------------- explain, diff

_U32_MAX: Final = (1 << 32) - 1


def _parse_tokens(text: str) -> list[int]:
    """Tokens as text: integers (``0x`` allowed) separated by commas or white space, a JSON
    list's brackets allowed; each a u32. ``ValueError`` names the first bad one."""
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    items = re.split(r"\s*,\s*|\s+", body.strip())
    if items == [""]:
        raise ValueError("no tokens")
    tokens = []
    for i, item in enumerate(items):
        try:
            value = int(item, 0)
        except ValueError:
            raise ValueError(f"token {i} ({item!r}) is not an integer") from None
        if not 0 <= value <= _U32_MAX:
            raise ValueError(f"token {i} ({item}) is outside 0..={_U32_MAX} (u32)")
        tokens.append(value)
    return tokens


def _token_list(text: str) -> list[int]:
    """``--tokens 1,2,3``: checked at parse time."""
    try:
        return _parse_tokens(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def _read_tokens(path: Path) -> list[int]:
    """``--tokens-file``: exit 3 when it cannot be read or is empty, 1 when it holds anything
    but tokens."""
    check_regular_file(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise cannot_read(path, exc) from None
    if not data:
        raise CliError(f"cannot read {path}: empty input (no bytes)")
    try:
        return _parse_tokens(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CliError(
            f"{path}: not text ({exc.reason} at byte {exc.start})", EXIT_INVALID
        ) from None
    except ValueError as exc:
        raise CliError(f"{path}: {exc}", EXIT_INVALID) from None


def _trace_request(path: Path, index: int) -> Any:
    """Request ``index`` of a Mooncake trace (a bad trace: exit_code's answer)."""
    from cbi1kit.sim._workload import read_mooncake

    check_regular_file(path)
    workload = read_mooncake(path, limit=index + 1)
    if index >= len(workload):
        raise CliError(
            f"--request {index} is outside {path}'s {len(workload)} request(s)", EXIT_USAGE
        )
    return workload.request(index)


#: what a capture cannot answer (exit 2, as for ``view``): the model, its catalog, its domain
_EXPLAIN_USAGE: Final[Mapping[type[Cbi1kitError], frozenset[StrEnum]]] = {
    IdentityError: frozenset({IdentityVariant.UnknownModel, IdentityVariant.NotALora}),
    LaneError: frozenset(
        {
            LaneVariant.NoCatalog,
            LaneVariant.TimeNotRecorded,
            LaneVariant.SeveralDomains,
            LaneVariant.NoSuchLane,
            LaneVariant.SeveralLanes,
        }
    ),
}


def _usage_if_unanswerable(exc: Cbi1kitError, asked: Mapping[Path, Any]) -> None:
    if exc.variant in _EXPLAIN_USAGE.get(exc.family(), frozenset()):
        raise _unanswerable(str(exc), asked) from None


def cmd_explain(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._shorthands import explain

    check_source(args.capture)
    tokens: list[int] | None = args.tokens
    request = None
    if args.request is not None and args.trace is None:
        raise CliError("--request goes with --trace", EXIT_USAGE)
    if args.tokens_file is not None:
        tokens = _read_tokens(args.tokens_file)
    elif args.trace is not None:
        if args.request is None:
            raise CliError("--trace needs --request N (which request of the trace)", EXIT_USAGE)
        request = _trace_request(args.trace, args.request)
    report = _replay(args.capture, None, not args.no_progress, history=True)
    try:
        result = explain(
            report,
            model=args.model,
            tokens=tokens,
            request=request,
            at=args.at,
            max_age=args.max_age,
            lora=args.lora,
            local_dc=args.local_dc,
            tie_key=args.tie_key,
            domain=args.domain,
            verification_window=args.verification_window,
        )
    except Cbi1kitError as exc:
        _usage_if_unanswerable(exc, {args.capture: report})
        raise
    if args.json:
        print(
            to_json({"capture": str(args.capture), **result.to_dict(), "ok": report.ok}, indent=2)
        )
    else:
        print(wrapped(str(result)))
        if not report.ok:
            print(
                f"note: the capture has {len(report.violations)} violation(s); see `cbi1kit replay`"
            )
    return EXIT_OK if report.ok else EXIT_INVALID


def _lane_input(path: Path) -> Any:
    """A diff side given on the command line, checked before any replay: a ``.npy`` lane
    (loaded; unreadable: exit 3, no lane: exit 1) or a readable capture (its path)."""
    from cbi1kit.analysis._diff import NPY_MAGIC, load_lane

    check_regular_file(path)
    try:
        with open(path, "rb") as f:
            npy = path.suffix == ".npy" or f.read(len(NPY_MAGIC)) == NPY_MAGIC
    except OSError as exc:
        raise cannot_read(path, exc) from None
    if not npy:
        check_source(path)
        return path
    try:
        return load_lane(path)
    except CaptureError as exc:
        raise cannot_read(path, exc) from None


def cmd_diff(args: argparse.Namespace) -> int:
    from cbi1kit.analysis._shorthands import diff

    b_path: Path = args.b if args.b is not None else args.a
    sides = [_lane_input(args.a), _lane_input(b_path)]
    picks = {
        "--dc": args.dc,
        "--dc-a": args.dc_a,
        "--dc-b": args.dc_b,
        "--model": args.model,
        "--at": args.at,
        "--at-a": args.at_a,
        "--at-b": args.at_b,
    }
    if not any(isinstance(side, Path) for side in sides) and (
        given := [flag for flag, value in picks.items() if value is not None]
    ):  # two .npy lanes: nothing to pick a lane or a moment in
        raise CliError(
            f"{', '.join(given)}: picks a lane or a moment of a capture, and both sides are .npy",
            EXIT_USAGE,
        )
    reports: dict[Path, Any] = {}
    for i, side in enumerate(sides):
        if isinstance(side, Path):
            if side not in reports:
                reports[side] = _replay(side, None, not args.no_progress, history=True)
            sides[i] = reports[side]
    try:
        result = diff(
            sides[0],
            sides[1],
            dc=args.dc,
            dc_a=args.dc_a,
            dc_b=args.dc_b,
            model=args.model,
            at=args.at,
            at_a=args.at_a,
            at_b=args.at_b,
            labels=(args.a.name, b_path.name),
        )
    except Cbi1kitError as exc:
        _usage_if_unanswerable(exc, reports)
        if (
            exc.variant is LaneVariant.NotReady
        ):  # nothing held then: a moment this lane cannot answer
            raise _unanswerable(str(exc), reports) from None
        raise
    ok = all(r.ok for r in reports.values())
    if args.json:
        print(to_json({**result.to_dict(args.limit), "ok": ok}, indent=2))
    else:
        print(wrapped(result.text(args.limit), " " * 9))
        if not ok:
            print("note: a capture has violations; see `cbi1kit replay`")
    return EXIT_OK if ok else EXIT_INVALID


def _checkout(instead: str) -> str:
    """Where the notebooks and the bundled data are (a checkout of the repository), and what
    to do ``instead``."""
    return f" (a cbi1kit checkout has it: run there, or {instead})"


def cmd_demo(args: argparse.Namespace) -> int:
    from cbi1kit.sim._simrelay import sample_config

    data: Path = args.data
    capture = data / "sample.kvrcap"
    trace = data / "mooncake" / "conversation_trace.jsonl"
    if not (capture.exists() or trace.exists()):  # neither a capture nor a trace to make one
        raise CliError(
            f"{data}: no bundled data in it{_checkout('give --data DIR')}", EXIT_UNREADABLE
        )
    if not args.no_report:  # the notebooks and their extra, before any work
        require("notebooks")
        if not Path("notebooks").is_dir():
            raise CliError(
                f"notebooks: no notebooks folder{_checkout('--no-report')}", EXIT_UNREADABLE
            )
    notebooks = None if args.no_report else args.demo_report(args, capture, trace)
    try:
        print("cbi1kit demo: simulate → replay → summary on the bundled data\n")
        if capture.exists() and not args.resimulate:
            if notebooks is not None:
                check_source(capture)  # not a capture: say so now, not after the notebooks
                notebooks.start()  # Lab and the notebooks' kernels start while we replay
            print(
                f"1. simulate: reusing {capture} ({capture.stat().st_size} bytes;"
                " `make sample` rebuilds it)"
            )
        else:
            print(f"1. simulate: {trace} → {capture}")
            result = _run_simulation(
                trace,
                capture,
                sample_config(),
                limit=None,
                force=True,
                progress=not args.no_progress,
            )
            _print_sim(result)
            if notebooks is not None:
                notebooks.start()
        print(f"\n2. replay {capture} with the consumer's rules")
        report = _replay(capture, None, not args.no_progress)
        _print_replay_summary(report, 10)
        print("\n3. summary: the replayed lane at its final sequence")
        for lane in report.lanes[:1]:  # the sample records one DC
            from cbi1kit.ckf._addressing import CkfAddressing
            from cbi1kit.ckf._stats import lane_stats

            fmt = lane.format
            if lane.final_lane is None or fmt is None:
                break
            stats = lane_stats(
                lane.final_lane,
                addressing=CkfAddressing(fmt.bucket_count, fmt.seed),
                fpr_probes=200_000,
            )
            print(
                table(
                    [
                        ("buckets", stats.buckets),
                        ("occupied slots", stats.occupied_slots),
                        ("load factor α", f"{stats.load_factor:.4f}"),
                        ("estimated FPR 8α/65534", f"{stats.estimated_fpr:.2e}"),
                        ("measured FPR", str(stats.fpr)),
                        ("lane size", f"{stats.size_bytes} bytes"),
                    ],
                    ("figure", "value"),
                )
            )
        notebooks_ok = True
        if notebooks is not None:
            notebooks_ok = notebooks.report()
    finally:
        if notebooks is not None:
            notebooks.close()
    print("\nnext: cbi1kit inspect / stats / export on", capture)
    return EXIT_OK if report.ok and notebooks_ok else EXIT_INVALID


class DemoReport:
    """The demo's step 4: every chart of the bundled data and each notebook run headless by
    papermill, into ``--report``. ``make demo`` runs a subclass (``tools/demo.py``) that also runs
    the notebooks in JupyterLab and Chromium, beside the replay, and screenshots them."""

    def __init__(self, args: argparse.Namespace, capture: Path, trace: Path) -> None:
        from cbi1kit._files import claim_outputs

        self.args, self.capture, self.trace = args, capture, trace
        self.folder = Path("notebooks")
        self.ok = True
        claim_outputs(self.outputs(), overwrite=args.force)  # before any work, not after a minute

    def outputs(self) -> list[Path]:
        """The files the report writes, claimed before the demo starts."""
        from cbi1kit.viz._report import NOTEBOOKS, report_outputs

        return report_outputs(self.args.report, trace=True, notebooks=NOTEBOOKS)

    def start(self) -> None:
        """Start what runs beside the replay (nothing, headless)."""

    def close(self) -> None:
        """Stop what ``start`` began."""

    def heading(self) -> str:
        return f"\n4. report: every chart and each notebook, run headless → {self.args.report}/"

    def before(self) -> None:
        """What to say between the heading and the report's progress."""

    def executed(self) -> Any:
        """Notebook runs the report takes as they are (None: papermill runs them)."""
        return None

    def report(self) -> bool:
        """Step 4: the charts, then the notebooks' pages; whether every notebook ran clean."""
        print(self.heading())
        self.before()
        try:
            built = _build_report(
                self.capture,
                self.args.report,
                self.trace,
                self.folder,
                self.args.no_progress,
                force=self.args.force,
                executed=self.executed,
            )
        finally:
            self.close()
        print(
            f"   wrote {built.index} ({len(built.pngs)} chart PNGs, "
            f"{len(built.notebooks)} notebooks) in {built.seconds:.0f} s"
        )
        return self.ok


def cmd_lab(args: argparse.Namespace) -> int:
    import os

    from cbi1kit.viz._lab import kernel_environment, lab_command

    folder: Path = args.notebooks
    if not folder.is_dir():
        why = _checkout("give --notebooks DIR")
        raise CliError(f"{folder}: no notebooks folder{why}", EXIT_UNREADABLE)
    argv = lab_command(folder.resolve(), port=args.port, open_browser=not args.no_browser)
    os.execve(argv[0], argv, kernel_environment())  # Lab takes this process over


def _build_report(
    capture: Path,
    out: Path,
    trace: Path | None,
    notebooks: Path | None,
    quiet: bool,
    *,
    force: bool,
    executed: Any = None,
    dc: str | None = None,
) -> Any:
    from cbi1kit.viz._report import build_report

    check_source(capture)
    if trace is not None:
        check_regular_file(trace)
    if notebooks is not None and not notebooks.is_dir():
        why = _checkout("give --notebooks DIR; or --no-notebooks")
        raise CliError(f"{notebooks}: no notebooks folder{why}", EXIT_USAGE)

    def say(msg: str) -> None:
        if not quiet:
            print(f"   {msg}", file=sys.stderr, flush=True)

    try:
        return build_report(
            capture,
            out,
            trace=trace,
            notebooks_dir=notebooks,
            progress=say,
            overwrite=force,
            executed=executed,
            dc=dc,
        )
    except LaneError as exc:
        raise _lane_choice(capture, exc, several=exc.variant is LaneVariant.SeveralLanes) from None
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        raise unwritable([out], exc) from None


#: what a write that fails for want of room or rights says: the output is named
_WRITE_ERRNOS: Final = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def cmd_report(args: argparse.Namespace) -> int:
    notebooks = None if args.no_notebooks else args.notebooks
    built = _build_report(
        args.capture,
        args.output,
        args.trace,
        notebooks,
        args.no_progress,
        force=args.force,
        dc=args.dc,
    )
    print(f"{built.index}: {len(built.pngs)} charts, {len(built.notebooks)} notebooks")
    for kind, png in built.pngs.items():
        print(f"  {kind:<16} {png}")
    if built.violations:  # charted all the same; the capture is not whole, as replay says
        print(
            f"note: the capture has {built.violations} violation(s), first: "
            f"{built.first_violation}; see `cbi1kit replay`",
            file=sys.stderr,
        )
        return EXIT_INVALID
    return EXIT_OK


# ------------------------------------------------------------------------------------- parser


if TYPE_CHECKING:  # the subparsers of ``cbi1kit``: each ``_add_*`` adds one command
    _Commands = argparse._SubParsersAction[OneLineParser]


def _format_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=U64, help="expected CKF seed (checks the format)")
    p.add_argument("--buckets", type=U64, help="expected bucket count (with --seed)")


def _quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _add_simulate(sub: _Commands) -> None:
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
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    _quiet(p)
    p.set_defaults(handler=cmd_simulate)


def _add_inspect(sub: _Commands) -> None:
    """``cbi1kit inspect``."""
    p = sub.add_parser(
        "inspect",
        help="frame files or a capture: header table, annotated hexdump, validation summary",
        description="Bare CBI1 frames: every field with its offset and every problem. A kvrcap "
        "capture: its header and streams, a frame table, one frame's annotated hexdump and a "
        "replay summary.",
    )
    p.add_argument("files", nargs="+", type=Path, help="bare CBI1 frame files or kvrcap captures")
    _format_args(p)
    p.add_argument("--head", type=at_least(0), default=8, help="body rows shown before the gap")
    p.add_argument("--tail", type=at_least(0), default=4, help="body rows shown after the gap")
    p.add_argument(
        "--rows", type=at_least(0), default=20, help="capture: frames listed in the table"
    )
    p.add_argument(
        "--frame", type=at_least(0), help="capture: frame to hexdump (default: first delta)"
    )
    p.add_argument("--max-violations", type=at_least(0), default=20, help="violations listed")
    _quiet(p)
    p.set_defaults(handler=cmd_inspect)


def _add_replay(sub: _Commands) -> None:
    """``cbi1kit replay``."""
    p = sub.add_parser(
        "replay",
        help="capture → validation report with the consumer's rules, per lane",
        description="Replay a capture (or grpcurl JSON, or bare frames) with the Global View "
        "consumer's rules: a lane per pool, a session per stream, results per lane; exit 1 if "
        "any rule is broken or the source is damaged.",
    )
    p.add_argument("capture", type=Path, help="kvrcap capture, grpcurl JSON or CBI1 frames")
    _format_args(p)
    p.add_argument("--max-violations", type=at_least(0), default=20, help="violations listed")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _quiet(p)
    p.set_defaults(handler=cmd_replay)


def _add_export(sub: _Commands) -> None:
    """``cbi1kit export``."""
    p = sub.add_parser(
        "export",
        help="capture → Parquet tables (frames, images, snapshots); --dataset: many captures",
        description="Write the capture's frames, images and snapshots tables as Parquet files "
        "into a directory; with --dataset, append captures to a hive-partitioned dataset "
        "(frames, images, snapshots, violations) that cbi1kit.open_dataset reads lazily.",
    )
    p.add_argument(
        "capture",
        type=Path,
        nargs="+",
        help="kvrcap capture, grpcurl JSON or CBI1 frames (--dataset: kvrcap captures, a "
        "rotated recording by its first segment)",
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="output directory")
    p.add_argument(
        "--dataset",
        action="store_true",
        help="append the captures to the partitioned dataset at -o (dc=/producer=/date=; a "
        "capture file already in it is skipped, nothing is rewritten)",
    )
    p.add_argument(
        "--force", action="store_true", help="overwrite existing table files (not --dataset)"
    )
    _quiet(p)
    p.set_defaults(handler=cmd_export)


def _add_stats(sub: _Commands) -> None:
    """``cbi1kit stats``."""
    p = sub.add_parser(
        "stats",
        help="filter stats (load, FPR, ...) of the replayed lane at the end or at a sequence",
        description="Replay, then report CF.INFO-style figures of one lane (--dc picks it in a "
        "capture of several; `cbi1kit view` shows every lane at a time).",
    )
    p.add_argument("capture", type=Path, help="kvrcap capture, grpcurl JSON or CBI1 frames")
    p.add_argument(
        "--at", type=_moment, metavar="SEQ|ISO|+90s", help="a sequence, a time or an offset"
    )
    p.add_argument("--dc", help="the lane of this DC: its id (16 hex digits) or its name")
    p.add_argument(
        "--fpr-probes",
        type=ranged(0, 10_000_000),
        default=100_000,
        help="random probes for the measured FPR, made distinct (0..=10^7)",
    )
    p.add_argument("--probe-seed", type=U64, default=0, help="seed of the FPR probes")
    _format_args(p)
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    _quiet(p)
    p.set_defaults(handler=cmd_stats)


def _add_view(sub: _Commands) -> None:
    """``cbi1kit view``."""
    p = sub.add_parser(
        "view",
        help="the global view: the consumer table per indexer domain at a sequence or a time",
        description="Replay a capture, then build what a global router consults at one moment: "
        "for the model (every pool without --model) the pools the capture's catalog advertised "
        "then, one consumer table per indexer domain (at most 16 DC lanes each, as upstream's "
        "manifest rules require), each lane ready with the words its session held or not, and "
        "where they came from (producer incarnation.generation, sequence, receive time, "
        "stream). Without --at: every lane's final words.",
        epilog="--at takes a sequence (each lane right after its own sequence N), an ISO 8601 "
        "time with a zone (2026-11-30T12:00:00Z) or an offset after the capture's first "
        "message (+90s; ns, us, ms, s, m, h). At a time, every message received by then is "
        "applied, and a lane whose session had ended (a violation, its stream closed, a new "
        "stream not yet installed) is not ready.",
    )
    p.add_argument("capture", type=Path, help="kvrcap capture (or grpcurl JSON, CBI1 frames)")
    p.add_argument("--model", help="a model or alias the catalog's pools register")
    p.add_argument("--at", type=_moment, help="a sequence, 2026-11-30T12:00:00Z or +90s")
    _max_age_arg(p)
    _format_args(p)
    p.add_argument("--json", action="store_true", help="print the view as JSON")
    _quiet(p)
    p.set_defaults(handler=cmd_view)


def _add_explain(sub: _Commands) -> None:
    """``cbi1kit explain``."""
    from cbi1kit.ckf._limits import DEFAULT_VERIFICATION_WINDOW, MAX_VERIFICATION_WINDOW

    p = sub.add_parser(
        "explain",
        help="one request step by step: hashes, fingerprints, buckets, each lane's slots, depth",
        description="Explain how a global router sees a request for a model at one moment: the "
        "catalog's registration and query semantics for the model (or a LoRA alias), the block "
        "hashes, each block's fingerprint and buckets, then per DC lane of the consumer table "
        "whether a slot of bucket a or b holds the fingerprint and since which snapshot or delta, "
        "the prefix depth upstream's search finds, where the chain breaks (and which delta "
        "removed the block), and the DC the router prefers.",
        epilog="--at as for `cbi1kit view`. Ties at the deepest depth go to --local-dc, then to "
        "the lowest stable rank for --tie-key (the global gateway's request key), then to the "
        "lowest pool id. Whether a match is a true or a false positive cannot be told from the "
        "consumer's side (16-bit fingerprints): ck.explain(..., truth=) in Python can.",
    )
    p.add_argument(
        "capture", type=Path, metavar="CAPTURE", help="kvrcap capture with its catalog stream"
    )
    p.add_argument(
        "--model", required=True, metavar="M", help="a model or alias the catalog's pools register"
    )
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--tokens", type=_token_list, metavar="1,2,3", help="the request's tokens (u32 each)"
    )
    given.add_argument(
        "--tokens-file", type=Path, metavar="F", help="a file of tokens (commas or spaces)"
    )
    given.add_argument(
        "--trace", type=Path, metavar="TRACE", help="a Mooncake trace (with --request)"
    )
    p.add_argument(
        "--request", type=at_least(0), metavar="N", help="which request of --trace (from 0)"
    )
    p.add_argument("--lora", metavar="ALIAS", help="a LoRA alias or adapter of the model")
    p.add_argument(
        "--at", type=_moment, metavar="SEQ|ISO|+90s", help="a sequence, a time or an offset"
    )
    _max_age_arg(p)
    p.add_argument("--local-dc", metavar="DC", help="the router's own DC: it wins a tie")
    p.add_argument("--tie-key", type=U64, metavar="KEY", help="the request's tie key (u64)")
    p.add_argument(
        "--domain", metavar="PREFIX", help="the indexer domain, when the model spans several"
    )
    p.add_argument(
        "--verification-window",
        type=ranged(1, MAX_VERIFICATION_WINDOW),
        metavar="W",
        default=DEFAULT_VERIFICATION_WINDOW,
        help="the router's prefix-search verification window "
        f"(1..={MAX_VERIFICATION_WINDOW}, default {DEFAULT_VERIFICATION_WINDOW})",
    )
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    _quiet(p)
    p.set_defaults(handler=cmd_explain)


def _add_diff(sub: _Commands) -> None:
    """``cbi1kit diff``."""
    p = sub.add_parser(
        "diff",
        help="two lanes bucket by bucket: captures, DCs, moments, .npy words",
        description="Compare two lanes: two captures, two DCs of one capture (--dc-a/--dc-b), "
        "one lane at two moments (--at-a/--at-b), or a lane's words saved as .npy (a producer's "
        "lane against the consumer's). Lists the buckets whose words differ, each word in hex "
        "and the fingerprints removed and added, with the counts.",
        epilog="B defaults to A. --dc and --at set both sides; --dc-a/--dc-b and --at-a/--at-b "
        "one side. --at as for `cbi1kit view`: a sequence aligns each lane at its own sequence, "
        "a time or +offset at what it had received by then. Lanes of different formats cannot "
        "be compared (exit 1).",
    )
    p.add_argument("a", type=Path, metavar="A", help="a capture (or CBI1 frames) or a .npy lane")
    p.add_argument("b", type=Path, nargs="?", metavar="B", help="another (default: A again)")
    p.add_argument("--dc", metavar="DC", help="the DC of both sides (its id in hex or its name)")
    p.add_argument("--dc-a", metavar="DC", help="the DC of side A")
    p.add_argument("--dc-b", metavar="DC", help="the DC of side B")
    p.add_argument("--model", metavar="M", help="among the pools the catalog advertises for M")
    p.add_argument("--at", type=_moment, metavar="SEQ|ISO|+90s", help="the moment of both sides")
    p.add_argument("--at-a", type=_moment, metavar="X", help="the moment of side A")
    p.add_argument("--at-b", type=_moment, metavar="Y", help="the moment of side B")
    p.add_argument(
        "--limit", type=at_least(0), default=20, metavar="N", help="buckets listed (default 20)"
    )
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    _quiet(p)
    p.set_defaults(handler=cmd_diff)


def _add_layout(sub: _Commands) -> None:
    """``cbi1kit layout``."""
    p = sub.add_parser(
        "layout",
        help="the CBI1 byte layout, from the layout tables",
        description="Print the CBI1 frame's byte layout (header, snapshot-chunk and delta "
        "bodies): every field's offset, width, type and meaning, from the one table the "
        "decoder, the encoder and the hex view read.",
    )
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.set_defaults(handler=cmd_layout)


def _add_demo(sub: _Commands) -> None:
    """``cbi1kit demo``."""
    p = sub.add_parser(
        "demo",
        help="simulate (or reuse) the sample → replay → summary, on the bundled data",
        description="The main job on a checkout's bundled data: simulate the sample capture "
        "from the Mooncake trace (or reuse it), replay it, print its summary, then run every "
        "notebook once in JupyterLab (screenshots where chromium is installed) and write the "
        "offline report.",
    )
    p.add_argument("--data", type=Path, default=Path("data"), help="bundled data folder")
    p.add_argument("--resimulate", action="store_true", help="simulate even if the sample exists")
    p.add_argument("--report", type=Path, default=Path("reports"), help="report folder")
    p.add_argument("--no-report", action="store_true", help="stop after the summary")
    p.add_argument(
        "--force", action="store_true", help="overwrite an existing report and screenshots"
    )
    _quiet(p)
    p.set_defaults(handler=cmd_demo, demo_report=DemoReport)


def _add_lab(sub: _Commands) -> None:
    """``cbi1kit lab``."""
    p = sub.add_parser(
        "lab",
        help="JupyterLab on the notebooks: this environment's kernel, saves kept output-free",
        description="JupyterLab on the notebooks folder with this environment as the kernel. "
        "Saving a notebook writes its .py source and its output-free .ipynb, so neither "
        "autosave nor Ctrl+S changes a tracked file with outputs; runs as root too.",
    )
    p.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="notebooks folder")
    p.add_argument("--port", type=ranged(0, 65535), default=0, help="port (0 picks a free one)")
    p.add_argument("--no-browser", action="store_true", help="only print Lab's address")
    p.set_defaults(handler=cmd_lab)


def _add_report(sub: _Commands) -> None:
    """``cbi1kit report``."""
    p = sub.add_parser(
        "report",
        help="capture → offline HTML report: every chart kind, PNGs, the executed notebooks",
        description="Write an offline HTML report of a capture: every chart kind as SVG and "
        "PNG, and the notebooks run with the capture as their parameter (--no-notebooks: "
        "the charts alone). It opens without a network.",
    )
    p.add_argument("capture", type=Path, help="kvrcap capture")
    p.add_argument("-o", "--output", type=Path, default=Path("reports"), help="report folder")
    p.add_argument(
        "--trace",
        type=Path,
        help="Mooncake trace for the prefix-depth chart (a separate simulation of it)",
    )
    p.add_argument("--notebooks", type=Path, default=Path("notebooks"), help="notebooks folder")
    p.add_argument("--no-notebooks", action="store_true", help="charts only, no notebooks")
    p.add_argument(
        "--dc",
        help="of a capture of several lanes, chart this DC's: its id (16 hex digits) or its name "
        "(charts only: the notebooks chart a capture of one lane)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing report")
    _quiet(p)
    p.set_defaults(handler=cmd_report)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="cbi1kit",
        description="See inside NVIDIA Dynamo's KV-cache filter stream (CBI1 frames).",
        epilog="exit codes: 0 ok, 1 invalid input, 2 usage error, 3 unreadable input or output",
    )
    parser.add_argument("--version", action="version", version=f"cbi1kit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _add_simulate,
        _add_inspect,
        _add_replay,
        _add_export,
        _add_stats,
        _add_view,
        _add_explain,
        _add_diff,
        register_relay,
        register_fleet,
        _add_layout,
        _add_demo,
        _add_lab,
        _add_report,
    ):
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, demo_report: type[DemoReport] | None = None) -> int:
    """The ``cbi1kit`` command; ``demo_report`` replaces the demo's step 4 (``tools/demo.py``)."""
    # gRPC core logs its own failures to stderr (a port in use, a name that does not resolve)
    # beside the one line an error gets here; GRPC_VERBOSITY set by the user still wins
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    parser = build_parser()
    args = parser.parse_args(argv)
    if demo_report is not None:
        args.demo_report = demo_report
    handler: Handler = args.handler
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
