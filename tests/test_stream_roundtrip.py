"""Producer → publisher → envelope → capture file → reader → replay: the lane comes back exact.

The builders here (``build_stream``, ``write_capture``) are shared with ``test_replay.py`` and
``test_tables.py``. Wire producer identities are built as protobuf messages directly, so these
tests do not depend on which native identity type the relay conversion uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import strategies
from google.protobuf import json_format

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._events import EventKind
from cbi1kit.analysis._shorthands import replay
from cbi1kit.capture._readers import (
    SUBSCRIBE_KV_POOL_METHOD,
    read_capture,
    read_frames,
    read_grpcurl_json,
)
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.ckf._producer import (
    CkfConfig,
    DcCkfPublisher,
    DcCkfState,
    KvRemoved,
    KvStored,
    StoredBlock,
)
from cbi1kit.hashing._identity import LaneLease
from cbi1kit.relay._publication import (
    HubSnapshot,
    PublicationFrame,
    PublicationFrameKind,
    encode_delta_publication as publish_delta,
    encode_snapshot_publication as publish_snapshot,
)
from cbi1kit.wire._format import SNAPSHOT_CHUNK_BUCKETS

DC = 0xAABBCCDDEEFF0011
MARKER = 0x4B565231
RELAY = pb.RelayIdentity(drt_instance_id=7, relay_incarnation=(1 << 64) - 1)


@dataclass(frozen=True)
class Ident:
    """What the publication adapter reads from an identity: the format and the DC."""

    format: Any
    dc_id: int = DC


def wire_producer(fmt: Any, *, dc_id: int = DC, generation: int = 1) -> pb.ProducerIdentity:
    return strategies.wire_producer(
        fmt.seed,
        fmt.bucket_count,
        dc_id=dc_id,
        generation=generation,
        incarnation=0xDEADBEEF_00000001,
    )


def envelope(frame: PublicationFrame, producer: pb.ProducerIdentity, ts: int) -> pb.FilterUpdate:
    kind = (
        pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
        if frame.kind is PublicationFrameKind.SNAPSHOT_CHUNK
        else pb.FILTER_UPDATE_KIND_DELTA
    )
    return pb.FilterUpdate(
        protocol_version=1,
        relay=RELAY,
        producer=producer,
        base_sequence=frame.base_sequence,
        sequence=frame.sequence,
        send_ts_us=ts,
        kind=kind,
        payload=frame.payload,
        contract_marker=MARKER,
    )


def heartbeat(producer: pb.ProducerIdentity, sequence: int, ts: int) -> pb.FilterUpdate:
    return pb.FilterUpdate(
        protocol_version=1,
        relay=RELAY,
        producer=producer,
        base_sequence=sequence,
        sequence=sequence,
        send_ts_us=ts,
        kind=pb.FILTER_UPDATE_KIND_HEARTBEAT,
        contract_marker=MARKER,
    )


@dataclass
class Stream:
    messages: list[pb.FilterUpdate]
    lanes: dict[int, np.ndarray]  # producer words after each sequence
    chunk_count: int
    snapshot_sequence: int
    final_sequence: int
    kinds: list[int] = field(default_factory=list)

    @property
    def final_words(self) -> np.ndarray:
        return self.lanes[self.final_sequence]


def build_stream(
    *,
    expected_blocks: int = 2_000_000,
    warmup_events: int = 400,
    deltas: int = 24,
    heartbeat_every: int = 5,
    seed: int = 1,
    dc_id: int = DC,
) -> Stream:
    """A seeded producer of DC ``dc_id``: warm-up, snapshot at N, then deltas and heartbeats."""
    rng = np.random.default_rng(seed)
    state = DcCkfState(CkfConfig(expected_blocks, publish_every_n_events=1_000_000))
    ident = Ident(state.format, dc_id)
    producer = wire_producer(state.format, dc_id=dc_id)
    publisher = DcCkfPublisher(ident, lease=LaneLease(1, 0, 1))  # type: ignore[arg-type]
    live: list[tuple[int, int]] = []
    ext = iter(range(1, 1 << 40))

    def store(n: int) -> None:
        worker = int(rng.integers(1, 4))
        toks = rng.integers(1, 1 << 63, size=n, dtype=np.uint64).tolist()
        blocks = tuple(StoredBlock(next(ext), t) for t in toks)
        state.apply(KvStored(worker, blocks))
        live.extend((worker, b.block_hash) for b in blocks)

    def remove(n: int) -> None:
        for _ in range(min(n, len(live))):
            worker, bh = live.pop(int(rng.integers(0, len(live))))
            state.apply(KvRemoved(worker, (bh,)))

    for _ in range(warmup_events):
        store(int(rng.integers(1, 12)))
    # the warm-up's deltas are published to nobody; the snapshot carries their effect
    for _ in range(3):
        batch = state.drain()
        if batch is not None:
            publisher.publish(batch)
    _tail, snap = publisher.snapshot_after_barrier(state, LaneLease(1, 0, 2))  # type: ignore[arg-type]
    ts = 1_700_000_000_000_000
    messages: list[pb.FilterUpdate] = []
    frames = publish_snapshot(HubSnapshot(ident, snap.sequence, snap.buckets))
    chunk_count = len(frames)
    for frame in frames:
        messages.append(envelope(frame, producer, ts))
        ts += 1000
    lanes = {snap.sequence: np.array(snap.buckets, dtype=np.uint64)}
    for i in range(deltas):
        for _ in range(int(rng.integers(1, 6))):
            if rng.random() < 0.3:
                remove(int(rng.integers(1, 4)))
            else:
                store(int(rng.integers(1, 8)))
        batch = state.drain()
        if batch is None:
            continue
        delta = publisher.publish(batch)
        assert delta is not None
        messages.append(envelope(publish_delta(delta), producer, ts))
        lanes[delta.sequence] = state.words().copy()
        ts += 1000
        if i % heartbeat_every == heartbeat_every - 1:
            messages.append(heartbeat(producer, delta.sequence, ts))
            ts += 1000
    return Stream(
        messages,
        lanes,
        chunk_count,
        snap.sequence,
        publisher.last_sequence,
        [m.kind for m in messages],
    )


def write_capture(path: Path, messages: list[pb.FilterUpdate], *, catalog: bool = True) -> Path:
    """One SubscribeKvPool stream (plus an unrelated catalog stream) with fixed receive times."""
    with CaptureWriter(path) as w:
        if catalog:
            cat = w.open_stream(
                "relay:50051", "/dynamo.kvrelay.v1.KvEventRelay/WatchKvPoolCatalog", b""
            )
            w.message(cat, b"\x08\x01", recv_unix_ns=1, recv_mono_ns=1)
        sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
        for i, m in enumerate(messages):
            w.message(
                sid,
                m.SerializeToString(),
                recv_unix_ns=1_700_000_000_000_000_000 + i * 1_000_000,
                recv_mono_ns=5_000_000 + i * 1_000_000,
            )
        w.close_stream(sid)
        if catalog:
            w.close_stream(cat)
    return path


@pytest.fixture(scope="module")
def stream() -> Stream:
    return build_stream()


def test_stream_has_multi_chunk_snapshot_deltas_and_heartbeats(stream: Stream) -> None:
    assert stream.chunk_count == (1 << 20) // SNAPSHOT_CHUNK_BUCKETS == 2
    kinds = set(stream.kinds)
    assert kinds == {1, 2, 3}
    assert stream.final_sequence > stream.snapshot_sequence + 10


def test_round_trip_through_capture(stream: Stream, tmp_path: Path) -> None:
    path = write_capture(tmp_path / "s.kvrcap", stream.messages)
    records = list(read_capture(path))
    assert [r.raw for r in records] == [m.SerializeToString() for m in stream.messages]
    report = replay(read_frames(path))
    assert report.ok, report.violations
    assert report.final_sequence == stream.final_sequence
    assert report.final_lane is not None
    assert report.final_lane.dtype == np.uint64
    np.testing.assert_array_equal(report.final_lane, stream.final_words)
    counts = report.counts
    assert counts["snapshot_chunk"] == stream.chunk_count - 1
    assert counts["snapshot_installed"] == 1
    assert counts["delta_applied"] == sum(k == 2 for k in stream.kinds)
    assert counts["heartbeat"] == sum(k == 3 for k in stream.kinds)
    # every sequence the producer reached can be materialised again
    for seq, words in stream.lanes.items():
        np.testing.assert_array_equal(report.lane_at(seq), words)


def test_replay_from_a_path_equals_replay_of_messages(stream: Stream, tmp_path: Path) -> None:
    path = write_capture(tmp_path / "s.kvrcap", stream.messages)
    a = replay(path)
    b = replay(stream.messages)
    assert [(e.kind, e.sequence) for e in a.events] == [(e.kind, e.sequence) for e in b.events]
    np.testing.assert_array_equal(a.final_lane, b.final_lane)  # type: ignore[arg-type]


def test_grpcurl_json_replays_identically_to_the_capture(stream: Stream, tmp_path: Path) -> None:
    path = write_capture(tmp_path / "s.kvrcap", stream.messages)
    dump = "\n".join(json_format.MessageToJson(m, indent=2) for m in stream.messages)
    (tmp_path / "s.json").write_text(dump)
    from_json = replay(read_grpcurl_json(tmp_path / "s.json"))
    from_capture = replay(path)
    assert [(e.frame_index, e.kind, e.sequence, e.reason) for e in from_json.events] == [
        (e.frame_index, e.kind, e.sequence, e.reason) for e in from_capture.events
    ]
    assert from_json.final_lane is not None
    np.testing.assert_array_equal(from_json.final_lane, from_capture.final_lane)  # type: ignore[arg-type]
    # field names as in the .proto (grpcurl's default output) read back the same way
    dump2 = "".join(
        json_format.MessageToJson(m, preserving_proto_field_name=True) for m in stream.messages
    )
    again = replay(read_grpcurl_json(dump2.encode()))
    assert [e.kind for e in again.events] == [e.kind for e in from_capture.events]
    assert again.events[-1].kind in (EventKind.DELTA_APPLIED, EventKind.HEARTBEAT)
