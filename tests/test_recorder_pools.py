"""``cbi1kit record`` records every selected pool in one process (#15, "the router's view").

A simulated relay serving a fleet (three DCs, two models: six pools, two indexer domains) is
recorded by one recorder: every pool's stream is in the capture, replay replays every lane
cleanly, and the global view at the end, at a sequence and at a time equals the producers' own
lanes then, bit for bit (each producer is seeded: a second run of it, its twin, gives its words
at any sequence). Pools join the catalog while recording, leave it and come back; one pool
refused for good ends alone; the selection picks the right subset. Loopback only; every wait
is bounded by a condition, none by a sleep.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from cliutil import unwrapped
from relayfixtures import FAST, Running, read_streams, recorder_config, subscriptions, wait_for

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis import replay
from cbi1kit.analysis._global import format_unix_ns
from cbi1kit.analysis._replay import LaneReport, ReplayReport
from cbi1kit.analysis._shorthands import global_view
from cbi1kit.capture._file import RecordType, decode_stream_open
from cbi1kit.capture._reader import CaptureReader
from cbi1kit.cli import main as cli_main
from cbi1kit.relay._session import (
    SUBSCRIBE_METHOD,
    PoolRecord,
    PoolSelector,
    RecordReport,
    pool_key_text,
)
from cbi1kit.sim._feeds import ProducerFeed
from cbi1kit.sim._hub import FaultPlan
from cbi1kit.sim._server import RelayServer

# a recorder thread that dies of an exception fails the test
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

Serve = Callable[..., RelayServer]
Recorders = Callable[..., Running]

ROOT = Path(__file__).parents[1]
MODELS = ("fleet/a", "fleet/b")
DCS = ("dc-0", "dc-1", "dc-2")
LIVE = ("FILTER_UPDATE_KIND_DELTA", "FILTER_UPDATE_KIND_HEARTBEAT")


def fleet(steps: int | None, *, models: tuple[str, ...] = MODELS) -> list[dict[str, Any]]:
    """A pool per model and DC, each its own seeded producer (its ``ProducerFeed`` keywords)."""
    return [
        {"model": m, "aliases": (), "dc": d, "seed": 40 + i, "steps": steps, "events_per_step": 6}
        for i, (m, d) in enumerate(itertools.product(models, DCS))
    ]


def feeds_of(kws: list[dict[str, Any]]) -> list[ProducerFeed]:
    return [ProducerFeed(**kw) for kw in kws]


def pool_text(feed: ProducerFeed) -> str:
    return pool_key_text(feed.descriptor().producer.pool_id)


def twin_words(kw: dict[str, Any], sequence: int) -> npt.NDArray[np.uint64]:
    """The producer's lane at ``sequence`` (generation 1), from a second run of it."""
    twin = ProducerFeed(**kw)
    while twin.sequence < sequence:
        assert twin.advance() is not None, f"the producer never reaches sequence {sequence}"
    assert twin.sequence == sequence
    return twin.words()


def record_of(report: RecordReport, feed: ProducerFeed) -> PoolRecord:
    return report.pool(pool_text(feed))


def caught_up(srv: RelayServer, rec: Running, feeds: list[ProducerFeed]) -> Callable[[], bool]:
    """Every feed published everything and its pool's stream received it."""

    def done() -> bool:
        report = rec.report
        for index, feed in enumerate(feeds):
            if not srv.pool_exhausted(index):
                return False
            found = [p for p in report.pools if p.pool == pool_text(feed)]
            if not found or found[0].last_kind not in LIVE:
                return False
            if found[0].last_sequence != feed.sequence:
                return False
        return True

    return done


def lane_of(report: ReplayReport, feed: ProducerFeed) -> LaneReport:
    (lane,) = [lane for lane in report.lanes if lane.pool == feed.identity.pool_id]
    return lane


def grows(count: Callable[[], int], by: int = 5) -> None:
    start = count()
    wait_for(lambda: count() >= start + by)


def pool_messages(path: Path) -> dict[str, list[tuple[int, pb.FilterUpdate]]]:
    """Each pool's subscription messages with their receive times, in capture order."""
    pool_of: dict[int, str] = {}
    out: dict[str, list[tuple[int, pb.FilterUpdate]]] = {}
    with CaptureReader(path) as reader:
        for rec in reader.records():
            if rec.type is RecordType.STREAM_OPEN:
                opened = decode_stream_open(rec.body)
                if opened.method == SUBSCRIBE_METHOD:
                    request = pb.SubscribeKvPoolRequest.FromString(opened.request)
                    pool_of[rec.stream_id] = pool_key_text(request.expected_producer.pool_id)
            elif rec.type is RecordType.MESSAGE and rec.stream_id in pool_of:
                update = pb.FilterUpdate.FromString(rec.body)
                out.setdefault(pool_of[rec.stream_id], []).append((rec.recv_unix_ns, update))
    return out


def sequence_at(messages: list[tuple[int, pb.FilterUpdate]], unix_ns: int) -> int | None:
    """The sequence a lane holds at ``unix_ns``: its newest snapshot or delta received by then
    (one stream, one-chunk snapshots: each chunk installs)."""
    held = None
    for t, update in messages:
        if t > unix_ns:
            break
        if update.kind != pb.FILTER_UPDATE_KIND_HEARTBEAT:
            held = update.sequence
    return held


# ------------------------------------------------------------------------------ a whole fleet


@pytest.fixture(scope="module")
def recorded_fleet(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, list[dict[str, Any]], list[ProducerFeed], RecordReport, RelayServer]:
    """Six pools served, recorded by one recorder until every producer has published all."""
    kws = fleet(steps=30)
    feeds = feeds_of(kws)
    path = tmp_path_factory.mktemp("fleet") / "fleet.kvrcap"
    srv = RelayServer(feeds, FAST).start()
    try:
        rec = Running(recorder_config(srv.address, path, validate=True))
        try:
            wait_for(caught_up(srv, rec, feeds), timeout=20)
            line = rec.recorder.status_line()
        finally:
            rec.finish()
    finally:
        srv.stop(0)
    assert line.startswith("pools 6/6  frames ") and " [5] " in line, line
    return path, kws, feeds, rec.report, srv


def test_one_recorder_records_every_pool_of_the_catalog(recorded_fleet: Any) -> None:
    path, _, feeds, report, srv = recorded_fleet
    assert report.exit_code == 0 and report.stop_reason == "test done"
    assert report.violations == [] and report.failed_pools == []
    assert [p.pool for p in report.pools] == [pool_text(f) for f in feeds]  # catalog order
    assert [p.label.split()[0] for p in report.pools] == [m for m in MODELS for _ in DCS]
    assert sum(p.messages for p in report.pools) == report.messages
    assert all(
        p.subscriptions == 1 and p.last_sequence == f.sequence
        for p, f in zip(report.pools, feeds, strict=True)
    )
    subs = subscriptions(path)
    assert len(subs) == report.subscriptions == 6
    relay = f"{srv.relay.drt_instance_id:016x}/{srv.relay.relay_incarnation:016x}"
    by_pool = {
        pool_key_text(pb.SubscribeKvPoolRequest.FromString(s.request).expected_producer.pool_id): s
        for s in subs
    }
    for feed in feeds:  # each pool's own stream (opened in whichever order its thread ran)
        sub = by_pool[pool_text(feed)]
        request = pb.SubscribeKvPoolRequest.FromString(sub.request)
        assert request.expected_producer == feed.descriptor().producer
        assert sub.info["catalog_relay"] == relay and sub.info["catalog_revision"] == 1
        assert len(sub.messages) == record_of(report, feed).messages
    assert sum(s.method != SUBSCRIBE_METHOD for s in read_streams(path)) == 5  # info + planes


def test_replay_replays_every_lane_cleanly(
    recorded_fleet: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, feeds, _, _ = recorded_fleet
    report = replay(path)
    assert report.ok, report.violations[:3]
    assert len(report.lanes) == len(feeds)
    for feed in feeds:
        lane = lane_of(report, feed)
        assert lane.final_sequence == feed.sequence
        assert lane.final_lane is not None and np.array_equal(lane.final_lane, feed.words())
    capsys.readouterr()
    assert cli_main(["replay", str(path), "--no-progress"]) == 0
    assert "valid: no violations" in capsys.readouterr().out


def assert_model_view(view: Any, model: str, feeds: list[ProducerFeed], words: Any) -> None:
    """One table of the model's three DC lanes, in catalog order, each ready and bit for bit
    ``words(feed, lane)``."""
    (domain,) = view.domains
    mine = [f for f in feeds if f.descriptor().registrations[0].canonical_model_id == model]
    assert [lane.pool for lane in domain.lanes] == [f.identity.pool_id for f in mine]
    for i, (lane, feed) in enumerate(zip(domain.lanes, mine, strict=True)):
        assert lane.ready, lane
        got = view.table.lane_words(i)
        assert got.dtype == np.uint64 and np.array_equal(got, words(feed, lane)), lane
    assert view.table.ready_mask() == 0b111


def test_the_global_view_at_the_end_is_the_producers_lanes(recorded_fleet: Any) -> None:
    path, _, feeds, _, _ = recorded_fleet
    report = replay(path)
    for model in MODELS:
        view = global_view(report, model=model)
        assert_model_view(view, model, feeds, lambda feed, lane: feed.words())
    assert len(global_view(report).domains) == 2  # no model: both indexer domains


def test_the_global_view_at_a_sequence_is_the_producers_lanes_then(recorded_fleet: Any) -> None:
    path, kws, feeds, _, _ = recorded_fleet
    report = replay(path)
    sequence = min(f.sequence for f in feeds) // 2
    assert sequence > 0
    twins = {pool_text(f): twin_words(kw, sequence) for f, kw in zip(feeds, kws, strict=True)}
    for model in MODELS:
        view = global_view(report, model=model, at=sequence)
        assert all(lane.sequence == sequence for lane in view.lanes)
        assert_model_view(view, model, feeds, lambda feed, lane: twins[pool_text(feed)])


def test_the_global_view_at_a_time_is_the_producers_lanes_then(recorded_fleet: Any) -> None:
    """At the receive time of a delta halfway through the pool subscribed last (every lane has
    its snapshot by then), each lane holds the producer's words at the sequence it had
    received by then, per the capture's receive times."""
    path, kws, feeds, _, _ = recorded_fleet
    report = replay(path)
    messages = pool_messages(path)
    last = max(messages, key=lambda pool: messages[pool][0][0])
    final = messages[last][-1][1].sequence
    at_ns = next(t for t, u in messages[last] if u.sequence == final // 2 and u.payload)
    expected = {pool: sequence_at(got, at_ns) for pool, got in messages.items()}
    assert expected[last] == final // 2 < final  # an intermediate moment
    assert all(s is not None for s in expected.values())
    kw_of = {pool_text(f): kw for f, kw in zip(feeds, kws, strict=True)}
    text_of = {f.identity.pool_id: pool_text(f) for f in feeds}
    for model in MODELS:
        view = global_view(report, model=model, at=format_unix_ns(at_ns))
        assert view.unix_ns == at_ns
        for lane in view.lanes:
            assert lane.sequence == expected[text_of[lane.pool]], lane
            assert lane.time_unix_ns is not None and lane.time_unix_ns <= at_ns

        def then(feed: ProducerFeed, lane: Any) -> npt.NDArray[np.uint64]:
            sequence = expected[pool_text(feed)]
            assert sequence is not None
            return twin_words(kw_of[pool_text(feed)], sequence)

        assert_model_view(view, model, feeds, then)


def test_cbi1kit_serve_of_a_fleet_recorded_by_cbi1kit_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end through both commands: ``cbi1kit serve`` with three DCs and two models in
    its own process, one ``cbi1kit record`` with no selection. Each served pool is a seeded
    producer (seed, seed + 1, ... in model-major order), so its twin knows how many frames it
    publishes (a snapshot and its deltas; no heartbeat within the run): ``--frames`` asks for
    exactly all of them, and the global view ends on the twins' lanes."""
    steps, seed = 25, 70
    kws = [
        {"model": m, "dc": d, "seed": seed + i, "steps": steps, "events_per_step": 8}
        for i, (m, d) in enumerate(itertools.product(MODELS, DCS))
    ]
    twins = feeds_of(kws)
    for twin in twins:
        while twin.advance() is not None:
            pass
    total = sum(1 + twin.sequence for twin in twins)
    argv = [sys.executable, "-m", "cbi1kit", "serve", "--steps", str(steps)]
    argv += ["--seed", str(seed), "--pace", "0.005", "--heartbeat", "120", "--duration", "60"]
    argv += [a for m in MODELS for a in ("--model", m)] + [a for d in DCS for a in ("--dc", d)]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().split(" on ")[1].split()[0]
        path = tmp_path / "fleet.kvrcap"
        code = cli_main(["record", address, "-o", str(path), "--frames", str(total), "--validate"])
    finally:
        proc.kill()
        proc.wait(10)
    err = unwrapped(capsys.readouterr().err)
    assert code == 0, err
    assert (
        err[0].startswith(f"recorded {total} frames")
        and "in 6 subscription(s) of 6 pools" in err[0]
    )
    assert len(err) == 7 and all("1 subscription(s)" in line for line in err[1:]), err
    report = replay(path)
    assert report.ok and len(report.lanes) == 6
    for twin in twins:
        lane = lane_of(report, twin)
        assert lane.final_sequence == twin.sequence
        assert np.array_equal(lane.final_lane, twin.words())  # type: ignore[arg-type]
    middle = min(t.sequence for t in twins) // 2
    then = {pool_text(t): twin_words(kw, middle) for t, kw in zip(twins, kws, strict=True)}
    for model in MODELS:
        assert_model_view(global_view(report, model=model), model, twins, lambda f, _: f.words())
        view = global_view(report, model=model, at=middle)
        assert_model_view(view, model, twins, lambda f, _: then[pool_text(f)])


# ------------------------------------------------------------------------------ pools that change


def test_a_pool_that_joins_the_catalog_later_gets_its_stream(
    tmp_path: Path, serve: Serve, recorders: Recorders
) -> None:
    kws = fleet(steps=20, models=("fleet/a",))
    feeds = feeds_of(kws)
    srv = serve(feeds[:2])
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, validate=True))
    wait_for(caught_up(srv, rec, feeds[:2]))
    assert len(rec.report.pools) == 2
    assert srv.add_pool(feeds[2]) == 2
    wait_for(caught_up(srv, rec, feeds))
    rec.finish()
    report = rec.report
    assert report.exit_code == 0 and report.violations == [] and report.failed_pools == []
    assert [p.pool for p in report.pools] == [pool_text(f) for f in feeds]
    subs = subscriptions(path)
    assert [s.info["catalog_revision"] for s in subs] == [1, 1, 2]  # the catalog that named it
    late = pb.SubscribeKvPoolRequest.FromString(subs[-1].request).expected_producer
    assert late == feeds[2].descriptor().producer
    replayed = replay(path)
    assert replayed.ok and len(replayed.lanes) == 3
    for feed in feeds:
        assert np.array_equal(lane_of(replayed, feed).final_lane, feed.words())  # type: ignore[arg-type]
    view = global_view(replayed, model="fleet/a")
    assert view.table.ready_mask() == 0b111


def test_a_withdrawn_pool_comes_back_and_resumes_while_the_others_record_on(
    tmp_path: Path, serve: Serve, recorders: Recorders
) -> None:
    """Withdrawn, the pool's stream ends and it waits (not failed) while the other pool keeps
    recording; back under a new layout generation, it is subscribed to that generation and
    replays to its producer's lane."""
    kws = fleet(steps=None, models=("fleet/a",))[:2]
    kws[0]["steps"] = 60
    feeds = feeds_of(kws)
    srv = serve(feeds)
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, validate=True))
    wait_for(lambda: len(rec.report.pools) == 2)
    wait_for(lambda: all((p.last_sequence or 0) >= 5 for p in rec.report.pools))
    gone, other = (record_of(rec.report, f) for f in feeds)
    srv.withdraw_pool(0)
    wait_for(lambda: len(gone.closes) == 1)
    grows(lambda: other.messages)
    assert gone.ended is None and gone.subscriptions == 1  # waiting, not failed
    srv.restore_pool(0)
    wait_for(
        lambda: (
            srv.pool_exhausted(0)
            and gone.last_kind in LIVE
            and gone.last_sequence == feeds[0].sequence
            and gone.subscriptions >= 2
        )
    )
    rec.finish()
    report = rec.report
    assert report.exit_code == 0 and report.violations == [] and report.failed_pools == []
    mine = [
        pb.SubscribeKvPoolRequest.FromString(s.request).expected_producer
        for s in subscriptions(path)
        if str(s.info["producer_key"]).startswith(gone.pool)
    ]
    assert mine[0].layout_generation == 1 and mine[-1].layout_generation == 2
    assert mine[-1] == feeds[0].descriptor().producer
    # the relay ends the stream, or the recorder sees the catalog first and leaves: either or
    # both, as the two race (relay.md §2.6)
    first_close = gone.closes[0]
    assert (
        first_close.reason == "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE"
        or first_close.local_reason == "catalog: pool withdrawn"
    ), first_close
    assert other.subscriptions == 1 and other.ended is None  # never interrupted
    replayed = replay(path)
    assert replayed.ok, replayed.violations[:3]
    assert np.array_equal(lane_of(replayed, feeds[0]).final_lane, feeds[0].words())  # type: ignore[arg-type]
    lane = lane_of(replayed, feeds[1])
    assert lane.final_sequence == other.last_sequence
    assert np.array_equal(lane.final_lane, twin_words(kws[1], other.last_sequence))  # type: ignore[arg-type]


def test_a_pool_withdrawn_for_good_ends_alone_and_starts_again_when_it_is_back(
    tmp_path: Path, serve: Serve, recorders: Recorders
) -> None:
    feeds = feeds_of(fleet(steps=None, models=("fleet/a",))[:2])
    srv = serve(feeds)
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, give_up_after=1.0))
    wait_for(lambda: len(rec.report.pools) == 2)
    wait_for(lambda: all((p.last_sequence or 0) >= 3 for p in rec.report.pools))
    gone, other = (record_of(rec.report, f) for f in feeds)
    srv.withdraw_pool(0)
    wait_for(lambda: gone.ended is not None)
    assert gone.ended == "the selected pool left the catalog" and gone.exit_code == 3
    assert rec.report.failed_pools == [gone]
    grows(lambda: other.messages)
    assert rec.thread.is_alive()  # the session goes on
    srv.restore_pool(0)
    wait_for(lambda: gone.ended is None and gone.subscriptions == 2 and gone.messages > 0)
    grows(lambda: gone.messages)
    rec.finish()
    assert rec.report.exit_code == 0 and rec.report.failed_pools == []
    assert replay(path).ok


def test_one_pool_refused_for_good_does_not_stop_the_others(
    tmp_path: Path, serve: Serve, recorders: Recorders, capsys: pytest.CaptureFixture[str]
) -> None:
    kws = fleet(steps=None, models=("fleet/a",))
    feeds = feeds_of(kws)
    srv = serve(feeds)
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(srv.address, path, validate=True))
    wait_for(lambda: len(rec.report.pools) == 3)
    wait_for(lambda: all((p.last_sequence or 0) >= 3 for p in rec.report.pools))
    refused = record_of(rec.report, feeds[1])
    srv.refuse_pool(1)
    wait_for(lambda: refused.ended is not None)
    for feed in (feeds[0], feeds[2]):
        grows(lambda f=feed: record_of(rec.report, f).messages)  # type: ignore[misc]
    rec.finish()
    report = rec.report
    assert report.exit_code == 0 and report.stop_reason == "test done"
    assert report.failed_pools == [refused] and refused.exit_code == 1
    assert refused.ended.startswith("SubscribeKvPool: FAILED_PRECONDITION")  # type: ignore[union-attr]
    assert refused.subscriptions == 1  # not retried unchanged
    assert refused.closes[-1].reason == "RELAY_ERROR_REASON_UNSUPPORTED_FEATURE"
    replayed = replay(path)
    assert replayed.ok, replayed.violations[:3]
    for feed, kw in zip(feeds, kws, strict=True):
        lane = lane_of(replayed, feed)
        assert lane.final_sequence is not None
        assert np.array_equal(lane.final_lane, twin_words(kw, lane.final_sequence))  # type: ignore[arg-type]


@pytest.mark.parametrize("pools", [1, 2])
def test_the_session_fails_when_every_pool_has(
    tmp_path: Path, serve: Serve, capsys: pytest.CaptureFixture[str], pools: int
) -> None:
    """One pool: its error as the session's (as before); several: each named."""
    feeds = feeds_of(fleet(steps=None, models=("fleet/a",))[:pools])
    srv = serve(feeds)
    for index in range(pools):
        srv.refuse_pool(index)
    path = tmp_path / "c.kvrcap"
    code = cli_main(["record", srv.address, "-o", str(path), "--timeout", "5"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    refusal = "SubscribeKvPool: FAILED_PRECONDITION this pool is refused (injected fault)"
    if pools == 1:
        assert err == f"cbi1kit record: error: {refusal}\n"
    else:
        labels = [f"fleet/a dc={f.identity.pool_id.dc_id.value:016x}" for f in feeds]
        named = "; ".join(f"{label}: {refusal}" for label in labels)
        assert err == f"cbi1kit record: error: every selected pool failed: {named}\n"
    assert len(subscriptions(path)) == pools


# ------------------------------------------------------------------------------ the CLI


def test_record_cli_names_each_pool_and_its_validation_failures(
    tmp_path: Path, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every pool of the catalog by default; the summary has a line per pool; ``--frames`` is
    exact across pools; a corrupt delta on one pool is that pool's validation failure."""
    feeds = feeds_of(fleet(steps=None))
    srv = serve(feeds, faults=FaultPlan(corrupt_delta=3))
    path = tmp_path / "c.kvrcap"
    argv = ["record", srv.address, "-o", str(path), "--frames", "300", "--validate"]
    code = cli_main([*argv, "--timeout", "5"])
    err = unwrapped(capsys.readouterr().err)
    assert code == 1, err
    head, *lines = err
    assert head.startswith("recorded 300 frames") and " subscription(s) of 6 pools and " in head
    pool_lines, failures = lines[:6], lines[6:]
    labels = [
        f"{m} dc={f.identity.pool_id.dc_id.value:016x}"
        for f, m in zip(feeds, [m for m in MODELS for _ in DCS], strict=True)
    ]
    frames = 0
    for i, (line, label) in enumerate(zip(pool_lines, labels, strict=True)):
        assert line.startswith(f"  [{i}] {label}: "), line
        frames += int(line.split(": ")[1].split()[0])
    assert frames == 300 == sum(1 for s in subscriptions(path) for _ in s.messages)
    assert failures[0] == "1 validation failure(s):"
    (failure,) = failures[1:]
    (label,) = [label for label in labels if failure.startswith(f"  - {label}: ")]
    assert "checksum" in failure.lower(), failure
    (bad,) = [s for s in subscriptions(path) if s.close and "checksum" in str(s.close["local"])]
    assert str(bad.close["local"]).startswith("validation: ")  # type: ignore[index]
    assert pb.FilterUpdate.FromString(bad.messages[0]).producer.pool_id.dc_id == int(
        label.split("dc=")[1], 16
    )


def test_selection_by_model_dc_and_producer_picks_the_subset(serve: Serve) -> None:
    feeds = feeds_of(fleet(steps=1))
    srv = serve(feeds)
    catalog = srv.catalog_update()
    keys = [pool_text(f) for f in feeds]  # a:dc-0, a:dc-1, a:dc-2, b:dc-0, b:dc-1, b:dc-2

    def picked(**kw: tuple[str, ...]) -> list[str]:
        return [pool_key_text(d.producer.pool_id) for d in PoolSelector(**kw).select(catalog)]

    assert picked() == keys
    assert picked(models=("fleet/a",)) == keys[:3]
    assert picked(models=("fleet/b", "fleet/a")) == keys
    assert picked(dcs=("dc-1",)) == [keys[1], keys[4]]
    assert picked(dcs=("dc-0", "dc-2")) == [keys[0], keys[2], keys[3], keys[5]]
    dc_hex = f"{feeds[2].identity.pool_id.dc_id.value:016x}"
    assert picked(dcs=(dc_hex,)) == [keys[2], keys[5]]  # a DC by its id
    assert picked(models=("fleet/b",), dcs=("dc-0", "dc-1")) == keys[3:5]
    assert picked(producers=(keys[4],)) == [keys[4]]
    domain_b = keys[3].split("/")[0]  # the cache semantics and routing scope of model b
    assert picked(producers=(domain_b, keys[0])) == [keys[0], *keys[3:]]
    assert picked(producers=(domain_b,), dcs=("dc-2",)) == [keys[5]]
    assert picked(models=("fleet/a",), dcs=("dc-9",)) == []
    assert picked(models=("nope",)) == []


def test_record_cli_records_the_selected_pools_only(
    tmp_path: Path, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = feeds_of(fleet(steps=None))
    srv = serve(feeds)
    path = tmp_path / "c.kvrcap"
    argv = ["record", srv.address, "-o", str(path), "--timeout", "5", "--frames", "60"]
    code = cli_main([*argv, "--model", "fleet/a", "--dc", "dc-0", "--dc", "dc-2"])
    err = unwrapped(capsys.readouterr().err)
    assert code == 0 and "of 2 pools" in err[0] and len(err) == 3, err
    chosen = {
        pool_key_text(pb.SubscribeKvPoolRequest.FromString(s.request).expected_producer.pool_id)
        for s in subscriptions(path)
    }
    assert chosen == {pool_text(feeds[0]), pool_text(feeds[2])}
    one = tmp_path / "one.kvrcap"
    argv = ["record", srv.address, "-o", str(one), "--timeout", "5", "--frames", "20"]
    assert cli_main([*argv, "--producer", pool_text(feeds[4])]) == 0
    err = unwrapped(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith("recorded 20 frames (") and " pools " not in err[0]
    (sub,) = subscriptions(one)
    assert str(sub.info["producer_key"]).startswith(pool_text(feeds[4]))


def test_no_match_is_exit_1_and_list_is_unchanged(
    tmp_path: Path, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    feeds = feeds_of(fleet(steps=1))
    srv = serve(feeds)
    path = tmp_path / "c.kvrcap"
    base = ["record", srv.address, "--timeout", "5"]
    code = cli_main([*base, "-o", str(path), "--model", "fleet/a", "--dc", "dc-9"])
    err = capsys.readouterr().err
    assert code == 1
    assert (
        err == "cbi1kit record: error: no pool in the catalog matches the selection (try --list)\n"
    )
    assert subscriptions(path) == []
    assert cli_main([*base, "--list"]) == 0
    out = capsys.readouterr().out.replace("\n    ", " ").splitlines()  # a pool a line, unwrapped
    assert out[0] == "catalog revision 1: 6 pool(s)"
    assert [line.split("key=")[1].split("@")[0] for line in out[1:]] == [
        pool_text(f) for f in feeds
    ]
