"""Sustained recording throughput over loopback gRPC, beside the server's send rate.

The simulated relay runs in a child process (so server and recorder do not share a GIL) and
serves a pre-encoded script; the recorder in this process writes every message to a capture.
Two workloads:

1. small deltas: one snapshot chunk, then 20,000 deltas of 12 images (~200 B payload each);
2. 4 MiB chunks: a 2**24-bucket lane, i.e. 32 snapshot chunks of 4 MiB (128 MiB).

Figures: recorder frames/s and MB/s (from the capture's monotonic receive times), the server's
send rate (from its own timestamps of the same stream), and their ratio; plus a bare gRPC
client that drops every message (no capture) as the transport baseline, same run.
The server's per-subscriber queue limits are lifted here so the send side runs flat out; the
upstream 16 frames / 16 MiB limits are exercised by ``tests/test_grpc_relay.py``.

Run: ``.venv/bin/python benchmarks/bench_grpc.py`` (or ``make bench``).
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

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture._file import CaptureReader, RecordType, decode_stream_open
from cbi1kit.hashing._identity import DcCkfFormatIdentity
from cbi1kit.relay._messages import RELAY_CONTRACT_MARKER
from cbi1kit.relay._publication import HubSnapshot, PublicationFrame, encode_delta
from cbi1kit.relay._recorder import SUBSCRIBE_METHOD, Recorder, RecorderConfig
from cbi1kit.sim._server import (
    MAX_MESSAGE_BYTES,
    FrameListFeed,
    RelayServer,
    ServerConfig,
    simulated_pool,
)


@dataclass
class _D:
    identity: Any
    base_sequence: int
    sequence: int
    buckets: Any
    values: Any


def _script(kind: str) -> tuple[FrameListFeed, int]:
    rng = np.random.default_rng(42)
    if kind == "deltas":
        fmt = DcCkfFormatIdentity(0x5EED, 1 << 16)
        identity, desc = simulated_pool(fmt)
        frames: list[PublicationFrame] = []
        for i in range(20_000):
            buckets = np.sort(rng.choice(fmt.bucket_count, 12, replace=False)).astype(np.uint32)
            values = rng.integers(1, 1 << 63, 12, dtype=np.uint64)
            frames.append(encode_delta(_D(identity, i, i + 1, buckets, values)))
        words = np.zeros(fmt.bucket_count, dtype=np.uint64)
        feed = FrameListFeed(
            HubSnapshot(identity, 0, words), frames, descriptor=desc, per_step=64, track_lane=False
        )
        return feed, 1 + len(frames)
    fmt = DcCkfFormatIdentity(0x5EED, 1 << 24)
    identity, desc = simulated_pool(fmt)
    words = rng.integers(0, 1 << 63, fmt.bucket_count, dtype=np.uint64)
    feed = FrameListFeed(HubSnapshot(identity, 0, words), [], descriptor=desc, track_lane=False)
    return feed, 32


def _serve(kind: str, conn: Any) -> None:
    feed, _ = _script(kind)
    config = ServerConfig(
        pace=0.0, heartbeat_interval=60.0, queue_frames=1 << 30, queue_bytes=1 << 40
    )
    with RelayServer(feed, config) as srv:
        conn.send(srv.address)
        conn.recv()  # "stop"
        conn.send(
            [(s.messages, s.payload_bytes, s.first_send, s.last_send) for s in srv.subscriptions]
        )


def _recv_rate(path: Path) -> tuple[int, int, float]:
    subs: set[int] = set()
    first = last = None
    n = nbytes = 0
    with CaptureReader(path, verify=False) as reader:
        for rec in reader.records():
            if rec.type is RecordType.STREAM_OPEN:
                if decode_stream_open(rec.body).method == SUBSCRIBE_METHOD:
                    subs.add(rec.stream_id)
            elif rec.type is RecordType.MESSAGE and rec.stream_id in subs:
                n += 1
                nbytes += len(rec.body)
                first = rec.recv_mono_ns if first is None else first
                last = rec.recv_mono_ns
    assert first is not None and last is not None
    return n, nbytes, (last - first) / 1e9


def _bare_client(address: str, frames: int) -> tuple[int, int, float]:
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
        t0 = t1 = 0.0
        for raw in stream:
            if n == 0:
                t0 = time.perf_counter()
            n += 1
            nbytes += len(raw)
            t1 = time.perf_counter()
            if n >= frames:
                stream.cancel()
                break
        return n, nbytes, t1 - t0


def run(kind: str, label: str) -> None:
    ctx = mp.get_context("spawn")
    results = {}
    for who in ("bare", "recorder"):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(kind, child), daemon=True)
        proc.start()
        try:
            address = parent.recv()
            expected = 1 + 20_000 if kind == "deltas" else 32
            if who == "bare":
                n, nbytes, secs = _bare_client(address, expected)
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    path = Path(tmp) / "bench.kvrcap"
                    rec = Recorder(RecorderConfig(address, path, max_frames=expected, status=False))
                    report = rec.run()
                    assert report.exit_code == 0, report.stop_reason
                    n, nbytes, secs = _recv_rate(path)
            parent.send("stop")
            (sent,) = parent.recv()
            s_n, s_bytes, s_first, s_last = sent
            results[who] = (n, nbytes, secs, s_n, s_bytes, s_last - s_first)
        finally:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    print(f"== {label}")
    for who, (n, nbytes, secs, s_n, s_bytes, s_secs) in results.items():
        fps, mbs = (n - 1) / secs, nbytes / secs / 1e6
        s_fps, s_mbs = (s_n - 1) / s_secs, s_bytes / s_secs / 1e6
        print(
            f"  {who:<8} received {n} msgs, {nbytes / 1e6:.1f} MB in {secs:.2f} s: "
            f"{fps:,.0f} frames/s, {mbs:,.1f} MB/s | server sent {s_fps:,.0f} frames/s, "
            f"{s_mbs:,.1f} MB/s | ratio {fps / s_fps:.2f}"
        )
    rec_fps = (results["recorder"][0] - 1) / results["recorder"][2]
    bare_fps = (results["bare"][0] - 1) / results["bare"][2]
    print(f"  recorder / bare client frames/s: {rec_fps / bare_fps:.2f}")


if __name__ == "__main__":
    run("deltas", "small deltas (12 images, ~200 B payload)")
    run("chunks", "4 MiB snapshot chunks (2**24-bucket lane)")
