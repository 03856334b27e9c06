"""kvrcap round trip, damage detection at the right record, and following a live writer."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cbi1kit._capture import (
    FILE_HEADER_LEN,
    RECORD_HEADER_LEN,
    CaptureCorruptError,
    CaptureReader,
    CaptureRecord,
    CaptureTruncatedError,
    CaptureWriter,
    RecordType,
    decode_stream_close,
    decode_stream_open,
)

METHOD = "/dynamo.kvrelay.v1.KvEventRelay/SubscribeKvPool"


def _clock() -> tuple[int, int]:
    _clock.n += 1  # type: ignore[attr-defined]
    return 1_700_000_000_000_000_000 + _clock.n, 10_000 + _clock.n  # type: ignore[attr-defined]


_clock.n = 0  # type: ignore[attr-defined]


def write_sample(path: Path, n_messages: int = 6, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    bodies = [rng.randbytes(rng.choice([0, 1, 50, 300, 5000])) for _ in range(n_messages)]
    with CaptureWriter(path, clock=_clock) as w:
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
    with CaptureReader(path) as reader:
        buf = memoryview(reader.buffer)
        assert bytes(buf[recs[3].body_offset : recs[3].end_offset]) == recs[3].body
        buf.release()


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
            assert isinstance(err, CaptureTruncatedError), (k, cut)
            assert (err.record_index, err.offset) == (k, start)
            assert isinstance(err, EOFError)
            with pytest.raises(CaptureTruncatedError, match=f"record {k} at byte offset {start}"):
                all_records(path)


def test_short_file_header(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    write_sample(path)
    data = path.read_bytes()
    path.write_bytes(data[:10])
    with pytest.raises(CaptureTruncatedError):
        all_records(path)
    path.write_bytes(b"garbage garbage garbage garbage garbage")
    with pytest.raises(CaptureCorruptError, match="bad magic"):
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
        if not isinstance(err, CaptureTruncatedError):
            assert isinstance(err, CaptureCorruptError)
    assert path.read_bytes() == original


def test_missing_and_repeated_records_are_detected(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    write_sample(path)
    data = path.read_bytes()
    b = _boundaries(path)
    path.write_bytes(data[: b[2]] + data[b[3] :])  # drop record 2
    with pytest.raises(CaptureCorruptError, match="missing or repeated") as info:
        all_records(path)
    assert info.value.record_index == 2
    path.write_bytes(data[: b[3]] + data[b[2] : b[3]] + data[b[3] :])  # repeat record 2
    with pytest.raises(CaptureCorruptError) as info:
        all_records(path)
    assert info.value.record_index == 3 and info.value.offset == b[3]


def test_append_mode_cuts_a_torn_tail_and_continues(tmp_path: Path) -> None:
    path = tmp_path / "c.kvrcap"
    write_sample(path)
    n = len(all_records(path))
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    with CaptureWriter(path, mode="a") as w:
        assert isinstance(w.recovered, CaptureTruncatedError)
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
