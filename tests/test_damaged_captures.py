"""Damaged captures, through the library and the CLI alike (#13).

A real relay stream (a snapshot, deltas, heartbeats, a catalog stream, indexes) is damaged in
every way a disk, a copy or a crash damages a file: truncation, bit flips, zeroed ranges,
garbage between records, a record dropped, repeated or swapped with its neighbour, a control
record with a body that does not decode. Whatever the damage:

* every record before it is kept, byte for byte;
* the damage is named at its record and byte offset: by the capture reader, the frame reader,
  replay, the frames table, and ``cbi1kit replay`` / ``inspect`` / ``export``;
* every intact record after it is read (resynchronisation), and the CLI counts what the
  library counts.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pytest
from cliutil import cli_run
from hypothesis import HealthCheck, example, given, settings, strategies as st
from test_capture import _rewrite
from test_stream_roundtrip import build_stream

from cbi1kit.analysis import frames_table, replay
from cbi1kit.capture import CaptureReader, CaptureWriter, RecordType, read_capture
from cbi1kit.capture._file import FILE_HEADER_LEN, STRUCTURAL, CaptureDamage, CaptureRecord
from cbi1kit.capture._items import FrameDamage
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD
from cbi1kit.errors import error_name

CATALOG_METHOD = "/dynamo.kvrelay.v1.KvEventRelay/WatchKvPoolCatalog"
STREAM = build_stream(expected_blocks=4096, warmup_events=100, deltas=10)


@dataclass(frozen=True)
class Span:
    index: int
    start: int
    end: int
    type: RecordType
    stream_id: int
    body: bytes


POOL_STREAM = 2  # the SubscribeKvPool stream's id (the catalog watch is 1)


def _write(path: Path) -> list[Span]:
    with CaptureWriter(path, index_every=5) as w:
        cat = w.open_stream("relay:50051", CATALOG_METHOD, b"")
        w.message(cat, b"\x08\x01")
        sid = w.open_stream("relay:50051", SUBSCRIBE_KV_POOL_METHOD, b"")
        assert sid == POOL_STREAM
        for m in STREAM.messages:
            w.message(sid, m.SerializeToString())
        w.close_stream(sid, status_code=14, status_name="UNAVAILABLE", details="restart")
        w.close_stream(cat)
    with CaptureReader(path) as reader:
        return [
            Span(r.index, r.offset, r.end_offset, r.type, r.stream_id, r.body)
            for r in reader.records(structural=True)
        ]


with tempfile.TemporaryDirectory(prefix="cbi1kit-damage-") as _tmp:
    _intact = Path(_tmp) / "intact.kvrcap"
    SPANS = _write(_intact)
    DATA = _intact.read_bytes()
DATA_SPANS = [s for s in SPANS if s.type not in STRUCTURAL]


@dataclass(frozen=True)
class Damage:
    """A damaged copy of the capture and what a reader must make of it.

    ``lost``: original records whose bytes the damage touched (they may be gone); ``first``:
    the record index and byte offset (in the damaged file) where the first damage is to be
    named; ``kind`` names the damage for failure messages.
    """

    kind: str
    data: bytes = field(repr=False)
    lost: frozenset[int]
    first: tuple[int, int] | None

    @property
    def in_body(self) -> bool:
        """A control record's body: intact as a record, damaged as what it says."""
        return self.kind.startswith("control")


def _touched(a: int, b: int) -> frozenset[int]:
    return frozenset(s.index for s in SPANS if s.start < b and a < s.end)


def _byte_damage(kind: str, a: int, b: int, data: bytes) -> Damage:
    hit = min((s for s in SPANS if s.start < b and a < s.end), key=lambda s: s.index)
    return Damage(kind, data, _touched(a, b), (hit.index, hit.start))


def truncate(cut: int) -> Damage:
    if any(s.start == cut for s in SPANS):  # nothing torn: a capture still being written
        return Damage("clean cut", DATA[:cut], _touched(cut, len(DATA)), None)
    return _byte_damage("truncate", cut, len(DATA), DATA[:cut])


def flip(bit: int) -> Damage:
    d = bytearray(DATA)
    d[bit // 8] ^= 1 << (bit % 8)
    return _byte_damage("flip", bit // 8, bit // 8 + 1, bytes(d))


def zero(a: int, n: int) -> Damage:
    b = min(len(DATA), a + n)
    if DATA[a:b] == bytes(b - a):
        return _byte_damage("zero", a, b, DATA)  # nothing changes: an identical copy
    return _byte_damage("zero", a, b, DATA[:a] + bytes(b - a) + DATA[b:])


def garbage(k: int, junk: bytes) -> Damage:
    s = SPANS[k]
    nxt = SPANS[k + 1]
    return Damage("garbage", DATA[: s.end] + junk + DATA[s.end :], frozenset(), (nxt.index, s.end))


def drop(k: int) -> Damage:
    s = SPANS[k]
    return Damage("drop", DATA[: s.start] + DATA[s.end :], frozenset({k}), (k, s.start))


def duplicate(k: int) -> Damage:
    s = SPANS[k]
    copy = DATA[s.start : s.end]
    return Damage("duplicate", DATA[: s.end] + copy + DATA[s.end :], frozenset(), (k + 1, s.end))


def swap(k: int) -> Damage:
    a, b = SPANS[k], SPANS[k + 1]
    data = DATA[: a.start] + DATA[b.start : b.end] + DATA[a.start : a.end] + DATA[b.end :]
    return Damage("swap", data, frozenset({k, k + 1}), (k, a.start))


def control(which: RecordType, body: bytes) -> Damage:
    """A STREAM_OPEN / STREAM_CLOSE whose body (same length, checksums valid) does not decode."""
    s = next(x for x in SPANS if x.type is which)
    body = (body * (len(s.body) // max(1, len(body)) + 1))[: len(s.body)]
    d = bytearray(DATA)
    _rewrite(d, s.start, body)
    return Damage(f"control {which.name}", bytes(d), frozenset({s.index}), (s.index, s.start))


last = len(SPANS) - 1
damages = st.one_of(
    st.integers(FILE_HEADER_LEN + 1, len(DATA) - 1).map(truncate),
    st.integers(FILE_HEADER_LEN * 8, len(DATA) * 8 - 1).map(flip),
    st.builds(zero, st.integers(FILE_HEADER_LEN, len(DATA) - 1), st.integers(1, 4096)),
    st.builds(garbage, st.integers(0, last - 1), st.binary(min_size=1, max_size=200)),
    st.integers(0, last - 1).map(drop),
    st.integers(0, last - 1).map(duplicate),
    st.integers(0, last - 2).map(swap),
    st.builds(
        control,
        st.sampled_from([RecordType.STREAM_OPEN, RecordType.STREAM_CLOSE]),
        st.sampled_from([b"\xff", b"{", b"\x00\x00\x00\x7f", b"[" * 8, b"9"]),
    ),
)


def _library(path: Path, damage: Damage) -> tuple[list[CaptureRecord], list[CaptureDamage]]:
    with CaptureReader(path) as reader:
        items = list(reader.items(structural=True))
    records = [i for i in items if isinstance(i, CaptureRecord)]
    found = [i for i in items if isinstance(i, CaptureDamage)]
    kept = {r.index: r.body for r in records if r.type not in STRUCTURAL}
    if damage.in_body:  # the capture reader does not read bodies: every record is there
        assert not found and len(kept) == len(DATA_SPANS)
        return records, found
    if damage.kind == "clean cut":  # docs/capture-format.md: a file without TRAILER is walked
        assert not found
        assert kept == {s.index: s.body for s in DATA_SPANS if s.index not in damage.lost}
        return records, found
    before = [s for s in DATA_SPANS if damage.first is None or s.index < damage.first[0]]
    after = [s for s in DATA_SPANS if s.index not in damage.lost and s not in before]
    for s in before:  # every record before the damage, byte for byte
        assert kept.get(s.index) == s.body, (damage.kind, "lost before the damage", s.index)
    for s in after:  # every intact record after it, read after resynchronisation
        if damage.kind == "zero" and damage.data == DATA:
            break
        assert kept.get(s.index) == s.body, (damage.kind, "not read after the damage", s.index)
    if damage.data != DATA and damage.first is not None:
        assert found, (damage.kind, "no damage reported")
        named = (found[0].record_index, found[0].offset)
        if damage.kind == "swap":  # the later record comes first: a gap at a, then a repeat
            assert named[1] == damage.first[1], (damage.kind, named, damage.first)
        else:
            assert named == damage.first, (damage.kind, named, damage.first)
    return records, found


def _cut_before(damage: Damage, span: Span) -> bool:
    """A truncation before ``span``: nothing after the cut can be read."""
    return damage.kind == "truncate" and damage.first is not None and span.index > damage.first[0]


relaxed = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(relaxed, max_examples=300)
@given(damage=damages)
def test_the_capture_reader_keeps_names_and_resyncs(damage: Damage) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "damaged.kvrcap"
        path.write_bytes(damage.data)
        _library(path, damage)


def _frames_then_damage(path: Path) -> tuple[Counter[bytes], list[FrameDamage]]:
    frames: Counter[bytes] = Counter()
    found: list[FrameDamage] = []
    for item in read_capture(path, damage="report"):
        if isinstance(item, FrameDamage):
            found.append(item)
        else:
            frames[item.raw] += 1
    return frames, found


_CATALOG_CLOSE = next(
    x for x in SPANS if x.type is RecordType.STREAM_CLOSE and x.stream_id != POOL_STREAM
)


@settings(relaxed, max_examples=40)
@given(damage=damages)
# found by this test: a byte of the catalog stream's close record zeroed. The frame reader and
# the table named the damage, replay took it for the catalog's business and said nothing
@example(damage=zero(_CATALOG_CLOSE.end - len(_CATALOG_CLOSE.body), 1))
def test_every_layer_and_the_cli_agree_on_the_damage(damage: Damage) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "damaged.kvrcap"
        path.write_bytes(damage.data)
        _, found = _library(path, damage)
        # the frame reader: every intact message of the pool stream, in order, byte for byte
        frames, frame_damage = _frames_then_damage(path)
        for s in DATA_SPANS:
            pool = s.type is RecordType.MESSAGE and s.stream_id == POOL_STREAM
            if pool and s.index not in damage.lost and not _cut_before(damage, s):
                assert frames[s.body] >= 1, (damage.kind, "message not read", s.index)
        where = f"record {found[0].record_index} at byte offset {found[0].offset}" if found else ""
        if found:
            named = [str(d.error) for d in frame_damage]
            assert any(where in text for text in named) or not frame_damage, (where, named)
        library = replay(path)
        table = frames_table(path).collect()
        errors = table.filter(pl.col("kind") == "SOURCE_ERROR")["validation_error"].to_list()
        # the CLI: the library's count, exit 1 on damage, and the damage named where it is
        code, out, err = cli_run("replay", str(path), "--json", "--no-progress")
        assert "Traceback" not in err
        report = json.loads(out)
        assert report["frames"] == library.frames
        assert code == (0 if library.ok else 1)
        code, out, err = cli_run("inspect", str(path), "--no-progress")
        assert "Traceback" not in err and code in (0, 1)
        if found:
            sourced = [v["reason"] for v in report["violations"] if v["rule"] == "SourceDamaged"]
            assert code == 1 and where in out, (damage.kind, where)
            assert any(where in r for r in sourced) or frame_damage == [], (where, sourced)
            assert any(where in e for e in errors) or frame_damage == [], (where, errors)
            export = Path(tmp) / "tables"
            code, _, err = cli_run("export", str(path), "-o", str(export), "--no-progress")
            assert code == 1 and len(err.strip().splitlines()) == 1
            assert (export / "frames.parquet").exists()


def test_a_catalog_update_that_does_not_decode_is_no_damage_to_the_frames(tmp_path: Path) -> None:
    """An intact catalog record whose bytes are no ``KvPoolCatalogUpdate``: the catalog
    reader's business (``read_capture_items`` reports it), not the frames'. No
    frame layer names it, replay keeps it aside, and ``cbi1kit replay`` exits 0."""
    from cbi1kit.capture import read_capture_items

    update = next(x for x in SPANS if x.type is RecordType.MESSAGE and x.stream_id != POOL_STREAM)
    data = bytearray(DATA)
    _rewrite(data, update.start, b"\xff" * len(update.body))  # a tag of field 0: no message
    path = tmp_path / "catalog.kvrcap"
    path.write_bytes(bytes(data))
    reported = [
        i for i in read_capture_items(path, damage="report")
        if isinstance(i, FrameDamage)
    ]  # fmt: skip
    assert len(reported) == 1 and "KvPoolCatalogUpdate" in str(reported[0].error)
    assert _frames_then_damage(path)[1] == []
    table = frames_table(path).collect()
    assert table.filter(pl.col("kind") == "SOURCE_ERROR").height == 0
    library = replay(path)
    assert library.ok and not library.violations
    # kept aside, and said: the catalog's record, not the frames'
    assert [d.index for d in library.plane_damage] == [reported[0].index]
    code, out, err = cli_run("replay", str(path), "--no-progress")
    assert code == 0, err
    assert "valid: no violations" in out
    said = " ".join(out.split())
    first = "planes: 1 catalog or readiness update(s) that do not decode, first: "
    first += error_name(reported[0].error)
    assert first in said
    code, out, err = cli_run("replay", str(path), "--no-progress", "--json")
    assert code == 0, err
    said = json.loads(out)["plane_damage"]
    assert said == [
        {
            "record_index": reported[0].error.record_index,
            "error": f"{error_name(reported[0].error)}: {reported[0].error}",
        }
    ]


def test_a_cut_at_a_record_boundary_reads_as_a_capture_still_being_written(tmp_path: Path) -> None:
    """Every record before the cut, nothing reported, exit 0: the file is a valid prefix."""
    damage = truncate(SPANS[5].start)
    assert damage.kind == "clean cut" and damage.lost
    path = tmp_path / "cut.kvrcap"
    path.write_bytes(damage.data)
    _library(path, damage)
    code, _out, err = cli_run("replay", str(path), "--no-progress")
    assert code == 0 and "Traceback" not in err


@pytest.mark.parametrize(
    "make",
    [
        lambda: truncate(SPANS[4].start + 10),
        lambda: flip(SPANS[3].start * 8 + 48 * 8 + 5),
        lambda: zero(SPANS[5].start, 40),
        lambda: garbage(2, random.Random(1).randbytes(64)),
        lambda: drop(4),
        lambda: duplicate(4),
        lambda: swap(4),
        lambda: control(RecordType.STREAM_OPEN, b"\xff"),
        lambda: control(RecordType.STREAM_CLOSE, b"{"),
    ],
    ids=["truncate", "flip", "zero", "garbage", "drop", "duplicate", "swap", "open", "close"],
)
def test_each_kind_of_damage_is_seen(make: Callable[[], Damage], tmp_path: Path) -> None:
    """The hypothesis suite may draw any mix; this pins one case of every kind."""
    damage = make()
    path = tmp_path / "damaged.kvrcap"
    path.write_bytes(damage.data)
    _library(path, damage)
    _, found = _frames_then_damage(path)
    assert damage.first is not None and found
    assert f"at byte offset {damage.first[1]}" in str(found[0].error)
    code, _out, err = cli_run("replay", str(path), "--no-progress")
    assert code == 1 and "Traceback" not in err


@pytest.mark.parametrize("engine", ["compiled", "reference"])
def test_a_damaged_record_is_blamed_on_its_own_stream(tmp_path: Path, engine: str) -> None:
    """A record whose header is intact but whose body fails its check names its own stream,
    not the stream of the message read before it (two pools' streams, interleaved)."""
    from cbi1kit.capture import CaptureWriter
    from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD

    a, b = build_stream(deltas=3, seed=1), build_stream(deltas=3, seed=2, dc_id=0xD2)
    path = tmp_path / "two.kvrcap"
    with CaptureWriter(path) as w:
        sa = w.open_stream("relay-a", SUBSCRIBE_KV_POOL_METHOD, b"")
        sb = w.open_stream("relay-b", SUBSCRIBE_KV_POOL_METHOD, b"")
        w.message(sa, a.messages[0].SerializeToString())
        w.message(sb, b.messages[0].SerializeToString())  # the one to damage
        for m in a.messages[1:]:
            w.message(sa, m.SerializeToString())
    with CaptureReader(path) as reader:
        victim = [r for r in reader.records() if r.stream_id == sb and r.type.name == "MESSAGE"]
    data = bytearray(path.read_bytes())
    data[victim[0].end_offset - 8] ^= 0x01
    path.write_bytes(bytes(data))
    report = replay(path, engine=engine)
    damaged = [v for v in report.violations if v.rule == "SourceDamaged"]
    assert len(damaged) == 1 and "body checksum mismatch" in damaged[0].reason
    assert damaged[0].stream_id == sb != sa


def test_a_frame_torn_at_the_end_uses_up_its_index_as_a_flipped_one_does(tmp_path: Path) -> None:
    """A pool MESSAGE cut mid-body (its header verified) is a lost frame: it takes its frame
    index, so replay, the frames table and a body flip of the same record all count it."""
    last = max(
        (s for s in SPANS if s.type is RecordType.MESSAGE and s.stream_id == POOL_STREAM),
        key=lambda s: s.index,
    )
    frames_before = sum(
        1
        for s in SPANS
        if s.type is RecordType.MESSAGE and s.stream_id == POOL_STREAM and s.index < last.index
    )
    torn, flipped = tmp_path / "torn.kvrcap", tmp_path / "flipped.kvrcap"
    torn.write_bytes(DATA[: last.end - 3])
    body_byte = last.end - 1
    flipped.write_bytes(DATA[:body_byte] + bytes([DATA[body_byte] ^ 1]) + DATA[last.end :])
    for path in (torn, flipped):
        (damage,) = [i for i in read_capture(path, damage="report") if isinstance(i, FrameDamage)]
        assert (damage.index, damage.frames) == (frames_before, 1), path.name
        report = replay(path)
        assert report.frames == frames_before + 1, path.name
        assert report.violations[-1].frame_index == frames_before
        assert frames_table(path).collect().height == report.frames
