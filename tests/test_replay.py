"""Replay: every event and every violation at its record, recovery at the next snapshot, damage."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from errorcheck import raises_variant
from test_stream_roundtrip import DC, Stream, build_stream, heartbeat, wire_producer, write_capture

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._events import EventKind, Violation
from cbi1kit.analysis._replayer import Replayer
from cbi1kit.analysis._shorthands import replay
from cbi1kit.capture._file import RecordType
from cbi1kit.capture._reader import CaptureReader
from cbi1kit.capture._readers import FrameRecord, read_capture
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD, WATCH_KV_POOL_CATALOG_METHOD
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.data import sample_capture
from cbi1kit.errors import CaptureError, LaneError
from cbi1kit.hashing import dc_text
from cbi1kit.wire._format import FilterFormat

SNAP, DELTA, HB = 1, 2, 3


@pytest.fixture(scope="module")
def stream() -> Stream:
    return build_stream(deltas=16, heartbeat_every=4, seed=7)


def first_index(stream: Stream, kind: int, nth: int = 0) -> int:
    return [i for i, k in enumerate(stream.kinds) if k == kind][nth]


def clone(m: pb.FilterUpdate) -> pb.FilterUpdate:
    c = pb.FilterUpdate()
    c.CopyFrom(m)
    return c


def test_clean_stream_events_in_order(stream: Stream) -> None:
    report = replay(stream.messages)
    assert report.ok
    assert [e.frame_index for e in report.events] == list(range(len(stream.messages)))
    want = {SNAP: EventKind.SNAPSHOT_CHUNK, DELTA: EventKind.DELTA_APPLIED, HB: EventKind.HEARTBEAT}
    kinds = [want[k] for k in stream.kinds]
    kinds[stream.chunk_count - 1] = EventKind.SNAPSHOT_INSTALLED
    assert [e.kind for e in report.events] == kinds


def test_duplicated_delta_is_reported_and_replay_waits_for_a_snapshot(stream: Stream) -> None:
    i = first_index(stream, DELTA, 2)
    msgs = [*stream.messages[: i + 1], stream.messages[i], *stream.messages[i + 1 :]]
    report = replay(msgs)
    (v,) = report.violations
    assert (v.frame_index, v.rule, v.sequence) == (i + 1, "StaleOrDuplicateDelta", msgs[i].sequence)
    assert all(e.kind is EventKind.SKIPPED for e in report.events[i + 2 :])
    # the lane keeps its last consistent state, and history up to there
    assert report.final_sequence == msgs[i].sequence
    np.testing.assert_array_equal(report.final_lane, stream.lanes[msgs[i].sequence])  # type: ignore[arg-type]


def test_missing_delta_is_a_base_sequence_gap(stream: Stream) -> None:
    i = next(
        j for j in range(len(stream.kinds) - 1) if stream.kinds[j] == stream.kinds[j + 1] == DELTA
    )
    msgs = stream.messages[:i] + stream.messages[i + 1 :]
    report = replay(msgs)
    v = report.violations[0]
    assert (v.frame_index, v.rule) == (i, "BaseSequenceMismatch")
    assert v.sequence == stream.messages[i + 1].sequence


def test_snapshot_chunk_out_of_order(stream: Stream) -> None:
    assert stream.chunk_count >= 2
    msgs = [stream.messages[1], stream.messages[0], *stream.messages[2:]]
    report = replay(msgs)
    v = report.violations[0]
    assert (v.frame_index, v.rule) == (0, "Cbi1Error.ChunkSequence")
    # chunk 0 then starts a fresh assembly; the lone chunk 0 is followed by a delta
    assert report.events[1].kind is EventKind.SNAPSHOT_CHUNK
    assert report.violations[1].frame_index == 2
    assert report.final_lane is None


def test_recovery_at_the_next_snapshot(stream: Stream) -> None:
    i = first_index(stream, DELTA, 1)
    broken = clone(stream.messages[i])
    broken.base_sequence += 5
    broken.sequence += 5
    # after the violation, a fresh snapshot of the final lane is sent in the same stream
    tail = build_stream(deltas=16, heartbeat_every=4, seed=7).messages
    snapshot = tail[: stream.chunk_count]
    msgs = [*stream.messages[:i], broken, *stream.messages[i + 1 : i + 3], *snapshot]
    report = replay(msgs)
    assert [v.frame_index for v in report.violations] == [i]
    assert report.events[i + 1].kind is EventKind.SKIPPED
    assert report.events[-1].kind is EventKind.SNAPSHOT_INSTALLED
    assert report.final_sequence == stream.snapshot_sequence
    # both snapshot points are kept: the latest one wins in lane_at
    assert len(report.sequence_ranges) == 2


def test_heartbeat_rules(stream: Stream) -> None:
    producer = stream.messages[0].producer
    early = heartbeat(producer, stream.snapshot_sequence, 1)
    report = replay([early, *stream.messages])
    assert report.violations[0].rule == "HeartbeatBeforeSnapshot"
    j = first_index(stream, HB)
    wrong = heartbeat(producer, stream.messages[j].sequence + 1, 1)
    report = replay([*stream.messages[:j], wrong])
    assert (report.violations[0].frame_index, report.violations[0].rule) == (j, "HeartbeatSequence")


def test_identity_and_envelope_rules(stream: Stream) -> None:
    i = first_index(stream, DELTA, 0)
    cases: dict[str, pb.FilterUpdate] = {}
    m = clone(stream.messages[i])
    m.producer.layout_generation = 2
    cases["ProducerChanged"] = m
    m = clone(stream.messages[i])
    m.relay.relay_incarnation = 1
    cases["RelayChanged"] = m
    m = clone(stream.messages[i])
    m.contract_marker = 0
    cases["relay-contract-marker"] = m
    m = clone(stream.messages[i])
    m.kind = pb.FILTER_UPDATE_KIND_UNSPECIFIED
    cases["relay-update-kind"] = m
    m = clone(stream.messages[i])
    m.kind = pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
    m.base_sequence = m.sequence
    cases["cbi1-kind-mismatch"] = m
    m = clone(stream.messages[i])
    m.producer.CopyFrom(
        wire_producer(FilterFormat(seed=m.producer.ckf_format.seed, bucket_count=1 << 20), dc_id=5)
    )
    cases["ProducerChanged "] = m
    for rule, msg in cases.items():
        report = replay([*stream.messages[:i], msg])
        v = report.violations[0]
        assert (v.frame_index, v.rule) == (i, rule.strip()), (rule, v)


def test_cbi1_header_must_match_the_envelope(stream: Stream) -> None:
    i = first_index(stream, DELTA, 0)
    m = clone(stream.messages[i])
    m.sequence += 1
    m.base_sequence += 1
    report = replay([*stream.messages[:i], m])
    assert report.violations[0].rule == "cbi1-epoch"


def test_expected_format_is_enforced(stream: Stream) -> None:
    seed = stream.messages[0].producer.ckf_format.seed
    report = replay(stream.messages, expected_format=FilterFormat(seed=seed, bucket_count=1 << 21))
    assert report.violations[0].rule == "FormatMismatch"
    assert replay(stream.messages, expected_format=FilterFormat(seed=seed, bucket_count=1 << 20)).ok


def test_payload_bit_flips_are_reported_at_their_record(stream: Stream) -> None:
    rng = np.random.default_rng(3)
    for i in (0, stream.chunk_count, first_index(stream, DELTA, 4)):
        m = clone(stream.messages[i])
        payload = bytearray(m.payload)
        bit = int(rng.integers(0, len(payload) * 8))
        payload[bit // 8] ^= 1 << (bit % 8)
        m.payload = bytes(payload)
        report = replay([*stream.messages[:i], m, *stream.messages[i + 1 :]])
        assert report.violations[0].frame_index == i
        assert not report.ok
        before = [e for e in report.events if e.frame_index < i]
        assert not any(isinstance(e, Violation) for e in before)


def test_lane_at_unknown_sequence(stream: Stream) -> None:
    report = replay(stream.messages)
    with raises_variant(LaneError, "SequenceNotReplayed") as info:
        report.lane_at(stream.final_sequence + 1)
    assert info.value.available == [(stream.snapshot_sequence, stream.final_sequence)]
    with raises_variant(LaneError, "SequenceNotReplayed"):
        report.lane_at(stream.snapshot_sequence - 1)


def test_incremental_replayer_matches_replay(stream: Stream) -> None:
    player = Replayer(keep_history=False)
    events = [player.feed(m) for m in stream.messages]
    report = player.report()
    assert events == report.events == replay(stream.messages).events
    np.testing.assert_array_equal(report.final_lane, stream.final_words)  # type: ignore[arg-type]
    # without history the sessions are still known: a replayed sequence is not rebuilt
    assert report.sequence_ranges == [(stream.snapshot_sequence, stream.final_sequence)]
    with raises_variant(LaneError, "HistoryNotKept"):
        report.lane_at(stream.final_sequence)
    with raises_variant(LaneError, "SequenceNotReplayed"):
        report.lane_at(stream.final_sequence + 1)


# ------------------------------------------------------------------------------ capture damage


def _message_records(path: Path) -> list[tuple[int, int]]:
    """(start offset, end offset) of each MESSAGE record of the capture, in order."""
    with CaptureReader(path) as reader:
        return [(r.offset, r.end_offset) for r in reader.records() if r.type is RecordType.MESSAGE]


@pytest.fixture(scope="module")
def small() -> Stream:
    return build_stream(expected_blocks=3000, warmup_events=60, deltas=10, heartbeat_every=3)


def test_truncation_at_every_record_boundary_and_inside(small: Stream, tmp_path: Path) -> None:
    path = write_capture(tmp_path / "s.kvrcap", small.messages, catalog=False)
    data = path.read_bytes()
    spans = _message_records(path)
    full = replay(path)
    assert full.ok
    for k, (start, end) in enumerate(spans):
        for cut in (start, start + 7, (start + end) // 2, end - 1):
            p = tmp_path / f"cut-{cut}.kvrcap"
            p.write_bytes(data[:cut])
            report = replay(p)
            events = report.events
            if cut == start:
                # a cut at a record boundary leaves a valid, shorter capture: nothing to report
                assert events == full.events[:k]
                continue
            assert events[:-1] == full.events[:k], cut
            last = events[-1]
            assert isinstance(last, Violation) and last.rule == "SourceDamaged"
            assert last.frame_index == k
            assert "Truncated" in (last.reason or "")
            # the recording's damage, no message a consumer saw: no action claimed for it
            assert last.action == "none" and last.to_dict()["action"] == "none"
            assert f"{last.describe()} [none]" in " ".join(report.text().split())


def test_capture_bit_flips_keep_every_record_before_them(small: Stream, tmp_path: Path) -> None:
    path = write_capture(tmp_path / "s.kvrcap", small.messages, catalog=False)
    data = path.read_bytes()
    spans = _message_records(path)
    full = replay(path)
    rng = np.random.default_rng(11)
    for k, (start, end) in enumerate(spans):
        bit = int(rng.integers(start * 8, end * 8))
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        p = tmp_path / "flip.kvrcap"
        p.write_bytes(bytes(flipped))
        report = replay(p)
        assert [e.kind for e in report.events[:k]] == [e.kind for e in full.events[:k]]
        # the damage is reported where it is, and replay goes on after it (issue 5)
        last = report.events[k]
        assert isinstance(last, Violation) and last.rule == "SourceDamaged"
        assert last.frame_index == k
        assert [e.frame_index for e in report.events[k + 1 :]] == list(range(k + 1, len(spans)))
        assert len(list(_intact(p))) == k
        got = [r.index for r in read_capture(p, damage="report") if isinstance(r, FrameRecord)]
        assert got == [i for i in range(len(spans)) if i != k]


def _intact(path: Path) -> list[int]:
    out = []
    try:
        for r in read_capture(path):
            out.append(r.index)
    except Exception:
        pass
    return out


def test_random_bytes_and_empty_inputs(tmp_path: Path) -> None:
    p = tmp_path / "noise.bin"
    p.write_bytes(np.random.default_rng(5).bytes(1000))
    with raises_variant(CaptureError, "Unreadable", match="unrecognised input"):
        replay(p)  # as ck.open: no source, an error, not a report of nothing
    report = replay([])
    assert report.ok and report.final_lane is None and report.final_sequence is None


# ------------------------------------------------------------------ memory: history on disk

LANE = 1 << 19  # 4 MiB of words: one snapshot chunk


def _sessions_capture(path: Path, sessions: int) -> dict[int, np.ndarray]:
    """``sessions`` streams, each a fresh snapshot of a 2^19-bucket lane and 3 deltas; the
    lanes expected at a few sequences (the first and last session's middle delta)."""
    from test_stream_roundtrip import MARKER, RELAY

    from cbi1kit.capture._readers import SUBSCRIBE_KV_POOL_METHOD
    from cbi1kit.capture._writer import CaptureWriter
    from cbi1kit.wire._encode import encode_delta, encode_snapshot_chunks

    fmt = FilterFormat(seed=0x5EED, bucket_count=LANE)
    producer = wire_producer(fmt)
    rng = np.random.default_rng(sessions)
    expected: dict[int, np.ndarray] = {}

    def update(kind: int, base: int, seq: int, payload: bytes) -> bytes:
        return pb.FilterUpdate(
            protocol_version=1,
            relay=RELAY,
            producer=producer,
            base_sequence=base,
            sequence=seq,
            send_ts_us=seq,
            kind=kind,
            payload=payload,
            contract_marker=MARKER,
        ).SerializeToString()

    with CaptureWriter(path) as w:
        for s in range(sessions):
            sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
            seq = 1000 * (s + 1)
            lane = rng.integers(0, 1 << 63, size=LANE, dtype=np.uint64)
            for chunk in encode_snapshot_chunks(fmt, producer.pool_id.dc_id, seq, lane):
                w.message(sid, update(SNAP, seq, seq, chunk))
            for d in range(3):
                buckets = rng.choice(LANE, size=50, replace=False)
                words = rng.integers(0, 1 << 63, size=50, dtype=np.uint64)
                lane[buckets] = words
                images = list(zip(buckets.tolist(), words.tolist(), strict=True))
                delta = encode_delta(fmt, producer.pool_id.dc_id, seq, seq + 1, images)
                w.message(sid, update(DELTA, seq, seq + 1, delta))
                seq += 1
                if d == 1 and s in (0, sessions - 1):
                    expected[seq] = lane.copy()
            w.close_stream(sid)
    return expected


def test_replay_memory_does_not_grow_with_the_snapshots(tmp_path: Path) -> None:
    """Replaying 12 snapshots of a lane takes no more memory than replaying 2 (the history
    ``lane_at`` reads is on disk), and ``lane_at`` still rebuilds any session's lanes."""
    peaks = []
    for sessions in (2, 12):
        path = tmp_path / f"{sessions}.kvrcap"
        expected = _sessions_capture(path, sessions)
        tracemalloc.start()
        try:
            report = replay(path)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert report.ok and len(report.sequence_ranges) == sessions
        for seq, lane in expected.items():
            np.testing.assert_array_equal(report.lane_at(seq), lane)
    assert peaks[1] < peaks[0] + 8 * LANE // 2, peaks  # half a lane's bytes


@pytest.mark.parametrize("where", ["messages", "capture"])
def test_lane_at_from_history_read_back_in_small_windows(
    stream: Stream, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history is the messages replay took, read back where the source holds them (a
    capture's records a few at a time, or the messages kept in memory): every sequence's lane
    is rebuilt."""
    from cbi1kit.analysis import _history

    monkeypatch.setattr(_history, "_WINDOW", 64)
    source: object = stream.messages
    if where == "capture":
        source = write_capture(tmp_path / "s.kvrcap", stream.messages)
    report = replay(source)  # type: ignore[arg-type]
    for seq, words in stream.lanes.items():
        np.testing.assert_array_equal(report.lane_at(seq), words)


def test_a_capture_changed_after_replay_is_not_read_as_its_history(
    stream: Stream, tmp_path: Path
) -> None:
    """``lane_at`` reads the capture's records back: a record that is not the one replay took
    (the file rewritten since) is ``CaptureError`` ``Changed``, never a wrong lane."""
    path = write_capture(tmp_path / "s.kvrcap", stream.messages)
    report = replay(path)
    last = max(stream.lanes)
    with CaptureReader(path) as reader:
        msgs = [r for r in reader.records() if r.type is RecordType.MESSAGE]
    data = bytearray(path.read_bytes())
    for m in msgs[-3:]:  # the last messages' bodies (a delta among them)
        data[(m.body_offset + m.end_offset) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CaptureError, match="not the record replay read") as info:
        report.lane_at(last)
    assert info.value.variant == "Changed"


def test_without_events_the_counts_and_violations_stay(stream: Stream) -> None:
    i = first_index(stream, DELTA, 2)
    msgs = [*stream.messages[: i + 1], stream.messages[i], *stream.messages[i + 1 :]]
    full = replay(msgs)
    lean = replay(msgs, keep_events=False, keep_history=False)
    assert lean.events == [] and len(full.events) == len(msgs)
    assert lean.counts == full.counts and sum(lean.counts.values()) == len(msgs)
    assert lean.violations == full.violations and len(lean.violations) == 1 and not lean.ok
    assert lean.sequence_ranges == full.sequence_ranges
    assert lean.final_sequence == full.final_sequence
    np.testing.assert_array_equal(lean.final_lane, full.final_lane)  # type: ignore[arg-type]


# ------------------------------------------------------------------ many subscriptions (#15)

T0 = 1_800_000_000_000_000_000
OTHER_DC = 0x0123456789ABCDEF


def _subscriptions(path: Path, streams: list[list[pb.FilterUpdate]], *, interleave: bool) -> Path:
    """Each message list its own SubscribeKvPool stream, interleaved message by message (or one
    after the other), the i-th message written received at ``T0 + i ms``; every stream closed
    1 ms after the last message; a catalog watch whose second message is no catalog update."""
    order = (
        [
            (k, m)
            for i in range(max(map(len, streams)))
            for k, s in enumerate(streams)
            for m in s[i : i + 1]
        ]
        if interleave
        else [(k, m) for k, s in enumerate(streams) for m in s]
    )
    t = T0
    with CaptureWriter(path) as w:
        cat = w.open_stream("relay", WATCH_KV_POOL_CATALOG_METHOD, b"", recv_unix_ns=t)
        w.message(cat, b"\x08\x01", recv_unix_ns=t)
        w.message(cat, b"\xff", recv_unix_ns=t)
        sids = [
            w.open_stream("relay", SUBSCRIBE_KV_POOL_METHOD, b"", recv_unix_ns=t) for _ in streams
        ]
        for k, m in order:
            w.message(sids[k], m.SerializeToString(), recv_unix_ns=t)
            t += 1_000_000
        for sid in sids:
            w.close_stream(sid, recv_unix_ns=t)
        w.close_stream(cat, recv_unix_ns=t)
    return path


@pytest.fixture(scope="module")
def other() -> Stream:
    return build_stream(deltas=12, heartbeat_every=5, seed=8, dc_id=OTHER_DC)


@pytest.mark.parametrize("interleave", [True, False])
def test_two_pools_replay_as_two_clean_lanes(
    stream: Stream, other: Stream, interleave: bool, tmp_path: Path
) -> None:
    """Two subscriptions of two pools, interleaved or not: a lane each, no violation (the old
    single-lane replay broke interleaved streams at each other's messages)."""
    path = _subscriptions(
        tmp_path / "two.kvrcap", [stream.messages, other.messages], interleave=interleave
    )
    report = replay(path)
    assert report.ok, report.violations[:2]
    assert report.frames == len(stream.messages) + len(other.messages)
    assert [lane.dc_id for lane in report.lanes] == [DC, OTHER_DC]
    for dc, s in ((DC, stream), (OTHER_DC, other)):
        lane = report.lane(dc=dc)
        assert lane.ok and lane.final_sequence == s.final_sequence
        np.testing.assert_array_equal(lane.final_lane, s.final_words)  # type: ignore[arg-type]
        for seq, words in s.lanes.items():
            np.testing.assert_array_equal(lane.lane_at(seq), words)
    assert report.lane(dc=f"{OTHER_DC:016x}").dc_id == OTHER_DC
    with raises_variant(LaneError, "SeveralLanes"):
        report.final_lane  # noqa: B018 - two lanes: which?
    with raises_variant(LaneError, "NoSuchLane"):
        report.lane(dc=5)
    # the catalog's garbage is the catalog's business, not a frame violation
    assert len(report.catalogs) == 1 and len(report.streams) == 3


def test_a_producer_changes_only_between_streams(stream: Stream, tmp_path: Path) -> None:
    """A new generation of the pool on a new stream: the same lane, a second session. The
    same change inside one stream is the violation ProducerChanged."""
    renewed = [clone(m) for m in stream.messages]
    for m in renewed:
        m.producer.layout_generation = 2
    path = _subscriptions(tmp_path / "gen.kvrcap", [stream.messages, renewed], interleave=False)
    report = replay(path)
    assert report.ok and len(report.lanes) == 1
    (lane,) = report.lanes
    assert [s.producer.layout_generation for s in lane.sessions if s.producer] == [1, 2]
    assert [s.stream_id for s in lane.sessions] == lane.streams and len(lane.streams) == 2
    within = [*stream.messages, *renewed[stream.chunk_count :]]
    (v,) = replay(within).violations
    assert (v.rule, v.frame_index) == ("ProducerChanged", len(stream.messages))


def test_a_lane_at_a_time_and_the_end_of_its_session(stream: Stream, tmp_path: Path) -> None:
    """At a wall-clock time every message received by then is applied; once the stream's close
    is recorded the session is over and the lane is not ready."""
    path = _subscriptions(tmp_path / "t.kvrcap", [stream.messages], interleave=False)
    lane = replay(path).lane()
    last = len(stream.messages) - 1
    for i in range(stream.chunk_count - 1, last + 1, 3):
        found = lane.session_at(T0 + i * 1_000_000)
        assert not isinstance(found, str)
        session, sequence = found
        applied = max(m.sequence for m in stream.messages[: i + 1])
        assert sequence == applied and session.stream_id == lane.streams[0]
        np.testing.assert_array_equal(
            lane.lane_at_time(T0 + i * 1_000_000 + 999), stream.lanes[applied]
        )  # type: ignore[arg-type]
    assert lane.session_at(T0 + (stream.chunk_count - 2) * 1_000_000) == (
        "not ready: no snapshot installed yet"
    )
    closed = lane.session_at(T0 + (last + 1) * 1_000_000)
    assert isinstance(closed, str) and "closed" in closed
    assert lane.lane_at_time(T0 + (last + 1) * 1_000_000) is None
    with raises_variant(LaneError, "TimeNotRecorded"):
        replay(stream.messages).lane().session_at(T0)


def test_a_replay_alone_loads_neither_polars_nor_pyarrow() -> None:
    """``cbi1kit replay`` keeps its memory to the engine: the table libraries (some 70 MiB
    resident) load only when a table is asked for."""
    sample = sample_capture()
    code = (
        "import sys, cbi1kit as ck\n"
        f"ck.replay({str(sample)!r}, keep_events=False, keep_history=False)\n"
        "print(sorted(m for m in ('polars', 'pyarrow') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_what_a_notebook_shows_of_a_result_is_one_short_line() -> None:
    """A notebook cell's last value is its repr: a summary line, never the words or tables."""
    import cbi1kit as ck

    c = ck.open(sample_capture())
    report = c.replay()
    view = c.view()
    shown = [c, report, report.lane(), view, view.domains[0], view.table, view.lanes[0]]
    for obj in shown:
        text = repr(obj)
        assert "\n" not in text and len(text) <= 160 and " object at 0x" not in text, text
    dc = dc_text(report.lane().dc_id)
    assert repr(report) == f"<ReplayReport: {report.frames:,} frames, 1 lane(s) [DC {dc}], ok>"


# ------------------------------------------------------- the catalog and readiness streams' rules

#: one plane update: (plane "c"/"r", stream, revision, drt instance, incarnation, content);
#: ("close", stream) ends a stream
PlaneStep = tuple[Any, ...]


def _plane_capture(path: Path, steps: list[PlaneStep]) -> Path:
    """A capture of catalog and readiness streams, opened as first named."""
    from cbi1kit._proto import kvrelay_v1_pb2 as pb
    from cbi1kit.capture._streams import (
        SUBSCRIBE_SERVING_READINESS_METHOD,
        WATCH_KV_POOL_CATALOG_METHOD,
    )
    from cbi1kit.capture._writer import CaptureWriter
    from cbi1kit.relay._messages import RELAY_CONTRACT_MARKER

    with CaptureWriter(path) as w:
        ids: dict[int, int] = {}
        for step in steps:
            if step[0] == "close":
                w.close_stream(ids.pop(step[1]))
                continue
            plane, stream, revision, drt, incarnation, content = step
            if stream not in ids:
                method = (
                    WATCH_KV_POOL_CATALOG_METHOD
                    if plane == "c"
                    else SUBSCRIBE_SERVING_READINESS_METHOD
                )
                ids[stream] = w.open_stream("relay:1", method, b"")
            relay = (
                None
                if drt is None
                else pb.RelayIdentity(drt_instance_id=drt, relay_incarnation=incarnation)
            )
            if plane == "c":
                update: Any = pb.KvPoolCatalogUpdate(
                    protocol_version=1,
                    relay=relay,
                    revision=revision,
                    snapshot=pb.KvPoolCatalogSnapshot(
                        pools=[pb.KvPoolDescriptor(pool_roles=[4]) for _ in range(content)]
                    ),
                    contract_marker=RELAY_CONTRACT_MARKER,
                )
            else:
                update = pb.ServingReadinessUpdate(
                    protocol_version=1,
                    relay=relay,
                    revision=revision,
                    entries=[
                        pb.TopologyEntry(namespace="ns", canonical_model_id=f"m{i}")
                        for i in range(content)
                    ],
                    contract_marker=RELAY_CONTRACT_MARKER,
                )
            w.message(ids[stream], update.SerializeToString())
    return path


@pytest.mark.parametrize(
    ("steps", "rules"),
    [
        (
            [
                ("c", 0, 1, 7, 1, 1),
                ("c", 0, 1, 7, 1, 1),
                ("c", 0, 3, 7, 1, 2),
                ("c", 0, 3, 7, 1, 2),
            ],
            [],
        ),
        ([("c", 0, 2, 7, 1, 1), ("c", 0, 1, 7, 1, 1)], ["catalog-revision-backwards"]),
        ([("c", 0, 2, 7, 1, 1), ("c", 0, 2, 7, 1, 2)], ["catalog-revision-unchanged"]),
        ([("c", 0, 1, 7, 1, 1), ("c", 0, 2, 7, 2, 1)], ["catalog-relay-changed"]),
        ([("c", 0, 1, None, 0, 1)], ["catalog-relay-missing"]),
        # the readiness stream: the same rules on its entries
        ([("r", 1, 5, 7, 1, 2), ("r", 1, 5, 7, 1, 2), ("r", 1, 6, 7, 1, 0)], []),
        ([("r", 1, 5, 7, 1, 2), ("r", 1, 4, 7, 1, 2)], ["readiness-revision-backwards"]),
        ([("r", 1, 5, 7, 1, 2), ("r", 1, 5, 7, 1, 1)], ["readiness-revision-unchanged"]),
        ([("r", 1, 5, None, 0, 2)], ["readiness-relay-missing"]),
        # one relay across the streams open together: catalog then readiness, either way round
        ([("c", 0, 1, 7, 1, 1), ("r", 1, 1, 7, 2, 1)], ["readiness-relay-changed"]),
        ([("r", 1, 1, 8, 1, 1), ("c", 0, 1, 7, 1, 1)], ["catalog-relay-changed"]),
        # a closed stream's relay is no longer the epoch's: a restarted relay, resubscribed
        (
            [
                ("c", 0, 1, 7, 1, 1),
                ("r", 1, 1, 7, 1, 1),
                ("close", 0),
                ("close", 1),
                ("c", 2, 1, 7, 2, 1),
                ("r", 3, 1, 7, 2, 1),
            ],
            [],
        ),
        (
            [("c", 0, 1, 7, 1, 1), ("r", 1, 1, 7, 1, 1), ("close", 0), ("c", 2, 1, 7, 2, 1)],
            ["catalog-relay-changed"],
        ),
        # a resubscribed stream starts its revisions afresh
        ([("c", 0, 9, 7, 1, 1), ("close", 0), ("c", 1, 1, 7, 1, 1)], []),
    ],
)
def test_the_catalog_and_readiness_streams_keep_upstreams_rules(
    tmp_path: Path, steps: list[PlaneStep], rules: list[str]
) -> None:
    """coordinator.rs (91ec3789, as 0092138f): one relay across a connection's catalog and
    readiness streams, revisions never go back, a repeated revision repeats its content;
    `cbi1kit replay` names the first break beside the frames' verdict."""
    from cliutil import cli_run

    path = _plane_capture(tmp_path / "planes.kvrcap", steps)
    report = replay(path)
    assert [v.rule for v in report.plane_violations] == rules
    assert len(report.readiness) == sum(1 for s in steps if s[0] == "r")
    code, out, _ = cli_run("replay", str(path), "--no-progress")
    assert code == 0  # the frames' verdict: the planes' breaks are listed apart
    assert ("planes: 1 rule break(s), first: record " in out) == bool(rules), out
    code, out, _ = cli_run("replay", str(path), "--json", "--no-progress")
    assert [v["rule"] for v in json.loads(out)["plane_violations"]] == rules


def test_a_pool_stream_needs_an_aggregated_base_model_source(tmp_path: Path) -> None:
    """stream.rs (53c7c79f) CkfStreamSession::new: upstream's consumer takes a CKF stream only
    from a pool the catalog gives the aggregated role and a base-model target; replay names
    each pool stream the catalog describes otherwise (the planes' list, from its open)."""
    from strategies import wire_producer

    from cbi1kit._proto import kvrelay_v1_pb2 as pb
    from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD, WATCH_KV_POOL_CATALOG_METHOD
    from cbi1kit.capture._writer import CaptureWriter
    from cbi1kit.relay._messages import RELAY_CONTRACT_MARKER

    base = pb.ModelTarget(base=pb.BaseModelTarget(base_model="m"))
    lora = pb.ModelTarget(lora=pb.LoraModelTarget(base_model="m", adapter="a"))
    agg, pre, dec = pb.WORKER_ROLE_AGGREGATED, pb.WORKER_ROLE_PREFILL, pb.WORKER_ROLE_DECODE
    pools = {  # dc id -> (roles, targets, the violation's words or None)
        1: ([agg], [base, lora], None),
        2: ([pre, dec], [base], "declares no aggregated role (roles: WORKER_ROLE_PREFILL"),
        3: ([agg], [lora], "no registration of the pool has a base-model target"),
    }
    producers = {dc: wire_producer(7, 1024, dc_id=dc) for dc in pools}
    catalog = pb.KvPoolCatalogUpdate(
        protocol_version=1,
        relay=pb.RelayIdentity(drt_instance_id=1, relay_incarnation=1),
        revision=1,
        snapshot=pb.KvPoolCatalogSnapshot(
            pools=[
                pb.KvPoolDescriptor(
                    producer=producers[dc],
                    pool_roles=roles,
                    registrations=[
                        pb.ModelRegistration(canonical_model_id="m", target=t) for t in targets
                    ],
                )
                for dc, (roles, targets, _) in pools.items()
            ]
        ),
        contract_marker=RELAY_CONTRACT_MARKER,
    )
    path = tmp_path / "sources.kvrcap"
    with CaptureWriter(path) as w:
        cat = w.open_stream("relay:1", WATCH_KV_POOL_CATALOG_METHOD, b"")
        w.message(cat, catalog.SerializeToString())
        streams = {
            dc: w.open_stream(
                "relay:1",
                SUBSCRIBE_KV_POOL_METHOD,
                pb.SubscribeKvPoolRequest(
                    subscriber_id="s", expected_producer=p, contract_marker=RELAY_CONTRACT_MARKER
                ).SerializeToString(),
            )
            for dc, p in producers.items()
        }
    found = replay(path).plane_violations
    assert [(v.stream_id, v.rule) for v in found] == [
        (streams[2], "catalog-pool-not-aggregated"),
        (streams[3], "catalog-pool-not-aggregated"),
    ]
    assert pools[2][2] in found[0].reason and pools[3][2] in found[1].reason
    assert "stream.rs @ 53c7c79f" in found[0].reason
