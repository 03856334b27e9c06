"""``ck.open``: one scan serves every table and the replay, a kept capture gives what the
one-pass functions give (both engines, intact and damaged captures), and ``refresh`` follows a
file as it grows to what the whole file gives."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import xxhash
from errorcheck import raises_variant
from hypothesis import HealthCheck, given, settings, strategies as st
from test_damaged_captures import DATA, SPANS, Damage, damages

import cbi1kit as ck
import cbi1kit.capture._scan as scan_module
from cbi1kit.analysis import frames_table, images_table, replay, snapshots_table
from cbi1kit.analysis._replay import ReplayReport
from cbi1kit.capture._file import FILE_HEADER_LEN, RecordType
from cbi1kit.capture._reader import CaptureReader
from cbi1kit.data import sample_capture
from cbi1kit.errors import CaptureError

SAMPLE = sample_capture()
ENGINES = ["compiled", "reference"]
relaxed = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def summary(report: ReplayReport) -> tuple[Any, ...]:
    """What a replay found: its counts, violations, and each lane's end."""
    lanes = [
        (
            lane.final_sequence,
            None if lane.final_lane is None else xxhash.xxh3_64_hexdigest(lane.final_lane),
        )
        for lane in report.lanes
    ]
    violations = [v.describe() for v in report.violations]
    return report.frames, report.counts, violations, lanes


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every file scan started from the file's start, by path."""
    started: list[str] = []
    init = scan_module.FileScan.__init__

    def counting(self: scan_module.FileScan, path: Any, **kw: Any) -> None:
        started.append(str(path))
        init(self, path, **kw)

    monkeypatch.setattr(scan_module.FileScan, "__init__", counting)
    return started


def test_one_scan_serves_every_table_and_the_replay(scans: list[str]) -> None:
    c = ck.open(SAMPLE)
    for _ in range(2):  # asking again computes nothing again
        frames = c.frames.collect()
        images = c.images.collect()
        snapshots = c.snapshots.collect()
        report = c.replay()
        c.view()
        c.stats()
        c.lane(at=report.lanes[0].final_sequence)
    assert scans == [str(SAMPLE)] and c.scans == 1
    assert c.replay() is report
    assert frames.height == report.frames and images.height and snapshots.height


def test_without_keeping_tables_each_pass_scans_again(scans: list[str]) -> None:
    c = ck.open(SAMPLE, keep_tables=False)
    assert c.frames.collect().equals(c.frames.collect())
    assert len(scans) == 2


def _same(path: Path, engine: str) -> None:
    """A kept capture's tables and replay against the one-pass functions, on ``engine``."""
    c = ck.open(path)
    assert c.frames_table(engine=engine).collect().equals(frames_table(path).collect())
    kept = c.tables(engine=engine)
    assert kept.images_df().equals(images_table(path, engine=engine))
    assert kept.snapshots_df().equals(snapshots_table(path, engine=engine))
    assert summary(c.replay(engine=engine)) == summary(replay(path, engine=engine))
    assert summary(c.replay(engine=engine)) == summary(c.replay(engine="compiled"))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_kept_capture_gives_what_the_functions_give(engine: str) -> None:
    _same(SAMPLE, engine)


@settings(relaxed, max_examples=40)
@given(damage=damages, engine=st.sampled_from(ENGINES))
def test_damaged_captures_read_the_same_kept_or_not(damage: Damage, engine: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "damaged.kvrcap"
        path.write_bytes(damage.data)
        _same(path, engine)


def _grow(path: Path, data: bytes, cuts: list[int], *, follow: bool = False) -> ck.Capture:
    """``data`` written to ``path`` up to each cut in turn, the capture refreshed after each."""
    path.write_bytes(data[: cuts[0]])
    c = ck.open(path, follow=follow)
    c.frames.collect()
    c.images.collect()
    c.replay()
    for cut in [*cuts[1:], len(data)]:
        with path.open("ab") as f:
            f.write(data[path.stat().st_size : cut])
        c.refresh()
    return c


_BOUNDARIES = [s.start for s in SPANS]


@settings(relaxed, max_examples=60)
@given(
    cuts=st.lists(st.integers(FILE_HEADER_LEN, len(DATA) - 1), min_size=1, max_size=4),
    boundary=st.booleans(),
    follow=st.booleans(),
)
def test_a_growing_capture_refreshes_to_the_whole(
    cuts: list[int], boundary: bool, follow: bool
) -> None:
    """Cut anywhere (mid-record, mid-header, at a record), refreshed after each append: the
    frames, images, snapshots and replay equal those of the whole file. Opened to follow, or
    cut at records, it is never scanned from its start again."""
    if boundary:  # a recorder flushes whole records
        cuts = [min(_BOUNDARIES, key=lambda b, c=c: abs(b - c)) for c in cuts]
    cuts = sorted(set(cuts))
    with tempfile.TemporaryDirectory() as tmp:
        whole = Path(tmp) / "whole.kvrcap"
        whole.write_bytes(DATA)
        c = _grow(Path(tmp) / "grow.kvrcap", DATA, cuts, follow=follow)
        assert (
            c.frames.collect()
            .drop("source_offset")
            .equals(frames_table(whole).collect().drop("source_offset"))
        )
        assert c.images.collect().equals(images_table(whole))
        assert c.snapshots.collect().equals(snapshots_table(whole))
        assert summary(c.replay()) == summary(replay(whole))
        if boundary or follow:  # every refresh read on, none from the start
            assert c.scans == 1


def test_refresh_reads_only_what_was_appended(tmp_path: Path) -> None:
    data = SAMPLE.read_bytes()
    half = min(s for s in _sample_boundaries() if s >= len(data) // 2)
    path = tmp_path / "grow.kvrcap"
    path.write_bytes(data[:half])
    c = ck.open(path)
    before = c.replay().frames
    assert c.refresh() == 0  # nothing new
    with path.open("ab") as f:
        f.write(data[half:])
    got = c.refresh()
    assert got > 0 and c.scans == 1
    assert c.replay().frames == ck.replay(SAMPLE).frames > before
    assert c.frames.collect().equals(frames_table(SAMPLE).collect())


def _sample_boundaries() -> list[int]:
    from cbi1kit.capture._scan import FileScan, Stretch

    scan = FileScan(SAMPLE)
    try:
        return [int(o) for s in scan.scan() if isinstance(s, Stretch) for o in s.cols[0].tolist()]
    finally:
        scan.close()


def test_a_capture_that_keeps_nothing_cannot_be_refreshed() -> None:
    with raises_variant(CaptureError, "Usage", match="keep_tables=True"):
        ck.open(SAMPLE, keep_tables=False).refresh()


def test_a_followed_capture_may_not_exist_yet(tmp_path: Path) -> None:
    """Opened to follow before the recorder has made the file: nothing yet, then the file."""
    path = tmp_path / "later.kvrcap"
    c = ck.open(path, follow=True)
    c.refresh()
    assert c.replay().frames == 0
    path.write_bytes(SAMPLE.read_bytes())
    c.refresh()
    assert summary(c.replay()) == summary(replay(SAMPLE))
    assert (
        c.frames.collect()
        .drop("source_offset")
        .equals(frames_table(SAMPLE).collect().drop("source_offset"))
    )


def test_a_path_that_is_no_source_raises_at_open(tmp_path: Path) -> None:
    """A typo, a folder, an empty or a foreign file is refused by ``ck.open`` itself, as any
    reader's open refuses it (not a Capture of nothing that fails later)."""
    with pytest.raises(FileNotFoundError):
        ck.open(tmp_path / "nosuch.kvrcap")
    with pytest.raises(IsADirectoryError):
        ck.open(tmp_path)
    empty, foreign = tmp_path / "empty.kvrcap", tmp_path / "notes.txt"
    empty.write_bytes(b"")
    foreign.write_text("not a capture\n")
    for path, why in ((empty, "empty input"), (foreign, "unrecognised input")):
        with raises_variant(CaptureError, "Unreadable", match=why):
            ck.open(path)


def test_a_frame_is_numbered_apart_from_the_capture_record_that_holds_it() -> None:
    """One meaning each: ``frame_index`` counts FilterUpdate frames (tables, events,
    violations, ``frames``); "record" is a kvrcap record (capture errors, ``inspect``)."""
    c = ck.open(SAMPLE)
    frames = c.frames.collect()
    assert frames.columns[0] == "frame_index"
    assert frames["frame_index"].to_list() == list(range(frames.height))
    assert c.replay().frames == frames.height
    with CaptureReader(SAMPLE) as reader:  # the first frame's record comes after the catalog's
        held = next(r for r in reader.records() if r.type is RecordType.MESSAGE)
    assert held.index > frames["frame_index"][0] == 0
    bad = ck.replay(Path(__file__).parent / "vectors/cbi1/frames/valid/delta-one-image.bin")
    assert bad.violations[0].describe().startswith("frame 0 ")


def test_a_captures_repr_counts_the_records_scanned() -> None:
    """Records, as ``inspect`` counts them (not the scan's spans: the sample's 5,583 frames are
    a few spans), and none before the first pass."""
    records = sum(ck.open(sample_capture()).overview().records.values())
    cap = ck.open(sample_capture())
    assert repr(cap).endswith(": 0 records scanned>")
    cap.replay()
    assert repr(cap) == f"<cbi1kit.Capture capture sample.kvrcap: {records:,} records scanned>"
