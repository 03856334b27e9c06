"""CKF: the compiled kick walk, vectorised addressing, the producer on the trace, prefix search.

Each figure is candidate vs baseline in the same run, alternating rounds, CPU and wall time
(``_harness``); the trace is the bundled ``ck.data.mooncake_trace()``, so this
runs in a plain clone. Baselines, and why each is fair:

* **Kick walk, insert to failure** (a 2^16-bucket table filled with random items until the
  first insert fails, ``max_kicks`` 500): ``CuckooTable.insert_prepared`` (the compiled kernel
  of ``ckf/_kick``) against **its Python reference** ``insert_walk_reference`` over a list of
  Python ints (the fastest form for a Python walk), same items, same RNG; both must end with
  the same words after the same number of inserts. Goal: well under a second (<= 0.25 s).
* **prepare** (fingerprint and both buckets of each hash) vectorised, against a per-item loop
  (one ``xxhash`` call per item): the same items. No goal.
* **Producer on the trace** (LRU of ``--capacity`` blocks over the trace's requests, every
  store and eviction applied to a ``DcCkfState``) against **the exact bookkeeping of the same
  events** (a dict of the resident blocks: insert on store, delete on removal), the floor any
  consumer of the events pays. No goal.
* **Prefix search** (16 lanes, 64-block queries): ``CkfLaneTable.find_prefix_matches``
  (vectorised probes, upstream's advisory search) against **the exact linear reference**
  (``linear_prefix_depths`` probing position by position with ``probe_hash``). No goal.

    .venv/bin/python benchmarks/bench_ckf.py [--quick] [--rounds N] [--requests N]
"""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import xxhash
from _harness import TRACE, Comparison, Report, compare, parser

from cbi1kit.ckf._addressing import CkfAddressing
from cbi1kit.ckf._consumer import CkfLaneTable, linear_prefix_depths, sequence_hashes
from cbi1kit.ckf._kick import insert_walk_reference
from cbi1kit.ckf._lane import DcCkfSnapshot
from cbi1kit.ckf._producer import CkfConfig, DcCkfState, KvRemoved, KvStored, StoredBlock
from cbi1kit.ckf._table import DEFAULT_MAX_KICKS, MAX_KICKS, CuckooTable, SplitMix64, lane_rng_seed
from cbi1kit.hashing._identity import LaneLease, ProducerIdentity
from cbi1kit.hashing._pools import (
    CacheSemanticsId,
    DcId,
    IdentitySource,
    IndexerDomainId,
    PoolId,
    RoutingScopeId,
)

SEED = 0x5DEECE66D1B54A33


def bench_kick(report: Report, log2: int, rounds: int) -> None:
    addressing = CkfAddressing(seed=SEED, bucket_count=1 << log2)
    hashes = np.random.default_rng(3).integers(0, 2**64, 5 << log2, dtype=np.uint64)
    fp, a, b = addressing.prepare_many(hashes)
    items = list(zip(fp.tolist(), a.tolist(), b.tolist(), strict=True))
    rng_seed = lane_rng_seed(SEED)
    delta = addressing._delta_list

    def compiled() -> tuple[int, list[int]]:
        table = CuckooTable(addressing)
        rng = SplitMix64(rng_seed)
        table.insert_many(fp, a, b, rng, DEFAULT_MAX_KICKS)
        return table.inserts, table.words_list()

    def per_item() -> tuple[int, list[int]]:
        table = CuckooTable(addressing)
        rng = SplitMix64(rng_seed)
        for f, x, y in items:
            if table.insert_prepared(f, x, y, rng, DEFAULT_MAX_KICKS) is None:
                break
        return table.inserts, table.words_list()

    def reference() -> tuple[int, list[int]]:
        words = [0] * addressing.bucket_count
        t_bucket = [0] * (MAX_KICKS + 1)
        t_before = [0] * (MAX_KICKS + 1)
        state, inserts = rng_seed, 0
        for f, x, y in items:
            n, state = insert_walk_reference(
                words, delta, f, x, y, state, DEFAULT_MAX_KICKS, t_bucket, t_before
            )
            if n < 0:
                break
            inserts += 1
        return inserts, words

    got, want = compiled(), reference()
    assert got == want == per_item(), "the compiled walk and its reference differ"
    inserts = got[0]
    label = (
        f"2^{log2} buckets: {inserts:,} inserts, load {inserts / (4 << log2):.3f}, "
        f"max_kicks {DEFAULT_MAX_KICKS}"
    )
    cand, base = compare(compiled, reference, rounds=rounds)
    report.figure(
        Comparison(
            f"kick walk, insert to failure [{label}]",
            cand,
            base,
            "CuckooTable.insert_many (one compiled call)",
            "insert_walk_reference over Python ints",
        ),
        goal_time=0.25,
        note="same items, same RNG; the two end with identical words after identical inserts",
    )
    cand, base = compare(per_item, reference, rounds=rounds)
    report.figure(
        Comparison(
            f"kick walk, insert to failure, one call per item [{label}]",
            cand,
            base,
            "CuckooTable.insert_prepared per item",
            "insert_walk_reference over Python ints",
        ),
        note="the producer's path (it needs each insert's writes): a numba call per item; no goal",
    )


def bench_prepare(report: Report, n: int, rounds: int) -> None:
    addressing = CkfAddressing(seed=SEED, bucket_count=1 << 19)
    hashes = np.random.default_rng(0).integers(0, 2**64, n, dtype=np.uint64)
    items = hashes.tolist()
    seed, mask = addressing.seed, addressing.mask
    delta = addressing._delta_list

    def loop() -> list[tuple[int, int, int]]:
        out = []
        for h in items:
            m = xxhash.xxh3_64_intdigest(h.to_bytes(8, "little"), seed)
            f = (m & 0xFFFF) or 1
            x = (m >> 16) & mask
            out.append((f, x, x ^ delta[f]))
        return out

    fp, a, b = addressing.prepare_many(hashes[:1000])
    assert list(zip(fp.tolist(), a.tolist(), b.tolist(), strict=True)) == loop()[:1000]
    cand, base = compare(lambda: addressing.prepare_many(hashes), loop, rounds=rounds)
    report.figure(
        Comparison(
            f"prepare [{n:,} hashes]",
            cand,
            base,
            "prepare_many",
            "per-item xxhash loop",
            work=n,
            unit="M hashes/s",
            scale=1e6,
        )
    )


def local_hash(block_id: int) -> int:
    """A stable 64-bit local block hash for a Mooncake hash id."""
    return xxhash.xxh3_64_intdigest(block_id.to_bytes(8, "little"), 1337)


def trace_events(requests: int, capacity: int) -> tuple[list[KvStored | KvRemoved], int, int]:
    """The trace's requests through an LRU of ``capacity`` blocks, as producer events."""
    lines = TRACE.read_text().splitlines()[:requests]
    lru: OrderedDict[int, None] = OrderedDict()
    events: list[KvStored | KvRemoved] = []
    stores = removes = 0
    for line in lines:
        ids = json.loads(line)["hash_ids"]
        k = 0
        while k < len(ids) and ids[k] in lru:
            lru.move_to_end(ids[k])
            k += 1
        if k < len(ids):
            parent = ids[k - 1] if k else None
            blocks = tuple(StoredBlock(i, local_hash(i)) for i in ids[k:])
            events.append(KvStored(1, blocks, parent_hash=parent))
            stores += len(blocks)
            for i in ids[k:]:
                lru[i] = None
        evict = []
        while len(lru) > capacity:
            evict.append(lru.popitem(last=False)[0])
        if evict:
            events.append(KvRemoved(1, tuple(evict)))
            removes += len(evict)
    return events, stores, removes


def bench_producer(report: Report, requests: int, capacity: int, rounds: int) -> None:
    events, stores, removes = trace_events(requests, capacity)

    def producer() -> DcCkfState:
        state = DcCkfState(CkfConfig(capacity))
        for ev in events:
            state.apply(ev)
        return state

    def exact() -> dict[int, int]:
        resident: dict[int, int] = {}
        for ev in events:
            if isinstance(ev, KvStored):
                for blk in ev.blocks:
                    resident[blk.block_hash] = blk.tokens_hash
            else:
                for h in ev.block_hashes:
                    del resident[h]
        return resident

    state = producer()
    cand, base = compare(producer, exact, rounds=rounds, min_seconds=0.0)
    report.figure(
        Comparison(
            f"producer on the trace [{requests:,} requests, LRU {capacity:,} blocks, "
            f"{state.bucket_count:,} buckets: {stores:,} stores, {removes:,} removes, "
            f"{state.capacity_failures} capacity failures]",
            cand,
            base,
            "DcCkfState.apply",
            "exact dict of the resident blocks",
            work=stores + removes,
            unit="k events/s",
            scale=1e3,
        ),
        note="events = blocks stored + blocks removed",
    )


def bench_search(report: Report, queries: int, rounds: int) -> None:
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
    ready = table.ready_mask()

    def vectorised() -> list[dict[int, int] | None]:
        return [table.find_prefix_matches(qs[i % len(qs)]) for i in range(queries)]

    def linear() -> list[list[int]]:
        out = []
        for i in range(queries):
            seq = sequence_hashes(qs[i % len(qs)]).tolist()
            out.append(
                linear_prefix_depths(len(seq), ready, lambda p, s=seq: table.probe_hash(s[p]))
            )
        return out

    cand, base = compare(vectorised, linear, rounds=rounds)
    report.figure(
        Comparison(
            f"prefix search [16 lanes, {queries:,} queries of 64 blocks]",
            cand,
            base,
            "find_prefix_matches",
            "linear reference, probe_hash per position",
            work=queries,
            unit="queries/s",
        ),
        note="the advisory search may stop short of the linear depth on a false positive "
        "(upstream's behaviour); the figure times the same queries, not equal answers",
    )


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--requests", type=int, default=None, help="trace requests (all: 12,031)")
    ap.add_argument("--capacity", type=int, default=50_000)
    args = ap.parse_args()
    report = Report("bench_ckf: kick walk, prepare, producer, prefix search", args.quick)
    rounds = args.rounds or (2 if args.quick else 5)
    bench_kick(report, 12 if args.quick else 16, args.rounds or (2 if args.quick else 3))
    bench_prepare(report, 20_000 if args.quick else 500_000, rounds)
    requests = args.requests or (500 if args.quick else 12_031)
    bench_producer(report, requests, args.capacity, args.rounds or (2 if args.quick else 3))
    bench_search(report, 200 if args.quick else 2_000, rounds)
    report.done()


if __name__ == "__main__":
    main()
