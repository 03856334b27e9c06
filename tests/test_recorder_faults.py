"""Recorder faults end to end (#13 item 9, 10): bytes from the relay that are no protobuf message,
and a relay restart with a new incarnation, with and without ``--validate``.

Each ends in a new stream (a resubscription, a rewatch, a retried ``GetRelayInfo``), keeps the
malformed bytes in the capture as received, and the capture replays clean apart from the named
fault: a malformed ``FilterUpdate`` is the rulebook's ``relay-protobuf-decode`` at its frame; a
restart is a new session, no violation. Loopback only; every wait is bounded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from cliutil import unwrapped
from relayfixtures import (
    FAST,
    Running,
    Stream,
    read_streams,
    recorder_config,
    run_to_end,
    subscriptions,
    wait_for,
)

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis import ReplayReport, replay
from cbi1kit.cli import main as cli_main
from cbi1kit.relay._session import CATALOG_METHOD, RELAY_INFO_METHOD, RecordReport
from cbi1kit.sim._feeds import ProducerFeed
from cbi1kit.sim._hub import MALFORMED_MESSAGE, FaultPlan
from cbi1kit.sim._server import RelayServer

# a recorder thread that dies of an exception (a DecodeError traceback) fails the test
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

Serve = Callable[..., RelayServer]
Recorders = Callable[..., Running]

NEW_INCARNATION = 0x0B0B_0002
NEW_DRT = 0x0D7_0002


def streams_of(path: Path, method: str) -> list[Stream]:
    return [s for s in read_streams(path) if s.method == method]


def relay_of(message: pb.FilterUpdate | pb.KvPoolCatalogUpdate) -> tuple[int, int]:
    return message.relay.drt_instance_id, message.relay.relay_incarnation


def assert_replays(
    path: Path,
    feed: ProducerFeed,
    violations: list[tuple[str, int]],
    capsys: pytest.CaptureFixture[str],
) -> ReplayReport:
    """The library's replay and ``cbi1kit replay`` agree: exactly ``violations`` (rule, frame
    index), and the lane ends as the producer's."""
    report = replay(path)
    assert [(v.rule, v.frame_index) for v in report.violations] == violations
    assert report.final_sequence == feed.sequence
    assert report.final_lane is not None and np.array_equal(report.final_lane, feed.words())
    capsys.readouterr()
    code = cli_main(["replay", str(path), "--json", "--no-progress"])
    out = json.loads(capsys.readouterr().out)
    assert code == (0 if not violations else 1)
    assert [(v["rule"], v["frame_index"]) for v in out["violations"]] == violations
    return report


def _record_to_the_end(
    srv: RelayServer, recorders: Recorders, feed: ProducerFeed, path: Path, validate: bool
) -> RecordReport:
    """Record ``srv`` until ``feed`` has published everything; the session must end cleanly."""
    rec = recorders(recorder_config(srv.address, path, validate=validate))
    run_to_end(srv, rec, feed)
    report = rec.report
    assert report.exit_code == 0 and report.stop_reason == "test done"
    return report


# ------------------------------------------------------------------------------ malformed bytes


@pytest.mark.parametrize("validate", [False, True])
def test_malformed_filter_update_is_kept_and_the_recorder_resubscribes(
    tmp_path: Path,
    serve: Serve,
    recorders: Recorders,
    capsys: pytest.CaptureFixture[str],
    validate: bool,
) -> None:
    feed = ProducerFeed(steps=20, seed=6)
    srv = serve(feed, faults=FaultPlan(garbage_update_after=4))
    path = tmp_path / "c.kvrcap"
    report = _record_to_the_end(srv, recorders, feed, path, validate)
    assert srv.faults.fired == ["garbage_update_after"]
    first, *rest = subscriptions(path)
    assert rest and report.subscriptions == len(rest) + 1
    assert first.messages[-1] == MALFORMED_MESSAGE  # kept as received
    assert first.close is not None and len(first.messages) == first.close["count"] == 5
    assert str(first.close["local"]).startswith("malformed FilterUpdate")
    assert all(pb.FilterUpdate.FromString(m).ByteSize() for m in first.messages[:-1])
    assert [v.split(":")[0] for v in report.violations] == (
        ["relay-protobuf-decode"] if validate else []
    )
    assert_replays(path, feed, [("relay-protobuf-decode", 4)], capsys)


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize("after", [0, 1])
def test_malformed_catalog_update_ends_the_watch_and_the_recorder_watches_again(
    tmp_path: Path,
    serve: Serve,
    recorders: Recorders,
    capsys: pytest.CaptureFixture[str],
    after: int,
    validate: bool,
) -> None:
    """At the start (no catalog yet) or mid-session (the generation change's catalog is the
    garbage): the watch ends, the next watch brings the catalog, the recorder follows it."""
    feed = ProducerFeed(steps=25, seed=8)
    srv = serve(feed, faults=FaultPlan(garbage_catalog_after=after, change_generation_after=5))
    path = tmp_path / "c.kvrcap"
    report = _record_to_the_end(srv, recorders, feed, path, validate)
    assert report.violations == []
    assert "garbage_catalog_after" in srv.faults.fired
    bad, *later = streams_of(path, CATALOG_METHOD)
    assert bad.messages[-1] == MALFORMED_MESSAGE and len(bad.messages) == after + 1
    assert bad.close is not None and bad.close["count"] == after + 1
    assert str(bad.close["local"]).startswith("malformed KvPoolCatalogUpdate")
    assert later, "the recorder watched the catalog again"
    revisions = [pb.KvPoolCatalogUpdate.FromString(m).revision for s in later for m in s.messages]
    assert revisions[-1] == 2
    gens = [
        pb.SubscribeKvPoolRequest.FromString(s.request).expected_producer.layout_generation
        for s in subscriptions(path)
    ]
    assert report.subscriptions == len(gens) >= 2 and gens[0] == 1 and gens[-1] == 2
    assert_replays(path, feed, [], capsys)


@pytest.mark.parametrize("validate", [False, True])
def test_malformed_relay_info_is_asked_again(
    tmp_path: Path,
    serve: Serve,
    recorders: Recorders,
    capsys: pytest.CaptureFixture[str],
    validate: bool,
) -> None:
    """It used to end the session (exit 1) at the first malformed RelayInfo."""
    feed = ProducerFeed(steps=10, seed=4)
    srv = serve(feed, faults=FaultPlan(garbage_relay_info=1))
    path = tmp_path / "c.kvrcap"
    report = _record_to_the_end(srv, recorders, feed, path, validate)
    assert report.violations == [] and report.subscriptions == 1
    bad, good = streams_of(path, RELAY_INFO_METHOD)
    assert bad.messages == [MALFORMED_MESSAGE]
    assert bad.close is not None and str(bad.close["local"]).startswith("malformed RelayInfo")
    assert pb.RelayInfo.FromString(good.messages[0]).relay.relay_incarnation == (
        srv.relay.relay_incarnation
    )
    assert srv.relay_info_answers == 2
    assert_replays(path, feed, [], capsys)


def test_relay_that_answers_no_relay_info_is_one_line_and_exit_1(
    tmp_path: Path, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    srv = serve(ProducerFeed(steps=1), faults=FaultPlan(garbage_relay_info=1000))
    path = tmp_path / "c.kvrcap"
    code = cli_main(["record", srv.address, "-o", str(path), "--give-up-after", "0.5"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"cbi1kit record: error: relay {srv.address} answers no RelayInfo:")
    asked = streams_of(path, RELAY_INFO_METHOD)
    assert len(asked) == srv.relay_info_answers >= 2  # asked again, with backoff
    assert srv.faults.fired == ["garbage_relay_info"]
    assert all(s.messages == [MALFORMED_MESSAGE] for s in asked)
    assert subscriptions(path) == []


@pytest.mark.parametrize("validate", [False, True])
def test_record_cli_through_a_malformed_filter_update(
    tmp_path: Path, serve: Serve, capsys: pytest.CaptureFixture[str], validate: bool
) -> None:
    """``cbi1kit record``: a summary line (no traceback); with ``--validate`` the malformed
    message is the one validation failure (exit 1)."""
    srv = serve(ProducerFeed(steps=None, seed=6), faults=FaultPlan(garbage_update_after=4))
    path = tmp_path / "c.kvrcap"
    argv = ["record", srv.address, "-o", str(path), "--frames", "20", "--timeout", "5"]
    code = cli_main([*argv, "--validate"] if validate else argv)
    err = unwrapped(capsys.readouterr().err)
    assert "Traceback" not in "\n".join(err)
    assert err[0].startswith("recorded 20 frames") and "in 2 subscription(s)" in err[0], err
    if validate:
        assert code == 1 and len(err) == 3 and err[1] == "1 validation failure(s):"
        assert err[2].startswith("  - relay-protobuf-decode: ")
    else:
        assert code == 0 and len(err) == 1
    first, _second = subscriptions(path)
    assert first.messages[-1] == MALFORMED_MESSAGE


# ------------------------------------------------------------------------------ relay restart


@pytest.mark.parametrize("validate", [False, True])
def test_relay_restart_with_a_new_incarnation_is_a_new_session(
    tmp_path: Path,
    serve: Serve,
    recorders: Recorders,
    capsys: pytest.CaptureFixture[str],
    validate: bool,
) -> None:
    """``record --validate`` used to retry forever after a restart; the relay identity is only
    constant within a stream, and each subscription names the relay its catalog came from."""
    old = serve(ProducerFeed(steps=None, seed=11))
    old_relay = (old.relay.drt_instance_id, old.relay.relay_incarnation)
    path = tmp_path / "c.kvrcap"
    rec = recorders(recorder_config(old.address, path, validate=validate))
    wait_for(lambda: rec.report.last_kind == "FILTER_UPDATE_KIND_DELTA")
    feed = ProducerFeed(steps=20, seed=12, incarnation=NEW_INCARNATION)  # upstream: the relay's
    new = old.restart(feed, relay_incarnation=NEW_INCARNATION, drt_instance_id=NEW_DRT)
    try:
        assert new.address == old.address
        run_to_end(new, rec, feed)
    finally:
        new.stop(0)
    report = rec.report
    assert report.exit_code == 0 and report.stop_reason == "test done"
    assert report.violations == []
    subs = subscriptions(path)
    first, last = subs[0], subs[-1]
    assert report.subscriptions == len(subs) >= 2
    assert {relay_of(pb.FilterUpdate.FromString(m)) for m in first.messages} == {old_relay}
    assert {relay_of(pb.FilterUpdate.FromString(m)) for m in last.messages} == {
        (NEW_DRT, NEW_INCARNATION)
    }
    expected = pb.SubscribeKvPoolRequest.FromString(last.request).expected_producer
    assert expected.producer_incarnation == NEW_INCARNATION
    assert first.info["catalog_relay"] == f"{old_relay[0]:016x}/{old_relay[1]:016x}"
    assert last.info["catalog_relay"] == f"{NEW_DRT:016x}/{NEW_INCARNATION:016x}"
    assert first.info["catalog_revision"] == last.info["catalog_revision"] == 1  # counts anew
    catalogs = streams_of(path, CATALOG_METHOD)
    assert relay_of(pb.KvPoolCatalogUpdate.FromString(catalogs[0].messages[0])) == old_relay
    assert relay_of(pb.KvPoolCatalogUpdate.FromString(catalogs[-1].messages[-1])) == (
        NEW_DRT,
        NEW_INCARNATION,
    )
    replayed = assert_replays(path, feed, [], capsys)
    assert len(replayed.sequence_ranges) == 2  # a snapshot from each relay


def test_record_cli_validate_across_a_relay_restart(
    tmp_path: Path, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cbi1kit record --validate`` runs on across the restart and exits 0 with one line.

    The old relay goes quiet after a snapshot and at most 10 deltas (no heartbeats), so the 40
    frames asked for need the restarted relay."""
    old_feed = ProducerFeed(steps=10, seed=11)
    old = serve(old_feed, replace(FAST, heartbeat_interval=60.0))
    path = tmp_path / "c.kvrcap"
    argv = ["record", old.address, "-o", str(path), "--validate", "--frames", "40"]
    argv += ["--timeout", "5", "--give-up-after", "20"]
    codes: list[int] = []
    cli = threading.Thread(target=lambda: codes.append(cli_main(argv)), daemon=True)
    cli.start()
    wait_for(
        lambda: (
            old.pool_exhausted()
            and bool(old.subscriptions)
            and old.subscriptions[0].messages == 1 + old_feed.sequence
        )
    )
    new = old.restart(
        ProducerFeed(steps=None, seed=12, incarnation=NEW_INCARNATION),
        relay_incarnation=NEW_INCARNATION,
        drt_instance_id=NEW_DRT,
    )
    try:
        cli.join(30)
        assert not cli.is_alive()
    finally:
        new.stop(0)
    err = unwrapped(capsys.readouterr().err)
    assert codes == [0]
    assert len(err) == 1 and err[0].startswith("recorded 40 frames"), err
    last = subscriptions(path)[-1]
    assert relay_of(pb.FilterUpdate.FromString(last.messages[0])) == (NEW_DRT, NEW_INCARNATION)
    assert cli_main(["replay", str(path), "--no-progress"]) == 0
    assert "valid: no violations" in capsys.readouterr().out


def test_a_duration_over_before_the_relay_ever_answered_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--duration`` ending while nothing listens is exit 3 naming the relay, not exit 0 with
    '0 frames': the recording asked for never began."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "c.kvrcap"
    code = cli_main(["record", f"127.0.0.1:{port}", "-o", str(path), "--duration", "1"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert err.startswith(f"cbi1kit record: error: relay 127.0.0.1:{port} unreachable"), err
    assert err.count("\n") == 1
    # a recording that never received a message is not left for replay to call valid (#42)
    assert err.rstrip().endswith(f"no message arrived: nothing was written to {path}")
    assert not path.exists()
    empty = tmp_path / "empty.kvrcap"
    empty.write_bytes(b"")
    code = cli_main(
        ["record", f"127.0.0.1:{port}", "-o", str(empty), "--append", "--duration", "1"]
    )
    assert code == 3 and empty.read_bytes() == b""  # as it was
    capsys.readouterr()


def test_the_status_line_says_what_the_recorder_waits_for(tmp_path: Path) -> None:
    """Before its first frame the status line names what is missing (the relay, and how the
    last try ended), not "frames 0 ... subscriptions 0"."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rec = Running(recorder_config(f"127.0.0.1:{port}", tmp_path / "c.kvrcap"))
    try:
        wait_for(lambda: "(try 2: UNAVAILABLE)" in rec.recorder.status_line())
        line = rec.recorder.status_line()
        assert line.startswith(f"waiting for the relay at 127.0.0.1:{port} (try "), line
    finally:
        rec.finish()
    assert rec.report.removed and not (tmp_path / "c.kvrcap").exists()


def test_append_onto_an_empty_file_starts_the_capture(
    tmp_path: Path, serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--append`` onto an empty file starts it, as ``>>`` does: a capture that replays."""
    feed = ProducerFeed(steps=None, seed=5)
    srv = serve(feed)
    path = tmp_path / "empty.kvrcap"
    path.write_bytes(b"")
    code = cli_main(["record", srv.address, "-o", str(path), "--append", "--frames", "6"])
    assert code == 0, capsys.readouterr().err
    report = replay(path)
    assert report.frames == 6 and report.ok


@pytest.mark.parametrize("backoff_initial", [0.05, 20.0])
def test_a_relay_gone_mid_recording_is_given_up_on_after_give_up_after(
    tmp_path: Path, serve: Serve, backoff_initial: float
) -> None:
    """The outage counts from the moment the relay stopped answering, and neither waiting for a
    catalog naming another producer nor a backoff grown long outlasts the budget: a relay
    stopped mid-recording with ``give_up_after`` 1 s and a 30 s backoff ceiling was given up on
    after about 40 s."""
    import time

    feed = ProducerFeed(steps=None, seed=31)
    srv = serve(feed)
    path = tmp_path / "c.kvrcap"
    cfg = recorder_config(
        srv.address, path, give_up_after=1.0, backoff_initial=backoff_initial, backoff_max=30.0
    )
    rec = Running(cfg)
    wait_for(lambda: (rec.recorder.report.messages or 0) > 3)
    srv.stop()  # as `cbi1kit serve` stops on SIGTERM: its streams end asking for a new catalog
    gone = time.monotonic()
    rec.thread.join(8)  # a 1 s budget; the backoff would have slept 10 s to 20 s
    assert not rec.thread.is_alive(), "still waiting on a relay gone for 8 s"
    assert time.monotonic() - gone < 8
    report = rec.recorder.report
    assert report.exit_code == 3 and "unreachable for 1.0 s" in report.stop_reason
