"""The global view (#15): a simulated fleet's capture replays every lane cleanly, and the
consumer table at any moment equals the simulator's own lanes then, bit for bit; the manifest's
rules hold for tables built from captures; moments parse exactly."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from errorcheck import raises_variant
from test_replay import clone
from test_stream_roundtrip import DC, build_stream

from cbi1kit.analysis._global import At, format_unix_ns, parse_at
from cbi1kit.analysis._replay import ReplayReport
from cbi1kit.analysis._shorthands import global_view, replay
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.data import mooncake_trace, sample_capture, snapshot_frame
from cbi1kit.errors import IdentityError, LaneError
from cbi1kit.hashing._pools import stable_dc_id
from cbi1kit.sim._engine import Simulator
from cbi1kit.sim._simrelay import (
    DEFAULT_EPOCH_UNIX_NS,
    RelayConfig,
    SimRelayConfig,
    SimRelayResult,
    simulate_capture,
)
from cbi1kit.sim._simulator import SimulatorConfig
from cbi1kit.sim._workload import Workload, read_mooncake

TRACE = mooncake_trace()
FLEET = SimRelayConfig(
    SimulatorConfig(dcs=3, workers_per_dc=2, capacity_blocks=256, policy="ckf", seed=3),
    RelayConfig(resubscribe_every_ms=30_000, heartbeat_interval_ms=5_000),
)
MS = 1_000_000


@dataclasses.dataclass
class Fleet:
    path: Path
    result: SimRelayResult
    workload: Workload
    report: ReplayReport


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    workload = read_mooncake(TRACE, limit=400)
    path = tmp_path_factory.mktemp("fleet") / "fleet.kvrcap"
    result = simulate_capture(workload, path, FLEET)
    return Fleet(path, result, workload, replay(path))


def simulator_lanes(
    workload: Workload, *, until_ms: int | None = None, sequence: int | None = None
) -> tuple[dict[int, np.ndarray], dict[int, int], list[int]]:
    """The simulator's own lanes, from a second run of the same seeded simulation: each DC's
    barrier snapshot plus every delta it published up to ``until_ms`` (or up to its own
    ``sequence``); each DC's sequence then; every delta's time. At the end they are the
    simulator's consumer table, checked here."""
    sim = Simulator(FLEET.simulator)
    words: dict[int, np.ndarray] = {}
    seqs: dict[int, int] = {}
    times: list[int] = []

    def on_snapshot(_t: int, dc: int, snap: Any) -> None:
        words[dc], seqs[dc] = np.array(snap.buckets, dtype=np.uint64), snap.sequence

    def on_delta(t: int, dc: int, delta: Any) -> None:
        times.append(t)
        if (until_ms is None or t <= until_ms) and (sequence is None or delta.sequence <= sequence):
            words[dc][delta.buckets.astype(np.intp)] = delta.values
            seqs[dc] = delta.sequence

    sim.run(workload, on_snapshot=on_snapshot, on_delta=on_delta)
    if until_ms is None and sequence is None:
        for dc, lane in words.items():
            assert np.array_equal(lane, sim.lane_words(dc))
    return words, seqs, times


def assert_view_equals(view: Any, words: dict[int, np.ndarray], seqs: dict[int, int]) -> None:
    """One table, a ready lane per DC in DC order, each lane bit for bit the simulator's."""
    (domain,) = view.domains
    assert [n.pool.dc_id for n in domain.lanes] == [stable_dc_id(f"sim-dc-{d}") for d in words]
    for dc, lane in enumerate(domain.lanes):
        assert lane.ready and lane.lane == dc, lane
        assert lane.sequence == seqs[dc]
        got = view.table.lane_words(dc)
        assert got.dtype == np.uint64 and np.array_equal(got, words[dc]), f"DC {dc}"
    assert view.table.ready_mask() == 0b111


def test_every_lane_replays_cleanly(fleet: Fleet) -> None:
    report = fleet.report
    assert report.ok, report.violations[:3]
    assert len(report.lanes) == FLEET.simulator.dcs and fleet.result.resubscriptions > 0
    for dc, words in fleet.result.final_words.items():
        lane = report.lane(dc=f"sim-dc-{dc}")
        assert lane.final_sequence == fleet.result.final_sequence[dc]
        assert np.array_equal(lane.final_lane, words)  # type: ignore[arg-type]
        assert len(lane.sessions) > 1  # resubscribed: a session per stream


def test_the_view_at_the_end_is_the_simulators_lanes(fleet: Fleet) -> None:
    words, seqs, _ = simulator_lanes(fleet.workload)
    assert seqs == fleet.result.final_sequence
    view = global_view(fleet.report, model=FLEET.simulator.model)
    assert_view_equals(view, words, seqs)
    assert [n.producer for n in view.lanes] == [d.producer for d in view.catalogs[0].pools]
    assert global_view(fleet.path).to_frame().equals(view.to_frame())  # no model: every lane


def test_the_view_at_a_time_is_the_simulators_lanes_then(fleet: Fleet) -> None:
    _, _, times = simulator_lanes(fleet.workload, until_ms=0)
    t0 = times[0]
    # a delta's time between two forced resubscriptions (every 30 s from the first request)
    t_ms = next(
        t for t in times[len(times) // 2 :] if (t - fleet.workload.timestamps_ms[0]) % 30_000
    )
    words, seqs, _ = simulator_lanes(fleet.workload, until_ms=t_ms)
    at_ns = DEFAULT_EPOCH_UNIX_NS + t_ms * MS + MS - 1  # the last ns of that millisecond
    view = global_view(fleet.report, model=FLEET.simulator.model, at=format_unix_ns(at_ns))
    assert view.unix_ns == at_ns and t0 <= t_ms
    assert_view_equals(view, words, seqs)
    assert all(n.time_unix_ns is not None and n.time_unix_ns <= at_ns for n in view.lanes)
    assert seqs != fleet.result.final_sequence  # an intermediate moment
    first = fleet.report.first_unix_ns
    assert first is not None
    relative = global_view(fleet.report, at=f"+{at_ns - first}ns")
    assert relative.unix_ns == at_ns and relative.to_frame().equals(view.to_frame())
    as_sequence = global_view(fleet.report, at=at_ns)  # an int names a sequence, not a time
    assert as_sequence.unix_ns is None and not any(n.ready for n in as_sequence.lanes)


def test_the_view_at_a_sequence_is_the_simulators_lanes_then(fleet: Fleet) -> None:
    sequence = min(fleet.result.final_sequence.values()) // 2
    words, seqs, _ = simulator_lanes(fleet.workload, sequence=sequence)
    assert set(seqs.values()) == {sequence}
    assert_view_equals(
        global_view(fleet.report, model=FLEET.simulator.model, at=sequence), words, seqs
    )


def test_a_lane_between_sessions_is_not_ready(fleet: Fleet) -> None:
    """Right after a resubscription's close, before its new snapshot is installed."""
    lane = fleet.report.lanes[0]
    first, second = lane.sessions[:2]
    assert first.ended_unix_ns is not None and second.installed_unix_ns is not None
    assert first.ended_unix_ns < second.installed_unix_ns
    view = global_view(fleet.report, at=format_unix_ns(first.ended_unix_ns))
    gap = view.lanes[0]
    assert not gap.ready and "closed" in gap.why and gap.sequence is None
    assert not view.table.ready_mask() & 1
    assert view.lanes[1].ready or view.lanes[1].why  # the other DCs have their own reasons


def test_model_and_catalog_errors(fleet: Fleet, tmp_path: Path) -> None:
    with raises_variant(IdentityError, "UnknownModel", match=FLEET.simulator.model):
        global_view(fleet.report, model="no/such-model")
    first = fleet.report.catalogs[0].recv_unix_ns
    with raises_variant(LaneError, "NoCatalog", match="received by"):
        global_view(fleet.report, model=FLEET.simulator.model, at=format_unix_ns(first - 1))
    assert global_view(fleet.report, model=FLEET.simulator.model, at=format_unix_ns(first)).catalogs
    one = tmp_path / "one.kvrcap"
    simulate_capture(
        fleet.workload.head(30), one, dataclasses.replace(FLEET, relay=RelayConfig(record_dc=1))
    )
    report = replay(one)  # one DC's pool stream, and the catalog of every pool
    lanes = global_view(report, model=FLEET.simulator.model).lanes
    assert len(lanes) == FLEET.simulator.dcs
    (ready,) = [lane for lane in lanes if lane.ready]
    assert ready.pool.dc_id == stable_dc_id("sim-dc-1")
    assert all("no subscription" in lane.why for lane in lanes if not lane.ready)


def test_a_models_timeline_starts_at_the_first_catalog(fleet: Fleet) -> None:
    """A pool's frames may arrive before the catalog (a live recording opens both streams at
    once): a model's timeline starts where a pool is first known to serve it, not with an
    error at the first message."""
    import copy

    from cbi1kit.analysis._global import build_timeline

    report = copy.copy(fleet.report)
    first = fleet.report.first_unix_ns
    assert first is not None
    late = first + 5 * 10**9  # the catalog received five seconds after the first frame
    report.catalogs = [dataclasses.replace(c, recv_unix_ns=late) for c in report.catalogs]
    timeline = build_timeline(report, model=FLEET.simulator.model, points=4)
    assert timeline["at"][0] == format_unix_ns(late) and timeline["offset_s"][0] == 5.0
    assert build_timeline(fleet.report, points=4)["offset_s"][0] == 0.0  # no model: from the start


def _subscriptions(path: Path, streams: list[list[Any]]) -> Path:
    with CaptureWriter(path) as w:
        t = 1_800_000_000_000_000_000
        for messages in streams:
            sid = w.open_stream("relay", SUBSCRIBE_KV_POOL_METHOD, b"", recv_unix_ns=t)
            for m in messages:
                t += MS
                w.message(sid, m.SerializeToString(), recv_unix_ns=t)
    return path


def test_one_table_per_indexer_domain_and_at_most_16_lanes(tmp_path: Path) -> None:
    """Pools of two indexer domains are two tables (never one); 17 DCs of one domain do not
    fit a manifest: upstream's InvalidLane."""
    small = {"expected_blocks": 64, "warmup_events": 5, "deltas": 2, "heartbeat_every": 9}
    base = build_stream(**small, seed=1)
    other = [clone(m) for m in base.messages]
    for m in other:
        m.producer.pool_id.indexer_domain.cache_semantics.digest = b"\x33" * 16
    view = global_view(_subscriptions(tmp_path / "d.kvrcap", [base.messages, other]))
    assert len(view.domains) == 2 and all(len(d.lanes) == 1 for d in view.domains)
    assert {d.lanes[0].pool.dc_id.value for d in view.domains} == {DC}
    with raises_variant(LaneError, "SeveralDomains"):
        view.table  # noqa: B018 - which one?
    for d in view.domains:
        assert d.table.indexer_domain == d.indexer_domain and d.lanes[0].ready
        assert np.array_equal(d.table.lane_words(0), base.final_words)
    fleet = [build_stream(**small, seed=dc, dc_id=1000 + dc).messages for dc in range(17)]
    path = _subscriptions(tmp_path / "17.kvrcap", fleet)
    assert replay(path).ok
    with raises_variant(LaneError, "Manifest.InvalidLane"):
        global_view(path)
    view = global_view(_subscriptions(tmp_path / "16.kvrcap", fleet[:16]))
    assert view.table.configured_lanes == view.table.ready_mask() == 0xFFFF


def test_moments_parse_exactly() -> None:
    ns = 1_796_040_000 * 10**9 + 123_456_789
    assert parse_at("2026-11-30T12:00:00.123456789Z") == At(unix_ns=ns)
    assert parse_at("2026-11-30T14:00:00.123456789+02:00") == At(unix_ns=ns)
    assert format_unix_ns(ns) == "2026-11-30T12:00:00.123456789Z"
    assert parse_at(format_unix_ns(ns)) == At(unix_ns=ns)
    assert parse_at(datetime(2026, 11, 30, 12, tzinfo=UTC)) == At(unix_ns=ns - 123_456_789)
    assert parse_at(datetime(2026, 11, 30, 12)) == At(unix_ns=ns - 123_456_789)  # naive: UTC
    assert parse_at("+90s") == parse_at(timedelta(seconds=90)) == At(offset_ns=90 * 10**9)
    assert parse_at("+1.5m") == At(offset_ns=90 * 10**9)
    assert parse_at("+0.000000001s") == At(offset_ns=1)
    assert parse_at("+250ms") == At(offset_ns=250 * MS)
    assert parse_at("18446744073709551615") == At(sequence=(1 << 64) - 1)
    assert parse_at(7) == parse_at("0x7") == At(sequence=7)
    assert parse_at(None) is None
    for bad in (
        "yesterday",
        "+-5s",
        "+5",
        "2026-11-30T12:00:00",  # no zone
        "2026-13-01T00:00:00Z",
        "18446744073709551616",
        "-3",
        True,
        1.5,
    ):
        with raises_variant(LaneError, "At"):
            parse_at(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        parse_at("now")


def test_a_lane_without_a_pool_is_listed_as_skipped() -> None:
    """Bare CBI1 frames carry no producer identity: no indexer domain holds their lane, and
    the view says so rather than 'no pool' alone (replay and stats show that lane)."""
    frames = snapshot_frame()
    view = global_view(frames)
    assert view.domains == []
    assert [pool for pool, _ in view.skipped] == [None]
    assert "DC 0000000000000009" in view.skipped[0][1]


@pytest.mark.parametrize(
    "text,said",
    [
        ("0001-01-01T00:00:00Z", "a time from 1970 to 2554"),
        ("9999-12-31T23:59:59Z", "a time from 1970 to 2554"),
        (str(1 << 64), "sequence 18446744073709551616 is outside"),
    ],
)
def test_a_moment_out_of_range_says_what_and_why_once(text: str, said: str) -> None:
    """The message names the field and the range in words (it was the dataclass's repr, and
    'cannot name a moment' twice)."""
    with raises_variant(LaneError, "At") as info:
        parse_at(text)
    message = str(info.value)
    assert said in message and "At(" not in message
    assert message.count("cannot name a moment") == 1


def test_a_view_before_the_first_message_says_its_pools_cannot_be_placed_yet() -> None:
    """It said "the capture holds no pool" and then listed the pools it skipped."""
    from cliutil import cli_run

    sample = sample_capture()
    code, out, err = cli_run("view", str(sample), "--at", "1970-01-01T00:00:00Z")
    assert code == 0, err
    assert "holds no pool" not in out
    assert "no lane: none of its 1 pool(s) can be placed at 1970-01-01T00:00:00Z" in out
    assert "no format known by then" in out


SEC = 1_000_000_000


def _paced(path: Path, gap_after: int) -> tuple[Path, list[int], list[int]]:
    """One pool's stream, a message a second, its stream closed ``gap_after`` seconds after
    the last: the path, each message's receive time, and its kind."""
    stream = build_stream(expected_blocks=64, warmup_events=5, deltas=6, heartbeat_every=2)
    t0 = 1_800_000_000 * SEC
    times = [t0 + i * SEC for i in range(len(stream.messages))]
    with CaptureWriter(path) as w:
        sid = w.open_stream("relay", SUBSCRIBE_KV_POOL_METHOD, b"", recv_unix_ns=t0)
        for m, t in zip(stream.messages, times, strict=True):
            w.message(sid, m.SerializeToString(), recv_unix_ns=t)
        w.close_stream(sid, recv_unix_ns=times[-1] + gap_after * SEC)
    return path, times, [int(m.kind) for m in stream.messages]


@pytest.mark.parametrize("engine", ["compiled", "reference"])
def test_a_lane_is_stale_as_upstreams_scorer_judges(tmp_path: Path, engine: str) -> None:
    """scorer.rs (6b5411d5): a ready lane scores while its last snapshot, delta or heartbeat
    is at most ``max_age`` old (strictly more: stale); heartbeats keep it fresh."""
    path, times, kinds = _paced(tmp_path / "paced.kvrcap", gap_after=100)
    report = replay(path, engine=engine)
    beat = max(i for i, k in enumerate(kinds) if k == 3)  # FILTER_UPDATE_KIND_HEARTBEAT
    assert kinds[beat - 1] == 2  # a delta a second before it
    last = times[-1]
    (lane,) = global_view(report, max_age=30).lanes
    assert lane.ready and lane.stale and lane.touched_unix_ns == last  # at the capture's end
    (lane,) = global_view(report, at=format_unix_ns(last + 30 * SEC), max_age=30).lanes
    assert lane.stale is False  # exactly max_age: still fresh (strictly more is stale)
    (lane,) = global_view(report, at=format_unix_ns(last + 30 * SEC + 1), max_age=30).lanes
    assert lane.stale is True
    (lane,) = global_view(report, at=format_unix_ns(times[beat]), max_age=0.5).lanes
    assert lane.touched_unix_ns == times[beat] and lane.stale is False  # the heartbeat's time
    (lane,) = global_view(report, at=format_unix_ns(times[beat] + SEC // 2 + 1), max_age=0.5).lanes
    assert lane.touched_unix_ns == times[beat] and lane.stale is True
    (lane,) = global_view(report).lanes
    assert lane.stale is None and lane.touched_unix_ns == last  # no max_age: not judged
    (lane,) = global_view(report, at=report.lanes[0].final_sequence, max_age=30).lanes
    assert lane.stale is None  # a sequence names no time


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), "30s", True])
def test_max_age_is_a_positive_duration(bad: Any) -> None:
    with raises_variant(LaneError, "MaxAge", match="positive duration"):
        global_view(ReplayReport(None, 0), max_age=bad)  # type: ignore[arg-type]
    assert global_view(ReplayReport(None, 0), max_age=timedelta(seconds=1)).max_age_ns == SEC
