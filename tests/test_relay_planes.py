"""The readiness, pool-load and serving-load planes (#15): what the simulated relay serves, what
the recorder records beside the pool stream, and which upstream schemas the recorder speaks.

Loopback only; every wait is bounded; servers stop in fixtures.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from cliutil import unwrapped
from google.protobuf import descriptor_pb2
from protofacts import facts
from relayfixtures import FAST, Running, read_streams, recorder_config, run_to_end, wait_for

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis import replay
from cbi1kit.cli import main as cli_main
from cbi1kit.data import mooncake_trace
from cbi1kit.relay._messages import ERROR_REASON_TRAILER, RELAY_CONTRACT_MARKER
from cbi1kit.relay._session import (
    PLANES,
    RELAY_INFO_METHOD,
    SERVING_LOAD_METHOD,
    SUBSCRIBE_METHOD,
    PoolSelector,
)
from cbi1kit.sim._feeds import ProducerFeed
from cbi1kit.sim._server import RelayServer
from cbi1kit.sim._simulator import SimulatorConfig

Serve = Callable[..., RelayServer]
Recorders = Callable[..., Running]
_W = pb.WorkerRole
AGG = _W.WORKER_ROLE_AGGREGATED


SERVICE = "/dynamo.kvrelay.v1.KvEventRelay/"
#: the server streams beside the pool's, as a client opens them
STREAMS = {
    "catalog": ("WatchKvPoolCatalog", pb.WatchKvPoolCatalogRequest, pb.KvPoolCatalogUpdate),
    "readiness": (
        "SubscribeServingReadiness",
        pb.SubscribeServingReadinessRequest,
        pb.ServingReadinessUpdate,
    ),
    "pool load": ("SubscribeKvPoolLoad", pb.SubscribeKvPoolLoadRequest, pb.KvPoolLoadUpdate),
    "serving load": ("SubscribeServingLoad", pb.SubscribeServingLoadRequest, pb.ServingLoadUpdate),
}


def two_pools(steps: int | None = 5) -> list[ProducerFeed]:
    """One model served by two endpoints, each its own pool."""
    return [
        ProducerFeed(steps=steps, seed=1, dc="a", endpoint=("sim", "backend", "generate-a")),
        ProducerFeed(steps=steps, seed=2, dc="b", endpoint=("sim", "backend", "generate-b")),
    ]


class Reader:
    """One server stream read on a thread into ``messages``, cancelled on ``close``."""

    def __init__(self, address: str, method: str, request: Any, response: Any) -> None:
        self.channel = grpc.insecure_channel(address)
        stub = self.channel.unary_stream(
            method,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response.FromString,
        )
        self.call = stub(request, timeout=30)
        self.messages: list[Any] = []
        self.error: grpc.RpcError | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for message in self.call:
                self.messages.append(message)
        except grpc.RpcError as err:
            self.error = err

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(5)
        self.channel.close()


@pytest.fixture
def readers() -> Iterator[Callable[..., Reader]]:
    opened: list[Reader] = []

    def open_plane(address: str, name: str, **request: Any) -> Reader:
        method, request_class, response = STREAMS[name]
        fields = {"subscriber_id": "t", "contract_marker": RELAY_CONTRACT_MARKER, **request}
        reader = Reader(address, SERVICE + method, request_class(**fields), response)
        opened.append(reader)
        return reader

    yield open_plane
    for reader in opened:
        reader.close()


def catalog_pool_ids(srv: RelayServer) -> list[pb.KvPoolId]:
    return [d.producer.pool_id for d in srv.catalog_update().snapshot.pools]


# ------------------------------------------------------------------------------ the server


def test_readiness_is_a_complete_snapshot_on_change_and_every_heartbeat(
    serve: Serve, readers: Callable[..., Reader]
) -> None:
    srv = serve(two_pools(), replace(FAST, readiness_heartbeat_interval=0.1))
    r = readers(srv.address, "readiness")
    wait_for(lambda: len(r.messages) >= 3)  # the snapshot and two heartbeats
    assert {m.revision for m in r.messages} == {1}
    (entry,) = r.messages[0].entries
    assert (entry.namespace, entry.canonical_model_id) == ("sim", "sim/model")
    assert entry.state == pb.SERVING_READINESS_STATE_READY
    assert list(entry.present_roles) == [AGG] and list(entry.missing_roles) == []
    assert [m.pool_id for m in entry.members] == catalog_pool_ids(srv)
    assert [m.endpoint.endpoint for m in entry.members] == ["generate-a", "generate-b"]
    assert not entry.duplicate_role_endpoints and not entry.legacy_fallback_active

    srv.set_ready(0, False)  # one endpoint's workers leave: the other still serves the model
    wait_for(lambda: r.messages[-1].revision == 2)
    assert r.messages[-1].entries[0].state == pb.SERVING_READINESS_STATE_READY
    srv.set_ready(1, False)  # and the other's
    wait_for(lambda: r.messages[-1].revision == 3)
    gone = r.messages[-1].entries[0]
    assert gone.state == pb.SERVING_READINESS_STATE_UNAVAILABLE
    assert list(gone.present_roles) == [] and list(gone.missing_roles) == [AGG]
    assert len(srv.catalog_update().snapshot.pools) == 2  # still published
    srv.set_ready(1, False)  # no change, no revision
    srv.set_ready(1, True)
    wait_for(lambda: r.messages[-1].revision == 4)
    assert r.messages[-1].entries[0].state == pb.SERVING_READINESS_STATE_READY


def _occupied(words: np.ndarray) -> int:
    return int(np.count_nonzero(words.view(np.uint16)))


def test_pool_load_windows_report_the_pools_blocks_and_lost_ranks(
    serve: Serve, readers: Callable[..., Reader]
) -> None:
    feeds = two_pools(steps=6)
    srv = serve(feeds)
    sub = readers(srv.address, "catalog")  # a pool advances only while it has a subscriber
    wait_for(lambda: bool(sub.messages))
    producer = sub.messages[0].snapshot.pools[0].producer
    pool = Reader(
        srv.address,
        SERVICE + "SubscribeKvPool",
        pb.SubscribeKvPoolRequest(
            subscriber_id="t", expected_producer=producer, contract_marker=RELAY_CONTRACT_MARKER
        ),
        pb.FilterUpdate,
    )
    try:
        wait_for(srv.pool_exhausted)
        load = readers(srv.address, "pool load")
        wait_for(lambda: len(load.messages) >= 2)
        first, second = load.messages[:2]
        assert second.window_sequence > first.window_sequence and first.window_ms == 200
        entries = {e.producer.pool_id.dc_id: e for e in second.pools}
        assert [e.producer for e in second.pools] == [
            d.producer for d in srv.catalog_update().snapshot.pools
        ]
        done = entries[producer.pool_id.dc_id]
        # every live block is one fingerprint in the producer's lane
        assert done.kv_used_blocks == _occupied(feeds[0].words()) > 0
        assert done.total_kv_blocks == 4096  # the capacity the filter is sized for
        assert done.kv_observed_ranks == done.kv_expected_ranks == ProducerFeed.WORKERS
        srv.set_ready(0, False)
        wait_for(lambda: load.messages[-1].pools[0].kv_observed_ranks == 0)
        lost = load.messages[-1].pools[0]
        assert (lost.kv_used_blocks, lost.total_kv_blocks) == (0, 0)
        assert lost.kv_expected_ranks == ProducerFeed.WORKERS  # coverage lost, not load zero
        assert all(
            b.window_sequence > a.window_sequence
            for a, b in zip(load.messages, load.messages[1:], strict=False)
        )
    finally:
        pool.close()


def test_the_trace_driven_pool_reports_its_filters_blocks_against_its_workers_capacity(
    readers: Callable[..., Reader],
) -> None:
    trace = mooncake_trace()
    srv = RelayServer.from_simulation(trace, pace=0.001, limit=60, server_config=FAST).start()
    try:
        feed = srv.pool_feed()
        producer = srv.catalog_update().snapshot.pools[0].producer
        request = pb.SubscribeKvPoolRequest(
            subscriber_id="t", expected_producer=producer, contract_marker=RELAY_CONTRACT_MARKER
        )
        pool = Reader(srv.address, SERVICE + "SubscribeKvPool", request, pb.FilterUpdate)
        wait_for(srv.pool_exhausted)
        pool.close()
        load = readers(srv.address, "pool load")
        wait_for(lambda: bool(load.messages))
        (entry,) = load.messages[-1].pools
        config = SimulatorConfig()  # what trace_feed simulates by default: one DC
        ranks = config.workers_per_dc * config.dp_ranks
        assert entry.kv_used_blocks == _occupied(feed.words()) > 0
        assert entry.total_kv_blocks == ranks * config.capacity_blocks
        assert entry.kv_observed_ranks == entry.kv_expected_ranks == ranks
    finally:
        srv.stop(0)


def test_serving_load_follows_upstreams_presence_rules(
    serve: Serve, readers: Callable[..., Reader]
) -> None:
    """Nothing reports request or token load to the simulated relay: every view UNAVAILABLE,
    gauges unset, totals set (upstream ``wire/load.rs``), deployment facts it knows set."""
    srv = serve(two_pools())
    r = readers(srv.address, "serving load")
    wait_for(lambda: bool(r.messages))
    update = r.messages[0]
    assert [p.producer for p in update.pools] == [
        d.producer for d in srv.catalog_update().snapshot.pools
    ]
    for p in update.pools:
        assert p.load.status == pb.DATA_STATUS_UNAVAILABLE and p.load.source_observed_ms == 0
        assert not p.load.HasField("requests") and p.load.HasField("tokens")
        assert p.load.tokens.ListFields() == []
        assert p.deployment.live_workers == ProducerFeed.WORKERS
        assert not p.deployment.HasField("max_concurrency")
    (model,) = update.models
    assert (model.namespace, model.canonical_model_id) == ("sim", "sim/model")
    assert model.load.status == pb.DATA_STATUS_UNAVAILABLE
    assert model.load.HasField("requests")
    assert not model.load.requests.HasField("requests_awaiting_first_token")
    assert not model.load.requests.HasField("requests_generating")
    tokens = model.load.tokens
    assert tokens.HasField("input_tokens_total") and tokens.HasField("output_tokens_total")
    for absent in ("awaiting_first_token_input_tokens", "inflight_input_tokens"):
        assert not tokens.HasField(absent)
    assert list(model.deployment.serving_pools) == catalog_pool_ids(srv)
    srv.set_ready(1, False)
    wait_for(lambda: r.messages[-1].pools[1].deployment.live_workers == 0)
    assert r.messages[-1].pools[0].deployment.live_workers == ProducerFeed.WORKERS


def _reason(err: grpc.RpcError | None) -> str | None:
    assert err is not None
    return dict(err.trailing_metadata() or ()).get(ERROR_REASON_TRAILER)  # type: ignore[attr-defined]


def test_each_plane_is_admitted_on_its_own_and_checks_the_request(
    serve: Serve, readers: Callable[..., Reader]
) -> None:
    srv = serve(two_pools(), replace(FAST, max_plane_subscribers=1))
    first = readers(srv.address, "readiness")
    wait_for(lambda: bool(first.messages))
    second = readers(srv.address, "readiness")
    wait_for(lambda: second.error is not None)
    assert second.error is not None and second.error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _reason(second.error) == "RELAY_ERROR_REASON_RESOURCE_LIMIT"
    load = readers(srv.address, "pool load")  # another plane, its own limit
    wait_for(lambda: bool(load.messages))
    first.close()
    wait_for(lambda: srv._plane_streams["readiness"] == 0)
    again = readers(srv.address, "readiness")  # the slot is free again
    wait_for(lambda: bool(again.messages))
    for name in ("serving load", "catalog"):
        bad = readers(srv.address, name, contract_marker=1)
        wait_for(lambda b=bad: b.error is not None)
        assert _reason(bad.error) == "RELAY_ERROR_REASON_CONTRACT_MISMATCH"
    bad = readers(srv.address, "serving load", subscriber_id="")
    wait_for(lambda: bad.error is not None)
    assert _reason(bad.error) == "RELAY_ERROR_REASON_INVALID_REQUEST"


def test_a_server_can_leave_rpcs_out_as_an_older_relay(
    serve: Serve, readers: Callable[..., Reader]
) -> None:
    srv = serve(two_pools(), replace(FAST, unimplemented=frozenset({"SubscribeServingLoad"})))
    r = readers(srv.address, "serving load")
    wait_for(lambda: r.error is not None)
    assert r.error is not None and r.error.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(ValueError, match="SubscribeNothing"):
        replace(FAST, unimplemented=frozenset({"SubscribeNothing"}))


# ------------------------------------------------------------------------------ the recorder


def _plane_streams(path: Path, method: str) -> list[Any]:
    return [s for s in read_streams(path) if s.method == method]


def test_the_recorder_records_every_plane_beside_the_pool_stream(
    tmp_path: Path, serve: Serve, recorders: Recorders
) -> None:
    """Each plane is its own stream (its request, its messages raw, its close); a pool whose
    workers left shows UNAVAILABLE in readiness while its filter stream goes on."""
    feeds = two_pools(steps=30)
    srv = serve(feeds)
    path = tmp_path / "c.kvrcap"
    cfg = recorder_config(srv.address, path, validate=True, selector=PoolSelector(dcs=("a",)))
    rec = recorders(cfg)
    wait_for(lambda: all(rec.report.plane_messages.get(p.name, 0) >= 2 for p in PLANES[1:]))
    srv.set_ready(0, False)
    srv.set_ready(1, False)
    wait_for(lambda: rec.report.plane_messages["readiness"] >= 4)
    run_to_end(srv, rec, feeds[0])
    report = rec.report
    assert report.exit_code == 0 and report.violations == [] and report.unserved == []
    for plane in PLANES:
        (stream,) = _plane_streams(path, plane.method)
        request = plane.request.FromString(stream.request)
        assert request.subscriber_id == "cbi1kit-recorder"
        assert request.contract_marker == RELAY_CONTRACT_MARKER
        parsed = [plane.response.FromString(m) for m in stream.messages]
        assert len(parsed) == report.plane_messages[plane.name] >= 1
        assert {m.relay.relay_incarnation for m in parsed} == {srv.relay.relay_incarnation}
        assert stream.close is not None and stream.close["status"] == "CANCELLED"
        assert stream.close["local"] == "stopped" and stream.close["count"] == len(parsed)
        assert stream.info["transport"] == "plaintext"
    (readiness,) = _plane_streams(path, PLANES[1].method)
    states = [pb.ServingReadinessUpdate.FromString(m) for m in readiness.messages]
    assert states[0].entries[0].state == pb.SERVING_READINESS_STATE_READY
    assert states[-1].entries[0].state == pb.SERVING_READINESS_STATE_UNAVAILABLE
    assert [s.revision for s in states][-1] == 3
    result = replay(path)  # the pool stream went on and replays to the producer's lane
    assert result.ok and np.array_equal(result.final_lane, feeds[0].words())


def test_record_validate_holds_the_catalog_and_readiness_to_one_relay(
    tmp_path: Path, serve: Serve, recorders: Recorders
) -> None:
    """coordinator.rs (91ec3789): a relay whose readiness stream names another incarnation
    than its open catalog stream breaks the epoch's one-relay rule; `record --validate` says
    so as it happens, and replay finds the same break in the capture."""
    feeds = two_pools(steps=30)
    srv = serve(feeds)
    path = tmp_path / "c.kvrcap"
    cfg = recorder_config(srv.address, path, validate=True, selector=PoolSelector(dcs=("a",)))
    rec = recorders(cfg)
    wait_for(lambda: rec.report.plane_messages.get("readiness", 0) >= 1)
    srv.relay = replace(srv.relay, relay_incarnation=srv.relay.relay_incarnation + 1)
    srv.set_ready(1, False)  # a readiness update, under the new incarnation
    wait_for(lambda: any("readiness-relay-changed" in v for v in rec.report.violations))
    rec.finish()
    said = [v for v in rec.report.violations if v.startswith("readiness stream")]
    assert said and "Relay incarnation changed within a connection epoch" in said[0]
    rules = {v.rule for v in replay(path).plane_violations}
    assert "readiness-relay-changed" in rules


class _PrefillFeed(ProducerFeed):
    """A pool whose endpoint declares the prefill role only (a disaggregated prefill pool)."""

    def descriptor(self) -> pb.KvPoolDescriptor:
        desc = super().descriptor()
        desc.pool_roles[:] = [_W.WORKER_ROLE_PREFILL]
        return desc


def test_record_validate_names_a_pool_upstream_takes_no_ckf_stream_from(
    tmp_path: Path, serve: Serve, recorders: Recorders
) -> None:
    """stream.rs (53c7c79f): a pool without the aggregated role is no CKF source of
    upstream's consumer; `record --validate` says so when it subscribes, replay likewise."""
    feeds = [_PrefillFeed(steps=5, seed=1, dc="a", endpoint=("sim", "backend", "generate-a"))]
    srv = serve(feeds)
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, validate=True))
    wait_for(lambda: any("catalog-pool-not-aggregated" in v for v in rec.report.violations))
    rec.finish()
    (said,) = [v for v in rec.report.violations if "catalog-pool-not-aggregated" in v]
    assert "declares no aggregated role (roles: WORKER_ROLE_PREFILL)" in said
    assert [v.rule for v in replay(path).plane_violations] == ["catalog-pool-not-aggregated"]


def test_an_older_relay_without_serving_load_is_recorded_without_it(
    tmp_path: Path, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    """A relay of upstream's five-RPC schema (bd44782f) answers SubscribeServingLoad
    UNIMPLEMENTED: asked once, its close recorded, named in the summary; nothing else changes."""
    srv = serve(
        ProducerFeed(steps=None, seed=3),
        replace(FAST, unimplemented=frozenset({"SubscribeServingLoad"})),
    )
    path = tmp_path / "c.kvrcap"
    argv = ["record", srv.address, "-o", str(path), "--frames", "30", "--timeout", "5"]
    assert cli_main(argv) == 0
    err = unwrapped(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith("recorded 30 frames"), err
    assert err[0].endswith("; not served: SubscribeServingLoad: UNIMPLEMENTED Method not found!")
    (asked,) = _plane_streams(path, SERVING_LOAD_METHOD)
    assert asked.messages == [] and asked.close is not None
    assert asked.close["status"] == "UNIMPLEMENTED"
    assert len(_plane_streams(path, RELAY_INFO_METHOD)) == 1
    assert replay(path).ok


def test_a_silent_plane_is_a_stall_and_is_watched_again(
    tmp_path: Path, serve: Serve, recorders: Recorders
) -> None:
    srv = serve(ProducerFeed(steps=None, seed=4), replace(FAST, readiness_heartbeat_interval=60))
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, stall_timeout=0.5))
    wait_for(lambda: rec.report.plane_messages.get("readiness", 0) >= 2)
    rec.finish()
    watches = _plane_streams(path, PLANES[1].method)
    assert len(watches) >= 2
    first = watches[0]
    assert first.close is not None and first.close["status"] == "DEADLINE_EXCEEDED"
    assert str(first.close["local"]).startswith("stall deadline")
    assert len(first.messages) == 1  # the snapshot, then silence
    catalog = _plane_streams(path, PLANES[0].method)
    assert len(catalog) == 1  # the catalog speaks only on change: silence is no stall


# ------------------------------------------------------------------------------ schemas


UPSTREAM = json.loads((Path(__file__).parent / "vectors/relay_proto/upstream.json").read_text())


def _ours() -> dict[str, Any]:
    """The schema the recorder was built with (upstream's newest, ``test_proto.py`` checks)."""
    file = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(file)
    return facts(file)


def _conflicts(mine: dict[str, Any], theirs: dict[str, Any], a: str, b: str) -> list[str]:
    """Where message ``a`` of ``mine`` and ``b`` of ``theirs`` read the same field number
    differently (name, label, type; recursively); a field only one side has is no conflict
    (proto3 skips or defaults it)."""
    seen: set[tuple[str, str]] = set()
    out: list[str] = []

    def walk(x: str, y: str) -> None:
        if (x, y) in seen:
            return
        seen.add((x, y))
        fx = {f["number"]: (n, f) for n, f in mine["messages"][x].items()}
        fy = {f["number"]: (n, f) for n, f in theirs["messages"][y].items()}
        for number in fx.keys() & fy.keys():
            (nx, f1), (ny, f2) = fx[number], fy[number]
            where = f"{x}.{nx} / {y}.{ny} (field {number})"
            repeated = (f1["label"] == "repeated", f2["label"] == "repeated")
            if nx != ny or repeated[0] != repeated[1]:
                out.append(where)
            elif f1["type"] in mine["messages"] and f2["type"] in theirs["messages"]:
                walk(f1["type"], f2["type"])
            elif f1["type"] in mine["enums"] and f2["type"] in theirs["enums"]:
                e1, e2 = mine["enums"][f1["type"]], theirs["enums"][f2["type"]]
                if any(e1[k] != e2[k] for k in e1.keys() & e2.keys()):
                    out.append(where)
            elif f1["type"] != f2["type"]:
                out.append(where)

    walk(a, b)
    return out


def speaks(theirs: dict[str, Any], method: str) -> str:
    mine = _ours()
    rpc = theirs["services"]["KvEventRelay"].get(method)
    if rpc is None:
        return "absent"
    ours = mine["services"]["KvEventRelay"][method]
    bad = _conflicts(mine, theirs, ours["request"], rpc["request"])
    bad += _conflicts(mine, theirs, ours["response"], rpc["response"])
    return "conflict" if bad else "same"


def test_which_upstream_schemas_the_recorder_speaks() -> None:
    """The recorder's calls against each recorded upstream version: the newest (d95e45a5) in
    full; bd44782f in full but for SubscribeServingLoad, which it lacks (the recorder records
    the UNIMPLEMENTED close and goes on); 2e45ac3b not: its SubscribeKvPoolRequest field 2 is a
    KvPoolId and its readiness entries are another message, under the same marker and version."""
    methods = [RELAY_INFO_METHOD, SUBSCRIBE_METHOD, *(p.method for p in PLANES)]
    names = [m.rsplit("/", 1)[1] for m in methods]
    table = {
        v["commit"][:8]: {n: speaks(v["facts"], n) for n in names} for v in UPSTREAM["versions"]
    }
    same = dict.fromkeys(names, "same")
    assert table["d95e45a5"] == same
    assert table["bd44782f"] == {**same, "SubscribeServingLoad": "absent"}
    assert table["2e45ac3b"] == {
        **same,
        "SubscribeKvPool": "conflict",
        "SubscribeServingReadiness": "conflict",
        "SubscribeServingLoad": "absent",
    }
    mine = _ours()
    oldest = UPSTREAM["versions"][2]["facts"]
    assert _conflicts(mine, oldest, "SubscribeKvPoolRequest", "SubscribeKvPoolRequest") == [
        "SubscribeKvPoolRequest.expected_producer / SubscribeKvPoolRequest.pool_id (field 2)"
    ]
