"""The fast replay engine against the per-message reference (#16): the same report, bit for bit.

``replay(..., engine="compiled")`` takes runs of deltas, heartbeats and skipped messages a span
at a time with compiled kernels and hands everything else to the per-message engine
(``engine="reference"``, which stays the oracle). Both replay the same captures here, and
``summary`` of their reports must be equal: counts, every event and violation (record index,
sequence, reason, stream, offset, rule), the streams and catalog updates, and per lane its
sessions, final words, and the words ``lane_at`` and ``lane_at_time`` rebuild at sequences and
times across every session. The captures: the bundled sample, the golden frames of
``tests/vectors/cbi1`` inside a stream, the streams the replay and damage tests build, and
hypothesis-drawn captures of several pools that break every rule (``strategies.capture_plans``).
"""

from __future__ import annotations

import contextlib
import gc
import random
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from errorcheck import raises_variant
from fleetdata import fleet_captures, rotate_copy
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings, strategies as st
from strategies import CapturePlan, capture_plans
from test_damaged_captures import Damage, damages
from test_replay import OTHER_DC, _sessions_capture, _subscriptions
from test_rulebook import GOLDEN, mutated
from test_stream_roundtrip import build_stream, write_capture

from cbi1kit import _lazy
from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis import _fast
from cbi1kit.analysis._replay import ReplayReport
from cbi1kit.analysis._replay_kernels import RULE_CHECKS
from cbi1kit.analysis._shorthands import images_table, replay, snapshots_table
from cbi1kit.capture import _scan
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.data import sample_capture
from cbi1kit.errors import CaptureError, LaneError
from cbi1kit.wire import RULES
from cbi1kit.wire._encode import encode_snapshot_chunks
from cbi1kit.wire._format import FilterFormat

ROOT = Path(__file__).parents[1]
SAMPLE = sample_capture()


def _words(get: Any) -> Any:
    """The words ``get()`` returns as bytes, or the error it raises (variant and message)."""
    try:
        words = get()
    except LaneError as exc:
        return ("LaneError", exc.variant, str(exc))
    return words.tobytes() if isinstance(words, np.ndarray) else words


def summary(report: ReplayReport, seed: int = 0) -> dict[str, Any]:
    """Everything a report exposes, comparable with ``==``: the lanes' words as bytes, and
    ``lane_at`` / ``lane_at_time`` at the ends and a few drawn points of every session."""
    rng = random.Random(seed)
    lanes = []
    for lane in report.lanes:
        points: list[Any] = []
        for s in lane.sessions:
            seqs = {s.sequence, s.last_sequence}
            seqs |= {rng.randint(s.sequence, s.last_sequence) for _ in range(3)}
            for seq in sorted(seqs):
                points.append(("seq", seq, _words(lambda q=seq, n=lane: n.lane_at(q))))
            times = [s.installed_unix_ns, s.last_unix_ns, s.ended_unix_ns]
            if s.installed_unix_ns is not None and s.last_unix_ns is not None:
                times += [
                    rng.randint(s.installed_unix_ns - 5, s.last_unix_ns + 5) for _ in range(3)
                ]
            for t in times:
                if t is not None:
                    points.append(("time", t, _words(lambda t=t, n=lane: n.lane_at_time(t))))
                    points.append(("session", t, _words(lambda t=t, n=lane: n.session_at(t))))
        segments = [
            (
                g.frame_index,
                g.sequence,
                g.last_sequence,
                g.bucket_count,
                g.kept,
                None if g.history is None else g.history.rows,
                g.stream_id,
                g.producer,
                g.dc_id,
                g.seed,
                g.installed_unix_ns,
                g.delta_unix_ns.tolist(),
                g.timed,
                g.ended_unix_ns,
                g.ended_by,
                g.faulted,
            )
            for g in lane._segments
        ]
        lanes.append(
            {
                "pool": lane.pool,
                "dc": lane.dc_id,
                "streams": lane.streams,
                "frames": lane.frames,
                "final_sequence": lane.final_sequence,
                "final_lane": None if lane.final_lane is None else lane.final_lane.tobytes(),
                "counts": lane.counts,
                "violations": lane.violations,
                "sessions": lane.sessions,
                "ranges": lane.sequence_ranges,
                "format": lane.format,
                "segments": segments,
                "points": points,
            }
        )
    return {
        "frames": report.frames,
        "counts": report.counts,
        "counts_order": list(report.counts),
        "events": report.events,
        "violations": report.violations,
        "catalogs": report.catalogs,
        "streams": report.streams,
        "first_unix_ns": report.first_unix_ns,
        "lanes": lanes,
    }


def fresh(tmp_path: Path, name: str) -> Path:
    """A path of its own in ``tmp_path`` (hypothesis runs every example in one directory)."""
    return Path(tempfile.mkdtemp(dir=tmp_path)) / name


def assert_same(path: Path, **kw: Any) -> ReplayReport:
    """Both engines over ``path``; their summaries must be equal. The fast engine's report."""
    fast = replay(path, engine="compiled", **kw)
    ref = replay(path, engine="reference", **kw)
    a, b = summary(fast), summary(ref)
    for key in a:
        assert a[key] == b[key], key
    return fast


# ------------------------------------------------------------------------- known captures


@pytest.mark.parametrize("events", [True, False])
def test_the_bundled_sample(events: bool) -> None:
    report = assert_same(SAMPLE, keep_events=events)
    assert report.counts["delta_applied"] == 5569


def test_the_bundled_sample_tables() -> None:
    assert images_table(SAMPLE, engine="compiled").equals(images_table(SAMPLE, engine="reference"))
    assert snapshots_table(SAMPLE, engine="compiled").equals(
        snapshots_table(SAMPLE, engine="reference")
    )


def test_a_stream_of_the_roundtrip_builder_and_its_expected_format(tmp_path: Path) -> None:
    stream = build_stream(deltas=40, heartbeat_every=4, seed=3)
    path = write_capture(tmp_path / "s.kvrcap", stream.messages)
    report = assert_same(path)
    assert report.ok and report.final_sequence == stream.final_sequence
    np.testing.assert_array_equal(report.final_lane, stream.final_words)  # type: ignore[arg-type]
    assert_same(
        path, expected_format=FilterFormat(seed=1, bucket_count=1 << 10)
    )  # every message breaks it


@pytest.mark.parametrize("interleave", [True, False])
def test_the_replay_tests_subscriptions_and_sessions(interleave: bool, tmp_path: Path) -> None:
    """The captures ``test_replay`` builds: two pools' subscriptions with a catalog watch
    whose second message is no catalog update, and sessions of 2^19-bucket lanes."""
    one = build_stream(deltas=16, heartbeat_every=4, seed=7)
    other = build_stream(deltas=12, heartbeat_every=5, seed=8, dc_id=OTHER_DC)
    path = _subscriptions(
        tmp_path / "two.kvrcap", [one.messages, other.messages], interleave=interleave
    )
    assert len(assert_same(path).lanes) == 2
    expected = _sessions_capture(tmp_path / "sessions.kvrcap", 3)
    report = assert_same(tmp_path / "sessions.kvrcap")
    for seq, words in expected.items():
        np.testing.assert_array_equal(report.lane_at(seq), words)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(damage=damages)
def test_the_damage_tests_captures(damage: Damage, tmp_path: Path) -> None:
    """Every damage ``test_damaged_captures`` does to a capture, through both engines."""
    path = fresh(tmp_path, "d.kvrcap")
    path.write_bytes(damage.data)
    assert_same(path)


def test_a_rotated_recording(tmp_path: Path) -> None:
    """Three interleaved pools with violations and resubscriptions, rotated into segments: the
    set replays (frame numbers running on, continued streams going on) as the reference
    replays it, and as the unrotated capture replays."""
    ops = ("delta",) * 40 + ("gap",) + ("delta",) * 30 + ("resubscribe",) + ("delta",) * 40
    plan = CapturePlan(
        6, ((8, ops), (5, ("delta",) * 90), (10, ("heartbeat", *ops))), True, 7, None
    )
    whole = plan.write(tmp_path / "whole.kvrcap")
    segments = rotate_copy(whole, tmp_path / "rot.kvrcap", rotate_bytes=whole.stat().st_size // 5)
    assert len(segments) >= 4
    rotated = assert_same(segments[0])
    same = ("final_lane", "sessions", "ranges", "counts", "points")  # offsets differ
    assert [{k: lane[k] for k in same} for lane in summary(rotated)["lanes"]] == [
        {k: lane[k] for k in same} for lane in summary(replay(whole))["lanes"]
    ]
    assert images_table(segments[0], engine="compiled").equals(
        images_table(whole, engine="compiled")
    )


def test_the_partitioned_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated fleet captures (two relays, broken frames, a rotated recording) exported to
    the partitioned dataset, whose replay goes through the fast engine segment by segment: the
    same rows as with the per-message engine (the kernels made unavailable)."""
    from cbi1kit.analysis import export_dataset, open_dataset

    captures = fleet_captures(tmp_path / "captures")
    sources = [captures[k] for k in ("a", "broken", "rotated")]
    export_dataset(sources, tmp_path / "fast")
    monkeypatch.setattr(_lazy, "compiled", lambda module: None)  # no kernels to load
    export_dataset(sources, tmp_path / "reference")
    fast, ref = open_dataset(tmp_path / "fast"), open_dataset(tmp_path / "reference")
    for table, lf in fast.tables.items():
        got = lf.collect().sort(pl.all())
        assert got.height and got.equals(ref.tables[table].collect().sort(pl.all())), table


@pytest.mark.parametrize("jump", [2**63 - 1, 2**63, 2**64 - 16])
def test_a_record_number_jump(jump: int, tmp_path: Path) -> None:
    """A capture whose records jump to a number of 2**63 or more (``test_hostile_inputs``):
    the walk after the damage numbers records past int64."""
    stream = build_stream(deltas=6)
    path = tmp_path / "jump.kvrcap"
    with CaptureWriter(path) as w:
        sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
        for m in stream.messages[:3]:
            w.message(sid, m.SerializeToString())
        w._next_index = jump
        for m in stream.messages[3:]:
            w.message(sid, m.SerializeToString())
    assert_same(path)


def _snapshot_before(update: pb.FilterUpdate) -> list[bytes]:
    """A snapshot (of zeros) from ``update``'s producer at its base sequence, the envelope
    otherwise ``update``'s, when its format is a small valid one: a stream then ready for it."""
    fmt = update.producer.ckf_format
    n = fmt.bucket_count
    if not update.HasField("producer") or not 2 <= n <= 1 << 16 or n & (n - 1):
        return []
    out = []
    lane = np.zeros(n, dtype=np.uint64)
    dc, base = update.producer.pool_id.dc_id, update.base_sequence
    for chunk in encode_snapshot_chunks(
        FilterFormat(seed=fmt.seed, bucket_count=n), dc, base, lane
    ):
        snap = pb.FilterUpdate()
        snap.CopyFrom(update)
        snap.kind = pb.FILTER_UPDATE_KIND_SNAPSHOT_CHUNK
        snap.sequence = base
        snap.payload = chunk
        out.append(snap.SerializeToString())
    return out


def _stream_capture(path: Path, messages: list[bytes]) -> Path:
    with CaptureWriter(path, index_every=4) as w:
        sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
        for raw in messages:
            w.message(sid, raw)
        w.close_stream(sid)
    return path


@pytest.mark.parametrize("k", range(len(GOLDEN)))
def test_every_golden_frame_in_a_ready_stream(k: int, tmp_path: Path) -> None:
    """Each golden frame of ``tests/vectors/cbi1`` (wrapped as ``test_rulebook`` wraps it) after
    a snapshot of its format at its base, then again (a duplicate, or its violation again)."""
    raw = GOLDEN[k].SerializeToString()
    assert_same(_stream_capture(tmp_path / "g.kvrcap", [*_snapshot_before(GOLDEN[k]), raw, raw]))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raws=st.lists(mutated(), min_size=1, max_size=8))
def test_mutated_messages_after_a_snapshot(raws: list[bytes], tmp_path: Path) -> None:
    """Bytes a consumer may meet (``test_rulebook``'s mutations of the golden frames), each
    after a snapshot of its own format where it parses."""
    messages: list[bytes] = []
    for raw in raws:
        with contextlib.suppress(DecodeError):  # bytes that are no message: no snapshot
            messages += _snapshot_before(pb.FilterUpdate.FromString(raw))
        messages.append(raw)
    assert_same(_stream_capture(fresh(tmp_path, "m.kvrcap"), messages))


# ------------------------------------------------------------------- drawn captures


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=capture_plans(), events=st.booleans(), history=st.booleans())
def test_drawn_captures_of_several_pools_with_violations(
    plan: CapturePlan, events: bool, history: bool, tmp_path: Path
) -> None:
    path = plan.write(fresh(tmp_path, "c.kvrcap"))
    assert_same(path, keep_events=events, keep_history=history)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=capture_plans(max_events=5))
def test_drawn_captures_tables(plan: CapturePlan, tmp_path: Path) -> None:
    path = plan.write(fresh(tmp_path, "t.kvrcap"))
    assert images_table(path, engine="compiled").equals(images_table(path, engine="reference"))
    assert snapshots_table(path, engine="compiled").equals(
        snapshots_table(path, engine="reference")
    )


def test_interleaved_pools_with_hooks_in_record_order(tmp_path: Path) -> None:
    """Three pools' streams message by message: the kernels take runs that span the lanes,
    and the tables' rows (the delta hook's calls) stay in record order."""
    clean = ("delta",) * 30 + ("heartbeat",) + ("delta",) * 30
    plan = CapturePlan(
        4,
        ((6, clean), (9, ("delta",) * 20 + ("gap",) + ("delta",) * 20), (4, ("big", *clean))),
        True,
        16,
        None,
    )
    path = plan.write(tmp_path / "three.kvrcap")
    report = assert_same(path)
    assert len(report.lanes) == 3 and report.counts["skipped"] == 20
    fast = images_table(path, engine="compiled")
    assert fast.equals(images_table(path, engine="reference"))
    assert fast["frame_index"].is_sorted()


def test_the_kernels_take_most_of_a_clean_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast engine is not the reference in disguise: of a long clean stream, the
    per-message engine sees only the snapshot (and nothing after a violation but the
    violation itself and the next snapshot)."""
    plan = CapturePlan(
        5,
        (
            (
                10,
                ("delta",) * 300
                + ("heartbeat",) * 3
                + ("gap",)
                + ("delta",) * 200
                + ("resubscribe",)
                + ("delta",) * 100,
            ),
        ),
        False,
        0,
        None,
    )
    path = plan.write(tmp_path / "clean.kvrcap")
    seen: list[int] = []
    one = _fast.CompiledFeeder.one

    def counted(self: Any, batch: Any, r: int) -> None:
        seen.append(r)
        one(self, batch, r)

    monkeypatch.setattr(_fast.CompiledFeeder, "one", counted)
    report = assert_same(path)
    assert report.counts["skipped"] == 200  # after the gap, until the resubscription
    assert len(seen) <= 7, seen  # two snapshots of up to three chunks each, the gap's delta


# ------------------------------------------------------------------------ the engine itself


def test_every_rule_of_the_rulebook_is_kept_by_the_kernels() -> None:
    assert set(RULE_CHECKS) == {rule.id for rule in RULES}
    assert all(RULE_CHECKS.values())


def test_the_engine_is_chosen_and_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compiled`` serves every source (messages in memory too); ``reference`` runs the
    per-message engine throughout; kernels that cannot load mean the reference, to the same
    report. Nothing else falls back: an error inside a kernel is raised."""
    with raises_variant(CaptureError, "Usage", match="engine must be one of"):
        replay(SAMPLE, engine="fast")
    calls: list[str] = []
    real = _fast.CompiledFeeder.feed

    def spy(self: Any, item: Any) -> Any:
        calls.append("compiled")
        return real(self, item)

    monkeypatch.setattr(_fast.CompiledFeeder, "feed", spy)
    replay(SAMPLE, keep_events=False)
    assert calls
    calls.clear()
    replay(SAMPLE, keep_events=False, engine="reference")
    assert not calls
    stream = build_stream(deltas=4, seed=2)
    assert replay(stream.messages, engine="compiled").ok and calls
    calls.clear()
    monkeypatch.setattr(_lazy, "compiled", lambda module: None)
    assert summary(replay(SAMPLE)) == summary(replay(SAMPLE, engine="reference"))
    assert not calls
    ticks: list[int] = []
    replay(SAMPLE, keep_events=False, engine="compiled", progress=ticks.append)
    assert sum(ticks) >= 5569


def test_an_error_in_a_kernel_is_raised_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*a: Any) -> int:
        raise RuntimeError("a kernel bug")

    monkeypatch.setattr(_fast.k, "replay_rows", broken)
    with pytest.raises(RuntimeError, match="a kernel bug"):
        replay(SAMPLE)


def test_without_events_memory_does_not_follow_the_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Python object per message, one batch at a time: with groups of 64 KiB of blocks and
    batches of 1,024 messages, the traced peak of a replay four times as long grows by what
    each delta keeps on purpose (8 bytes of receive time, 8 of the capture's index, in arrays
    that grow by doubling), far below an object per message (a ``ReplayEvent`` alone is over
    100 bytes)."""
    monkeypatch.setattr(_scan, "_PART", 64 << 10)
    peaks = []
    for n in (4000, 16000):
        plan = CapturePlan(9, ((12, ("delta",) * n),), False, 1024, None)
        path = plan.write(tmp_path / f"{n}.kvrcap")
        replay(path, keep_events=False, keep_history=False)  # kernels loaded, caches warm
        gc.collect()
        tracemalloc.start()
        report = replay(path, keep_events=False, keep_history=False)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert report.counts["delta_applied"] == n
    assert peaks[1] - peaks[0] < 12000 * 64, peaks


def _deltas_seen(engine: str) -> list[tuple[int, int, bytes, bytes, bytes]]:
    """Every applied delta the sample's replay hands ``on_delta``, its arrays kept as handed."""
    from cbi1kit.analysis._capture import open_capture
    from cbi1kit.analysis._fast import feeder_of
    from cbi1kit.analysis._replayer import Replayer

    seen: list[Any] = []
    player = Replayer(keep_history=False, on_delta=lambda *a: seen.append(a))
    feeder = feeder_of(engine, player)
    for item in open_capture(SAMPLE, keep_tables=False).items():
        feeder.feed(item)
    return [(i, s, b.tobytes(), n.tobytes(), p.tobytes()) for i, s, b, n, p in seen]


SAMPLE = sample_capture()


def test_an_on_delta_hook_keeps_what_it_was_handed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With small windows (many kernel takes), the compiled engine hands ``on_delta`` arrays
    it never writes again, each take's sized to the take (they once doubled every take: 38 GiB
    after 17), and the same deltas as the per-message engine."""
    monkeypatch.setattr(_scan, "_PART", 1 << 14)
    compiled = _deltas_seen("compiled")
    assert len(compiled) > 1000
    assert compiled == _deltas_seen("reference")
