"""Recording over loopback gRPC against a bare client, both timed on one clock over the same
interval, in alternating rounds.

The simulated relay runs in a child process (server and client do not share a GIL) and serves
a pre-encoded script (so its send rate is not the encoder's); its per-subscriber queue limits
are lifted so the send side runs flat out (the upstream 16 frames / 16 MiB limits are
exercised by ``tests/test_grpc_relay.py``). Two workloads, the two mixes:

1. simulator-like: one snapshot chunk, then 20,000 deltas of 12 images (~200 B payload each);
2. snapshot-heavy: a 2^24-bucket lane, 32 snapshot chunks of 4 MiB (128 MiB).

Candidate: ``cbi1kit record`` (the ``Recorder``: every message written to a capture, with the
catalog, readiness and load planes beside it). Baseline: a bare gRPC client subscribing to the
same script and dropping every message (no capture): the transport alone. Fair because both
receive the same messages from the same server script, in the same run, alternating which goes
first; each round gets a fresh server process.

One clock, one interval: the server stamps each send with ``time.monotonic()`` and the client
each receive with ``time.monotonic()`` / ``monotonic_ns()`` (the recorder's capture stamps),
the same system-wide CLOCK_MONOTONIC in both processes. A round's time is from the server's
first send of the subscription to the client's last receive: what it took to get every message
through, server and client together. The CPU time is the receiving process's over the round;
the server's own send span and CPU are printed beside. (The old figure timed the recorder's
receive span on its clock and the server's send span on another, one after the other.)

    .venv/bin/python benchmarks/bench_grpc.py [--quick] [--rounds N]
"""

from __future__ import annotations

import multiprocessing as mp
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from _harness import Comparison, MiB, Report, Timing, parser

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._file import RecordType, decode_stream_open
from cbi1kit.capture._reader import CaptureReader
from cbi1kit.hashing._identity import DcCkfFormatIdentity
from cbi1kit.relay._messages import MAX_MESSAGE_BYTES, RELAY_CONTRACT_MARKER
from cbi1kit.relay._publication import HubSnapshot, PublicationFrame, encode_delta_publication
from cbi1kit.relay._recorder import Recorder
from cbi1kit.relay._session import SUBSCRIBE_METHOD, RecorderConfig
from cbi1kit.sim._feeds import FrameListFeed, simulated_pool
from cbi1kit.sim._hub import ServerConfig
from cbi1kit.sim._server import RelayServer
from cbi1kit.wire._format import SNAPSHOT_CHUNK_BUCKETS


@dataclass
class _D:
    identity: Any
    base_sequence: int
    sequence: int
    buckets: Any
    values: Any


def _script(kind: str, quick: bool) -> tuple[FrameListFeed, int]:
    rng = np.random.default_rng(42)
    if kind == "deltas":
        fmt = DcCkfFormatIdentity(0x5EED, 1 << 16)
        identity, desc = simulated_pool(fmt)
        frames: list[PublicationFrame] = []
        for i in range(2_000 if quick else 20_000):
            buckets = np.sort(rng.choice(fmt.bucket_count, 12, replace=False)).astype(np.uint32)
            values = rng.integers(1, 1 << 63, 12, dtype=np.uint64)
            frames.append(encode_delta_publication(_D(identity, i, i + 1, buckets, values)))
        words = np.zeros(fmt.bucket_count, dtype=np.uint64)
        feed = FrameListFeed(
            HubSnapshot(identity, 0, words), frames, descriptor=desc, per_step=64, track_lane=False
        )
        return feed, 1 + len(frames)
    fmt = DcCkfFormatIdentity(0x5EED, 1 << (21 if quick else 24))
    identity, desc = simulated_pool(fmt)
    words = rng.integers(0, 1 << 63, fmt.bucket_count, dtype=np.uint64)
    feed = FrameListFeed(HubSnapshot(identity, 0, words), [], descriptor=desc, track_lane=False)
    return feed, fmt.bucket_count // SNAPSHOT_CHUNK_BUCKETS


def _serve(kind: str, quick: bool, conn: Any) -> None:
    feed, _ = _script(kind, quick)
    config = ServerConfig(
        pace=0.0, heartbeat_interval=60.0, queue_frames=1 << 30, queue_bytes=1 << 40
    )
    with RelayServer(feed, config) as srv:
        cpu0 = time.process_time()
        conn.send(srv.address)
        conn.recv()  # "stop"
        cpu = time.process_time() - cpu0
        conn.send(
            (
                [
                    (s.messages, s.payload_bytes, s.first_send, s.last_send)
                    for s in srv.subscriptions
                ],
                cpu,
            )
        )


@dataclass
class Received:
    messages: int
    payload: int
    last_recv: float  # time.monotonic() seconds


def _recorder_received(path: Path) -> Received:
    subs: set[int] = set()
    n = nbytes = 0
    last = 0
    with CaptureReader(path, verify=False) as reader:
        for rec in reader.records():
            if rec.type is RecordType.STREAM_OPEN:
                if decode_stream_open(rec.body).method == SUBSCRIBE_METHOD:
                    subs.add(rec.stream_id)
            elif rec.type is RecordType.MESSAGE and rec.stream_id in subs:
                n += 1
                nbytes += len(rec.body)
                last = rec.recv_mono_ns
    return Received(n, nbytes, last / 1e9)


def _bare_client(address: str, frames: int) -> Received:
    opts = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
    with grpc.insecure_channel(address, options=opts) as ch:
        catalog = ch.unary_stream(
            "/dynamo.kvrelay.v1.KvEventRelay/WatchKvPoolCatalog",
            request_serializer=pb.WatchKvPoolCatalogRequest.SerializeToString,
            response_deserializer=pb.KvPoolCatalogUpdate.FromString,
        )
        call = catalog(
            pb.WatchKvPoolCatalogRequest(subscriber_id="b", contract_marker=RELAY_CONTRACT_MARKER)
        )
        producer = next(call).snapshot.pools[0].producer
        call.cancel()
        sub = ch.unary_stream(
            SUBSCRIBE_METHOD,
            request_serializer=pb.SubscribeKvPoolRequest.SerializeToString,
            response_deserializer=None,
        )
        stream = sub(
            pb.SubscribeKvPoolRequest(
                subscriber_id="bare",
                expected_producer=producer,
                contract_marker=RELAY_CONTRACT_MARKER,
            )
        )
        n = nbytes = 0
        last = 0.0
        for raw in stream:
            n += 1
            nbytes += len(raw)
            last = time.monotonic()
            if n >= frames:
                stream.cancel()
                break
        return Received(n, nbytes, last)


@dataclass
class Round:
    received: Received
    cpu: float  # the receiving process's CPU seconds over the round
    first_send: float
    last_send: float
    server_cpu: float

    @property
    def interval(self) -> float:
        """First send to last receive, one clock."""
        return self.received.last_recv - self.first_send


def one_round(kind: str, who: str, quick: bool) -> Round:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(kind, quick, child), daemon=True)
    proc.start()
    try:
        address = parent.recv()
        expected = 1 + (2_000 if quick else 20_000) if kind == "deltas" else None
        if expected is None:
            expected = (1 << (21 if quick else 24)) // SNAPSHOT_CHUNK_BUCKETS
        cpu0 = time.process_time()
        if who == "bare":
            got = _bare_client(address, expected)
            cpu = time.process_time() - cpu0
        else:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "bench.kvrcap"
                rec = Recorder(RecorderConfig(address, path, max_frames=expected, status=False))
                report = rec.run()
                cpu = time.process_time() - cpu0
                assert report.exit_code == 0, report.stop_reason
                got = _recorder_received(path)
        assert got.messages == expected, (got.messages, expected)
        parent.send("stop")
        subs, server_cpu = parent.recv()
        sent = [s for s in subs if s[0] >= expected]
        assert len(sent) == 1, subs
        _, _, first_send, last_send = sent[0]
        return Round(got, cpu, first_send, last_send, server_cpu)
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def run(report: Report, kind: str, label: str, quick: bool, rounds: int) -> None:
    results: dict[str, list[Round]] = {"recorder": [], "bare": []}
    for r in range(rounds):
        for who in ("recorder", "bare") if r % 2 == 0 else ("bare", "recorder"):
            results[who].append(one_round(kind, who, quick))
    timings = {
        who: Timing([x.cpu for x in rs], [x.interval for x in rs]) for who, rs in results.items()
    }
    n = results["recorder"][0].received.messages
    mb = results["recorder"][0].received.payload / MiB
    c = Comparison(
        f"recording over loopback gRPC, {label} [{n:,} messages, {mb:.0f} MiB]",
        timings["recorder"],
        timings["bare"],
        "cbi1kit record",
        "a bare gRPC client",
        work=n,
        unit="msgs/s",
    )
    send = [x.last_send - x.first_send for x in results["recorder"]]
    lag = [x.received.last_recv - x.last_send for x in results["recorder"]]
    server_cpu = [x.server_cpu for x in results["recorder"]]
    report.figure(
        c,
        clock="wall",
        note=(
            f"wall = first send -> last receive, one clock; cpu = the receiving process's. "
            f"With the recorder the server's send span was {min(send):.2f} s best, its CPU "
            f"{min(server_cpu):.2f} s, the last receive {min(lag) * 1e3:.0f} ms after the last "
            "send; no goal"
        ),
    )


def main() -> None:
    args = parser(__doc__).parse_args()
    report = Report("bench_grpc: recording vs a bare client, one clock", args.quick)
    rounds = args.rounds or (1 if args.quick else 3)
    run(report, "deltas", "simulator-like: small deltas", args.quick, rounds)
    run(report, "chunks", "snapshot-heavy: 4 MiB chunks", args.quick, rounds)
    report.done()


if __name__ == "__main__":
    main()
