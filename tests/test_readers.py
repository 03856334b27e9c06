"""One frame stream from captures, grpcurl JSON and bare CBI1 files; damage is located."""

from __future__ import annotations

import base64
import io
import itertools
import json
import struct
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from errorcheck import raises_variant
from google.protobuf import json_format

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.capture import _readers
from cbi1kit.capture._items import CatalogRecord, StreamEvent
from cbi1kit.capture._readers import (
    FrameDamage,
    FrameRecord,
    read_capture,
    read_capture_items,
    read_catalog,
    read_cbi1_files,
    read_frames,
    read_grpcurl_json,
)
from cbi1kit.capture._streams import SUBSCRIBE_KV_POOL_METHOD, WATCH_KV_POOL_CATALOG_METHOD
from cbi1kit.capture._writer import CaptureWriter
from cbi1kit.data import delta_frame, sample_capture
from cbi1kit.errors import CaptureError
from cbi1kit.hashing._identity import DcCkfFormatIdentity, ProducerIdentity, RelayIdentity
from cbi1kit.hashing._pools import (
    CacheSemanticsId,
    DcId,
    IdentitySource,
    IndexerDomainId,
    PoolId,
    RoutingScopeId,
)
from cbi1kit.relay import _messages as r
from cbi1kit.relay._publication import (
    HubSnapshot,
    encode_delta_publication,
    encode_snapshot_publication,
)

SEED = 0x5EED
RELAY = RelayIdentity((1 << 64) - 1, 9)


def identity(bucket_count: int) -> ProducerIdentity:
    return ProducerIdentity(
        PoolId(
            IndexerDomainId(
                CacheSemanticsId(b"\x01" * 16, IdentitySource.DEFAULT_DERIVED),
                RoutingScopeId(b"\x02" * 16, IdentitySource.EXPLICIT),
            ),
            DcId(7),
        ),
        5,
        1,
        DcCkfFormatIdentity(seed=SEED, bucket_count=bucket_count),
    )


def stream(bucket_count: int = 1 << 20) -> list[pb.FilterUpdate]:
    """A multi-chunk snapshot, deltas and a heartbeat, as the relay would send them."""
    rng = np.random.default_rng(5)
    ident = identity(bucket_count)
    words = rng.integers(0, 1 << 63, size=bucket_count, dtype=np.uint64)
    out = [
        r.filter_update_from_frame(f, RELAY, send_ts_us=1)
        for f in encode_snapshot_publication(HubSnapshot(ident, 3, words))
    ]
    for seq in range(3, 6):
        images = [
            (int(b), int(w))
            for b, w in zip(
                rng.integers(0, bucket_count, 4), rng.integers(0, 1 << 63, 4), strict=True
            )
        ]
        delta = SimpleNamespace(identity=ident, base_sequence=seq, sequence=seq + 1, images=images)
        out.append(
            r.filter_update_from_frame(encode_delta_publication(delta), RELAY, send_ts_us=seq)
        )
    out.append(r.heartbeat_update(ident, 6, RELAY, send_ts_us=99))
    return out


def test_capture_reader_yields_filter_updates_byte_exact(tmp_path: Path) -> None:
    msgs = stream()
    path = tmp_path / "s.kvrcap"
    raws = [m.SerializeToString() + b"\xc8\x3e\x01" for m in msgs]  # plus an unknown field
    with CaptureWriter(path) as w:
        cat = w.open_stream("t", "/dynamo.kvrelay.v1.KvEventRelay/WatchKvPoolCatalog", b"")
        w.message(cat, b"\x18\x01")
        sid = w.open_stream("t", SUBSCRIBE_KV_POOL_METHOD, b"")
        for raw in raws:
            w.message(sid, raw)
        w.close_stream(sid)
    got = list(read_capture(path))
    assert [g.raw for g in got] == raws
    assert [g.index for g in got] == list(range(len(raws)))
    for g, m in zip(got, msgs, strict=True):
        assert g.update is not None
        assert g.update.sequence == m.sequence and g.payload == m.payload
        assert g.recv_unix_ns is not None and g.stream_id == sid
        r.validate_filter_update(g.update)
    assert [g.index for g in read_frames(path)] == list(range(len(raws)))
    # damage: everything before it is still yielded, then the capture's error
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    seen = []
    with raises_variant(CaptureError, "Truncated"):
        for g in read_capture(path):
            seen.append(g.raw)
    assert seen == raws  # the torn record is the stream-close record


def test_catalog_reader_and_the_one_pass_reader(tmp_path: Path) -> None:
    """Catalog updates are decoded as such (not as FilterUpdates), numbered apart from the
    frames; an update that does not decode is named at its record; the one-pass reader yields
    the frames numbered as read_capture numbers them, the catalog, and every open and close."""
    msgs = stream(1 << 10)
    listing = pb.KvPoolCatalogUpdate(
        protocol_version=1, relay=r.relay_identity_to_wire(RELAY), revision=4
    )
    path = tmp_path / "c.kvrcap"
    with CaptureWriter(path) as w:
        cat = w.open_stream("relay-a", WATCH_KV_POOL_CATALOG_METHOD, b"", info={"n": 1})
        w.message(cat, listing.SerializeToString())
        sid = w.open_stream("relay-a", SUBSCRIBE_KV_POOL_METHOD, b"req")
        for m in msgs[:2]:
            w.message(sid, m.SerializeToString())
        w.message(cat, b"\x0a\xff")  # a length running past the message: no catalog update
        w.message(cat, listing.SerializeToString())
        for m in msgs[2:]:
            w.message(sid, m.SerializeToString())
        w.close_stream(sid, status_name="CANCELLED", status_code=1, local_reason="done")
    with raises_variant(CaptureError, "Unreadable", match="KvPoolCatalogUpdate") as info:
        seen = []
        for rec in read_catalog(path):
            seen.append(rec)
    assert info.value.record_index == 6  # after the schema, open, message, open, two frames
    assert [(c.index, c.update) for c in seen] == [(0, listing)]
    reported = list(read_catalog(path, damage="report"))
    assert [type(c) for c in reported] == [CatalogRecord, FrameDamage, CatalogRecord]
    assert isinstance(reported[2], CatalogRecord) and reported[2].index == 1
    assert reported[2].stream_id == cat and reported[2].raw == listing.SerializeToString()
    items = list(read_capture_items(path, damage="report"))
    frames = [i for i in items if isinstance(i, FrameRecord)]
    assert [f.index for f in frames] == [f.index for f in read_capture(path)]
    assert [f.raw for f in frames] == [m.SerializeToString() for m in msgs]
    events = [i for i in items if isinstance(i, StreamEvent)]
    assert [(e.stream_id, e.opened is not None) for e in events] == [
        (cat, True),
        (sid, True),
        (sid, False),
    ]
    assert events[0].opened is not None and events[0].opened.info == {"n": 1}
    assert events[1].opened is not None and events[1].opened.request == b"req"
    assert events[2].closed is not None and events[2].closed.local_reason == "done"
    assert sum(isinstance(i, CatalogRecord) for i in items) == 2


def _dump(msgs: list[pb.FilterUpdate]) -> str:
    return "".join(json_format.MessageToJson(m) + "\n" for m in msgs)


def test_grpcurl_json_reads_back_identically(tmp_path: Path) -> None:
    msgs = stream(1 << 12)
    text = _dump(msgs)
    assert "\n{\n" in text  # pretty-printed, concatenated
    path = tmp_path / "dump.json"
    path.write_text(text)
    got = list(read_grpcurl_json(path))
    assert [g.update for g in got] == msgs
    assert [g.raw for g in got] == [m.SerializeToString() for m in msgs]
    assert text[got[1].source_offset] == "{"
    assert [g.update for g in read_frames(path)] == msgs
    # JSONL and original field names work too
    jsonl = "".join(
        json.dumps(json_format.MessageToDict(m, preserving_proto_field_name=True)) + "\n"
        for m in msgs
    )
    assert [g.update for g in read_grpcurl_json(jsonl.encode())] == msgs


def test_grpcurl_bad_base64_names_record_and_field() -> None:
    msgs = stream(1 << 12)
    objs = [json_format.MessageToDict(m) for m in msgs]
    objs[2]["payload"] = objs[2]["payload"][:10] + "!!" + objs[2]["payload"][12:]
    text = "\n".join(json.dumps(o, indent=2) for o in objs)
    seen = []
    with raises_variant(CaptureError, "Unreadable") as info:
        for g in read_grpcurl_json(text.encode()):
            seen.append(g.update)
    assert seen == msgs[:2]
    assert info.value.record_index == 2 and info.value.field == "FilterUpdate.payload"
    assert info.value.offset == text.index(
        "{", len(json.dumps(objs[0], indent=2)) + len(json.dumps(objs[1], indent=2))
    )
    assert "FilterUpdate.payload" in str(info.value)


def test_grpcurl_url_safe_and_unpadded_base64_accepted() -> None:
    msg = stream(1 << 12)[-2]
    obj = json_format.MessageToDict(msg)
    obj["payload"] = base64.urlsafe_b64encode(msg.payload).decode().rstrip("=")
    (got,) = read_grpcurl_json(json.dumps(obj).encode())
    assert got.update == msg


def test_grpcurl_truncated_json() -> None:
    msgs = stream(1 << 12)
    text = _dump(msgs)
    cut = text[: len(text) - 40]
    seen = []
    with raises_variant(CaptureError, "Truncated") as info:
        for g in read_grpcurl_json(cut.encode()):
            seen.append(g.update)
    assert seen == msgs[:-1]
    assert info.value.record_index == len(msgs) - 1
    assert isinstance(info.value, EOFError)


def test_grpcurl_unknown_field_is_an_error() -> None:
    with raises_variant(CaptureError, "Unreadable", match="record 0"):
        list(read_grpcurl_json(b'{"noSuchField": 1}'))


def test_bare_cbi1_files(tmp_path: Path) -> None:
    msgs = stream(1 << 20)
    payloads = [bytes(m.payload) for m in msgs if m.payload]
    single = tmp_path / "one.bin"
    single.write_bytes(payloads[0])
    many = tmp_path / "many.bin"
    many.write_bytes(b"".join(payloads))
    got = list(read_cbi1_files([single, many]))
    assert [g.raw for g in got] == [payloads[0], *payloads]
    assert [g.index for g in got] == list(range(len(payloads) + 1))
    assert got[2].source_offset == len(payloads[0])
    assert [g.raw for g in read_frames(many)] == payloads
    # truncation inside the third frame
    many.write_bytes(b"".join(payloads)[: len(payloads[0]) + len(payloads[1]) + 30])
    seen = []
    with raises_variant(CaptureError, "Truncated") as info:
        for g in read_cbi1_files(many):
            seen.append(g.raw)
    assert seen == payloads[:2] and info.value.record_index == 2


def test_random_bytes_and_legacy_frames(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(rng.bytes(1000))
    with raises_variant(CaptureError, "Unreadable", match="unrecognised input"):
        list(read_frames(junk))
    payload = bytes(stream(1 << 12)[-2].payload)
    mixed = tmp_path / "mixed.bin"
    mixed.write_bytes(payload + rng.bytes(100))
    seen = []
    with raises_variant(CaptureError, "Unreadable", match="not a CBI1 frame") as info:
        for g in read_cbi1_files(mixed):
            seen.append(g.raw)
    assert seen == [payload] and info.value.offset == len(payload)
    legacy = tmp_path / "legacy.bin"
    legacy.write_bytes(b"CKF1" + bytes(60))
    with raises_variant(CaptureError, "Unreadable", match="CKF1 prototype frame"):
        list(read_frames(legacy))


def test_write_grpcurl_json_reads_back_identically(tmp_path: Path) -> None:
    from cbi1kit.capture._readers import read_capture, read_grpcurl_json, write_grpcurl_json

    sample = sample_capture()
    records = list(itertools.islice(read_capture(sample), 200))
    out = tmp_path / "dump.json"
    assert write_grpcurl_json(records, out) == len(records)
    back = list(read_grpcurl_json(out))
    assert [r.update for r in back] == [r.update for r in records]
    assert [r.payload for r in back] == [r.payload for r in records]


def test_grpcurl_json_may_name_the_dc_id_cluster_id(tmp_path: Path) -> None:
    """Dynamo 1.7 calls a pool's third part ClusterId: a dump naming ``dc_id`` so, in either
    JSON spelling, reads as the same frames; naming it both ways is an error at that record."""
    from cbi1kit.capture._readers import read_capture, read_grpcurl_json, write_grpcurl_json

    sample = sample_capture()
    records = list(itertools.islice(read_capture(sample), 20))
    out = tmp_path / "dump.json"
    write_grpcurl_json(records, out)
    text = out.read_text()
    assert text.count('"dcId"') == len(records)
    for alias in ('"clusterId"', '"cluster_id"'):
        renamed = text.replace('"dcId"', alias).encode()
        assert [r.raw for r in read_grpcurl_json(renamed)] == [r.raw for r in records]
    both = text.replace('"dcId": ', '"clusterId": "1", "dcId": ', 1).encode()
    with raises_variant(CaptureError, "Unreadable", match="record 0"):
        list(read_grpcurl_json(both))


def test_write_grpcurl_json_refuses_bare_frames(tmp_path: Path) -> None:
    from cbi1kit.capture._readers import read_cbi1_files, write_grpcurl_json

    frames = delta_frame()
    with raises_variant(CaptureError, "Unreadable", match="no FilterUpdate envelope"):
        write_grpcurl_json(read_cbi1_files(frames), tmp_path / "x.json")


# ------------------------------------------------------------- streaming: a block at a time


def _split(data: bytes, block: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], Any]:
    """(offset, object) pairs and the error (variant, offset, record, message) or None, reading
    ``block`` bytes at a time."""
    monkeypatch.setattr(_readers, "_JSON_BLOCK", block)
    got: list[Any] = []
    try:
        for item in _readers._JsonValues(io.BytesIO(data), "dump"):
            got.append(item)
    except CaptureError as exc:
        return got, (exc.variant, exc.offset, exc.record_index, str(exc))
    return got, None


def _json_dumps() -> dict[str, bytes]:
    rng = np.random.default_rng(13)
    values = [
        {"a": "äöü €", "n": [1, 2.5e-3, None, True], "s": "\\u00e9\\ud83d\\ude00"},
        {"nested": {"x": ["ü" * 40, {"y": -12345678901234567890}]}},
        *({"payload": base64.b64encode(rng.bytes(int(n))).decode()} for n in (0, 5, 3000)),
    ]
    pretty = "\n".join(json.dumps(v, indent=2, ensure_ascii=False) for v in values).encode()
    dumps = {"pretty": pretty, "jsonl": b"".join(json.dumps(v).encode() + b"\r\n" for v in values)}
    for cut in (1, 7, len(pretty) // 3, len(pretty) - 2):
        dumps[f"cut-{cut}"] = pretty[:-cut]
    split_char = pretty.index("ä".encode()) + 1
    dumps["split-utf8"] = pretty[:split_char]
    dumps["bad-utf8"] = pretty[: len(pretty) // 2] + b"\xff" + pretty[len(pretty) // 2 :]
    dumps["not-json"] = pretty[:40] + b" @ " + pretty[40:]
    dumps["array"] = pretty + b"\n[1, 2]"
    return dumps


@pytest.mark.parametrize("name", list(_json_dumps()))
def test_grpcurl_splitter_reads_in_blocks_as_it_reads_at_once(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever block size the dump is read in, the objects, their byte offsets and the error
    (variant, offset, record, message) are those of reading the whole dump in one block."""
    data = _json_dumps()[name]
    whole = _split(data, len(data) + 1, monkeypatch)
    for block in (1, 3, 64, 1000):
        assert _split(data, block, monkeypatch) == whole, block
    objects, error = whole
    for offset, obj in objects:  # offsets are bytes, non-ASCII text before them included
        assert data[offset : offset + 1] == b"{"
        assert json.JSONDecoder().raw_decode(data[offset:].decode("utf-8", "ignore"))[0] == obj
    if name in ("pretty", "jsonl"):
        assert len(objects) == 5 and error is None
    elif name.startswith("cut-") or name == "split-utf8":
        assert error is not None and error[0] in ("Truncated", "Unreadable")
    else:
        assert error is not None and error[0] == "Unreadable"
    if name == "bad-utf8":
        assert error is not None and "not UTF-8" in error[3]
        assert error[1] == data.index(b"\xff") and error[2] == len(objects)


class _Counting(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.served = 0

    def read(self, n: int | None = -1) -> bytes:
        out = super().read(n)
        self.served += len(out)
        return out


def test_grpcurl_a_value_that_never_ends_is_refused_without_reading_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_readers, "_JSON_BLOCK", 1024)
    monkeypatch.setattr(_readers, "_JSON_OBJECT_MAX", 8192)
    endless = _Counting(b'{"sequence": "1"}\n{"payload": "' + b"A" * 1_000_000)
    with raises_variant(CaptureError, "Unreadable", match="still open after 8192") as info:
        list(_readers._JsonValues(endless, "dump"))
    assert (info.value.offset, info.value.record_index) == (18, 1)
    assert endless.served < 64 * 1024
    # a plain syntax error in a long value is still named as one
    bad = b'{"a": x' + b" " * 100_000 + b"}"
    with raises_variant(CaptureError, "Unreadable", match="Expecting value at offset 6"):
        list(_readers._JsonValues(io.BytesIO(bad), "dump"))


def _peak(records: Iterator[Any]) -> int:
    """Peak traced memory while iterating, one record held at a time."""
    tracemalloc.start()
    try:
        for _ in records:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _frame_files(tmp_path: Path, frames: int) -> tuple[Path, Path, int]:
    """``frames`` 1 MiB snapshot chunks as a bare-frame file and as a grpcurl dump."""
    from cbi1kit.wire._encode import encode_snapshot_chunks
    from cbi1kit.wire._format import FilterFormat

    rng = np.random.default_rng(frames)
    fmt = FilterFormat(seed=SEED, bucket_count=1 << 17)
    bare, dump = tmp_path / f"{frames}.cbi1", tmp_path / f"{frames}.json"
    with open(bare, "wb") as b, open(dump, "w") as j:
        for i in range(frames):
            words = rng.integers(0, 1 << 63, size=1 << 17, dtype=np.uint64)
            (frame,) = encode_snapshot_chunks(fmt, 7, i + 1, words)
            b.write(frame)
            j.write(json_format.MessageToJson(pb.FilterUpdate(sequence=i + 1, payload=frame)))
    return bare, dump, len(frame)


def test_readers_hold_a_frame_at_a_time_not_the_file(tmp_path: Path) -> None:
    """Peak memory stays under a few frames (bare) or a few JSON objects (grpcurl, ~1.4 MB of
    base64 per frame) for a file of 2 frames and of 24, a file several times that bound."""
    for n in (2, 24):
        bare, dump, frame = _frame_files(tmp_path, n)
        bare_bound, json_bound = 3 * frame + (64 << 10), 16 * frame
        assert _peak(read_cbi1_files(bare)) < bare_bound
        assert _peak(read_grpcurl_json(dump)) < json_bound
    assert bare.stat().st_size > 6 * bare_bound and dump.stat().st_size > 2 * json_bound


def test_a_bare_frame_too_large_is_refused_before_its_body_is_read(tmp_path: Path) -> None:
    from cbi1kit.wire._encode import encode_delta
    from cbi1kit.wire._format import FilterFormat

    frame = bytearray(encode_delta(FilterFormat(seed=SEED, bucket_count=1024), 7, 1, 2, [(3, 4)]))
    struct.pack_into("<I", frame, 56, 1 << 30)  # image_count: a 12 GiB frame
    path = tmp_path / "huge.cbi1"
    path.write_bytes(bytes(frame) + bytes(16 << 20))
    tracemalloc.start()
    try:
        with raises_variant(CaptureError, "Unreadable", match="above the CBI1 maximum") as info:
            list(read_frames(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (info.value.offset, info.value.field) == (0, "header")
    assert peak < 1 << 20
