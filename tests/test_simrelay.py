"""The simulated relay: deterministic captures that replay cleanly to the producer's words."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from errorcheck import raises_variant

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._shorthands import replay
from cbi1kit.capture._file import RecordType, decode_stream_close, decode_stream_open
from cbi1kit.capture._reader import CaptureReader
from cbi1kit.capture._readers import read_capture, read_catalog
from cbi1kit.capture._streams import WATCH_KV_POOL_CATALOG_METHOD
from cbi1kit.data import mooncake_trace, sample_capture
from cbi1kit.errors import OutputError
from cbi1kit.hashing._pools import stable_dc_id
from cbi1kit.relay._messages import catalog_from_wire, producer_from_wire
from cbi1kit.relay._session import CATALOG_METHOD
from cbi1kit.sim._simrelay import (
    DEFAULT_EPOCH_UNIX_NS,
    RelayConfig,
    SimRelayConfig,
    SimRelayResult,
    sample_config,
    simulate_capture,
)
from cbi1kit.sim._simulator import SimulatorConfig
from cbi1kit.sim._workload import Workload, read_mooncake, synthetic_chat

TRACE = mooncake_trace()
SMALL = SimulatorConfig(dcs=3, workers_per_dc=2, capacity_blocks=256, policy="ckf")


@pytest.fixture(scope="module")
def trace() -> Workload:
    return read_mooncake(TRACE, limit=400)


def _replays_to_producer(path: Path, res: SimRelayResult) -> None:
    """Every recorded DC's lane replays clean to its producer's final words, one lane each."""
    report = replay(path)
    assert report.ok, report.violations[:3]
    assert len(report.lanes) == len(res.final_words) > 0
    for dc, words in res.final_words.items():
        lane = report.lane(dc=f"sim-dc-{dc}")
        assert lane.final_sequence == res.final_sequence[dc]
        assert lane.final_lane is not None and np.array_equal(lane.final_lane, words)


def test_same_inputs_same_bytes(tmp_path: Path, trace: Workload) -> None:
    cfg = SimRelayConfig(SMALL, RelayConfig(heartbeat_interval_ms=1_000))
    a = simulate_capture(trace, tmp_path / "a.kvrcap", cfg)
    b = simulate_capture(trace, tmp_path / "b.kvrcap", cfg)
    assert (tmp_path / "a.kvrcap").read_bytes() == (tmp_path / "b.kvrcap").read_bytes()
    assert a.capture_bytes == b.capture_bytes > 0
    other = SimRelayConfig(SimulatorConfig(**{**SMALL.to_json(), "seed": 9}), cfg.relay)  # type: ignore[arg-type]
    simulate_capture(trace, tmp_path / "c.kvrcap", other)
    assert (tmp_path / "c.kvrcap").read_bytes() != (tmp_path / "a.kvrcap").read_bytes()


def test_capture_replays_to_the_producer_words(tmp_path: Path, trace: Workload) -> None:
    for dc in range(SMALL.dcs):
        path = tmp_path / f"dc{dc}.kvrcap"
        res = simulate_capture(trace, path, SimRelayConfig(SMALL, RelayConfig(record_dc=dc)))
        assert res.delta_frames == res.simulation.deltas[dc] > 0
        assert list(res.final_words) == [dc] and res.catalog_updates == 1
        _replays_to_producer(path, res)
        (record,) = read_catalog(path)  # one DC's subscription, the catalog of every pool
        assert len(catalog_from_wire(record.update).pools) == SMALL.dcs


def test_the_whole_fleet_with_its_catalog(tmp_path: Path, trace: Workload) -> None:
    """By default every DC is recorded: a catalog stream describing every pool, then a
    subscription per pool naming the catalog's producer; each replays to its producer."""
    path = tmp_path / "fleet.kvrcap"
    res = simulate_capture(trace, path, SimRelayConfig(SMALL))
    assert sorted(res.final_words) == list(range(SMALL.dcs)) and res.streams == SMALL.dcs
    assert res.delta_frames == sum(res.simulation.deltas)
    (record,) = read_catalog(path)
    catalog = catalog_from_wire(record.update)
    assert res.catalog_updates == 1 and catalog.revision == 1
    advertised = [d.producer for d in catalog.pools]
    assert [p.dc_id for p in advertised] == [stable_dc_id(f"sim-dc-{dc}") for dc in range(3)]
    assert all(d.serves(SMALL.model) and d.roles == ("AGGREGATED",) for d in catalog.pools)
    assert {d.query_semantics.kv_block_size for d in catalog.pools} == {trace.block_size}
    opens = [
        (r.stream_id, decode_stream_open(r.body))
        for r in CaptureReader(path).records()
        if r.type is RecordType.STREAM_OPEN
    ]
    assert opens[0][1].method == WATCH_KV_POOL_CATALOG_METHOD == CATALOG_METHOD
    subscribed = [
        producer_from_wire(pb.SubscribeKvPoolRequest.FromString(o.request).expected_producer)
        for _, o in opens[1:]
    ]
    assert subscribed == advertised
    _replays_to_producer(path, res)


def test_stream_shape_clock_and_heartbeats(tmp_path: Path, trace: Workload) -> None:
    path = tmp_path / "h.kvrcap"
    res = simulate_capture(
        trace, path, SimRelayConfig(SMALL, RelayConfig(heartbeat_interval_ms=2_000, record_dc=0))
    )
    assert res.heartbeats > 0 and res.streams == 1
    with CaptureReader(path) as reader:
        records = list(reader.records())
        assert reader.created_unix_ns == DEFAULT_EPOCH_UNIX_NS + int(trace.timestamps_ms[0]) * 10**6
    assert [r.type for r in records[:3]] == [
        RecordType.SCHEMA,
        RecordType.MARK,
        RecordType.STREAM_OPEN,
    ]
    assert records[-1].type is RecordType.STREAM_CLOSE
    assert decode_stream_close(records[-1].body).status_name == "OK"
    monos = [r.recv_mono_ns for r in records[2:]]
    assert monos == sorted(monos) and len(set(monos)) == len(monos)
    updates = [f.update for f in read_capture(path)]
    kinds = [u.kind for u in updates if u is not None]
    assert kinds[0] == pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
    beats = [u for u in updates if u is not None and u.kind == pb.FILTER_UPDATE_KIND_HEARTBEAT]
    assert len(beats) == res.heartbeats
    # heartbeats never advance the sequence and carry no payload
    seq = 0
    for u in updates:
        assert u is not None
        if u.kind == pb.FILTER_UPDATE_KIND_HEARTBEAT:
            assert u.base_sequence == u.sequence == seq and not u.payload
        seq = u.sequence
    assert replay(path).counts["heartbeat"] == res.heartbeats


def test_delta_over_the_image_limit_forces_a_fresh_snapshot(
    tmp_path: Path, trace: Workload
) -> None:
    path = tmp_path / "f.kvrcap"
    relay = RelayConfig(max_delta_images=20, record_dc=0)
    res = simulate_capture(trace, path, SimRelayConfig(SMALL, relay))
    assert res.forced_snapshots > 0 and res.streams == res.forced_snapshots + 1
    assert res.delta_frames + res.forced_snapshots == res.simulation.deltas[0]
    closes = [
        decode_stream_close(r.body)
        for r in CaptureReader(path).records()
        if r.type is RecordType.STREAM_CLOSE
    ]
    assert [c.error_reason for c in closes].count("PUBLICATION_UNAVAILABLE") == res.forced_snapshots
    _replays_to_producer(path, res)
    assert len(replay(path).sequence_ranges) == res.streams


def test_forced_resubscription(tmp_path: Path, trace: Workload) -> None:
    path = tmp_path / "r.kvrcap"
    res = simulate_capture(
        trace, path, SimRelayConfig(SMALL, RelayConfig(resubscribe_every_ms=30_000))
    )
    # every DC's subscription is resubscribed: a session per stream, each lane replays clean
    assert res.resubscriptions > 0 and res.streams == res.resubscriptions + SMALL.dcs
    _replays_to_producer(path, res)
    for lane in replay(path).lanes:
        assert len(lane.sessions) == len(lane.streams) == res.resubscriptions // SMALL.dcs + 1


@pytest.mark.parametrize("space", ["standard", "eagle", "lora"])
def test_token_level_workloads_in_every_hash_space(tmp_path: Path, space: str) -> None:
    w = synthetic_chat(40, hash_space=space, seed=5)  # type: ignore[arg-type]
    cfg = SimRelayConfig(
        SimulatorConfig(
            dcs=2, workers_per_dc=2, capacity_blocks=200, policy="ckf", clear_every_ms=20_000
        )
    )
    res = simulate_capture(w, tmp_path / "s.kvrcap", cfg)
    assert res.simulation.events["cleared"] > 0
    _replays_to_producer(tmp_path / "s.kvrcap", res)


def test_config_checks_and_overwrite(tmp_path: Path, trace: Workload) -> None:
    with pytest.raises(ValueError, match="record_dc"):
        SimRelayConfig(SimulatorConfig(dcs=2), RelayConfig(record_dc=2))
    with pytest.raises(ValueError):
        RelayConfig(max_delta_images=0)
    # the epoch and a trace's time each within half the i64 clock: receive times never wrap
    from cbi1kit.sim._workload import SIM_NS_MAX, TRACE_FIELD_MAX

    RelayConfig(epoch_unix_ns=SIM_NS_MAX)
    with pytest.raises(ValueError, match="epoch_unix_ns"):
        RelayConfig(epoch_unix_ns=SIM_NS_MAX + 1)
    assert SIM_NS_MAX + TRACE_FIELD_MAX["timestamp"] * 1_000_000 < 1 << 63
    path = tmp_path / "o.kvrcap"
    w = trace.head(20)
    simulate_capture(w, path, SimRelayConfig(SMALL))
    before = path.read_bytes()
    with raises_variant(OutputError, "Exists"):  # refused before anything is touched
        simulate_capture(w, path, SimRelayConfig(SMALL))
    assert path.read_bytes() == before
    simulate_capture(w, path, SimRelayConfig(SMALL), overwrite=True)
    # cut short (Ctrl-C, or any error): nothing that would read as a whole capture is left,
    # and the earlier capture stays as it was
    earlier = path.read_bytes()
    calls = 0

    def interrupt(_done: int) -> None:
        nonlocal calls
        calls += 1
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        simulate_capture(w, path, SimRelayConfig(SMALL), overwrite=True, progress=interrupt)
    assert calls == 1 and path.read_bytes() == earlier
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no partial file beside it
    fresh = tmp_path / "fresh.kvrcap"
    calls = 0
    with pytest.raises(KeyboardInterrupt):
        simulate_capture(w, fresh, SimRelayConfig(SMALL), progress=interrupt)
    assert not fresh.exists()
    assert sample_config().relay.record_dc == 0


def test_bundled_sample_is_regenerated_byte_for_byte(tmp_path: Path) -> None:
    """`make sample` reproduces the bundled sample exactly: fixed seeds, simulated clock."""
    from cbi1kit.sim._workload import read_mooncake

    out = tmp_path / "sample.kvrcap"
    workload = read_mooncake(mooncake_trace())
    simulate_capture(workload, out, sample_config())
    assert out.read_bytes() == sample_capture().read_bytes(), (
        "the bundled sample is stale: run `make sample`"
    )
