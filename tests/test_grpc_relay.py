"""Record from the simulated relay over loopback gRPC, with every injected fault (the
malformed-message faults and relay restarts: ``test_recorder_faults``).

Loopback only (127.0.0.1, ephemeral ports); every wait is bounded; servers stop in fixtures.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt
import pytest
from relayfixtures import (
    Running,
    Stream,
    read_streams,
    recorder_config,
    run_to_end,
    subscriptions,
    wait_for,
)

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.cli import main as relay_main
from cbi1kit.data import mooncake_trace
from cbi1kit.hashing._identity import DcCkfFormatIdentity
from cbi1kit.relay._messages import ERROR_REASON_TRAILER, RELAY_CONTRACT_MARKER
from cbi1kit.relay._publication import HubSnapshot, PublicationFrame, encode_delta_publication
from cbi1kit.relay._session import (
    CATALOG_METHOD,
    SUBSCRIBE_METHOD,
    Action,
    PoolSelector,
    classify_close,
)
from cbi1kit.relay._stream import StepKind, StreamChecker
from cbi1kit.sim._feeds import FrameListFeed, ProducerFeed, simulated_pool
from cbi1kit.sim._hub import FaultPlan, ServerConfig
from cbi1kit.sim._server import RelayServer
from cbi1kit.wire._assembly import SnapshotAssembly
from cbi1kit.wire._codec import decode
from cbi1kit.wire._format import FilterFormat
from cbi1kit.wire._frames import Delta, SnapshotChunk

ROOT = Path(__file__).parents[1]


# ------------------------------------------------------------------------------ helpers


@dataclass
class Replayed:
    lane: npt.NDArray[np.uint64] | None
    sequence: int | None
    violations: list[str]


def replay_stream(stream: Stream) -> Replayed:
    """Decode, assemble the snapshot, apply deltas in order; collect every violation."""
    lane: npt.NDArray[np.uint64] | None = None
    seq: int | None = None
    bad: list[str] = []
    assembly: SnapshotAssembly | None = None
    fmt: FilterFormat | None = None
    for raw in stream.messages:
        u = pb.FilterUpdate.FromString(raw)
        if fmt is None:
            f = u.producer.ckf_format
            fmt = FilterFormat(seed=f.seed, bucket_count=f.bucket_count)
            assembly = SnapshotAssembly(fmt)
        assert assembly is not None
        if u.kind == pb.FILTER_UPDATE_KIND_HEARTBEAT:
            if seq is None or u.sequence != seq:
                bad.append(f"heartbeat at {u.sequence}, lane at {seq}")
            continue
        try:
            frame = decode(fmt, u.payload)
        except ValueError as exc:
            bad.append(str(exc))
            continue
        if isinstance(frame, SnapshotChunk):
            done = assembly.absorb(frame)
            if done is not None:
                lane, seq = np.array(done.words, dtype=np.uint64), u.sequence
        else:
            assert isinstance(frame, Delta)
            if lane is None or u.base_sequence != seq:
                bad.append(f"delta {u.base_sequence}->{u.sequence} on lane at {seq}")
                continue
            lane[frame.buckets] = frame.words
            seq = u.sequence
    return Replayed(lane, seq, bad)


def replay_capture(path: Path) -> Replayed:
    """The last subscription's lane; ``replay`` checks the whole capture if present."""
    from cbi1kit.analysis import replay
    from cbi1kit.capture._readers import read_capture

    subs = subscriptions(path)
    last = replay_stream(subs[-1])
    report = replay(list(read_capture(path)))
    assert report.ok, report.violations
    assert np.array_equal(np.asarray(report.final_lane, dtype=np.uint64), last.lane)
    return last


# ------------------------------------------------------------------------------ the happy path


def test_record_from_serve_and_replay(
    tmp_path: Path, serve: Callable[..., RelayServer], recorders: Callable[..., Running]
) -> None:
    feed = ProducerFeed(steps=40, seed=3, events_per_step=12)
    srv = serve(feed)
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, validate=True))
    run_to_end(srv, rec, feed)
    assert rec.report.exit_code == 0 and rec.report.violations == []
    streams = read_streams(path)
    methods = [s.method for s in streams]
    assert methods.count(SUBSCRIBE_METHOD) == 1 and CATALOG_METHOD in methods
    (sub,) = subscriptions(path)
    assert len(sub.messages) == srv.subscriptions[0].messages  # nothing lost
    kinds = [pb.FilterUpdate.FromString(m).kind for m in sub.messages]
    assert kinds[0] == pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
    assert pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK not in kinds[1:]
    out = replay_capture(path)
    assert out.violations == []
    assert out.sequence == feed.sequence == 40
    assert out.lane is not None and np.array_equal(out.lane, feed.words())
    assert np.count_nonzero(out.lane) > 0


def test_heartbeats_only_after_the_snapshot_and_at_the_current_sequence(
    tmp_path: Path, serve: Callable[..., RelayServer], recorders: Callable[..., Running]
) -> None:
    feed = ProducerFeed(steps=3, seed=1)
    srv = serve(feed, ServerConfig(pace=0.005, heartbeat_interval=0.05))
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, validate=True))
    wait_for(lambda: rec.report.messages >= 8)
    rec.finish()
    updates = [pb.FilterUpdate.FromString(m) for m in subscriptions(path)[0].messages]
    beats = [u for u in updates if u.kind == pb.FILTER_UPDATE_KIND_HEARTBEAT]
    assert len(beats) >= 3 and beats[0] is not updates[0]
    assert all(b.sequence == b.base_sequence == 3 and not b.payload for b in beats[1:])
    assert rec.report.violations == []


def test_list_shows_the_catalog_and_leaves_nothing_behind(
    tmp_path: Path, serve: Callable[..., RelayServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where --list's scratch goes
    srv = serve(ProducerFeed(steps=1))
    code = relay_main(["record", srv.address, "--list", "--quiet", "--timeout", "5"])
    assert code == 0
    assert list(tmp_path.iterdir()) == []


def test_append_to_a_foreign_file_is_refused_and_to_an_empty_one_starts_it(tmp_path: Path) -> None:
    """Appending used to report success and write records behind a zeroed header. An empty
    file is started, as ``>>`` does (#42); a recording that received nothing leaves it empty."""
    from cbi1kit.capture._reader import CaptureReader
    from cbi1kit.capture._writer import CaptureWriter
    from cbi1kit.errors import CaptureError

    argv = ["record", "127.0.0.1:1", "--append", "--quiet", "--timeout", "1", "--duration", "1"]
    path = tmp_path / "target.kvrcap"
    foreign = b"not a capture at all, but long enough"
    path.write_bytes(foreign)
    with pytest.raises(CaptureError, match="nothing to append to"):
        CaptureWriter(path, mode="a")
    assert path.read_bytes() == foreign
    assert relay_main([*argv, "-o", str(path)]) == 3 and path.read_bytes() == foreign
    empty = tmp_path / "empty.kvrcap"
    empty.write_bytes(b"")
    assert relay_main([*argv, "-o", str(empty)]) == 3 and empty.read_bytes() == b""
    with CaptureWriter(empty, mode="a") as writer:
        writer.mark("started")
    with CaptureReader(empty) as reader:
        assert [r.type.name for r in reader.records()] == ["SCHEMA", "MARK"]


def test_selection_errors(tmp_path: Path, serve: Callable[..., RelayServer]) -> None:
    srv = serve([ProducerFeed(steps=1, dc="a"), ProducerFeed(steps=1, dc="b")])
    base = [srv.address, "--quiet", "--timeout", "5", "--give-up-after", "2"]
    assert relay_main(["record", *base, "-o", str(tmp_path / "2.kvrcap"), "--model", "x"]) == 1
    cfg = recorder_config(srv.address, tmp_path / "3.kvrcap", selector=PoolSelector(dcs=("b",)))
    rec = Running(cfg)
    wait_for(lambda: rec.report.last_sequence == 1)
    rec.finish()
    (sub,) = subscriptions(tmp_path / "3.kvrcap")
    req = pb.SubscribeKvPoolRequest.FromString(sub.request)
    assert req.expected_producer == srv.catalog_update().snapshot.pools[1].producer


# ------------------------------------------------------------------------------ admission errors


def _subscribe(address: str, request: pb.SubscribeKvPoolRequest) -> grpc.RpcError:
    with grpc.insecure_channel(address) as ch:
        call = ch.unary_stream(
            SUBSCRIBE_METHOD,
            request_serializer=pb.SubscribeKvPoolRequest.SerializeToString,
            response_deserializer=pb.FilterUpdate.FromString,
        )
        with pytest.raises(grpc.RpcError) as info:
            for _ in call(request, timeout=5):
                pass
        return info.value  # type: ignore[return-value]


def _reason(err: grpc.RpcError) -> str | None:
    return dict(err.trailing_metadata() or ()).get(ERROR_REASON_TRAILER)  # type: ignore[attr-defined]


def test_admission_errors_carry_the_reason_trailer(serve: Callable[..., RelayServer]) -> None:
    srv = serve(ProducerFeed(steps=1))
    producer = srv.catalog_update().snapshot.pools[0].producer
    ok = {"subscriber_id": "t", "contract_marker": RELAY_CONTRACT_MARKER}
    stale = pb.ProducerIdentity()
    stale.CopyFrom(producer)
    stale.layout_generation += 1
    other = pb.ProducerIdentity()
    other.CopyFrom(producer)
    other.pool_id.dc_id ^= 1
    badfmt = pb.ProducerIdentity()
    badfmt.CopyFrom(producer)
    badfmt.ckf_format.slots_per_bucket = 8
    cases = [
        (pb.SubscribeKvPoolRequest(**ok, expected_producer=stale), "PRODUCER_CHANGED", 9),
        (pb.SubscribeKvPoolRequest(**ok, expected_producer=other), "POOL_NOT_FOUND", 5),
        (pb.SubscribeKvPoolRequest(**ok, expected_producer=badfmt), "UNSUPPORTED_FEATURE", 9),
        (pb.SubscribeKvPoolRequest(**ok), "INVALID_REQUEST", 3),
        (
            pb.SubscribeKvPoolRequest(subscriber_id="t", expected_producer=producer),
            "CONTRACT_MISMATCH",
            9,
        ),
        (
            pb.SubscribeKvPoolRequest(
                subscriber_id="a\nb", expected_producer=producer, contract_marker=0x4B565231
            ),
            "INVALID_REQUEST",
            3,
        ),
    ]
    for request, reason, code in cases:
        err = _subscribe(srv.address, request)
        assert _reason(err) == f"RELAY_ERROR_REASON_{reason}"
        assert err.code().value[0] == code  # type: ignore[attr-defined]


def test_classification_follows_the_contract_table() -> None:
    S = grpc.StatusCode
    assert classify_close(S.FAILED_PRECONDITION, "RELAY_ERROR_REASON_CONTRACT_MISMATCH") is (
        Action.FATAL
    )
    assert classify_close(S.FAILED_PRECONDITION, "RELAY_ERROR_REASON_PRODUCER_CHANGED") is (
        Action.REFRESH
    )
    assert classify_close(S.RESOURCE_EXHAUSTED, "RELAY_ERROR_REASON_SUBSCRIBER_LAGGED") is (
        Action.RESUBSCRIBE
    )
    assert classify_close(S.UNAVAILABLE, "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE") is (
        Action.REFRESH
    )
    assert classify_close(S.UNAVAILABLE, None) is Action.RESUBSCRIBE
    assert classify_close(S.INVALID_ARGUMENT, "RELAY_ERROR_REASON_UNSPECIFIED") is Action.FATAL
    assert classify_close(S.FAILED_PRECONDITION, "bogus") is Action.REFRESH


# ------------------------------------------------------------------------------ faults


def test_drop_mid_snapshot_then_resubscribe(
    tmp_path: Path, serve: Callable[..., RelayServer], recorders: Callable[..., Running]
) -> None:
    feed = ProducerFeed(expected_blocks=2_000_000, steps=10, seed=5)  # 2^20 buckets: 2 chunks
    srv = serve(feed, faults=FaultPlan(drop_after_chunks=1))
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, validate=True))
    run_to_end(srv, rec, feed)
    first, *rest = subscriptions(path)
    assert first.close is not None
    assert first.close["status"] == "UNAVAILABLE" and first.close["reason"] is None
    assert len(first.messages) == first.close["count"] == 1  # the chunk before the drop
    assert srv.faults.fired == ["drop_after_chunks"]
    assert rest, "the recorder resubscribed"
    out = replay_stream(rest[-1])
    assert out.violations == [] and out.lane is not None
    assert np.array_equal(out.lane, feed.words())


def test_corrupt_payload_is_kept_and_forces_a_resubscription(
    tmp_path: Path, serve: Callable[..., RelayServer], recorders: Callable[..., Running]
) -> None:
    feed = ProducerFeed(steps=20, seed=6)
    srv = serve(feed, faults=FaultPlan(corrupt_delta=3))
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, validate=True))
    run_to_end(srv, rec, feed)
    first, *rest = subscriptions(path)
    assert first.close is not None and str(first.close["local"]).startswith("validation:")
    assert "checksum" in str(first.close["local"]).lower()
    bad = pb.FilterUpdate.FromString(first.messages[-1])  # kept, raw, as received
    assert bad.kind == pb.FILTER_UPDATE_KIND_DELTA
    with pytest.raises(ValueError, match="hashes to"):
        decode(
            FilterFormat(
                seed=feed.identity.format.seed, bucket_count=feed.identity.format.bucket_count
            ),
            bad.payload,
        )
    assert len(rec.report.violations) == 1 and rest
    out = replay_stream(rest[-1])
    assert out.violations == [] and out.lane is not None
    assert np.array_equal(out.lane, feed.words())


def test_generation_change_ends_the_stream_and_the_recorder_follows_the_catalog(
    tmp_path: Path, serve: Callable[..., RelayServer], recorders: Callable[..., Running]
) -> None:
    feed = ProducerFeed(steps=25, seed=8)
    srv = serve(feed, faults=FaultPlan(change_generation_after=5))
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, validate=True))
    run_to_end(srv, rec, feed)
    first, *rest = subscriptions(path)
    assert first.close is not None
    # Two legitimate orders: the relay retires the stream first, or the recorder sees the new
    # key in the catalog first and leaves on its own (relay.md §2.6).
    if first.close["status"] == "UNAVAILABLE":
        assert first.close["reason"] == "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE"
        assert len(first.messages) == srv.subscriptions[0].messages
    else:
        assert first.close["status"] == "CANCELLED"
        assert first.close["local"] == "catalog: new producer generation"
        assert len(first.messages) <= srv.subscriptions[0].messages
    assert len(first.messages) == first.close["count"]
    gens = [
        pb.SubscribeKvPoolRequest.FromString(s.request).expected_producer.layout_generation
        for s in subscriptions(path)
    ]
    assert gens[0] == 1 and gens[-1] == 2
    catalogs = [s for s in read_streams(path) if s.method == CATALOG_METHOD]
    revisions = [pb.KvPoolCatalogUpdate.FromString(m).revision for m in catalogs[0].messages]
    assert revisions == [1, 2]
    out = replay_stream(rest[-1])
    assert out.violations == [] and out.lane is not None
    assert np.array_equal(out.lane, feed.words())


def test_stall_fires_the_client_deadline_then_resubscribes(
    tmp_path: Path, serve: Callable[..., RelayServer], recorders: Callable[..., Running]
) -> None:
    feed = ProducerFeed(steps=20, seed=9)
    srv = serve(feed, faults=FaultPlan(stall_after=4))
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, validate=True, stall_timeout=0.5))
    run_to_end(srv, rec, feed)
    first, *rest = subscriptions(path)
    assert first.close is not None and first.close["status"] == "DEADLINE_EXCEEDED"
    assert str(first.close["local"]).startswith("stall deadline")
    assert len(first.messages) == 4
    out = replay_stream(rest[-1])
    assert out.violations == [] and out.lane is not None
    assert np.array_equal(out.lane, feed.words())


def _big_script(n: int, images: int, seed: int) -> tuple[FrameListFeed, int]:
    fmt = DcCkfFormatIdentity(0x5EED, 1 << 19)
    identity, desc = simulated_pool(fmt)
    rng = np.random.default_rng(seed)
    words = np.zeros(fmt.bucket_count, dtype=np.uint64)
    frames: list[PublicationFrame] = []

    @dataclass
    class D:
        identity: object
        base_sequence: int
        sequence: int
        buckets: npt.NDArray[np.uint32]
        values: npt.NDArray[np.uint64]

    for i in range(n):
        buckets = np.sort(rng.permutation(fmt.bucket_count)[:images]).astype(np.uint32)
        values = rng.integers(1, 1 << 63, size=images, dtype=np.uint64)
        frames.append(encode_delta_publication(D(identity, i, i + 1, buckets, values)))
    feed = FrameListFeed(HubSnapshot(identity, 0, words), frames, descriptor=desc)
    return feed, len(frames[0].payload)


def test_slow_consumer_is_ended_as_lagged_and_resubscribes_from_a_snapshot(
    tmp_path: Path, serve: Callable[..., RelayServer], recorders: Callable[..., Running]
) -> None:
    feed, size = _big_script(n=90, images=90_000, seed=11)  # ~1 MiB deltas
    assert size > 1_000_000
    srv = serve(feed, ServerConfig(pace=0.01, heartbeat_interval=0.2))
    path = tmp_path / "c.kvrcap"
    slow = threading.Event()
    slow.set()

    def consumer(update: pb.FilterUpdate) -> None:
        if slow.is_set():
            time.sleep(0.1)

    rec = recorders(recorder_config(srv.address, path, on_message=consumer, validate=True))
    wait_for(lambda: rec.report.subscriptions >= 2, timeout=20)
    slow.clear()
    run_to_end(srv, rec, feed)
    assert srv.lagged_total >= 1
    first, *rest = subscriptions(path)
    assert first.close is not None
    assert first.close["status"] == "RESOURCE_EXHAUSTED"
    assert first.close["reason"] == "RELAY_ERROR_REASON_SUBSCRIBER_LAGGED"
    assert len(first.messages) == srv.subscriptions[0].messages  # every queued frame arrived
    fresh = pb.FilterUpdate.FromString(rest[-1].messages[0])
    assert fresh.kind == pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK and fresh.sequence > 0
    out = replay_stream(rest[-1])
    assert out.violations == [] and out.lane is not None
    assert np.array_equal(out.lane, feed.words())


def test_killed_server_process_capture_is_intact_and_recorder_gives_up(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cbi1kit",
            "serve",
            "--pace",
            "0.01",
            "--heartbeat",
            "0.2",
            "--steps",
            "100000",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        address = line.split(" on ")[1].split()[0]
        path = tmp_path / "c.kvrcap"
        rec = Running(recorder_config(address, path, give_up_after=1.0, validate=True))
        wait_for(lambda: rec.report.messages >= 10)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        rec.thread.join(15)
        assert not rec.thread.is_alive()
        assert rec.report.exit_code == 3
        subs = subscriptions(path)
        first = subs[0]
        assert first.close is not None and first.close["status"] == "UNAVAILABLE"
        assert len(first.messages) == first.close["count"] >= 10
        assert sum(len(s.messages) for s in subs) == rec.report.messages
        assert replay_stream(first).violations == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_validator_is_the_replay_engine_and_flags_a_gap() -> None:
    """``--validate`` runs the stream engine replay runs: a gap is the lane's fault, named by
    upstream's variant; the relay identity is the stream's own (a restart may change it)."""
    feed = ProducerFeed(steps=3, seed=2)
    producer = feed.descriptor().producer
    from cbi1kit.hashing._identity import RelayIdentity
    from cbi1kit.relay._messages import filter_update_from_frame
    from cbi1kit.relay._publication import encode_snapshot_publication

    snapshot = list(encode_snapshot_publication(feed.snapshot()))
    deltas = [f for _ in range(3) for f in (feed.advance() or ())]

    def stream(relay: RelayIdentity, frames: list[PublicationFrame]) -> list[str | None]:
        checker = StreamChecker(expected_producer=producer)
        steps = [checker.check(filter_update_from_frame(f, relay, send_ts_us=0)) for f in frames]
        return [s.rule if s.kind is StepKind.VIOLATION else s.kind for s in steps]

    kinds = stream(RelayIdentity(1, 2), [*snapshot, deltas[0], deltas[2]])
    assert kinds[-3:] == [
        StepKind.SNAPSHOT_INSTALLED,
        StepKind.DELTA_APPLIED,
        "BaseSequenceMismatch",
    ]
    # a restarted relay (new incarnation) on the next subscription is a clean stream
    assert StepKind.VIOLATION not in stream(RelayIdentity(1, 3), [*snapshot, deltas[0]])
    assert "relay-delta-contiguous" not in kinds
    # ... while a relay identity that changes within one stream is a violation
    checker = StreamChecker(expected_producer=producer)
    checker.check(filter_update_from_frame(snapshot[0], RelayIdentity(1, 2), send_ts_us=0))
    step = checker.check(filter_update_from_frame(deltas[0], RelayIdentity(1, 3), send_ts_us=0))
    assert step.rule == "RelayChanged"


def test_serve_backed_by_the_trace_simulator(
    tmp_path: Path, recorders: Callable[..., Running]
) -> None:
    trace = mooncake_trace()
    srv = RelayServer.from_simulation(
        trace, pace=0.001, limit=120, server_config=ServerConfig(heartbeat_interval=0.2)
    ).start()
    try:
        feed = srv.pool_feed()
        assert isinstance(feed, FrameListFeed) and feed.sequence == 0
        path = tmp_path / "c.kvrcap"
        rec = recorders(recorder_config(srv.address, path, validate=True))
        run_to_end(srv, rec, feed)
        assert rec.report.violations == [] and feed.sequence > 50
        out = replay_capture(path)
        assert out.violations == [] and out.lane is not None
        assert np.array_equal(out.lane, feed.words())
    finally:
        srv.stop(0)


def test_record_validate_exits_1_after_a_validation_failure(
    tmp_path: Path, serve: Callable[..., RelayServer]
) -> None:
    """It used to exit 0 having printed the failures."""
    srv = serve(ProducerFeed(steps=6, seed=6), faults=FaultPlan(corrupt_delta=2))
    path = tmp_path / "v.kvrcap"
    argv = ["record", srv.address, "-o", str(path), "--validate", "--quiet", "--timeout", "5"]
    assert relay_main([*argv, "--frames", "12"]) == 1
    assert path.stat().st_size > 0  # what was received is kept, the bad message included


def test_append_to_a_torn_capture_says_what_it_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A capture whose last record was torn (a recorder killed mid-write) is appended to after
    cutting that record off: the user is told, and the capture holds a MARK saying so (it was
    cut silently and the result replayed as whole)."""
    from cbi1kit.capture._file import RecordType
    from cbi1kit.capture._reader import CaptureReader
    from cbi1kit.capture._writer import CaptureWriter

    path = tmp_path / "torn.kvrcap"
    with CaptureWriter(path, index_every=0) as w:
        w.mark("first")
        w.mark("the record a crash tore")
    path.write_bytes(path.read_bytes()[:-5])
    argv = ["record", "127.0.0.1:1", "-o", str(path), "--append", "--give-up-after", "0.5"]
    assert relay_main([*argv, "--quiet", "--timeout", "1"]) == 3
    err = capsys.readouterr().err
    assert "a torn last record was cut off before appending (record 2 at byte offset" in err, err
    with CaptureReader(path) as reader:
        marks = [r.body.decode() for r in reader.records() if r.type is RecordType.MARK]
    assert marks[0] == "first" and "torn last record" in marks[1]
