"""Replay a ~1 GiB capture of small deltas: the fast engine beside the per-message one (#16).

A seeded capture shaped like a simulated busy pool is generated in a temp dir: one DC pool of a
2^19-bucket lane (the relay's default lane: one snapshot chunk), deltas of log-normal image
counts (median ``--median-images``, ``--sigma``, at most 1,024: the simulator publishes a few
stored or evicted blocks at a time; some 2.1 M messages in 1 GiB, as in the issue) whose images
are absolute words (a fingerprint added to or cleared from a slot of the lane), a heartbeat
every ``--heartbeat-every`` deltas, a resubscription (a new stream, opened by a snapshot of the
lane) every ``--resubscribe-every`` deltas, receive times 1 ms apart. A capture generated with
the same options but a smaller size is a prefix of it: the same messages, fewer of them.

In a fresh process, after a first replay that loads the compiled kernels, ``--rounds``
alternating rounds of:

* fast: ``replay(path, keep_events=False, keep_history=False)`` (what ``cbi1kit replay`` runs)
  over the whole capture, then the same with ``keep_history=True`` (the library's default,
  which keeps what ``lane_at`` reads in a temporary file);
* reference, the baseline: the same with ``engine="reference"``, the per-message engine (the
  fast one's oracle). At some 25-35 µs a message it would take over a minute on 1 GiB, so it
  runs on the ``--prefix-mib`` prefix (64 MiB) and is reported per message; the fast engine is
  timed on that prefix too, for a ratio on the very same messages;

best and median of CPU time (the whole process's: the thread that checks and scans blocks
included) and wall time, and messages/s. Peak memory: ``cbi1kit replay`` of the whole capture
in a fresh process, its peak resident set measured as ``bench_memory.py`` measures it, beside the
``import cbi1kit`` baseline, ``cbi1kit replay`` of a capture of one snapshot and a few hundred
deltas (the engine's fixed cost) and the lane. Targets (#16): fast ≥ 1,000,000 messages/s on one
core; peak ≤ lanes + 256 MiB above the import baseline.

    .venv/bin/python benchmarks/bench_replay.py [--size-mib 1024] [--prefix-mib 64]
        [--rounds 3] [--keep FILE] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import xxhash
from bench_memory import run as peak_rss

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._file import CaptureWriter
from cbi1kit.capture._readers import SUBSCRIBE_KV_POOL_METHOD
from cbi1kit.relay._messages import RELAY_CONTRACT_MARKER
from cbi1kit.wire._codec import IMAGE_DTYPE, encode_delta, encode_snapshot_chunks
from cbi1kit.wire._format import FilterFormat, FrameKind
from cbi1kit.wire._layout import DELTA_PREFIX, HEADER

MiB = 1 << 20
SEED = 0x5DEECE66D1B54A33
DC = 0x0123456789ABCDEF
T0 = 1_800_000_000_000_000_000
MS = 1_000_000
BUCKETS = 1 << 19
RECORD_HEADER = 48


def producer(generation: int, buckets: int) -> pb.ProducerIdentity:
    d = pb.DigestIdentity
    return pb.ProducerIdentity(
        pool_id=pb.KvPoolId(
            identity_version=1,
            indexer_domain=pb.IndexerDomainId(
                cache_semantics=d(digest=b"\x11" * 16, source=2),
                routing_scope=d(digest=b"\x22" * 16, source=1),
            ),
            dc_id=DC,
        ),
        producer_incarnation=0xFEEDFACE,
        layout_generation=generation,
        ckf_format=pb.CkfFormat(
            format_version=1,
            seed=SEED,
            bucket_count=buckets,
            fingerprint_bits=16,
            slots_per_bucket=4,
        ),
    )


class _Deltas:
    """``encode_delta``'s bytes without its per-call checks and Python image list: the header
    once per format, its epoch and checksum patched per delta (checked against
    ``encode_delta`` on the first delta of every stream)."""

    def __init__(self, fmt: FilterFormat) -> None:
        self.head = bytearray(encode_delta(fmt, DC, 0, 1, [(0, 0)])[: HEADER.size])
        assert self.head[HEADER.field("flags").offset] == FrameKind.DELTA
        self.epoch = HEADER.field("epoch")
        self.checksum = HEADER.field("body_checksum")
        self.prefix = DELTA_PREFIX.codec

    def __call__(self, base: int, images: np.ndarray) -> bytes:
        body = self.prefix.pack(base, len(images)) + images.tobytes()
        head = self.head
        head[self.epoch.offset : self.epoch.end] = (base + 1).to_bytes(8, "little")
        check = xxhash.xxh3_64_intdigest(body) & 0xFFFFFFFF
        head[self.checksum.offset : self.checksum.end] = check.to_bytes(4, "little")
        return bytes(head) + body


def generate(
    path: Path,
    size: int,
    *,
    buckets: int = BUCKETS,
    median_images: float = 12.0,
    sigma: float = 1.0,
    resubscribe_every: int = 500_000,
    heartbeat_every: int = 1000,
    seed: int = 16,
) -> dict[str, int]:
    """Write the capture until ``size`` bytes; its message counts."""
    rng = np.random.default_rng(seed)
    fmt = FilterFormat(SEED, buckets)
    deltas = _Deltas(fmt)
    counts = {"chunks": 0, "deltas": 0, "heartbeats": 0, "streams": 0}
    lane = np.zeros(buckets, dtype=np.uint64)
    seq, t, written = 1000, T0, 0
    msg = pb.FilterUpdate(
        protocol_version=1,
        relay=pb.RelayIdentity(drt_instance_id=3, relay_incarnation=4),
        contract_marker=RELAY_CONTRACT_MARKER,
    )

    def send(sid: int) -> None:
        nonlocal written, t
        data = msg.SerializeToString()
        w.message(sid, data, recv_unix_ns=t, recv_mono_ns=t - T0)
        written += len(data) + RECORD_HEADER
        t += MS

    with CaptureWriter(path, flush_records=4096) as w:
        while written < size:
            sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"", recv_unix_ns=t)
            counts["streams"] += 1
            msg.producer.CopyFrom(producer(counts["streams"], buckets))
            msg.kind = pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
            msg.base_sequence = msg.sequence = seq
            for chunk in encode_snapshot_chunks(fmt, DC, seq, lane):
                msg.payload = chunk
                send(sid)
                counts["chunks"] += 1
            in_stream = 0
            while written < size and in_stream < resubscribe_every:
                # 4,096 deltas drawn at once: image counts, buckets, the slot and fingerprint
                # each image writes (an eviction writes 0: the slot empties)
                n = np.clip(rng.lognormal(np.log(median_images), sigma, 4096), 1, 1024)
                n = n.astype(np.int64)
                ends = np.cumsum(n)
                where = rng.integers(0, buckets, int(ends[-1]))
                shift = rng.integers(0, 4, int(ends[-1])).astype(np.uint64) * np.uint64(16)
                fp = rng.integers(1, 1 << 16, int(ends[-1])).astype(np.uint64)
                fp[rng.random(int(ends[-1])) < 0.3] = 0
                for k in range(len(n)):
                    span = slice(int(ends[k] - n[k]), int(ends[k]))
                    b, first = np.unique(where[span], return_index=True)  # distinct buckets
                    sh, f = shift[span][first], fp[span][first]
                    images = np.empty(len(b), dtype=IMAGE_DTYPE)
                    images["bucket"] = b
                    images["word"] = (lane[b] & ~(np.uint64(0xFFFF) << sh)) | (f << sh)
                    lane[b] = images["word"]
                    payload = deltas(seq, images)
                    if in_stream == 0:
                        assert payload == encode_delta(fmt, DC, seq, seq + 1, images)
                    msg.kind = pb.FILTER_UPDATE_KIND_DELTA
                    msg.base_sequence, msg.sequence = seq, seq + 1
                    msg.send_ts_us = t // 1000
                    msg.payload = payload
                    send(sid)
                    seq += 1
                    counts["deltas"] += 1
                    in_stream += 1
                    if in_stream % heartbeat_every == 0:
                        msg.kind = pb.FILTER_UPDATE_KIND_HEARTBEAT
                        msg.base_sequence = msg.sequence = seq
                        msg.ClearField("payload")
                        send(sid)
                        counts["heartbeats"] += 1
                    if written >= size or in_stream >= resubscribe_every:
                        break
            w.close_stream(sid, recv_unix_ns=t, recv_mono_ns=t - T0)
    return counts


# ----------------------------------------------------------------------------- measurement

Run = tuple[float, float, int, str]  # CPU seconds, wall seconds, messages, what it found


def _timed(path: str, **kw: Any) -> Run:
    from cbi1kit.analysis import replay

    c, t = time.process_time(), time.perf_counter()
    report = replay(path, keep_events=False, **kw)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    assert report.ok, report.violations[:3]
    lane = report.final_lane
    found = f"{report.counts()} {report.final_sequence} {xxhash.xxh3_64_hexdigest(lane.tobytes())}"
    return cpu, wall, report.records, found


def measure(full: str, prefix: str, rounds: int) -> dict[str, list[Run]]:
    """Alternating rounds of every configuration (after one pass that loads the kernels)."""
    _timed(prefix, keep_history=False)
    out: dict[str, list[Run]] = {}
    plan = (
        ("fast", full, {"keep_history": False}),
        ("reference_prefix", prefix, {"keep_history": False, "engine": "reference"}),
        ("fast_prefix", prefix, {"keep_history": False}),
        ("fast_history", full, {"keep_history": True}),
        ("reference_history_prefix", prefix, {"keep_history": True, "engine": "reference"}),
    )
    for _ in range(rounds):
        for name, path, kw in plan:
            out.setdefault(name, []).append(_timed(path, **kw))
    # the engines found the same: counts, final sequence, final words
    assert len({r[3] for name in out if name.endswith("prefix") for r in out[name]}) == 1
    return out


def _line(label: str, runs: list[Run]) -> tuple[str, float]:
    cpu = [r[0] for r in runs]
    wall = [r[1] for r in runs]
    n = runs[0][2]
    rate = n / min(cpu)
    return (
        f"  {label:<40} {n:>10,} msgs  CPU best {min(cpu):7.3f} s median "
        f"{statistics.median(cpu):7.3f} s   wall best {min(wall):7.3f} s median "
        f"{statistics.median(wall):7.3f} s   {rate:>11,.0f} msgs/s CPU, {n / min(wall):>11,.0f} "
        f"wall ({1e6 * min(cpu) / n:.2f} µs/msg)",
        rate,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--prefix-mib", type=int, default=64)
    ap.add_argument("--median-images", type=float, default=12.0)
    ap.add_argument("--sigma", type=float, default=1.0, help="of the log-normal image counts")
    ap.add_argument("--resubscribe-every", type=int, default=500_000)
    ap.add_argument("--heartbeat-every", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3, help="alternating timed rounds")
    ap.add_argument("--keep", type=Path, help="reuse this capture if it exists, else write it")
    ap.add_argument("--quick", action="store_true", help="32 MiB, an 8 MiB prefix, one round")
    ap.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, args.rounds)))
        return
    if args.quick:
        args.size_mib, args.prefix_mib, args.rounds = 32, 8, 1
    shape: dict[str, Any] = {
        "median_images": args.median_images,
        "sigma": args.sigma,
        "resubscribe_every": args.resubscribe_every,
        "heartbeat_every": args.heartbeat_every,
    }
    with tempfile.TemporaryDirectory() as tmp:
        full = args.keep or Path(tmp) / "replay.kvrcap"
        t = time.perf_counter()
        if not (args.keep and full.exists()):
            generate(full, args.size_mib * MiB, **shape)
        gen_s = time.perf_counter() - t
        prefix = Path(tmp) / "prefix.kvrcap"
        generate(prefix, min(args.prefix_mib, args.size_mib) * MiB, **shape)
        measure_argv = ["--measure", str(full), str(prefix), "--rounds", str(args.rounds)]
        res = subprocess.run(
            [sys.executable, __file__, *measure_argv],
            check=True,
            capture_output=True,
            text=True,
        )
        r = json.loads(res.stdout)
        base = [peak_rss(["-c", "import cbi1kit"])[0] for _ in range(args.rounds)]
        # the engine's fixed cost: one snapshot and a few hundred deltas of the same capture
        tiny = Path(tmp) / "tiny.kvrcap"
        generate(tiny, BUCKETS * 8 + (256 << 10), **shape)
        cli = ["-m", "cbi1kit", "replay", "--json", "--no-progress"]
        fixed = [peak_rss([*cli, str(tiny)])[0] for _ in range(args.rounds)]
        peaks = [peak_rss([*cli, str(full)]) for _ in range(args.rounds)]
        summary = json.loads(peaks[0][2])
        size, prefix_size = full.stat().st_size, prefix.stat().st_size

    counts = summary["counts"]
    lane = BUCKETS * 8
    print(
        f"capture: {size / MiB:.0f} MiB, {r['fast'][0][2]:,} messages: "
        f"{counts.get('delta_applied', 0):,} deltas (log-normal, median {args.median_images:g} "
        f"images), {counts.get('heartbeat', 0):,} heartbeats, "
        f"{counts.get('snapshot_installed', 0)} snapshot(s) of a {BUCKETS}-bucket lane"
        + ("" if args.keep and gen_s < 1 else f"; generated in {gen_s:.0f} s")
    )
    print(
        f"replay, {args.rounds} alternating rounds; the reference (per-message) engine runs on "
        f"the first {prefix_size / MiB:.0f} MiB ({r['reference_prefix'][0][2]:,} messages), "
        "its rates are per message:"
    )
    lines = {
        name: _line(label, r[name])
        for name, label in (
            ("fast", "fast, whole capture"),
            ("fast_prefix", "fast, prefix"),
            ("reference_prefix", "reference (baseline), prefix"),
            ("fast_history", "fast, whole capture, history kept"),
            ("reference_history_prefix", "reference, prefix, history kept"),
        )
    }
    for text, _rate in lines.values():
        print(text)
    fast, ref = lines["fast_prefix"][1], lines["reference_prefix"][1]
    print(f"  fast vs reference on the same messages: {fast / ref:.0f}x (messages/s by CPU)")
    floor, engine = min(base), min(fixed)
    peak = min(p[0] for p in peaks)
    print(
        f"peak RSS of `cbi1kit replay` on the whole capture: best {peak / MiB:.0f} MiB, median "
        f"{statistics.median(p[0] for p in peaks) / MiB:.0f} MiB ({min(p[1] for p in peaks):.1f} s"
        f" wall); baselines: `import cbi1kit` {floor / MiB:.0f} MiB, `cbi1kit replay` of one "
        f"snapshot and a few hundred deltas {engine / MiB:.0f} MiB (numpy, protobuf, numba, the "
        f"kernels, a lane); lane {lane / MiB:.0f} MiB; above that replay: "
        f"{(peak - engine) / MiB:.0f} MiB"
    )
    print(
        f"targets (#16): fast >= 1,000,000 msgs/s on the whole capture: "
        f"{lines['fast'][1]:,.0f}; peak above import <= lane + 256 MiB = "
        f"{(lane + 256 * MiB) / MiB:.0f} MiB: {(peak - floor) / MiB:.0f} MiB"
    )


if __name__ == "__main__":
    main()
