"""The one scanner of the kvrcap format: its compiled walk against the Python one, windows cut
anywhere, damage located and read past, and the index the writer keeps (block checks)."""

from __future__ import annotations

import itertools
import random
import signal
from pathlib import Path

import polars as pl
import pytest
import xxhash
from hypothesis import given, settings, strategies as st
from test_capture import write_sample
from test_stream_roundtrip import SUBSCRIBE_KV_POOL_METHOD, Stream, build_stream

import cbi1kit.capture._scan as scan_module
from cbi1kit.analysis._shorthands import frames_batches, frames_table
from cbi1kit.capture._file import (
    FILE_HEADER_LEN,
    RECORD_HEADER_LEN,
    CaptureDamage,
    RecordType,
    read_index,
)
from cbi1kit.capture._reader import CaptureReader
from cbi1kit.capture._readers import FrameDamage, read_capture
from cbi1kit.capture._scan import FileScan
from cbi1kit.capture._walk import walk_python
from cbi1kit.capture._writer import CaptureWriter


def _check(data: bytes) -> int:
    return xxhash.xxh3_64_intdigest(data) & 0xFFFFFFFF


def _spans(path: Path) -> list[tuple[int, int, int, RecordType]]:
    with CaptureReader(path) as reader:
        return [(r.index, r.offset, r.end_offset, r.type) for r in reader.records(structural=True)]


def _stream_capture(
    path: Path, stream: Stream, *, index_every: int = 4, catalog: bool = True
) -> Path:
    """The round-trip stream's messages (plus a catalog stream), a small index block size."""
    with CaptureWriter(path, index_every=index_every) as w:
        cat = 0
        if catalog:
            cat = w.open_stream("relay", "/dynamo.kvrelay.v1.KvEventRelay/WatchKvPoolCatalog", b"")
            w.message(cat, b"\x08\x01", recv_unix_ns=1, recv_mono_ns=1)
        sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
        for i, m in enumerate(stream.messages):
            w.message(sid, m.SerializeToString(), recv_unix_ns=10 + i, recv_mono_ns=20 + i)
            if i == 5:
                w.mark("half way")
        w.close_stream(sid)
        if catalog:
            w.close_stream(cat)
    return path


@pytest.fixture(scope="module")
def stream() -> Stream:
    return build_stream(deltas=12, heartbeat_every=3, seed=11)


@pytest.fixture(scope="module")
def indexed(stream: Stream, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _stream_capture(tmp_path_factory.mktemp("ci") / "s.kvrcap", stream)


def _scan(path: Path) -> pl.DataFrame:
    return frames_table(path).collect()


@pytest.fixture(params=["compiled", "python"])
def walk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every scan test on the compiled walk and on its Python twin."""
    if request.param == "python":
        monkeypatch.setattr(scan_module, "load_walk", lambda: walk_python)
    return str(request.param)


def test_block_checks_cover_exactly_the_records_of_each_index(indexed: Path) -> None:
    data = indexed.read_bytes()
    spans = _spans(indexed)
    index = read_index(data)
    assert index is not None and len(index.blocks) >= 3
    listed: list[int] = []
    for block in index.blocks:
        assert block.block_check == _check(data[block.start : block.index_offset])
        listed += [*block.offsets.tolist(), block.index_offset]
    # index-based framing equals the walked chain (the TRAILER ends it)
    assert [*listed, index.trailer_offset] == [s[1] for s in spans]
    assert spans[-1][3] is RecordType.TRAILER and index.trailer_index == spans[-1][0]


def test_a_capture_with_an_index_reads_as_one_without(
    stream: Stream, indexed: Path, tmp_path: Path, walk: str
) -> None:
    plain = _stream_capture(tmp_path / "plain.kvrcap", stream, index_every=0)
    fast, walked = _scan(indexed), _scan(plain)
    assert fast.height == len(stream.messages)
    assert fast["validation_error"].null_count() == fast.height
    assert fast.drop("source_offset").equals(walked.drop("source_offset"))
    # source offsets are the records' own
    msgs = [s[1] for s in _spans(indexed) if s[3] is RecordType.MESSAGE][1:]  # not the catalog
    assert fast["source_offset"].to_list() == msgs


def _drop_block_checks(data: bytearray) -> None:
    """Make every INDEX look like an older writer's: no flag, reserved field 0."""
    index = read_index(bytes(data))
    assert index is not None
    for block in index.blocks:
        o = block.index_offset
        data[o + 5] = 0
        body = o + RECORD_HEADER_LEN
        data[body + 20 : body + 24] = b"\0\0\0\0"
        blen = block.index_end - body
        data[o + 40 : o + 44] = _check(bytes(data[body : body + blen])).to_bytes(4, "little")
        data[o + 44 : o + 48] = _check(bytes(data[o : o + 44])).to_bytes(4, "little")


def test_old_format_index_without_block_checks_still_reads(indexed: Path, tmp_path: Path) -> None:
    data = bytearray(indexed.read_bytes())
    _drop_block_checks(data)
    old = tmp_path / "old.kvrcap"
    old.write_bytes(bytes(data))
    index = read_index(bytes(data))
    assert index is not None and all(b.block_check is None for b in index.blocks)
    with CaptureReader(old) as reader:
        assert [type(i) for i in reader.items()].count(CaptureDamage) == 0
    assert _scan(old).equals(_scan(indexed))
    # appending to it: the new INDEX has a block check, the old ones keep none
    with CaptureWriter(old, mode="a", index_every=4) as w:
        w.mark("appended")
    index = read_index(old.read_bytes())
    assert index is not None and index.blocks[-1].block_check is not None
    assert index.blocks[0].block_check is None
    raw = old.read_bytes()
    last = index.blocks[-1]
    assert last.block_check == _check(raw[last.start : last.index_offset])


def test_append_mode_block_check_covers_the_recovered_block(tmp_path: Path) -> None:
    path = tmp_path / "a.kvrcap"
    write_sample(path, n_messages=9, index_every=4)
    with CaptureWriter(path, mode="a", index_every=4) as w:
        w.mark("more")
        w.mark("and more")
    raw = path.read_bytes()
    index = read_index(raw)
    assert index is not None
    for block in index.blocks:
        assert block.block_check == _check(raw[block.start : block.index_offset])


def _items_view(path: Path) -> tuple[list[tuple[int, int, str]], list[int]]:
    """Damage (record, offset, reason) and MESSAGE offsets of the frame stream, from the reader."""
    frames = []
    damage = []
    for item in read_capture(path, damage="report"):
        if isinstance(item, FrameDamage):
            damage.append((item.error.record_index, item.error.offset, item.error.reason))
        else:
            frames.append(item.source_offset)
    return damage, frames


@settings(max_examples=150, deadline=None)
@given(bit=st.integers(min_value=0))
def test_bit_flip_in_a_block_is_located_at_its_record(indexed: Path, bit: int) -> None:
    data = bytearray(indexed.read_bytes())
    pos = FILE_HEADER_LEN * 8 + bit % ((len(data) - FILE_HEADER_LEN) * 8)
    data[pos // 8] ^= 1 << (pos % 8)
    flipped = indexed.with_name(f"flip-{pos}.kvrcap")
    flipped.write_bytes(bytes(data))
    try:
        damage, frames = _items_view(flipped)
        df = _scan(flipped)
        with CaptureReader(flipped) as reader:
            items = list(reader.items())
    finally:
        flipped.unlink()
    reported = [i for i in items if isinstance(i, CaptureDamage)]
    assert len(reported) == 1  # a single flip is one damaged record, exactly located
    assert [d[:2] for d in damage] == [(d.record_index, d.offset) for d in reported]
    errors = df.filter(pl.col("kind") == "SOURCE_ERROR")
    assert errors["source_offset"].to_list() == [d.offset for d in reported]
    assert [
        f"record {d.record_index} at byte offset {d.offset}" in e
        for d, e in zip(reported, errors["validation_error"], strict=True)
    ] == [True]
    ok = df.filter(pl.col("kind") != "SOURCE_ERROR")
    assert ok["source_offset"].to_list() == frames
    # frame numbers as read_capture(damage="report") gives them
    idx = [(i.index, i.source_offset) for i in read_capture_report(indexed, data)]
    assert [(r, o) for r, o in zip(df["frame_index"], df["source_offset"], strict=True)] == idx


def read_capture_report(path: Path, data: bytearray) -> list[object]:
    tmp = path.with_name("report.kvrcap")
    tmp.write_bytes(bytes(data))
    try:
        return list(read_capture(tmp, damage="report"))
    finally:
        tmp.unlink()


def test_frames_table_reads_on_past_damage(stream: Stream, indexed: Path, tmp_path: Path) -> None:
    spans = _spans(indexed)
    full = frames_table(indexed).collect()
    msgs = [s for s in spans if s[3] is RecordType.MESSAGE][1:]
    data = bytearray(indexed.read_bytes())
    victims = [msgs[3], msgs[9]]
    for _k, start, end, _t in victims:  # two body flips
        data[(start + end) // 2] ^= 0x40
    path = tmp_path / "d.kvrcap"
    path.write_bytes(bytes(data))
    df = pl.concat(list(frames_batches(path, batch_records=4)))
    bad = df.filter(pl.col("kind") == "SOURCE_ERROR")
    assert bad["source_offset"].to_list() == [v[1] for v in victims]
    assert all("body checksum mismatch" in e for e in bad["validation_error"])
    good = df.filter(pl.col("kind") != "SOURCE_ERROR")
    lost = {v[1] for v in victims}
    assert good.equals(full.filter(~pl.col("source_offset").is_in(list(lost))))
    # each damaged message uses up its frame number, as in replay
    assert bad["frame_index"].to_list() == [3, 9]
    # the torn tail of a file cut inside a late record is the last row; all before it is read
    cut = tmp_path / "cut.kvrcap"
    cut.write_bytes(bytes(indexed.read_bytes()[: msgs[-2][1] + 60]))
    df = frames_table(cut).collect()
    assert df["kind"][-1] == "SOURCE_ERROR" and "Truncated" in df["validation_error"][-1]
    assert df.head(df.height - 1).equals(full.head(df.height - 1))


def test_an_index_that_disagrees_with_the_records_is_damage(
    indexed: Path, tmp_path: Path, walk: str
) -> None:
    """An INDEX (checksums intact) that lists a position that is not a record: the INDEX is
    reported where it is, and every frame row is as before."""
    from cbi1kit.capture._file import _INDEX_HEAD

    data = bytearray(indexed.read_bytes())
    index = read_index(bytes(data))
    assert index is not None and len(index.blocks) >= 3
    block = index.blocks[2]
    body = block.index_offset + RECORD_HEADER_LEN
    at = body + _INDEX_HEAD.size + 8 * 1  # the block's second record, one byte later
    data[at : at + 8] = (int(block.offsets[1]) + 1).to_bytes(8, "little")
    blen = block.index_end - body
    o = block.index_offset
    data[o + 40 : o + 44] = _check(bytes(data[body : body + blen])).to_bytes(4, "little")
    data[o + 44 : o + 48] = _check(bytes(data[o : o + 44])).to_bytes(4, "little")
    moved = tmp_path / "moved.kvrcap"
    moved.write_bytes(bytes(data))
    relisted = read_index(bytes(data))
    assert relisted is not None and relisted.blocks[2].block_check == block.block_check
    df = _scan(moved)
    errors = df.filter(pl.col("kind") == "SOURCE_ERROR")
    assert errors.height == 1 and "INDEX record disagrees" in errors["validation_error"][0]
    assert df.filter(pl.col("kind") != "SOURCE_ERROR").equals(_scan(indexed))


@pytest.mark.parametrize("part", [48, 61, 200, 1 << 20])
def test_windows_cut_anywhere_give_the_same_rows(
    indexed: Path, monkeypatch: pytest.MonkeyPatch, part: int, walk: str
) -> None:
    """The file read a window of ``part`` bytes at a time (so records and spans split at every
    kind of seam, and a record larger than a window is read whole) gives the same items."""
    whole = _scan(indexed)
    whole_items = _items_view(indexed)
    monkeypatch.setattr(scan_module, "_PART", part)
    assert _scan(indexed).equals(whole)
    assert _items_view(indexed) == whole_items
    with CaptureReader(indexed) as reader:
        assert [r.offset for r in reader.records(structural=True)] == [
            s[1] for s in _spans(indexed)
        ]


def _follow(path: Path, data: bytes, cuts: list[int]) -> list[tuple[int, int]]:
    """Records ``(offset, type)`` of ``data`` written to ``path`` in pieces ending at ``cuts``,
    scanned after each piece without ``final``, then once with it."""
    path.write_bytes(b"")
    seen: list[tuple[int, int]] = []
    scan = FileScan(path)
    signal.signal(signal.SIGALRM, _spun)
    signal.setitimer(signal.ITIMER_REAL, 20.0)
    try:
        for cut in [*cuts, len(data)]:
            with path.open("r+b") as f:
                f.seek(0, 2)
                f.write(data[f.tell() : cut])
            for item in itertools.islice(scan.scan(final=cut == len(data)), 10_000):
                assert isinstance(item, scan_module.Stretch), item
                seen += zip(item.cols[0].tolist(), item.cols[1].tolist(), strict=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        scan.close()
    return seen


def _spun(_signum: int, _frame: object) -> None:
    raise TimeoutError("the scan did not return")


@pytest.mark.parametrize("part", [61, 1 << 20])
def test_a_growing_file_scans_as_the_whole(
    indexed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, part: int, walk: str
) -> None:
    """A file cut mid-record (a record still being written) stops the scan there, without
    damage and without spinning; the rest, once appended, reads as the whole file does."""
    monkeypatch.setattr(scan_module, "_PART", part)
    data = indexed.read_bytes()
    whole = _follow(tmp_path / "whole.kvrcap", data, [])
    assert whole and whole[0][0] == FILE_HEADER_LEN
    rng = random.Random(7)
    for _ in range(6):
        cuts = sorted(rng.sample(range(1, len(data)), 3))
        assert _follow(tmp_path / "grow.kvrcap", data, cuts) == whole, cuts


@pytest.mark.parametrize("sizes", [(30, 30), (100, 10, 100), (100, 100, 0), (10, 100, 30)])
def test_a_stretch_stays_whole_while_the_next_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sizes: tuple[int, ...], walk: str
) -> None:
    """Records larger than a window (read into it whole): each stretch's bytes are still the
    file's when the next stretch comes (``FrameSpan``'s contract), also after a window that
    held only the start of a record."""
    monkeypatch.setattr(scan_module, "_PART", 64)
    path = tmp_path / "big.kvrcap"
    with CaptureWriter(path, index_every=0) as w:
        for n in sizes:
            w.write(RecordType.MESSAGE, bytes([7]) * n, stream_id=1)
    data = path.read_bytes()
    scan = FileScan(path)
    seen: list[scan_module.Stretch] = []
    try:
        for item in scan.scan():
            assert isinstance(item, scan_module.Stretch)
            for prev in seen[-1:]:
                end = int(prev.cols[0][-1]) - prev.base + RECORD_HEADER_LEN + int(prev.cols[3][-1])
                assert bytes(prev.buf[:end]) == data[prev.base : prev.base + end]
            seen.append(item)
    finally:
        scan.close()
    assert sum(len(s) for s in seen) >= len(sizes)
