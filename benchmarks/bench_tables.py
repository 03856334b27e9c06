"""Build the ``frames`` table from a ~1 GiB capture; compare with reading the file's bytes once.

A seeded capture is generated in a temp dir: sessions of one 2^21-bucket snapshot (4 chunk
messages of 4 MiB) followed by deltas whose image counts are log-normal (median
``--median-images``, capped at 4096), until ``--size-mib`` is reached with about
``--snapshot-share`` of the bytes in snapshot chunks. The measurement runs in a fresh
subprocess so its peak RSS is not the generator's:

* baseline: ``readinto`` the whole file once, 64 MiB at a time (page cache warm, as for the table);
* frames: ``frames_batches`` over the capture, every batch materialised, rows counted;
* peak memory: tracemalloc peak (Python + numpy allocations) and the ru_maxrss delta.

Targets (issue 5): frames ≤ 3× the baseline; peak memory well below the capture size.

    .venv/bin/python benchmarks/bench_tables.py [--size-mib 1024] [--median-images 32]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from cbi1kit._capture import CaptureWriter
from cbi1kit._format import SNAPSHOT_CHUNK_BUCKETS, FilterFormat
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit._readers import SUBSCRIBE_KV_POOL_METHOD
from cbi1kit._wire import IMAGE_DTYPE, encode_delta, encode_snapshot_chunks

MiB = 1 << 20
SEED = 0x5DEECE66D1B54A33
DC = 0x0123456789ABCDEF
BUCKETS = 1 << 21


def producer(generation: int) -> pb.ProducerIdentity:
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
            bucket_count=BUCKETS,
            fingerprint_bits=16,
            slots_per_bucket=4,
        ),
    )


def generate(path: Path, size: int, snapshot_share: float, median_images: int) -> dict[str, int]:
    rng = np.random.default_rng(20240501)
    fmt = FilterFormat(SEED, BUCKETS)
    relay = pb.RelayIdentity(drt_instance_id=3, relay_incarnation=4)
    chunk_bytes = 4 * (SNAPSHOT_CHUNK_BUCKETS * 8 + 64)
    sessions = max(1, round(size * snapshot_share / chunk_bytes))
    per_session = size // sessions
    counts = {"chunks": 0, "deltas": 0, "heartbeats": 0}
    ts = 1_700_000_000_000_000
    with CaptureWriter(path, flush_records=4096) as w:
        for s in range(sessions):
            sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
            written = 0
            prod = producer(s + 1)
            lane = rng.integers(0, 1 << 63, size=BUCKETS, dtype=np.uint64)
            lane[rng.random(BUCKETS) < 0.5] = 0
            seq = int(rng.integers(0, 1000))
            for payload in encode_snapshot_chunks(fmt, DC, seq, lane):
                msg = pb.FilterUpdate(
                    protocol_version=1,
                    relay=relay,
                    producer=prod,
                    base_sequence=seq,
                    sequence=seq,
                    send_ts_us=ts,
                    kind=1,
                    payload=payload,
                    contract_marker=0x4B565231,
                )
                data = msg.SerializeToString()
                w.message(sid, data)
                written += len(data) + 48
                counts["chunks"] += 1
            sizes = np.minimum(
                4096, np.maximum(1, rng.lognormal(np.log(median_images), 1.0, 200_000))
            ).astype(np.int64)
            k = 0
            while written < per_session:
                n = int(sizes[k % len(sizes)])
                k += 1
                images = np.empty(n, dtype=IMAGE_DTYPE)
                images["bucket"] = _distinct(rng, n)
                images["word"] = rng.integers(0, 1 << 63, size=n, dtype=np.uint64)
                ts += 500
                msg = pb.FilterUpdate(
                    protocol_version=1,
                    relay=relay,
                    producer=prod,
                    base_sequence=seq,
                    sequence=seq + 1,
                    send_ts_us=ts,
                    kind=2,
                    payload=encode_delta(fmt, DC, seq, seq + 1, images),
                    contract_marker=0x4B565231,
                )
                seq += 1
                data = msg.SerializeToString()
                w.message(sid, data)
                written += len(data) + 48
                counts["deltas"] += 1
                if k % 64 == 0:
                    hb = pb.FilterUpdate(
                        protocol_version=1,
                        relay=relay,
                        producer=prod,
                        base_sequence=seq,
                        sequence=seq,
                        send_ts_us=ts,
                        kind=3,
                        contract_marker=0x4B565231,
                    )
                    w.message(sid, hb.SerializeToString())
                    counts["heartbeats"] += 1
            w.close_stream(sid)
    return counts


def count_kinds(path: Path) -> dict[str, int]:
    """The message mix of an existing capture (for ``--keep``)."""
    from cbi1kit._tables import frames_table

    kinds = frames_table(path).select("kind").collect()["kind"].value_counts()
    names = {"SNAPSHOT_CHUNK": "chunks", "DELTA": "deltas", "HEARTBEAT": "heartbeats"}
    counts = dict.fromkeys(names.values(), 0)
    for kind, n in kinds.iter_rows():
        if kind in names:
            counts[names[kind]] = n
    return counts


def _distinct(rng: np.random.Generator, n: int) -> np.ndarray:
    b = np.unique(rng.integers(0, BUCKETS, size=n + 8))
    while b.size < n:
        b = np.unique(np.concatenate([b, rng.integers(0, BUCKETS, size=n)]))
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


def measure(path: Path) -> dict[str, float]:
    from cbi1kit._tables import frames_batches

    read_once(path)  # warm the page cache for both
    base_s, total = read_once(path)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    t = time.perf_counter()
    rows = bad = 0
    for df in frames_batches(path):
        rows += df.height
        bad += df["validation_error"].null_count() - df.height
    frames_s = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # without tracemalloc's own overhead
    t = time.perf_counter()
    for _df in frames_batches(path):
        pass
    frames_untraced = time.perf_counter() - t
    base2, _ = read_once(path)
    return {
        "bytes": total,
        "rows": rows,
        "invalid_rows": -bad,
        "read_once_s": min(base_s, base2),
        "frames_s": frames_untraced,
        "frames_traced_s": frames_s,
        "tracemalloc_peak_mib": peak / MiB,
        "maxrss_delta_mib": (rss1 - rss0) / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--snapshot-share", type=float, default=0.5)
    ap.add_argument("--median-images", type=int, default=32)
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    ap.add_argument(
        "--keep", type=Path, help="capture path: reuse it if it exists, else generate it there"
    )
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
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
            [sys.executable, __file__, "--measure", str(path)],
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
    print(
        f"read bytes once (baseline: readinto a preallocated 64 MiB buffer, warm page cache, "
        f"best of 2): {r['read_once_s']:.3f} s"
    )
    ratio = r["frames_s"] / r["read_once_s"]
    print(
        f"frames table: {r['frames_s']:.3f} s, {r['rows']} rows ({r['invalid_rows']} invalid), "
        f"{r['rows'] / r['frames_s']:,.0f} rows/s, {ratio:.2f}x baseline (target <= 3x)"
    )
    print(
        f"peak memory: tracemalloc {r['tracemalloc_peak_mib']:.1f} MiB, ru_maxrss delta "
        f"{r['maxrss_delta_mib']:.1f} MiB (capture {size_mib:.0f} MiB)"
    )


if __name__ == "__main__":
    main()
