"""CKF benchmarks: vectorised prepare, the producer on the Mooncake trace, prefix search.

Run from the repo root: ``.venv/bin/python benchmarks/bench_ckf.py [--requests N]``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import xxhash

from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._consumer import CkfLaneTable, find_prefix_depths, sequence_hashes
from cbi1kit.ckf._lane import DcCkfSnapshot
from cbi1kit.ckf._producer import CkfConfig, DcCkfState, KvRemoved, KvStored, StoredBlock
from cbi1kit.hashing._identity import (
    CacheSemanticsId,
    DcId,
    IdentitySource,
    IndexerDomainId,
    LaneLease,
    PoolId,
    ProducerIdentity,
    RoutingScopeId,
)

TRACE = Path(__file__).resolve().parents[2] / "shared/data/mooncake/conversation_trace.jsonl"


def bench_prepare(n: int = 2_000_000, loop_n: int = 200_000, repeats: int = 5) -> None:
    """Best of ``repeats`` for both sides (first call included in neither: warm-up)."""
    addressing = CkfAddressing(1 << 19, 0x5DEECE66D1B54A33)
    hashes = np.random.default_rng(0).integers(0, 2**64, size=n, dtype=np.uint64)
    addressing.prepare_many(hashes[:1000])
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        addressing.prepare_many(hashes)
        best = min(best, time.perf_counter() - t)
    vec = n / best
    seed, mask = addressing.seed, addressing.mask
    items = hashes[:loop_n].tolist()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for h in items:
            m = xxhash.xxh3_64_intdigest(h.to_bytes(8, "little"), seed)
            _ = ((m & 0xFFFF) or 1, (m >> 16) & mask)
        best = min(best, time.perf_counter() - t)
    loop = loop_n / best
    print(
        f"prepare: vectorised {vec / 1e6:.1f} M hashes/s; per-item xxhash loop "
        f"{loop / 1e6:.2f} M/s; ratio {vec / loop:.1f}x (best of {repeats})"
    )


def local_hash(block_id: int) -> int:
    """A stable 64-bit local block hash for a Mooncake hash id."""
    return xxhash.xxh3_64_intdigest(block_id.to_bytes(8, "little"), 1337)


def bench_producer(requests: int, capacity: int) -> None:
    lines = TRACE.read_text().splitlines()[:requests]
    state = DcCkfState(CkfConfig(capacity))
    lru: OrderedDict[int, None] = OrderedDict()  # resident block ids (external = hash id)
    stores = removes = 0
    t_store = t_remove = 0.0
    for line in lines:
        ids = json.loads(line)["hash_ids"]
        # store the request's chain from its first non-cached block
        k = 0
        while k < len(ids) and ids[k] in lru:
            lru.move_to_end(ids[k])
            k += 1
        if k < len(ids):
            parent = ids[k - 1] if k else None
            blocks = tuple(StoredBlock(i, local_hash(i)) for i in ids[k:])
            t = time.perf_counter()
            state.apply(KvStored(1, blocks, parent_hash=parent))
            t_store += time.perf_counter() - t
            stores += len(blocks)
            for i in ids[k:]:
                lru[i] = None
        evict = []
        while len(lru) > capacity:
            evict.append(lru.popitem(last=False)[0])
        if evict:
            t = time.perf_counter()
            state.apply(KvRemoved(1, tuple(evict)))
            t_remove += time.perf_counter() - t
            removes += len(evict)
    # time split over the store path: hashing (chain), addressing (prepare), table (insert)
    sample = [local_hash(i) for i in range(100_000)]
    t = time.perf_counter()
    prev = 0
    for x in sample:
        prev = xxhash.xxh3_64_intdigest(prev.to_bytes(8, "little") + x.to_bytes(8, "little"), 1337)
    t_hash = time.perf_counter() - t
    t = time.perf_counter()
    for x in sample:
        state.addressing.prepare_ints(x)
    t_addr = time.perf_counter() - t
    per_store = t_store / max(stores, 1)
    h_share = t_hash / len(sample) / per_store
    a_share = t_addr / len(sample) / per_store
    print(
        f"producer ({len(lines)} requests, LRU {capacity} blocks, "
        f"{state.bucket_count} buckets): {stores / t_store / 1e3:.0f} k stores/s, "
        f"{removes / max(t_remove, 1e-9) / 1e3:.0f} k removes/s; capacity failures "
        f"{state.capacity_failures}; per store ≈ hashing {h_share:.0%}, addressing "
        f"{a_share:.0%}, table + bookkeeping {1 - h_share - a_share:.0%}"
    )


def bench_search(queries: int = 2000) -> None:
    config = CkfConfig(4096, seed=0x5EED)
    fmt = config.format()
    table = CkfLaneTable(fmt)
    domain = IndexerDomainId(
        CacheSemanticsId(b"\x01" * 16, IdentitySource.EXPLICIT),
        RoutingScopeId(b"\x00" * 16, IdentitySource.EXPLICIT),
    )
    rng = np.random.default_rng(1)
    qs = [rng.integers(1, 2**63, size=64, dtype=np.uint64).tolist() for _ in range(64)]
    for lane in range(16):
        s = DcCkfState(config)
        for qi, q in enumerate(qs):
            k = int(rng.integers(0, 65))
            s.apply(KvStored(1, tuple(StoredBlock(qi * 1000 + i, t) for i, t in enumerate(q[:k]))))
        ident = ProducerIdentity(PoolId(domain, DcId(1 + lane)), 1, 1, fmt)  # a DC per lane
        lease = LaneLease(1, lane, 1)
        rep = table.replica(lane)
        rep.assign(ident, lease)
        rep.install_snapshot(DcCkfSnapshot(ident, lease, 1, s.words()))
    t = time.perf_counter()
    for i in range(queries):
        table.find_prefix_matches(qs[i % len(qs)])
    full = queries / (time.perf_counter() - t)
    masks = [table.probe_many(sequence_hashes(q)).tolist() for q in qs]
    t = time.perf_counter()
    for i in range(queries):
        find_prefix_depths(64, 0xFFFF, 2, masks[i % len(masks)].__getitem__)
    search_only = queries / (time.perf_counter() - t)
    print(
        f"prefix search, 16 lanes × 64-block queries: {full:.0f} queries/s end to end "
        f"(chain + vectorised probes + search); search alone {search_only:.0f} queries/s"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=12_031)
    ap.add_argument("--capacity", type=int, default=50_000)
    args = ap.parse_args()
    bench_prepare()
    bench_producer(args.requests, args.capacity)
    bench_search()


if __name__ == "__main__":
    main()
