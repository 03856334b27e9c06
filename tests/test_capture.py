"""kvrcap round trip, damage detection at the right record, and following a live writer."""

from __future__ import annotations

import random
import re
import threading
import time
from pathlib import Path

import pytest
from errorcheck import is_variant, raises_variant
from hypothesis import HealthCheck, given, settings, strategies as st

from cbi1kit.capture._file import (
    FILE_HEADER_LEN,
    FILE_MAGIC,
    RECORD_HEADER_LEN,
    STRUCTURAL,
    CaptureDamage,
    CaptureRecord,
    RecordType,
    decode_stream_close,
    decode_stream_open,
    is_capture_file,
)
from cbi1kit.capture._reader import CaptureReader
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.errors import CaptureError

METHOD = "/dynamo.kvrelay.v1.KvEventRelay/SubscribeKvPool"


def _clock() -> tuple[int, int]:
    _clock.n += 1  # type: ignore[attr-defined]
    return 1_700_000_000_000_000_000 + _clock.n, 10_000 + _clock.n  # type: ignore[attr-defined]


_clock.n = 0  # type: ignore[attr-defined]


def write_sample(
    path: Path, n_messages: int = 6, seed: int = 7, *, index_every: int = 0
) -> list[bytes]:
    """A small capture; without an index by default, so its last record is a stream close."""
    rng = random.Random(seed)
    bodies = [rng.randbytes(rng.choice([0, 1, 50, 300, 5000])) for _ in range(n_messages)]
    with CaptureWriter(path, clock=_clock, index_every=index_every) as w:
        sid = w.open_stream("dns:///relay:50051", METHOD, b"\x0a\x04gv-1", metadata=[("a", "b")])
        cat = w.open_stream(
            "dns:///relay:50051", "/dynamo.kvrelay.v1.KvEventRelay/WatchKvPoolCatalog", b""
        )
        w.message(cat, b"catalog-bytes")
        for body in bodies:
            w.message(sid, body, recv_unix_ns=(1 << 64) - 1, recv_mono_ns=5)
        w.mark("phase 2")
        w.close_stream(
            sid,
            status_code=14,
            status_name="UNAVAILABLE",
            details="retired",
            error_reason="RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE",
            trailing_metadata=[("kv-relay-error-reason", "X")],
        )
        w.close_stream(cat)
    return bodies


def all_records(path: Path) -> list[CaptureRecord]:
    with CaptureReader(path) as reader:
        return list(reader.records())


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    bodies = write_sample(path)
    recs = all_records(path)
    assert [r.index for r in recs] == list(range(len(recs)))
    assert recs[0].type is RecordType.SCHEMA and recs[0].offset == FILE_HEADER_LEN
    opened = decode_stream_open(recs[1].body)
    assert (opened.method, opened.request, opened.metadata) == (
        METHOD,
        b"\x0a\x04gv-1",
        (("a", "b"),),
    )
    sid = recs[1].stream_id
    msgs = [r for r in recs if r.type is RecordType.MESSAGE and r.stream_id == sid]
    assert [m.body for m in msgs] == bodies
    assert all(m.recv_unix_ns == (1 << 64) - 1 and m.recv_mono_ns == 5 for m in msgs)
    closes = [decode_stream_close(r.body) for r in recs if r.type is RecordType.STREAM_CLOSE]
    assert closes[0].message_count == len(bodies) and closes[0].status_name == "UNAVAILABLE"
    assert closes[0].error_reason == "RELAY_ERROR_REASON_PUBLICATION_UNAVAILABLE"
    assert closes[1].message_count == 1
    data = path.read_bytes()
    for rec in recs:  # offsets point at the bytes; body_offset slices them zero-copy
        assert data[rec.body_offset : rec.end_offset] == rec.body
        assert data[rec.offset : rec.offset + 4] == b"KRec"


def _boundaries(path: Path) -> list[int]:
    return [FILE_HEADER_LEN] + [r.end_offset for r in all_records(path)]


def test_truncation_at_every_record_boundary_is_clean(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    write_sample(path)
    data = path.read_bytes()
    for k, cut in enumerate(_boundaries(path)):
        path.write_bytes(data[:cut])
        assert len(all_records(path)) == k


def test_truncation_inside_every_record_is_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    write_sample(path)
    data = path.read_bytes()
    bounds = _boundaries(path)
    for k in range(len(bounds) - 1):
        start, end = bounds[k], bounds[k + 1]
        for cut in sorted(
            {
                start + 1,
                start + 4,
                start + RECORD_HEADER_LEN - 1,
                start + RECORD_HEADER_LEN,
                end - 1,
            }
            - {end}
        ):
            if not start < cut < end:
                continue
            path.write_bytes(data[:cut])
            with CaptureReader(path) as reader:
                got = list(reader.records(strict=False))
                err = reader.damage
            assert len(got) == k
            assert is_variant(err, CaptureError, "Truncated"), (k, cut)
            assert (err.record_index, err.offset) == (k, start)
            assert isinstance(err, EOFError)
            with raises_variant(
                CaptureError, "Truncated", match=f"record {k} at byte offset {start}"
            ):
                all_records(path)


def test_short_file_header(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    write_sample(path)
    data = path.read_bytes()
    path.write_bytes(data[:10])
    with raises_variant(CaptureError, "Truncated"):
        all_records(path)
    path.write_bytes(b"garbage garbage garbage garbage garbage")
    with raises_variant(CaptureError, "Corrupt", match="bad magic"):
        all_records(path)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(bit=st.integers(min_value=0))
def test_single_bit_flip_is_reported_at_its_record(tmp_path: Path, bit: int) -> None:
    path = tmp_path / "flip.kvrcap"
    if not path.exists():
        write_sample(path, n_messages=4, seed=3)
    data = bytearray(path.read_bytes())
    original = bytes(data)
    bounds = _boundaries(path)
    pos = bit % (len(data) * 8)
    data[pos // 8] ^= 1 << (pos % 8)
    flipped = tmp_path / "flipped.kvrcap"
    flipped.write_bytes(bytes(data))
    byte = pos // 8
    with CaptureReader(flipped) as reader:
        got = list(reader.records(strict=False))
        err = reader.damage
    assert err is not None, byte
    if byte < FILE_HEADER_LEN:
        assert got == [] and err.record_index == -1
    else:
        k = max(i for i, b in enumerate(bounds) if b <= byte)
        assert err.record_index == k and err.offset == bounds[k]
        assert len(got) == k
        assert [r.body for r in got] == [r.body for r in all_records(path)][:k]
        # a flip in a length field may look like a torn tail; anything else is corruption
        if not is_variant(err, CaptureError, "Truncated"):
            assert is_variant(err, CaptureError, "Corrupt")
    assert path.read_bytes() == original


def test_missing_and_repeated_records_are_detected(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    write_sample(path)
    data = path.read_bytes()
    b = _boundaries(path)
    path.write_bytes(data[: b[2]] + data[b[3] :])  # drop record 2
    with raises_variant(CaptureError, "Corrupt", match="missing or repeated") as info:
        all_records(path)
    assert info.value.record_index == 2
    path.write_bytes(data[: b[3]] + data[b[2] : b[3]] + data[b[3] :])  # repeat record 2
    with raises_variant(CaptureError, "Corrupt") as info:
        all_records(path)
    assert info.value.record_index == 3 and info.value.offset == b[3]


def test_append_mode_cuts_a_torn_tail_and_continues(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    write_sample(path)
    n = len(all_records(path))
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    with CaptureWriter(path, mode="a") as w:
        assert is_variant(w.recovered, CaptureError, "Truncated")
        assert w.record_count == n - 1
        w.mark("resumed")
    recs = all_records(path)
    assert len(recs) == n and recs[-1].body == b"resumed"


def test_flush_policy_batches_writes(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    with CaptureWriter(path, flush_records=3, write_schema=False) as w:
        w.mark("a")
        w.mark("b")
        assert path.stat().st_size == FILE_HEADER_LEN
        w.mark("c")
        assert len(all_records(path)) == 3


def test_reader_follows_a_live_writer(tmp_path: Path) -> None:
    path = tmp_path / "live.kvrcap"
    writer = CaptureWriter(path)
    done = threading.Event()
    rng = random.Random(11)
    bodies = [rng.randbytes(rng.randrange(0, 20_000)) for _ in range(40)]

    def produce() -> None:
        sid = writer.open_stream("t", METHOD, b"")
        for body in bodies:
            writer.message(sid, body)
            time.sleep(0.002)
        writer.close_stream(sid)
        writer.close()
        done.set()

    thread = threading.Thread(target=produce)
    with CaptureReader(path) as reader:
        thread.start()
        seen = [
            r.body
            for r in reader.follow(poll_seconds=0.001, idle_timeout=10, stop=done.is_set)
            if r.type is RecordType.MESSAGE
        ]
    thread.join()
    assert seen == bodies


# ------------------------------------------------------- resynchronisation past damage (issue 5)


def _spans(path: Path) -> list[tuple[int, int, int]]:
    """(record index, start, end) of every record, structural ones included."""
    with CaptureReader(path) as reader:
        return [(r.index, r.offset, r.end_offset) for r in reader.records(structural=True)]


def _read_items(path: Path) -> tuple[list[CaptureRecord], list[CaptureDamage]]:
    with CaptureReader(path) as reader:
        items = list(reader.items(structural=True))
        assert reader.damages == [i for i in items if isinstance(i, CaptureDamage)]
    recs = [i for i in items if isinstance(i, CaptureRecord)]
    return recs, [i for i in items if isinstance(i, CaptureDamage)]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("idx") / "indexed.kvrcap"
    write_sample(path, n_messages=9, seed=5, index_every=4)
    return path


def test_index_and_trailer_records(indexed: Path) -> None:
    spans = _spans(indexed)
    with CaptureReader(indexed) as reader:
        types = [r.type for r in reader.records(structural=True)]
        plain = list(reader.records())
    assert types.count(RecordType.INDEX) >= 3 and types[-1] is RecordType.TRAILER
    assert all(r.type not in STRUCTURAL for r in plain)
    assert [s[0] for s in spans] == list(range(len(spans)))  # the chain counts them
    assert spans[-1][2] == indexed.stat().st_size


@settings(max_examples=200, deadline=None)
@given(bit=st.integers(min_value=0))
def test_single_bit_flip_resync_reads_every_intact_record(indexed: Path, bit: int) -> None:
    data = bytearray(indexed.read_bytes())
    spans = _spans(indexed)
    pos = bit % (len(data) * 8)
    byte = pos // 8
    data[byte] ^= 1 << (pos % 8)
    flipped = indexed.with_name(f"flip-{byte}.kvrcap")
    flipped.write_bytes(bytes(data))
    try:
        recs, damage = _read_items(flipped)
    finally:
        flipped.unlink()
    if byte < len(FILE_MAGIC):
        assert recs == [] and [d.record_index for d in damage] == [-1]
        return
    if byte < FILE_HEADER_LEN:  # a checksum mismatch under an intact magic: records still read
        assert [d.record_index for d in damage] == [-1]
        assert [r.index for r in recs] == [s[0] for s in spans]
        return
    (hit,) = [s for s in spans if s[1] <= byte < s[2]]
    assert [(r.index, r.offset, r.end_offset) for r in recs] == [s for s in spans if s != hit]
    assert len(damage) == 1
    (d,) = damage
    assert (d.record_index, d.offset, d.end_offset) == (hit[0], hit[1], hit[2])
    assert list(d.skipped) == [hit[0]]
    assert is_variant(d.error, CaptureError, "Corrupt")


def test_body_len_flip_is_reported_and_reading_resumes(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    write_sample(path, n_messages=6, index_every=0)
    spans = _spans(path)
    data = path.read_bytes()
    for k, start, _end in spans:
        for bit in (0, 13, 30):  # small, large, and a body_len past the end of the file
            d = bytearray(data)
            d[start + 8 + bit // 8] ^= 1 << (bit % 8)
            path.write_bytes(bytes(d))
            recs, damage = _read_items(path)
            assert [r.index for r in recs] == [s[0] for s in spans if s[0] != k]
            assert [(x.record_index, x.offset, list(x.skipped)) for x in damage] == [
                (k, start, [k])
            ]
            assert "record header checksum mismatch" in damage[0].reason
            # the strict reader still stops there
            with raises_variant(
                CaptureError, "Corrupt", match=f"record {k} at byte offset {start}"
            ):
                all_records(path)


def test_junk_between_records_is_skipped(tmp_path: Path) -> None:
    # without an index: inserted bytes also move every later record away from the offsets an
    # INDEX lists, which is reported as index damage of its own
    path = tmp_path / "c.kvrcap"
    write_sample(path, n_messages=5, index_every=0)
    spans = _spans(path)
    data = path.read_bytes()
    rng = random.Random(3)
    for k, _start, end in spans[:-1]:
        junk = rng.randbytes(rng.randrange(1, 300)) + b"KRec" + rng.randbytes(60) + b"KRe"
        path.write_bytes(data[:end] + junk + data[end:])
        recs, damage = _read_items(path)
        assert [r.index for r in recs] == [s[0] for s in spans]
        assert [r.offset for r in recs] == [s[1] + (len(junk) if s[0] > k else 0) for s in spans]
        (d,) = damage
        assert (d.record_index, d.offset, d.end_offset) == (k + 1, end, end + len(junk))
        assert list(d.skipped) == [] and "bad record magic" in d.reason


def test_missing_record_is_reported_and_reading_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    write_sample(path, index_every=0)
    spans = _spans(path)
    data = path.read_bytes()
    path.write_bytes(data[: spans[2][1]] + data[spans[3][1] :])  # drop record 2
    recs, damage = _read_items(path)
    assert [r.index for r in recs] == [s[0] for s in spans if s[0] != 2]
    assert [(d.record_index, list(d.skipped)) for d in damage] == [(2, [2])]
    path.write_bytes(data[: spans[3][1]] + data[spans[2][1] : spans[3][1]] + data[spans[3][1] :])
    recs, damage = _read_items(path)  # record 2 repeated: the copy is reported and skipped
    assert [r.index for r in recs] == [s[0] for s in spans]
    assert [(d.record_index, d.offset, list(d.skipped)) for d in damage] == [(3, spans[3][1], [])]


def test_index_disagreeing_with_the_chain_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    write_sample(path, n_messages=5, index_every=3)
    with CaptureReader(path) as reader:
        idx = next(r for r in reader.records(structural=True) if r.type is RecordType.INDEX)
    d = bytearray(path.read_bytes())
    body = bytearray(d[idx.body_offset : idx.end_offset])
    body[24] ^= 8  # the first listed offset; checksums rewritten so only the content is wrong
    _rewrite(d, idx.offset, bytes(body))
    path.write_bytes(bytes(d))
    recs, damage = _read_items(path)
    assert [(x.record_index, x.offset) for x in damage] == [(idx.index, idx.offset)]
    assert "disagrees" in damage[0].reason
    assert [r.index for r in recs] == [i for i in range(recs[-1].index + 1) if i != idx.index]


def _rewrite(data: bytearray, offset: int, body: bytes) -> None:
    """Replace a record's body (same length) and fix both checksums."""
    import xxhash

    start = offset + RECORD_HEADER_LEN
    data[start : start + len(body)] = body
    data[offset + 40 : offset + 44] = (xxhash.xxh3_64_intdigest(body) & 0xFFFFFFFF).to_bytes(
        4, "little"
    )
    head = bytes(data[offset : offset + 44])
    data[offset + 44 : offset + 48] = (xxhash.xxh3_64_intdigest(head) & 0xFFFFFFFF).to_bytes(
        4, "little"
    )


def test_truncation_everywhere_with_resync(indexed: Path, tmp_path: Path) -> None:
    spans = _spans(indexed)
    data = indexed.read_bytes()
    path = tmp_path / "cut.kvrcap"
    for k, start, end in spans:
        for cut in sorted({start, start + 1, start + 4, start + 47, start + 48, end - 1}):
            if not start <= cut < end:
                continue
            path.write_bytes(data[:cut])
            recs, damage = _read_items(path)
            assert [r.index for r in recs] == list(range(k))
            if cut == start:
                assert damage == []
                continue
            (d,) = damage
            assert d.truncated and (d.record_index, d.offset, d.end_offset) == (k, start, cut)


def test_append_to_an_indexed_capture(indexed: Path, tmp_path: Path) -> None:
    path = tmp_path / "a.kvrcap"
    path.write_bytes(indexed.read_bytes())
    before = all_records(path)
    with CaptureWriter(path, mode="a", index_every=4) as w:
        assert w.recovered is None
        w.mark("more")
    recs, damage = _read_items(path)
    assert damage == [] and recs[-1].type is RecordType.TRAILER
    assert [r.body for r in all_records(path)] == [r.body for r in before] + [b"more"]


def _mapped_kib(path: Path) -> int | None:
    """Resident KiB of this process's mappings of ``path`` (Linux ``smaps``), None elsewhere."""
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return None
    total, inside = 0, False
    for line in lines:
        if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):  # a mapping's first line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_reading_holds_a_window_of_the_file_not_the_file(tmp_path: Path) -> None:
    """The scanner reads a few MiB at a time (two windows at most in memory), whatever the size
    of the capture, and a body larger than a window is read whole."""
    import tracemalloc

    path = tmp_path / "big.kvrcap"
    body = random.Random(5).randbytes(256 << 10)
    with CaptureWriter(path, clock=_clock) as w:
        sid = w.open_stream("t", METHOD, b"")
        for _ in range(128):  # 32 MiB of records
            w.message(sid, body)
        w.message(sid, body * 24)  # 6 MiB: larger than a window
    tracemalloc.start()
    try:
        with CaptureReader(path) as reader:
            n = sum(1 for item in reader.items() if not isinstance(item, CaptureDamage))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == 131  # schema, open, 129 messages
    assert peak < 24 << 20  # two 4 MiB windows, the large record twice (read, then copied)


def test_a_capture_is_told_by_its_magic_alone(tmp_path: Path) -> None:
    cases = {
        "capture": (FILE_MAGIC + b"\0" * 24, True),
        "magic only": (FILE_MAGIC, True),
        "empty": (b"", False),
        "cut magic": (FILE_MAGIC[:3], False),
        # a copy in text mode: a damaged capture (its header check says so), not a foreign file
        "text-mode copy": (FILE_MAGIC.replace(b"\r\n", b"\n") + b"\0" * 24, True),
        "grpcurl json": (b'{"sequence": 1}', False),
    }
    for name, (data, expected) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        assert is_capture_file(path) is expected, name
    with pytest.raises(FileNotFoundError):
        is_capture_file(tmp_path / "missing")
