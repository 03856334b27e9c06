"""Replay as users call it, and the fast engine against the per-message one (#27).

For each mix (``simulator-like``: small deltas, a 4,096-bucket lane's one-chunk snapshots at
every resubscription; ``16-image deltas``: the same with every delta 16 images; and
``snapshot-heavy``) a seeded capture is generated (``bench_tables.generate_mix``: 256 MiB,
``--quick`` 32), and its first ``--prefix-mib`` (64, ``--quick`` 8) copied record by record
into a capture of their own (at least four snapshots' worth). In a fresh process, after a
first replay that loads the compiled kernels:

* **prefix**: the lean replay (``keep_events=False, keep_history=False``, what ``cbi1kit
  replay`` runs) with the fast engine vs the same with ``engine="reference"``, the
  per-message engine the fast one is tested against: the same report (checked here).
  Goal >= 10x on the small-delta mixes.
* **as users call it**: ``ck.replay(path)`` with its defaults (events and history kept) over
  the whole capture, alternating with the lean replay of the same file. Goal >= 2 M
  messages/s by CPU median on the two small-delta mixes (#27); snapshot-heavy, half of whose
  bytes are snapshot chunks, is a figure beside them.
* **memory**: ``cbi1kit replay`` of the whole capture in a fresh process, its peak resident set
  (``bench_memory.run``) above ``python -c "import cbi1kit"``; beside it the engine's fixed
  cost, ``cbi1kit replay`` of the capture's first snapshot and a few hundred deltas. Goal: <=
  the lane + 256 MiB.

CPU time is the whole process's.

    .venv/bin/python benchmarks/bench_replay.py [--quick] [--rounds N] [--sim-size-mib 256]
        [--size-mib 256] [--prefix-mib 64] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import xxhash
from _harness import (
    DELTAS_16,
    MIXES,
    Comparison,
    MiB,
    Mix,
    Report,
    Timing,
    add_keep,
    child_json,
    compare,
    parser,
)
from bench_memory import run as peak_of
from bench_tables import generate_mix

from cbi1kit.capture._file import RecordType, decode_stream_close, decode_stream_open
from cbi1kit.capture._reader import CaptureReader
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.wire._format import SNAPSHOT_CHUNK_BUCKETS

GOAL_RATE = 2_000_000  # messages/s, ck.replay(path) as users call it, the whole capture (#27)
LEAN: Final = {"keep_events": False, "keep_history": False}  # what `cbi1kit replay` keeps
GOAL_RATIO = 10.0  # the fast engine vs the per-message one on the same messages
LANE_SLACK = 256 * MiB  # peak above import <= the lane + this (#16)


def copy_prefix(src: Path, dst: Path, size: int) -> None:
    """The records of ``src`` that start in its first ``size`` bytes, as a capture of their own
    (same stream ids, bytes and receive times; streams still open are closed at the end)."""
    with CaptureReader(src) as reader, CaptureWriter(dst, flush_records=4096) as w:
        for rec in reader.records():
            if rec.offset >= size:
                break
            t = {"recv_unix_ns": rec.recv_unix_ns, "recv_mono_ns": rec.recv_mono_ns}
            if rec.type is RecordType.STREAM_OPEN:
                o = decode_stream_open(rec.body)
                w.open_stream(o.target, o.method, o.request, metadata=o.metadata, info=o.info, **t)
            elif rec.type is RecordType.MESSAGE:
                w.message(rec.stream_id, rec.body, **t)
            elif rec.type is RecordType.STREAM_CLOSE:
                c = decode_stream_close(rec.body)
                w.close_stream(
                    rec.stream_id, status_code=c.status_code, status_name=c.status_name, **t
                )
        for sid in w.open_streams:
            w.close_stream(sid)


# ------------------------------------------------------------------- in the measuring process


def _replay(path: str, **kw: Any) -> tuple[int, str]:
    """One replay (``kw``: replay's options; none: as users call it): its messages, and what it
    found (counts, each lane's final words)."""
    import cbi1kit as ck

    report = ck.replay(path, **kw)
    lanes = [
        (lane.final_sequence, xxhash.xxh3_64_hexdigest(lane.final_lane.tobytes()))
        for lane in report.lanes
        if lane.final_lane is not None
    ]
    return report.frames, f"{report.counts} {report.violations} {lanes}"


def measure_mix(full: str, prefix: str, rounds: int) -> dict[str, Any]:
    t = time.perf_counter()
    _replay(prefix, **LEAN)  # loads the compiled kernels (or compiles them)
    first = time.perf_counter() - t
    messages, fast_found = _replay(prefix, **LEAN)
    _, ref_found = _replay(prefix, **LEAN, engine="reference")
    assert fast_found == ref_found, "the engines disagree"  # tests/test_replay_fast.py's job
    cand, base = compare(
        lambda: _replay(prefix, **LEAN),
        lambda: _replay(prefix, **LEAN, engine="reference"),
        rounds=rounds,
    )
    whole, _ = _replay(full)
    # as users call it (events and history kept) against the lean replay, alternating
    history, fast = compare(lambda: _replay(full), lambda: _replay(full, **LEAN), rounds=rounds)
    return {
        "first_s": first,
        "prefix_messages": messages,
        "messages": whole,
        "candidate": [cand.cpu, cand.wall],
        "baseline": [base.cpu, base.wall],
        "fast": [fast.cpu, fast.wall],
        "history": [history.cpu, history.wall],
    }


# ------------------------------------------------------------------------------ the figures


def _times(t: Timing) -> str:
    return (
        f"cpu best/median {t.cpu_best:.3f} / {t.cpu_median:.3f} s | wall best/median "
        f"{t.wall_best:.3f} / {t.wall_median:.3f} s | {len(t.cpu)} rounds"
    )


def run_mix(
    report: Report,
    mix: Mix,
    size_mib: int,
    prefix_mib: int,
    rounds: int,
    keep: Path | None,
    *,
    goals: bool,
) -> None:
    """One mix's figures (``goals``: the rate and ratio goals of #16 apply to it)."""
    snapshot = mix.buckets * 8 + 64 * -(-mix.buckets // SNAPSHOT_CHUNK_BUCKETS)
    # the prefix holds a few sessions of deltas, not only a snapshot's chunks
    prefix_mib = min(size_mib, max(prefix_mib, 4 * snapshot // MiB))
    with tempfile.TemporaryDirectory() as tmp:
        full = (keep or Path(tmp)) / f"replay-{mix.name.replace(' ', '-')}-{size_mib}MiB.kvrcap"
        t = time.perf_counter()
        counts = None
        if not (keep is not None and full.exists()):
            counts = generate_mix(full, size_mib * MiB, mix)
        gen_s = time.perf_counter() - t
        prefix = Path(tmp) / "prefix.kvrcap"
        copy_prefix(full, prefix, min(prefix_mib, size_mib) * MiB)
        fixed = Path(tmp) / "fixed.kvrcap"  # a snapshot and a few hundred deltas
        copy_prefix(full, fixed, snapshot + (256 << 10))
        argv = ["--measure", str(full), str(prefix), "--rounds", str(rounds)]
        r = child_json(__file__, *argv)
        cli = ["-m", "cbi1kit", "replay", "--json", "--no-progress"]
        floor = min(peak_of(["-c", "import cbi1kit"])[0] for _ in range(rounds))
        engine = min(peak_of([*cli, str(fixed)])[0] for _ in range(rounds))
        peak = min(peak_of([*cli, str(full)])[0] for _ in range(rounds))
        size, prefix_size = full.stat().st_size, prefix.stat().st_size

    made = (
        ""
        if counts is None
        else (
            f"{counts['chunks']:,} snapshot chunks, {counts['deltas']:,} deltas (median "
            f"{mix.median_images} images), {counts['heartbeats']:,} heartbeats; generated in "
            f"{gen_s:.0f} s; "
        )
    )
    print(
        f"capture [{mix.name}]: {size / MiB:.0f} MiB, {r['messages']:,} messages: {made}first "
        f"replay (loading the kernels) {r['first_s']:.2f} s"
    )
    n = r["prefix_messages"]
    cand, base = Timing(*r["candidate"]), Timing(*r["baseline"])
    report.figure(
        Comparison(
            f"replay [{mix.name}, the first {prefix_size / MiB:.0f} MiB: {n:,} messages]",
            cand,
            base,
            "fast engine",
            "per-message engine",
            work=n,
            unit="M msgs/s",
            scale=1e6,
        ),
        goal_ratio=GOAL_RATIO if goals else None,
        note="replay(path, keep_events=False, keep_history=False); both found the same",
    )
    fast, history = Timing(*r["fast"]), Timing(*r["history"])
    rate, ref_rate = r["messages"] / history.cpu_median, n / base.cpu_median
    report.value(
        f"ck.replay(path) [{mix.name}, the whole {size / MiB:.0f} MiB: {r['messages']:,} msgs]",
        f"{rate / 1e6:.3g} M msgs/s (events and history kept)",
        f"per-message engine {ref_rate / 1e6:.3g} M msgs/s (its lean rate on the prefix)",
        rate / ref_rate,
        ok=rate >= GOAL_RATE if goals else None,
        goal=f">= {GOAL_RATE / 1e6:g} M msgs/s by cpu median" if goals else "",
        detail=_times(history),
    )
    report.value(
        f"lean replay [{mix.name}, the whole capture]",
        f"keeping neither events nor history {r['messages'] / fast.cpu_median / 1e6:.3g} M msgs/s",
        f"as users call it {rate / 1e6:.3g} M msgs/s",
        history.cpu_median / fast.cpu_median,
        detail=f"{_times(fast)}; what `cbi1kit replay` runs; no goal",
    )
    lane = mix.buckets * 8
    report.value(
        f"replay memory [{mix.name}, the whole capture]",
        f"`cbi1kit replay` peak RSS {peak / MiB:.0f} MiB, {(peak - floor) / MiB:.0f} MiB above "
        "import",
        f"the lane + 256 MiB = {(lane + LANE_SLACK) / MiB:.0f} MiB",
        (peak - floor) / (lane + LANE_SLACK),
        ok=peak - floor <= lane + LANE_SLACK,
        goal="<= the lane + 256 MiB above `import cbi1kit`",
        detail=f"`import cbi1kit` {floor / MiB:.0f} MiB; the engine's fixed cost (replay of one "
        f"snapshot and a few hundred deltas: numpy, protobuf, numba, the kernels, a lane) "
        f"{engine / MiB:.0f} MiB; above it {(peak - engine) / MiB:.0f} MiB for the whole capture",
    )


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--sim-size-mib", type=int, default=None, help="simulator-like capture")
    ap.add_argument("--size-mib", type=int, default=None, help="snapshot-heavy capture")
    ap.add_argument("--prefix-mib", type=int, default=None, help="what the reference replays")
    add_keep(ap)
    ap.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    if args.measure:
        print(json.dumps(measure_mix(*args.measure, rounds)))
        return
    report = Report("bench_replay: replay, the fast engine vs the per-message engine", args.quick)
    prefix = args.prefix_mib or (8 if args.quick else 64)
    sim = args.sim_size_mib or (32 if args.quick else 256)
    mixes = [  # #27's goals: the small deltas
        (MIXES["simulator-like"], sim, True),
        (DELTAS_16, sim, True),
        (MIXES["snapshot-heavy"], args.size_mib or (32 if args.quick else 256), False),
    ]
    for mix, size, goals in mixes:
        run_mix(report, mix, size, prefix, rounds, args.keep, goals=goals)
    report.done()


if __name__ == "__main__":
    main()
