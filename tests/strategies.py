"""Shared hypothesis strategies: formats, images, lanes and whole frames; relay captures of
several pools that break every consumer rule (``capture_plans``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD, WATCH_KV_POOL_CATALOG_METHOD
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.wire._format import U64_MAX, FilterFormat
from cbi1kit.wire._frames import IMAGE_DTYPE, _encode_chunk, _encode_delta_bytes

u64 = st.integers(min_value=0, max_value=U64_MAX)
u64_edges = st.one_of(u64, st.sampled_from([0, 1, U64_MAX, U64_MAX - 1, 1 << 63, (1 << 63) - 1]))


@st.composite
def formats(draw: st.DrawFn, max_log2: int = 12) -> FilterFormat:
    """A valid format; lanes stay small (<= 2**max_log2 buckets) so examples are cheap."""
    return FilterFormat(seed=draw(u64_edges), bucket_count=1 << draw(st.integers(1, max_log2)))


@st.composite
def images_for(draw: st.DrawFn, fmt: FilterFormat, max_size: int = 64) -> np.ndarray:
    n = draw(st.integers(0, max_size))
    buckets = draw(st.lists(st.integers(0, fmt.bucket_count - 1), min_size=n, max_size=n))
    words = draw(st.lists(u64_edges, min_size=n, max_size=n))
    out = np.empty(n, dtype=IMAGE_DTYPE)
    out["bucket"] = buckets
    out["word"] = np.array(words, dtype=np.uint64)
    return out


@st.composite
def lanes_for(draw: st.DrawFn, fmt: FilterFormat) -> np.ndarray:
    """A lane with a drawn density of nonzero words (seeded from hypothesis, reproducible)."""
    seed = draw(st.integers(0, 2**32 - 1))
    density = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
    rng = np.random.default_rng(seed)
    words = rng.integers(0, U64_MAX, fmt.bucket_count, dtype=np.uint64, endpoint=True)
    words[rng.random(fmt.bucket_count) >= density] = 0
    return words


# ------------------------------------------------------------------ relay captures (#16)
#
# A capture of one or more pools' subscriptions, each a snapshot and then a drawn run of
# operations: mostly clean deltas, and every way a stream breaks the consumer's rules (gaps,
# duplicates, header against envelope, format, DC, checksum, empty or repeated images,
# heartbeats, kinds, producer and relay changes, protobuf oddities a consumer accepts, snapshots
# mid-stream, resubscriptions, catalog updates), optionally damaged on disk. ``CapturePlan``
# holds the drawn values and writes the capture deterministically from them.

#: what may happen to a stream between its runs of clean deltas
STREAM_OPS: tuple[str, ...] = (
    "heartbeat",
    "big",
    "gap",
    "duplicate",
    "epoch",
    "base_epoch",
    "format",
    "dc",
    "checksum",
    "empty",
    "dup_bucket",
    "range",
    "hb_sequence",
    "hb_payload",
    "kind",
    "kind_chunk",
    "no_producer",
    "producer",
    "relay",
    "marker",
    "garbage",
    "unknown_field",
    "repeated_field",
    "noncanonical",
    "snapshot",
    "newer_snapshot",
    "partial_snapshot",
    "chunk1",
    "resubscribe",
    "reopen",
    "close",
    "catalog",
    "mark",
)


@dataclass(frozen=True)
class CapturePlan:
    """What a capture holds: per pool its lane size (log2) and operations; how the pools'
    records interleave; how often the writer indexes; the damage done to the file after."""

    seed: int
    pools: tuple[tuple[int, tuple[str, ...]], ...]
    interleave: bool
    index_every: int
    damage: tuple[str, float] | None

    def write(self, path: Path) -> Path:
        rng = np.random.default_rng(self.seed)
        per_pool = [_pool_records(rng, k, log2, ops) for k, (log2, ops) in enumerate(self.pools)]
        order: list[tuple[Any, ...]] = []
        if self.interleave:
            for i in range(max(map(len, per_pool))):
                order += [recs[i] for recs in per_pool if i < len(recs)]
        else:
            order = [r for recs in per_pool for r in recs]
        t = 1_800_000_000_000_000_000
        with CaptureWriter(path, index_every=self.index_every) as w:
            sids: dict[Any, int] = {}
            catalog = w.open_stream("relay", WATCH_KV_POOL_CATALOG_METHOD, b"", recv_unix_ns=t)
            for rec in order:
                t += int(rng.integers(1, 3_000_000))
                kind = rec[0]
                if kind == "open":
                    sids[rec[1]] = w.open_stream(
                        "relay", SUBSCRIBE_KV_POOL_METHOD, b"", recv_unix_ns=t
                    )
                elif kind == "close":
                    w.close_stream(
                        sids.pop(rec[1]),
                        status_code=14,
                        status_name="UNAVAILABLE",
                        error_reason="PUBLICATION_UNAVAILABLE",
                        recv_unix_ns=t,
                    )
                elif kind == "msg":
                    w.message(sids[rec[1]], rec[2], recv_unix_ns=t)
                elif kind == "catalog":
                    w.message(catalog, rec[1], recv_unix_ns=t)
                else:
                    w.mark("a note")
            for sid in sids.values():
                w.close_stream(sid, recv_unix_ns=t)
            w.close_stream(catalog, recv_unix_ns=t)
        if self.damage is not None:
            how, where = self.damage
            data = bytearray(path.read_bytes())
            at = 32 + int(where * (len(data) - 33))
            if how == "flip":
                data[at] ^= 0x5A
            elif how == "cut":
                data = data[:at]
            else:  # a zeroed stretch
                data[at : at + 64] = bytes(len(data[at : at + 64]))
            path.write_bytes(bytes(data))
        return path


def wire_producer(
    seed: int, bucket_count: int, *, dc_id: int, generation: int = 1, incarnation: int = 7
) -> pb.ProducerIdentity:
    """A producer identity as the relay sends it (fixed digests), for a lane of ``seed`` and
    ``bucket_count``: the tests that build relay messages by hand share it."""
    d = pb.DigestIdentity
    return pb.ProducerIdentity(
        pool_id=pb.KvPoolId(
            identity_version=1,
            indexer_domain=pb.IndexerDomainId(
                cache_semantics=d(digest=b"\x11" * 16, source=2),
                routing_scope=d(digest=b"\x22" * 16, source=1),
            ),
            dc_id=dc_id,
        ),
        producer_incarnation=incarnation,
        layout_generation=generation,
        ckf_format=pb.CkfFormat(
            format_version=1,
            seed=seed,
            bucket_count=bucket_count,
            fingerprint_bits=16,
            slots_per_bucket=4,
        ),
    )


def _pool_records(
    rng: np.random.Generator, k: int, log2: int, ops: tuple[str, ...]
) -> list[tuple[Any, ...]]:
    """One pool's records: its streams' opens, messages and closes, from its operations."""
    fmt = FilterFormat(seed=int(rng.integers(0, 2**63)), bucket_count=1 << log2)
    dc = 0x1000 + k
    buckets = fmt.bucket_count
    state = {"generation": 1, "stream": 0, "seq": int(rng.integers(0, 50))}
    relay = pb.RelayIdentity(drt_instance_id=3, relay_incarnation=4)
    lane = rng.integers(0, 2**64, buckets, dtype=np.uint64, endpoint=False)
    lane[rng.random(buckets) < 0.5] = 0
    out: list[tuple[Any, ...]] = []
    last: list[bytes] = []

    def update(what: int, base: int, seq: int, payload: bytes = b"", **kw: Any) -> pb.FilterUpdate:
        m = pb.FilterUpdate(
            protocol_version=1,
            relay=relay,
            producer=wire_producer(
                fmt.seed, fmt.bucket_count, dc_id=dc, generation=state["generation"]
            ),
            base_sequence=base,
            sequence=seq,
            send_ts_us=1,
            kind=what,  # type: ignore[arg-type]
            payload=payload,
            contract_marker=0x4B565231,
        )
        for name, value in kw.items():
            setattr(m, name, value)
        return m

    def send(m: pb.FilterUpdate | bytes) -> None:
        raw = m if isinstance(m, bytes) else m.SerializeToString()
        out.append(("msg", (k, state["stream"]), raw))
        last[:] = [raw]

    def snapshot(seq: int, parts: int | None = None, sent: int | None = None) -> None:
        """The lane at ``seq`` in ``parts`` chunks (drawn), the first ``sent`` of them."""
        parts = parts or int(rng.integers(1, 4))
        cuts = np.unique(np.r_[0, np.sort(rng.integers(1, buckets, parts - 1)), buckets])
        for i in range(len(cuts) - 1 if sent is None else min(sent, len(cuts) - 1)):
            frame = _encode_chunk(
                fmt, dc, seq, i, len(cuts) - 1, int(cuts[i]), lane[cuts[i] : cuts[i + 1]]
            )
            send(update(pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, seq, seq, frame))

    def images(n: int) -> np.ndarray:
        n = min(n, buckets)
        out_ = np.empty(n, dtype=IMAGE_DTYPE)
        out_["bucket"] = rng.permutation(buckets)[:n]
        out_["word"] = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
        out_["word"][rng.random(n) < 0.3] = 0
        return out_

    def delta(n: int | None = None, **change: Any) -> None:
        """The producer's next delta (its lane moves on), sent as ``change`` says."""
        seq = state["seq"]
        imgs = images(int(rng.integers(1, 24)) if n is None else n)
        lane[imgs["bucket"]] = imgs["word"]
        head = {"fmt": fmt, "dc": dc, "base": seq, "epoch": seq + 1}
        head.update({key: change.pop(key) for key in list(change) if key in head})
        frame = _encode_delta_bytes(head["fmt"], head["dc"], head["base"], head["epoch"], imgs)
        m = update(pb.FILTER_UPDATE_KIND_DELTA, seq, seq + 1, frame, **change)
        state["seq"] = seq + 1
        send(m)

    def open_stream(with_snapshot: bool = True) -> None:
        state["stream"] += 1
        out.append(("open", (k, state["stream"])))
        if with_snapshot:
            snapshot(state["seq"])

    def close_stream() -> None:
        out.append(("close", (k, state["stream"])))

    open_stream()
    for op in ops:
        seq = state["seq"]
        if op == "delta":
            delta()
        elif op == "big":
            delta(int(rng.integers(200, 2000)))
        elif op == "heartbeat":
            send(update(pb.FILTER_UPDATE_KIND_HEARTBEAT, seq, seq))
        elif op == "gap":
            state["seq"] += 1
            delta()
        elif op == "duplicate":
            if last:
                send(last[0])
        elif op == "epoch":
            delta(epoch=seq + 2)
        elif op == "base_epoch":
            delta(base=seq + 7)
        elif op == "format":
            delta(fmt=FilterFormat(seed=fmt.seed ^ 1, bucket_count=buckets))
        elif op == "dc":
            delta(dc=dc + 1)
        elif op == "checksum":
            delta()
            m = pb.FilterUpdate.FromString(out.pop()[2])
            payload = bytearray(m.payload)
            payload[-1] ^= 0x10  # the last image's word: the body no longer hashes to it
            m.payload = bytes(payload)
            send(m)
        elif op == "empty":
            delta(0)
        elif op == "dup_bucket":
            imgs = images(int(rng.integers(2, 12)))
            imgs["bucket"][-1] = imgs["bucket"][0]
            frame = _encode_delta_bytes(fmt, dc, seq, seq + 1, imgs)
            state["seq"] = seq + 1
            send(update(pb.FILTER_UPDATE_KIND_DELTA, seq, seq + 1, frame))
        elif op == "range":
            imgs = images(3)
            imgs["bucket"][1] = buckets + int(rng.integers(0, 5))
            frame = _encode_delta_bytes(fmt, dc, seq, seq + 1, imgs)
            state["seq"] = seq + 1
            send(update(pb.FILTER_UPDATE_KIND_DELTA, seq, seq + 1, frame))
        elif op == "hb_sequence":
            send(update(pb.FILTER_UPDATE_KIND_HEARTBEAT, seq + 3, seq + 3))
        elif op == "hb_payload":
            send(update(pb.FILTER_UPDATE_KIND_HEARTBEAT, seq, seq, b"x"))
        elif op == "kind":
            delta(kind=7)
        elif op == "kind_chunk":
            delta(kind=pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, base_sequence=seq + 1)
        elif op == "no_producer":
            m = update(pb.FILTER_UPDATE_KIND_HEARTBEAT, seq, seq)
            m.ClearField("producer")
            send(m)
        elif op == "producer":
            state["generation"] += 1
            delta()
        elif op == "relay":
            relay = pb.RelayIdentity(drt_instance_id=3, relay_incarnation=int(rng.integers(5, 9)))
            delta()
        elif op == "marker":
            delta(contract_marker=0x4B565232)
        elif op == "garbage":
            send(b"\xff\xff\x01")
        elif op == "unknown_field":
            delta()
            send(out.pop()[2] + b"\xa0\x06\x2a")  # field 100, varint 42
        elif op == "repeated_field":
            delta()
            m = pb.FilterUpdate.FromString(out.pop()[2])
            again = pb.FilterUpdate(producer=m.producer).SerializeToString()
            send(m.SerializeToString() + again)
        elif op == "noncanonical":
            delta()
            m = pb.FilterUpdate.FromString(out.pop()[2])
            extra = pb.ProducerIdentity(layout_generation=state["generation"])
            m.ClearField("producer")
            body = m.SerializeToString()
            producer = wire_producer(
                fmt.seed, fmt.bucket_count, dc_id=dc, generation=state["generation"]
            ).SerializeToString()
            producer += extra.SerializeToString()  # the same value again: last one wins
            send(body + b"\x1a" + _varint(len(producer)) + producer)
        elif op == "snapshot":
            snapshot(seq)
        elif op == "newer_snapshot":
            state["seq"] = seq + 3
            snapshot(seq + 3)
        elif op == "partial_snapshot":  # a snapshot starts over and stops: then a delta
            snapshot(seq, parts=2, sent=1)
        elif op == "chunk1":
            frame = _encode_chunk(fmt, dc, seq, 1, 2, buckets // 2, lane[buckets // 2 :])
            send(update(pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK, seq, seq, frame))
        elif op == "resubscribe":
            close_stream()
            if rng.random() < 0.5:
                state["generation"] += 1
            open_stream()
        elif op == "reopen":
            close_stream()
            open_stream(with_snapshot=False)
        elif op == "close":  # a new stream that starts with a heartbeat, then its snapshot
            close_stream()
            open_stream(with_snapshot=False)
            send(update(pb.FILTER_UPDATE_KIND_HEARTBEAT, seq, seq))
            snapshot(seq)
        elif op == "catalog":
            out.append(("catalog", b"\x08\x01" if rng.random() < 0.7 else b"\xff"))
        elif op == "mark":
            out.append(("mark",))
    close_stream()
    return out


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


@st.composite
def capture_plans(draw: st.DrawFn, max_pools: int = 3, max_events: int = 10) -> CapturePlan:
    """A drawn capture (see ``CapturePlan``): per pool, runs of clean deltas (up to 80) each
    followed by one of ``STREAM_OPS``."""
    runs = st.tuples(st.integers(0, 80), st.sampled_from(STREAM_OPS))
    ops = st.lists(runs, max_size=max_events).map(
        lambda rs: tuple(op for n, what in rs for op in ("delta",) * n + (what,))
    )
    pools = draw(st.lists(st.tuples(st.integers(2, 12), ops), min_size=1, max_size=max_pools))
    damage = draw(
        st.none() | st.tuples(st.sampled_from(["flip", "cut", "zero"]), st.floats(0.0, 1.0))
    )
    return CapturePlan(
        draw(st.integers(0, 2**32 - 1)),
        tuple(pools),
        draw(st.booleans()),
        draw(st.sampled_from([0, 3, 16, 1024])),
        damage,
    )
