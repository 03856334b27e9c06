"""Rotated recordings (#16): a capture written as segments reads as the unrotated capture.

A simulated fleet capture is copied record by record (same bytes, same receive times) through
``RotatingCaptureWriter``: replay of the segment set equals replay of the original (every event,
violation, stream and lane), the frames table is the same but for the byte offsets, each
segment reads alone, and the base path, a list of the segments (any order) and a ``CaptureSet``
are the same capture. A live recording of a served fleet rotated by size replays every lane
cleanly to the producers' words. Missing segments, stale segments and unrelated files are
typed errors.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from errorcheck import raises_variant
from fleetdata import rotate_copy
from relayfixtures import FAST, Running, recorder_config, wait_for

from cbi1kit.analysis import Capture, frames_table, open_capture, replay
from cbi1kit.analysis._replay import ReplayReport
from cbi1kit.capture import (
    CaptureReader,
    CaptureSet,
    CaptureWriter,
    RecordType,
    RotatingCaptureWriter,
    capture_segments,
    read_capture,
)
from cbi1kit.capture._file import decode_stream_open
from cbi1kit.capture._items import ReadCursor
from cbi1kit.capture._segments import CONTINUED, read_segment_info, segment_path
from cbi1kit.errors import CaptureError, OutputError
from cbi1kit.sim import RelayConfig, SimRelayConfig, SimulatorConfig, simulate_capture
from cbi1kit.sim._workload import synthetic_chat

FLEET = SimRelayConfig(
    SimulatorConfig(dcs=3, workers_per_dc=2, capacity_blocks=512, policy="ckf", seed=4),
    RelayConfig(heartbeat_interval_ms=2_000, resubscribe_every_ms=40_000),
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fleet") / "fleet.kvrcap"
    simulate_capture(synthetic_chat(300, seed=8), path, FLEET)
    return path


@pytest.fixture(scope="module")
def rotated(fleet: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    size = fleet.stat().st_size
    return rotate_copy(fleet, tmp_path_factory.mktemp("rot") / "rot.kvrcap", rotate_bytes=size // 7)


def events(report: ReplayReport) -> list[tuple[Any, ...]]:
    return [(e.frame_index, e.kind, e.sequence, e.reason, e.stream_id) for e in report.events]


def assert_same_replay(a: ReplayReport, b: ReplayReport) -> None:
    assert a.frames == b.frames and a.counts == b.counts
    assert events(a) == events(b)
    assert [(v.frame_index, v.rule, v.reason) for v in a.violations] == [
        (v.frame_index, v.rule, v.reason) for v in b.violations
    ]
    assert a.streams.keys() == b.streams.keys()
    for sid, info in a.streams.items():
        other = b.streams[sid]
        assert (info.opened, info.closed) == (other.opened, other.closed), sid
        assert (info.opened_unix_ns, info.closed_unix_ns) == (
            other.opened_unix_ns,
            other.closed_unix_ns,
        )
    assert [c.raw for c in a.catalogs] == [c.raw for c in b.catalogs]
    assert len(a.lanes) == len(b.lanes) > 1
    for x, y in zip(a.lanes, b.lanes, strict=True):
        assert x.pool == y.pool and x.final_sequence == y.final_sequence
        assert x.sequence_ranges == y.sequence_ranges
        assert x.final_lane is not None and y.final_lane is not None
        assert np.array_equal(x.final_lane, y.final_lane)


def test_a_rotated_recording_replays_as_the_unrotated_one(fleet: Path, rotated: list[Path]) -> None:
    assert len(rotated) >= 5
    assert rotated[1] == segment_path(rotated[0], 1) and rotated[1].name == "rot.0001.kvrcap"
    assert capture_segments(rotated[0]) == rotated
    assert_same_replay(replay(fleet), replay(rotated[0]))  # the base path finds the rest
    assert_same_replay(replay(fleet), replay(CaptureSet(rotated)))


def test_each_segment_is_a_closed_capture_with_its_streams_reopened(rotated: list[Path]) -> None:
    for number, path in enumerate(rotated):
        info = read_segment_info(path)
        assert info is not None and (info.segment, info.base) == (number, "rot.kvrcap")
        with CaptureReader(path) as reader:
            recs = list(reader.records(structural=True))
        assert recs[-1].type is RecordType.TRAILER  # closed: index and trailer
        opens = [decode_stream_open(r.body) for r in recs if r.type is RecordType.STREAM_OPEN]
        continued = [o for o in opens if (o.info or {}).get(CONTINUED)]
        assert (number == 0) == (not continued)
        report = replay(path)  # alone: readable, whatever state it starts without
        assert report.frames > 0


def test_frames_of_the_set_are_the_unrotated_frames(fleet: Path, rotated: list[Path]) -> None:
    whole = frames_table(fleet).collect()
    got = frames_table(rotated[0]).collect()
    assert got.drop("source_offset").equals(whole.drop("source_offset"))
    shuffled = [str(p) for p in reversed(rotated)]
    assert frames_table(shuffled).collect().equals(got)
    assert frames_table(CaptureSet(rotated)).collect().equals(got)
    # a segment alone (the base path alone is the whole set): the same rows, numbered from 0
    first = 0
    for path in rotated:
        alone = Capture(path, cursor=ReadCursor()).frames.collect()  # this file alone
        part = got.filter(
            pl.col("frame_index").is_between(first, first + alone.height - 1)
        ).with_columns(pl.col("frame_index") - first)
        assert alone.equals(part)
        first += alone.height
    assert first == got.height


def test_read_capture_numbers_frames_across_segments(fleet: Path, rotated: list[Path]) -> None:
    a = [(r.index, r.stream_id, r.raw) for r in read_capture(fleet)]
    b = [(r.index, r.stream_id, r.raw) for r in read_capture(rotated[0])]
    assert a == b


def test_rotation_by_time(fleet: Path, tmp_path: Path) -> None:
    with CaptureReader(fleet) as reader:
        times = [r.recv_mono_ns for r in reader.records() if r.type is RecordType.MESSAGE]
    span = (max(times) - min(times)) / 1e9
    paths = rotate_copy(fleet, tmp_path / "t.kvrcap", rotate_seconds=span / 4)
    assert 4 <= len(paths) <= 6
    for path in paths[1:]:
        with CaptureReader(path) as reader:
            msgs = [r.recv_mono_ns for r in reader.records() if r.type is RecordType.MESSAGE]
        assert (max(msgs) - min(msgs)) / 1e9 <= span / 4
    assert_same_replay(replay(fleet), replay(paths[0]))


def test_a_missing_segment_is_a_typed_error(fleet: Path, tmp_path: Path) -> None:
    paths = rotate_copy(fleet, tmp_path / "m.kvrcap", rotate_bytes=fleet.stat().st_size // 4)
    paths[2].unlink()
    with raises_variant(CaptureError, "Segments", match="segment 2 .* is missing"):
        capture_segments(paths[0])
    with raises_variant(CaptureError, "Segments", match="not consecutive"):
        capture_segments([paths[0], paths[1], paths[3]])
    with raises_variant(CaptureError, "Segments", match="not segments of one"):
        capture_segments([paths[0], fleet])


def test_stale_segments_are_refused_and_append_goes_on(fleet: Path, tmp_path: Path) -> None:
    size = fleet.stat().st_size
    paths = rotate_copy(fleet, tmp_path / "s.kvrcap", rotate_bytes=size // 3)
    paths[0].unlink()
    with raises_variant(OutputError, "Exists", match=r"s\.0001\.kvrcap exists"):
        RotatingCaptureWriter(tmp_path / "s.kvrcap", rotate_bytes=size)
    # appending goes on with the last segment, under stream ids not given out before
    base = tmp_path / "a.kvrcap"
    with RotatingCaptureWriter(base, rotate_bytes=4096) as w:
        first = w.open_stream("t", "/x/Y", b"")
        for _ in range(100):
            w.message(first, b"m" * 100)
        w.close_stream(first)
    made = len(w.paths)
    with RotatingCaptureWriter(base, rotate_bytes=4096, mode="a") as w:
        assert w.path == segment_path(base, made - 1)
        second = w.open_stream("t", "/x/Y", b"")
        assert second > first
        for _ in range(100):
            w.message(second, b"n" * 100)
    assert len(w.paths) > made and capture_segments(base) == w.paths
    plain = tmp_path / "plain.kvrcap"
    CaptureWriter(plain).close()
    with raises_variant(CaptureError, "Segments", match="not the first segment"):
        RotatingCaptureWriter(plain, rotate_bytes=4096, mode="a")


# ------------------------------------------------------------------------- a live recording


def test_a_live_recording_rotated_by_size_replays_every_lane(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    from cbi1kit.sim._feeds import ProducerFeed

    feeds = [
        ProducerFeed(model=m, dc=d, seed=60 + i, steps=40, events_per_step=6)
        for i, (m, d) in enumerate([("r/a", "dc-0"), ("r/a", "dc-1"), ("r/b", "dc-0")])
    ]
    srv = serve(feeds, FAST)
    path = tmp_path / "live.kvrcap"
    rec = Running(recorder_config(srv.address, path, validate=True, rotate_bytes=16 << 10))
    try:

        def done() -> bool:
            pools = rec.report.pools
            return all(srv.pool_exhausted(i) for i in range(len(feeds))) and sorted(
                p.last_sequence or 0 for p in pools
            ) == sorted(f.sequence for f in feeds)

        wait_for(done, timeout=30)
    finally:
        rec.finish()
    assert rec.report.violations == []
    segments = capture_segments(path)
    assert len(segments) >= 3 and segments == rec.recorder.paths
    report = replay(path)
    assert report.ok, report.violations[:3]
    for feed in feeds:
        (lane,) = [n for n in report.lanes if n.pool == feed.identity.pool_id]
        assert lane.final_sequence == feed.sequence
        assert lane.final_lane is not None and np.array_equal(lane.final_lane, feed.words())


def test_append_to_a_rotated_recording_goes_on_in_its_last_segment(
    serve: Callable[..., Any], tmp_path: Path
) -> None:
    """``record --append`` onto a rotated recording without rotation options wrote into segment
    0 behind the later ones, and the set then replayed ``AwaitingSnapshot`` (#42): it goes on in
    the last segment, and the set replays valid."""
    from cbi1kit.cli import main as cli_main
    from cbi1kit.sim._feeds import ProducerFeed

    srv = serve(ProducerFeed(seed=9, steps=None, events_per_step=4), FAST)
    path = tmp_path / "ap.kvrcap"
    rec = Running(recorder_config(srv.address, path, rotate_bytes=8 << 10))
    try:
        wait_for(lambda: len(rec.recorder.paths) >= 3, timeout=30)
    finally:
        rec.finish()
    before = {p: p.read_bytes() for p in capture_segments(path)}
    code = cli_main(
        ["record", srv.address, "-o", str(path), "--append", "--frames", "5", "--quiet"]
    )
    assert code == 0
    after = capture_segments(path)
    assert after == list(before)  # no new segment: nothing asked to rotate
    for p in after[:-1]:
        assert p.read_bytes() == before[p], f"{p.name} was written to"
    last = after[-1]
    assert last.read_bytes().startswith(before[last][: len(before[last]) - 64])
    assert last.stat().st_size > len(before[last])
    report = replay(path)
    assert report.ok, report.violations[:3]


def test_replay_progress_counts_the_bytes_of_every_segment(
    rotated: list[Path], tmp_path: Path
) -> None:
    """``replay(progress=...)`` and ``export(progress=...)`` count bytes read toward
    ``size()``, the segments summed: what the CLI's bars show with their total (#47), ending
    within the last segment's tail."""
    cap = open_capture(rotated[0])
    steps: list[int] = []
    cap.replay(progress=steps.append, keep_events=False)
    size = sum(p.stat().st_size for p in rotated)
    assert cap.size() == size and all(n > 0 for n in steps)
    tail = rotated[-1].stat().st_size // 4  # its trailer and index are no item
    assert size - tail <= sum(steps) <= size
    exported: list[int] = []  # export counts the same way, over its own pass
    open_capture(rotated[0], keep_tables=False).export(tmp_path, progress=exported.append)
    assert sum(exported) == sum(steps) and (tmp_path / "frames.parquet").exists()
