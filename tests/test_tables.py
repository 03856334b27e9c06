"""Tables: dtypes, values against the messages, validation, Parquet round trip, images vs lane."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_stream_roundtrip import Stream, build_stream, write_capture

from cbi1kit._proto import kvrelay_v1_pb2 as pb
from cbi1kit.analysis._schema import (
    FRAMES_SCHEMA,
    IMAGES_SCHEMA,
    OCCUPANCY_SCHEMA,
    SNAPSHOTS_SCHEMA,
)
from cbi1kit.analysis._shorthands import (
    export_parquet,
    frames_batches,
    frames_table,
    images_table,
    replay,
    snapshots_table,
)
from cbi1kit.analysis._tables import occupancy_table
from cbi1kit.relay._messages import check_filter_update
from cbi1kit.wire._codec import decode, peek_format
from cbi1kit.wire._rules import RULE_INDEX, rule_for

U64_MAX = (1 << 64) - 1


@pytest.fixture(scope="module")
def stream() -> Stream:
    return build_stream(deltas=20, heartbeat_every=4, seed=5)


@pytest.fixture(scope="module")
def capture(stream: Stream, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_capture(tmp_path_factory.mktemp("cap") / "s.kvrcap", stream.messages)


def test_frames_schema_and_values(stream: Stream, capture: Path) -> None:
    df = frames_table(capture).collect()
    assert df.schema == pl.Schema(FRAMES_SCHEMA)
    assert df.height == len(stream.messages)
    assert df["validation_error"].null_count() == df.height
    for name, dtype in df.schema.items():
        if name.endswith(("sequence", "dc_id", "incarnation", "seed", "bucket_count", "epoch")):
            assert dtype == pl.UInt64, name
    msgs = stream.messages
    assert df["sequence"].to_list() == [m.sequence for m in msgs]
    assert df["base_sequence"].to_list() == [m.base_sequence for m in msgs]
    assert df["send_ts_us"].to_list() == [m.send_ts_us for m in msgs]
    assert df["relay_incarnation"].to_list() == [U64_MAX] * len(msgs)
    assert df["payload_len"].to_list() == [len(m.payload) for m in msgs]
    assert df["raw_len"].to_list() == [m.ByteSize() for m in msgs]
    kinds = {1: "SNAPSHOT_CHUNK", 2: "DELTA", 3: "HEARTBEAT"}
    assert df["kind"].cast(pl.Utf8).to_list() == [kinds[m.kind] for m in msgs]
    for row, m in zip(df.iter_rows(named=True), msgs, strict=True):
        if not m.payload:
            assert row["cbi1_epoch"] is None
            continue
        frame = decode(peek_format(m.payload), m.payload)
        assert row["cbi1_epoch"] == frame.header.epoch
        assert row["cbi1_dc_id"] == frame.header.dc_id == m.producer.pool_id.dc_id
        assert row["cbi1_checksum_ok"] is True
        if m.kind == 1:
            assert (row["chunk_index"], row["chunk_count"], row["word_count"]) == (
                frame.chunk_index,  # type: ignore[union-attr]
                frame.chunk_count,  # type: ignore[union-attr]
                frame.word_count,  # type: ignore[union-attr]
            )
            assert row["image_count"] is None
        else:
            assert row["image_count"] == frame.image_count  # type: ignore[union-attr]
            assert row["base_epoch"] == frame.base_epoch  # type: ignore[union-attr]
            assert row["chunk_index"] is None


def test_frames_from_messages_and_json_match_the_capture(stream: Stream, capture: Path) -> None:
    drop = ["recv_time", "recv_mono_ns", "source_offset", "stream_id"]
    a = frames_table(capture).collect().drop(drop)
    b = frames_table(stream.messages).collect().drop(drop)
    assert a.equals(b)
    small = list(frames_batches(capture, batch_records=3))
    assert len(small) > 3
    assert pl.concat(small).drop(drop).equals(a)


def _mutations(m: pb.FilterUpdate) -> list[pb.FilterUpdate]:
    out = []
    for edit in (
        lambda c: setattr(c, "contract_marker", 1),
        lambda c: setattr(c, "protocol_version", 2),
        lambda c: c.ClearField("relay"),
        lambda c: c.ClearField("producer"),
        lambda c: setattr(c.producer, "layout_generation", 0),
        lambda c: setattr(c.producer.ckf_format, "fingerprint_bits", 8),
        lambda c: setattr(c.producer.pool_id.indexer_domain.cache_semantics, "digest", b"x"),
        lambda c: setattr(c, "kind", 0),
        lambda c: setattr(c, "kind", 9),
        lambda c: setattr(c, "sequence", c.sequence + 3),
        lambda c: setattr(c, "payload", b""),
    ):
        c = pb.FilterUpdate()
        c.CopyFrom(m)
        edit(c)
        out.append(c)
    return out


def test_vectorised_validation_agrees_with_the_relay_validator(stream: Stream) -> None:
    delta = next(m for m in stream.messages if m.kind == 2)
    hb = next(m for m in stream.messages if m.kind == 3)
    msgs = [*_mutations(delta), *_mutations(hb)]
    df = frames_table(msgs).collect()
    for row, m in zip(df.iter_rows(named=True), msgs, strict=True):
        err = check_filter_update(m)
        if err is None:
            assert row["validation_error"] is None or row["validation_error"].startswith("CBI1")
            assert row["validation_rule"] is None or row["validation_rule"].startswith("cbi1-")
            continue
        # the relay validator's first error, or an earlier rule (upstream decodes the payload
        # before the lane ingestor checks a delta's sequence)
        rule, want = row["validation_rule"], rule_for(err)
        assert rule is not None and RULE_INDEX[rule] <= RULE_INDEX[want], (rule, err)
        if rule.startswith("relay-"):
            got = row["validation_error"]
            assert rule == want and got.split(":")[0] in str(err), (got, err)
        else:
            assert want == "relay-delta-contiguous", (rule, err)


def test_cbi1_damage_is_flagged(stream: Stream) -> None:
    m = pb.FilterUpdate()
    m.CopyFrom(next(x for x in stream.messages if x.kind == 2))
    payload = bytearray(m.payload)
    payload[-1] ^= 0x10
    m.payload = bytes(payload)
    legacy = pb.FilterUpdate()
    legacy.CopyFrom(m)
    legacy.payload = b"CKF1" + legacy.payload[4:]
    df = frames_table([m, legacy]).collect()
    assert df["cbi1_checksum_ok"].to_list() == [False, False]
    assert "checksum" in df["validation_error"][0]
    assert "CKF1 prototype" in df["validation_error"][1]


def test_unknown_fields_and_truncated_capture(stream: Stream, tmp_path: Path) -> None:
    raw = stream.messages[-1].SerializeToString() + b"\xa0\x06\x05"  # field 100 varint
    df = frames_table([pb.FilterUpdate.FromString(raw)]).collect()
    assert df["has_unknown_fields"].to_list() == [True]
    path = write_capture(tmp_path / "s.kvrcap", stream.messages)
    data = path.read_bytes()
    full = frames_table(path).collect()
    for keep in (len(data) - 300, len(data) // 2):
        (tmp_path / "cut.kvrcap").write_bytes(data[:keep])
        cut = frames_table(tmp_path / "cut.kvrcap").collect()
        assert cut["kind"][-1] == "SOURCE_ERROR"
        assert "Truncated" in cut["validation_error"][-1]
        assert cut["frame_index"][-1] == cut.height - 1 <= full.height
        assert cut.head(cut.height - 1).equals(full.head(cut.height - 1))


def test_images_previous_and_new_words_follow_the_lane(stream: Stream, capture: Path) -> None:
    images = images_table(capture)
    assert images.schema == pl.Schema(IMAGES_SCHEMA)
    report = replay(capture)
    lane = report.lane_at(stream.snapshot_sequence).copy()
    for seq, part in images.group_by("sequence", maintain_order=True):
        buckets = part["bucket"].to_numpy().astype(np.intp)
        np.testing.assert_array_equal(part["previous_word"].to_numpy(), lane[buckets])
        lane[buckets] = part["new_word"].to_numpy()
        np.testing.assert_array_equal(lane, stream.lanes[seq[0]])  # type: ignore[index]
    np.testing.assert_array_equal(lane, stream.final_words)
    slots = lambda w: (w.view("<u2").reshape(-1, 4) != 0).sum(1)  # noqa: E731
    np.testing.assert_array_equal(
        images["occupied_after"].to_numpy(), slots(images["new_word"].to_numpy())
    )


@pytest.mark.parametrize("engine", ["compiled", "reference"])
def test_images_table_is_the_same_in_blocks_of_any_size(
    capture: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The images are kept in blocks of rows; a block boundary anywhere (mid-delta, at every
    row) gives the table of one block, and a table taken mid-way is what came so far."""
    from cbi1kit.analysis import _tables

    whole = images_table(capture, engine=engine)
    assert whole.height > 8
    for rows in (1, 3, 7, whole.height - 1):
        monkeypatch.setattr(_tables, "_CHUNK_ROWS", rows)
        assert images_table(capture, engine=engine).equals(whole)
    collector = _tables.Collector()
    monkeypatch.setattr(_tables, "_CHUNK_ROWS", 5)
    sizes = np.random.default_rng(7).integers(0, 9, 64)
    at = 0
    for n in sizes:  # rows added in pieces, a table taken after each: the rows so far
        part = whole.slice(at, int(n))
        cols = [part[c].to_numpy() for c in ("frame_index", "sequence")]
        counts = np.ones(part.height, np.int64)
        collector.on_deltas(
            cols[0].view(np.int64), cols[1], counts, *(part[c].to_numpy() for c in _IMAGE_COLS)
        )
        at += part.height
        assert collector.images_df().equals(whole.head(at))


_IMAGE_COLS = ("bucket", "new_word", "previous_word")


def test_snapshots_and_occupancy(stream: Stream, capture: Path) -> None:
    snaps = snapshots_table(capture)
    assert snaps.schema == pl.Schema(SNAPSHOTS_SCHEMA)
    words = stream.lanes[stream.snapshot_sequence]
    occupied = int((words.view("<u2") != 0).sum())
    assert snaps.row(0, named=True) | {"stream_id": 0} == {
        "frame_index": stream.chunk_count - 1,
        "stream_id": 0,
        "sequence": stream.snapshot_sequence,
        "bucket_count": words.size,
        "chunk_count": stream.chunk_count,
        "nonzero_buckets": int(np.count_nonzero(words)),
        "occupied_slots": occupied,
        "load_factor": occupied / (4 * words.size),
    }
    occ = occupancy_table(words, bins=16)
    assert occ.schema == pl.Schema(OCCUPANCY_SCHEMA)
    assert occ["occupied_slots"].sum() == occupied
    assert occ["buckets"].sum() == words.size
    assert occ["bucket_end"][-1] == words.size


def test_parquet_round_trip_keeps_u64(stream: Stream, capture: Path, tmp_path: Path) -> None:
    paths = export_parquet(capture, tmp_path / "out")
    frames = pl.read_parquet(paths["frames"])
    assert frames.schema == pl.Schema(FRAMES_SCHEMA)
    assert frames.equals(frames_table(capture).collect())
    assert frames["relay_incarnation"].max() == U64_MAX
    images = pl.read_parquet(paths["images"])
    assert images.schema == pl.Schema(IMAGES_SCHEMA)
    assert images.equals(images_table(capture))
    assert pl.read_parquet(paths["snapshots"]).equals(snapshots_table(capture))
    # the extreme value survives a polars → Parquet → polars trip in a u64 column
    extreme = pl.DataFrame({"w": [0, U64_MAX]}, schema={"w": pl.UInt64})
    extreme.write_parquet(tmp_path / "x.parquet")
    back = pl.read_parquet(tmp_path / "x.parquet")
    assert back.schema["w"] == pl.UInt64 and back["w"].to_list() == [0, U64_MAX]


def test_lazy_projection_filter_and_limit(capture: Path, stream: Stream) -> None:
    lf = frames_table(capture, batch_records=4)
    deltas = lf.filter(pl.col("kind") == "DELTA").select("sequence").collect()
    assert deltas["sequence"].to_list() == [m.sequence for m in stream.messages if m.kind == 2]
    assert lf.head(3).collect().height == 3


def test_frames_of_bare_frames_come_in_batches_of_bounded_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of large frames is read in spans bounded by bytes as well as by records: the
    table is the same, and memory follows a span, not the file (twice the file, the same
    peak)."""
    import tracemalloc

    from cbi1kit.capture import _readers
    from cbi1kit.wire._encode import encode_snapshot_chunks
    from cbi1kit.wire._format import FilterFormat

    rng = np.random.default_rng(17)
    fmt = FilterFormat(seed=0x5EED, bucket_count=1 << 17)
    peaks = []
    for frames in (24, 48):  # of 1 MiB each
        path = tmp_path / f"chunks-{frames}.cbi1"
        with open(path, "wb") as f:
            for i in range(frames):
                (frame,) = encode_snapshot_chunks(
                    fmt, 7, i + 1, rng.integers(0, 1 << 63, size=1 << 17, dtype=np.uint64)
                )
                f.write(frame)
        whole = frames_table(path, engine="reference").collect()
        monkeypatch.setattr(_readers, "_SPAN_BYTES", 4 << 20)
        tracemalloc.start()
        try:
            batches = [df.height for df in frames_batches(path, engine="reference")]
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        monkeypatch.undo()
        assert batches == [4] * (frames // 4) and whole.height == frames
        assert frames_table(path, engine="reference").collect().equals(whole)
    assert peaks[1] < peaks[0] + (2 << 20), peaks
