"""Build the ``frames`` table from a ~1 GiB capture; compare with reading the file's bytes once.

A seeded capture is generated in a temp dir: sessions of one 2^21-bucket snapshot (4 chunk
messages of 4 MiB) followed by deltas whose image counts are log-normal (median
``--median-images``, capped at 4096), until ``--size-mib`` is reached with about
``--snapshot-share`` of the bytes in snapshot chunks. The measurement runs in a fresh
subprocess so its peak RSS is not the generator's:

* baseline: ``readinto`` the whole file once, 64 MiB at a time (page cache warm, as for the table);
* frames: ``frames_batches`` over the capture, every batch materialised;
* the two alternate for ``--rounds`` rounds; best and median of each, and their ratios;
* peak memory, over a traced pass after a first one that loads the compiled kernels: tracemalloc
  peak (Python + numpy allocations) and the peak resident set (VmHWM, reset before the pass;
  mapped file pages count while they are mapped).

Targets (issue 5): frames ≤ 3× the baseline; peak memory well below the capture size.

    .venv/bin/python benchmarks/bench_tables.py [--size-mib 1024] [--median-images 32]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._file import CaptureWriter
from cbi1kit.capture._readers import SUBSCRIBE_KV_POOL_METHOD
from cbi1kit.wire._codec import IMAGE_DTYPE, encode_delta, encode_snapshot_chunks
from cbi1kit.wire._format import SNAPSHOT_CHUNK_BUCKETS, FilterFormat

MiB = 1 << 20
SEED = 0x5DEECE66D1B54A33
DC = 0x0123456789ABCDEF
BUCKETS = 1 << 21


def producer(generation: int, buckets: int = BUCKETS) -> pb.ProducerIdentity:
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


def write_update(
    w: CaptureWriter,
    sid: int,
    prod: pb.ProducerIdentity,
    ts: int,
    kind: int,
    base: int,
    seq: int,
    payload: bytes = b"",
) -> int:
    """Write one FilterUpdate from the benchmark's relay; its record's size in the capture."""
    msg = pb.FilterUpdate(
        protocol_version=1,
        relay=pb.RelayIdentity(drt_instance_id=3, relay_incarnation=4),
        producer=prod,
        base_sequence=base,
        sequence=seq,
        send_ts_us=ts,
        kind=kind,
        payload=payload,
        contract_marker=0x4B565231,
    )
    data = msg.SerializeToString()
    w.message(sid, data)
    return len(data) + 48


def generate(
    path: Path, size: int, snapshot_share: float, median_images: int, buckets: int = BUCKETS
) -> dict[str, int]:
    """Sessions of one ``buckets``-word snapshot, then deltas, until ``size`` bytes, about
    ``snapshot_share`` of them in snapshot chunks; the message counts."""
    rng = np.random.default_rng(20240501)
    fmt = FilterFormat(SEED, buckets)
    snapshot_bytes = -(-buckets // SNAPSHOT_CHUNK_BUCKETS) * 64 + buckets * 8
    sessions = max(1, round(size * snapshot_share / snapshot_bytes))
    per_session = size // sessions
    counts = {"chunks": 0, "deltas": 0, "heartbeats": 0}
    ts = 1_700_000_000_000_000
    with CaptureWriter(path, flush_records=4096) as w:
        for s in range(sessions):
            sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
            written = 0
            prod = producer(s + 1, buckets)
            lane = rng.integers(0, 1 << 63, size=buckets, dtype=np.uint64)
            lane[rng.random(buckets) < 0.5] = 0
            seq = int(rng.integers(0, 1000))

            for payload in encode_snapshot_chunks(fmt, DC, seq, lane):
                written += write_update(w, sid, prod, ts, 1, seq, seq, payload)
                counts["chunks"] += 1
            sizes = np.minimum(
                4096, np.maximum(1, rng.lognormal(np.log(median_images), 1.0, 200_000))
            ).astype(np.int64)
            k = 0
            while written < per_session:
                n = int(sizes[k % len(sizes)])
                k += 1
                images = np.empty(n, dtype=IMAGE_DTYPE)
                images["bucket"] = _distinct(rng, n, buckets)
                images["word"] = rng.integers(0, 1 << 63, size=n, dtype=np.uint64)
                ts += 500
                delta = encode_delta(fmt, DC, seq, seq + 1, images)
                written += write_update(w, sid, prod, ts, 2, seq, seq + 1, delta)
                seq += 1
                counts["deltas"] += 1
                if k % 64 == 0:
                    write_update(w, sid, prod, ts, 3, seq, seq)
                    counts["heartbeats"] += 1
            w.close_stream(sid)
    return counts


def count_kinds(path: Path) -> dict[str, int]:
    """The message mix of an existing capture (for ``--keep``)."""
    from cbi1kit.analysis._frames import frames_table

    kinds = frames_table(path).select("kind").collect()["kind"].value_counts()
    names = {"SNAPSHOT_CHUNK": "chunks", "DELTA": "deltas", "HEARTBEAT": "heartbeats"}
    counts = dict.fromkeys(names.values(), 0)
    for kind, n in kinds.iter_rows():
        if kind in names:
            counts[names[kind]] = n
    return counts


def _distinct(rng: np.random.Generator, n: int, buckets: int) -> np.ndarray:
    b = np.unique(rng.integers(0, buckets, size=n + 8))
    while b.size < n:
        b = np.unique(np.concatenate([b, rng.integers(0, buckets, size=n)]))
    return rng.permutation(b)[:n]


def read_once(path: Path) -> tuple[float, int]:
    buf = bytearray(64 * MiB)
    view = memoryview(buf)
    total = 0
    t = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(view):
            total += n
    return time.perf_counter() - t, total


def _peak_rss() -> int:
    """Peak resident set size in bytes (VmHWM; ru_maxrss where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak_rss() -> int:
    """Restart the peak from the current RSS (Linux: ``5`` to clear_refs); the RSS now."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    return _peak_rss()


def measure(path: Path, rounds: int) -> dict[str, float]:
    from cbi1kit.analysis._frames import frames_batches

    t = time.perf_counter()
    for _df in frames_batches(path):  # the first pass also loads the compiled kernels
        pass
    first_s = time.perf_counter() - t
    rss0 = _reset_peak_rss()
    tracemalloc.start()
    rows = bad = 0
    for df in frames_batches(path):
        rows += df.height
        bad += df["validation_error"].null_count() - df.height
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss1 = _peak_rss()
    # then alternate the two, untraced, so that both see the same machine
    base, frames = [], []
    for _ in range(rounds):
        base_s, total = read_once(path)
        base.append(base_s)
        t = time.perf_counter()
        for _df in frames_batches(path):
            pass
        frames.append(time.perf_counter() - t)
    return {
        "bytes": total,
        "rows": rows,
        "invalid_rows": -bad,
        "read_once_best_s": min(base),
        "read_once_median_s": statistics.median(base),
        "frames_best_s": min(frames),
        "frames_median_s": statistics.median(frames),
        "frames_first_s": first_s,
        "tracemalloc_peak_mib": peak / MiB,
        "rss_start_mib": rss0 / MiB,
        "rss_peak_mib": rss1 / MiB,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--snapshot-share", type=float, default=0.5)
    ap.add_argument("--median-images", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds of each (best, median)")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    ap.add_argument(
        "--keep", type=Path, help="capture path: reuse it if it exists, else generate it there"
    )
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.rounds)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "bench.kvrcap"
        t = time.perf_counter()
        if args.keep and args.keep.exists():
            counts = count_kinds(path)
        else:
            counts = generate(path, args.size_mib * MiB, args.snapshot_share, args.median_images)
        gen_s = time.perf_counter() - t
        out = subprocess.run(
            [sys.executable, __file__, "--measure", str(path), "--rounds", str(args.rounds)],
            check=True,
            capture_output=True,
            text=True,
        )
        r = json.loads(out.stdout)
    size_mib = r["bytes"] / MiB
    print(
        f"capture: {size_mib:.0f} MiB, {counts['chunks']} snapshot chunks, {counts['deltas']} "
        f"deltas (median {args.median_images} images), {counts['heartbeats']} heartbeats; "
        f"generated in {gen_s:.1f} s"
    )
    n = args.rounds
    print(
        f"read bytes once (baseline: readinto a preallocated 64 MiB buffer, warm page cache): "
        f"best of {n} {r['read_once_best_s']:.3f} s, median {r['read_once_median_s']:.3f} s"
    )
    best = r["frames_best_s"] / r["read_once_best_s"]
    median = r["frames_median_s"] / r["read_once_median_s"]
    print(
        f"frames table: best of {n} {r['frames_best_s']:.3f} s, median {r['frames_median_s']:.3f} s"
        f" (first pass, loading the compiled kernels: {r['frames_first_s']:.3f} s); "
        f"{r['rows']} rows ({r['invalid_rows']} invalid), "
        f"{r['rows'] / r['frames_best_s']:,.0f} rows/s"
    )
    print(f"ratio to the baseline: {best:.2f}x best, {median:.2f}x median (target <= 3x)")
    print(
        f"peak memory over a pass: tracemalloc {r['tracemalloc_peak_mib']:.1f} MiB; resident "
        f"{r['rss_peak_mib']:.0f} MiB at the peak, {r['rss_start_mib']:.0f} MiB before the pass "
        f"(capture {size_mib:.0f} MiB)"
    )


if __name__ == "__main__":
    main()
