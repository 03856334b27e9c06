"""The CBI1 codec: layout, worked examples, round trips, and only typed errors on bad bytes."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from errorcheck import is_variant, raises_variant
from hypothesis import HealthCheck, given, settings, strategies as st
from strategies import formats, images_for, lanes_for, u64_edges

from cbi1kit import errors
from cbi1kit.errors import Cbi1Error
from cbi1kit.wire._codec import (
    DeltaBatch,
    _decode_deltas_reference,
    decode,
    decode_deltas,
    peek_format,
)
from cbi1kit.wire._encode import encode_delta, encode_snapshot_chunk, encode_snapshot_chunks
from cbi1kit.wire._format import (
    HEADER_LEN,
    IMAGES_MAX_FRAME_BYTES,
    SNAPSHOT_CHUNK_BUCKETS,
    U64_MAX,
    FilterFormat,
    FrameKind,
    max_delta_images,
)
from cbi1kit.wire._frames import IMAGE_DTYPE, Delta, FrameHeader, SnapshotChunk, body_checksum
from cbi1kit.wire._layout import DELTA_IMAGE, DELTA_PREFIX, HEADER, SNAPSHOT_PREFIX, layout_markdown

FMT = FilterFormat(seed=0x5EED, bucket_count=1024)

WORKED_DELTA = bytes.fromhex(
    "43424931 0100 0200 10 04 0100 ed5e000000000000 0004000000000000 0700000000000000"
    "0500000000000000 4ef64661 0400000000000000 02000000 03000000 ddddccccbbbbaaaa"
    "e8030000 2a00000000000000".replace(" ", "")
)
WORKED_EMPTY = bytes.fromhex(
    "434249310100020010040100ed5e000000000000000400000000000007000000000000000100000000000000"
    "f0a4c269000000000000000000000000"
)


# ----------------------------------------------------------------------------------- layout


@pytest.mark.parametrize("layout", [HEADER, DELTA_PREFIX, SNAPSHOT_PREFIX, DELTA_IMAGE])
def test_layouts_are_contiguous_and_match_their_struct(layout) -> None:  # type: ignore[no-untyped-def]
    offset = layout.start
    for f in layout:
        assert f.offset == offset, f.path
        offset = f.end
    assert layout.codec.size == layout.size


def test_header_layout_tiles_bytes_0_to_48_exactly() -> None:
    covered = [0] * HEADER_LEN
    for f in HEADER:
        for i in range(f.offset, f.end):
            covered[i] += 1
    assert covered == [1] * HEADER_LEN
    assert (HEADER.start, HEADER.end) == (0, HEADER_LEN)
    assert DELTA_PREFIX.start == SNAPSHOT_PREFIX.start == HEADER_LEN
    assert DELTA_PREFIX.size == 12
    assert SNAPSHOT_PREFIX.size == 16
    assert DELTA_IMAGE.size == IMAGE_DTYPE.itemsize == 12


def test_header_layout_offsets_are_the_specs() -> None:
    spec = {
        "magic": (0, 4), "wire_version": (4, 2), "flags": (6, 2), "fingerprint_bits": (8, 1),
        "slots_per_bucket": (9, 1), "format_version": (10, 2), "seed": (12, 8),
        "bucket_count": (20, 8), "dc_id": (28, 8), "epoch": (36, 8), "body_checksum": (44, 4),
    }  # fmt: skip
    assert {f.name: (f.offset, f.size) for f in HEADER} == spec


def test_docs_table_is_generated_from_the_layout() -> None:
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "wire-format.md").read_text()
    for layout in (HEADER, DELTA_PREFIX, SNAPSHOT_PREFIX, DELTA_IMAGE):
        assert layout_markdown(layout) in doc, f"docs/wire-format.md is stale for {layout.region}"


# ---------------------------------------------------------------------------- worked examples


def test_worked_delta_example_byte_for_byte() -> None:
    out = encode_delta(FMT, 7, 4, 5, [(3, 0xAAAABBBBCCCCDDDD), (1000, 42)])
    assert len(out) == 84
    assert out == WORKED_DELTA
    frame = decode(FMT, out)
    assert isinstance(frame, Delta)
    assert frame.header == FrameHeader(seed=0x5EED, bucket_count=1024, dc_id=7, epoch=5)
    assert frame.base_epoch == 4
    assert frame.images.tolist() == [(3, 0xAAAABBBBCCCCDDDD), (1000, 42)]


def test_worked_empty_delta_example() -> None:
    assert encode_delta(FMT, 7, 0, 1, []) == WORKED_EMPTY


def test_max_delta_images_is_349525() -> None:
    assert max_delta_images() == 349_525
    assert IMAGES_MAX_FRAME_BYTES == 4_194_368


def test_u64_max_survives_everything() -> None:
    top = U64_MAX
    fmt = FilterFormat(seed=top, bucket_count=2)
    data = encode_delta(fmt, top, top, top, [(1, top)])
    frame = decode(fmt, data)
    assert isinstance(frame, Delta)
    assert frame.header == FrameHeader(seed=top, bucket_count=2, dc_id=top, epoch=top)
    assert frame.base_epoch == top
    assert int(frame.words[0]) == top
    assert frame.serialize() == data
    chunk = decode(fmt, next(iter(encode_snapshot_chunks(fmt, top, top, [top, top]))))
    assert isinstance(chunk, SnapshotChunk)
    assert [int(w) for w in chunk.words] == [top, top]
    from cbi1kit.wire._inspect import inspect

    shown = str(inspect(data).hexdump())
    assert "0xffffffffffffffff (18446744073709551615)" in shown
    assert "0xffffffffffffffff" in repr(fmt)


# ------------------------------------------------------------------------------ error details


def test_checksum_error_names_field_offset_and_both_values() -> None:
    bad = bytearray(WORKED_DELTA)
    bad[-1] ^= 0x01
    actual = body_checksum(bad)
    with raises_variant(Cbi1Error, "Checksum") as info:
        decode(FMT, bad)
    exc = info.value
    assert (exc.offset, exc.field) == (44, "header.body_checksum")
    assert (exc.expected, exc.actual) == (0x6146F64E, actual)
    assert str(exc) == (
        "checksum mismatch at header.body_checksum (offset 44): "
        f"frame says 0x6146f64e, body hashes to 0x{actual:08x}"
    )
    assert isinstance(exc, ValueError)


def test_truncated_is_also_eoferror() -> None:
    with pytest.raises(EOFError):
        decode(FMT, WORKED_DELTA[:47])


def test_legacy_ckf1_frame_is_named() -> None:
    legacy = b"CKF1" + WORKED_DELTA[4:]
    with raises_variant(Cbi1Error, "Magic.Legacy", match="CKF1 prototype"):
        decode(FMT, legacy)
    with raises_variant(Cbi1Error, "Magic"):
        decode(FMT, legacy)


def test_bad_delta_bucket_names_the_image() -> None:
    data = bytearray(encode_delta(FMT, 7, 4, 5, [(3, 1), (5, 2), (7, 3)]))
    struct.pack_into("<I", data, 60 + 2 * 12, 1024)
    struct.pack_into("<I", data, 44, body_checksum(data))
    with raises_variant(Cbi1Error, "Malformed") as info:
        decode(FMT, data)
    assert (info.value.field, info.value.offset) == ("delta.images[2].bucket", 84)


def test_bad_bucket_in_a_large_delta_is_found() -> None:
    images = [(i % 1024, i) for i in range(500)]
    data = bytearray(encode_delta(FMT, 7, 4, 5, images))
    struct.pack_into("<I", data, 60 + 321 * 12, 4000)
    struct.pack_into("<I", data, 44, body_checksum(data))
    with raises_variant(Cbi1Error, "Malformed") as info:
        decode(FMT, data)
    assert info.value.field == "delta.images[321].bucket"


def test_snapshot_bucket_count_mismatch_at_encode() -> None:
    with raises_variant(Cbi1Error, "SnapshotBucketCount") as info:
        encode_snapshot_chunks(FMT, 7, 1, [0])
    assert (info.value.expected, info.value.actual) == (1024, 1)


def test_encoder_rejects_values_outside_their_types() -> None:
    with raises_variant(Cbi1Error, "InvalidImage", match=r"images\[1\]\.word"):
        encode_delta(FMT, 7, 0, 1, [(1, 1), (2, 1 << 64)])
    with raises_variant(Cbi1Error, "InvalidImage", match=r"images\[0\]\.bucket"):
        encode_delta(FMT, 7, 0, 1, [(-1, 1)])
    with raises_variant(Cbi1Error, "InvalidImage"):
        encode_snapshot_chunks(FilterFormat(seed=1, bucket_count=2), 0, 0, [-1, 0])


def test_peek_format_bootstraps_from_the_first_frame() -> None:
    assert peek_format(WORKED_DELTA) == FilterFormat(seed=0x5EED, bucket_count=1024)
    corrupt = bytearray(WORKED_DELTA)
    corrupt[-1] ^= 0xFF  # peek does not look at the body
    assert peek_format(corrupt) == FilterFormat(seed=0x5EED, bucket_count=1024)
    with raises_variant(Cbi1Error, "Magic"):
        peek_format(b"XXXX" + WORKED_DELTA[4:])


# -------------------------------------------------------------------------- snapshot chunking


def test_lane_is_cut_into_ordered_chunks_lazily() -> None:
    fmt = FilterFormat(seed=9, bucket_count=1 << 21)
    lane = np.arange(fmt.bucket_count, dtype=np.uint64)
    chunks = encode_snapshot_chunks(fmt, 3, 11, lane)
    assert len(chunks) == 4 == fmt.chunk_count
    frames = [decode(fmt, c) for c in chunks]
    for i, frame in enumerate(frames):
        assert isinstance(frame, SnapshotChunk)
        assert (frame.chunk_index, frame.chunk_count) == (i, 4)
        assert frame.bucket_offset == i * SNAPSHOT_CHUNK_BUCKETS
        assert frame.words[0] == i * SNAPSHOT_CHUNK_BUCKETS
    assert chunks[-1] == chunks[3]
    with pytest.raises(IndexError):
        chunks[4]
    single = encode_snapshot_chunk(
        fmt, 3, 11, 2, 4, lane[2 * SNAPSHOT_CHUNK_BUCKETS :][:SNAPSHOT_CHUNK_BUCKETS]
    )
    assert single == chunks[2]


def test_decoded_words_are_zero_copy_views() -> None:
    fmt = FilterFormat(seed=1, bucket_count=2)
    data = bytearray(next(iter(encode_snapshot_chunks(fmt, 0, 0, [5, 6]))))
    frame = decode(fmt, data)
    assert isinstance(frame, SnapshotChunk)
    assert np.shares_memory(frame.words, np.frombuffer(data, dtype=np.uint8))
    with pytest.raises(ValueError, match="read-only"):
        frame.words[0] = 1


# ------------------------------------------------------------------------------- properties


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), dc_id=u64_edges, base=u64_edges, epoch=u64_edges)
def test_delta_round_trip(data: st.DataObject, dc_id: int, base: int, epoch: int) -> None:
    fmt = data.draw(formats())
    images = data.draw(images_for(fmt))
    encoded = encode_delta(fmt, dc_id, base, epoch, images)
    frame = decode(fmt, encoded)
    assert isinstance(frame, Delta)
    assert frame.kind is FrameKind.DELTA
    assert frame.header == FrameHeader(
        seed=fmt.seed, bucket_count=fmt.bucket_count, dc_id=dc_id, epoch=epoch
    )
    assert frame.base_epoch == base
    assert frame.images.tobytes() == images.tobytes()
    assert frame.serialize() == encoded
    assert frame == Delta(frame.header, base, images)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), dc_id=u64_edges, epoch=u64_edges)
def test_snapshot_round_trip(data: st.DataObject, dc_id: int, epoch: int) -> None:
    fmt = data.draw(formats())
    lane = data.draw(lanes_for(fmt))
    (encoded,) = encode_snapshot_chunks(fmt, dc_id, epoch, lane)
    frame = decode(fmt, encoded)
    assert isinstance(frame, SnapshotChunk)
    assert (frame.chunk_index, frame.chunk_count, frame.bucket_offset) == (0, 1, 0)
    assert np.array_equal(frame.words, lane)
    assert frame.serialize() == encoded


@settings(max_examples=500)
@given(st.binary(max_size=200), formats())
def test_arbitrary_bytes_only_raise_cbi1_errors(data: bytes, fmt: FilterFormat) -> None:
    try:
        frame = decode(fmt, data)
    except errors.Cbi1Error as exc:
        assert exc.field is not None or exc.offset is not None
    else:
        assert frame.serialize() == data


@st.composite
def mutated_frames(draw: st.DrawFn) -> tuple[FilterFormat, bytes]:
    fmt = draw(formats(max_log2=6))
    if draw(st.booleans()):
        frame = encode_delta(fmt, 1, 2, 3, draw(images_for(fmt, max_size=8)))
    else:
        (frame,) = encode_snapshot_chunks(fmt, 1, 2, draw(lanes_for(fmt)))
    return fmt, _damaged(draw, frame)


def _damaged(draw: st.DrawFn, frame: bytes) -> bytes:
    """``frame`` with one to four bytes flipped, cut, added or fields overwritten, its checksum
    fixed up afterwards or not."""
    buf = bytearray(frame)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "truncate", "extend", "field"]))
        if op == "flip" and buf:
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del buf[draw(st.integers(0, len(buf))) :]
        elif op == "extend":
            buf += draw(st.binary(min_size=1, max_size=16))
        elif op == "field" and len(buf) >= 64:
            at = draw(st.sampled_from([6, 8, 9, 10, 48, 52, 56]))
            buf[at : at + 4] = draw(st.binary(min_size=4, max_size=4))
    if draw(st.booleans()) and len(buf) >= HEADER_LEN:
        struct.pack_into("<I", buf, 44, body_checksum(buf))  # get past the checksum
    return bytes(buf)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_frames())
def test_mutated_frames_only_raise_cbi1_errors_and_inspect_agrees(
    case: tuple[FilterFormat, bytes],
) -> None:
    from cbi1kit.wire._inspect import inspect

    fmt, data = case
    report = inspect(data, fmt)
    try:
        frame = decode(fmt, data)
    except errors.Cbi1Error as exc:
        assert not report.ok
        first = report.problems[0]
        name = (
            exc.variant
            if not is_variant(exc, Cbi1Error, "Format")
            else f"Format.{exc.format_variant}"
        )
        assert first.variant == name, (report.problems, exc)
        assert exc.field is not None
    else:
        assert report.ok, report.problems
        assert report.frame == frame
        assert frame.serialize() == data


# ------------------------------------------------------------ fast decode vs the reference path
# ``decode`` takes a short path for a frame that passes every check and hands anything else to
# ``_decode_reference`` (the checks one by one in upstream's order). The two must agree on
# every frame: the same frame (kind, header, fields, arrays, read-only) or the same error.


def _decoded(fn: Any, fmt: FilterFormat, data: Any) -> tuple[Any, ...]:
    try:
        frame = fn(fmt, data)
    except errors.Cbi1Error as exc:
        return ("error", type(exc), exc.variant, exc.subvariant, exc.field, exc.offset, str(exc))
    arrays = frame.images if isinstance(frame, Delta) else frame.words
    assert not arrays.flags.writeable
    assert isinstance(frame.header, FrameHeader)
    fields = (
        (frame.base_epoch,)
        if isinstance(frame, Delta)
        else (frame.chunk_index, frame.chunk_count, frame.bucket_offset)
    )
    return (type(frame), frame.header, fields, arrays.dtype, arrays.tobytes())


def _agree(fmt: FilterFormat, data: bytes) -> None:
    from cbi1kit.wire._codec import _decode_reference

    expected = _decoded(_decode_reference, fmt, data)
    for form in (data, bytearray(data), memoryview(data), memoryview(bytearray(data))):
        assert _decoded(decode, fmt, form) == expected
    if len(data) % 8 == 0 and data:  # a buffer whose items are not bytes
        words = np.frombuffer(data, dtype=np.uint64)
        assert _decoded(decode, fmt, memoryview(words)) == expected


def _golden_frames() -> list[Any]:
    import gzip
    import json
    from pathlib import Path

    vectors = Path(__file__).parent / "vectors" / "cbi1"
    out = []
    for case in json.loads((vectors / "manifest.json").read_text())["cases"]:
        spec = case.get("expected_format") or case.get("decode_format")
        if "file" not in case or spec is None:
            continue
        raw = (vectors / case["file"]).read_bytes()
        data = gzip.decompress(raw) if case["file"].endswith(".gz") else raw
        seed, buckets = int(spec["seed"]), int(spec["bucket_count"])
        if spec.get("constructed_via", "FilterFormat::new") == "FilterFormat::new":
            fmt = FilterFormat(seed=seed, bucket_count=buckets)
        else:
            fmt = FilterFormat.unchecked(seed=seed, bucket_count=buckets)
        out.append(pytest.param(fmt, data, id=case["id"]))
    return out


@pytest.mark.parametrize(("fmt", "data"), _golden_frames())
def test_fast_decode_matches_the_reference_on_every_golden_frame(
    fmt: FilterFormat, data: bytes
) -> None:
    _agree(fmt, data)
    _agree(
        FilterFormat.unchecked(seed=fmt.seed ^ 1, bucket_count=fmt.bucket_count), data
    )  # a foreign format


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_frames())
def test_fast_decode_matches_the_reference_on_mutated_frames(
    case: tuple[FilterFormat, bytes],
) -> None:
    _agree(*case)


@settings(max_examples=300)
@given(st.binary(max_size=200), formats())
def test_fast_decode_matches_the_reference_on_arbitrary_bytes(
    data: bytes, fmt: FilterFormat
) -> None:
    _agree(fmt, data)


@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(0, 200))
def test_fast_decode_matches_the_reference_on_deltas_of_any_size(
    data: st.DataObject, size: int
) -> None:
    """Deltas on both sides of the small-delta bucket check (64 images), with a bucket past
    the lane sometimes: the fast path must send those to the reference."""
    fmt = data.draw(formats(max_log2=8))
    images = np.empty(size, dtype=IMAGE_DTYPE)
    images["bucket"] = data.draw(
        st.lists(st.integers(0, fmt.bucket_count - 1), min_size=size, max_size=size)
    )
    images["word"] = 7
    frame = bytearray(encode_delta(fmt, 1, 2, 3, images))
    if size and data.draw(st.booleans()):
        i = data.draw(st.integers(0, size - 1))
        struct.pack_into(
            "<I", frame, 60 + 12 * i, data.draw(st.integers(fmt.bucket_count, 2**32 - 1))
        )
        struct.pack_into("<I", frame, 44, body_checksum(frame))
    _agree(fmt, bytes(frame))


# ----------------------------------------------------------------- many deltas: decode_deltas
# ``decode_deltas`` checks every frame at once; per frame it must be ``decode``: the same deltas,
# or the error ``decode`` raises for the first frame it refuses (or the first snapshot chunk),
# with that frame's index. ``_decode_deltas_reference`` (decode frame by frame) must agree too.


def _error(exc: Cbi1Error) -> tuple[Any, ...]:
    return (type(exc), exc.variant, exc.subvariant, exc.field, exc.offset, exc.expected, exc.actual)


def _per_frame(fmt: FilterFormat, frames: list[Any]) -> tuple[Any, ...]:
    """What ``decode`` says of the frames in order: their deltas, or the first refusal."""
    deltas = []
    for i, data in enumerate(frames):
        try:
            frame = decode(fmt, data)
        except Cbi1Error as exc:
            return ("error", i, (*_error(exc), f"frame {i}: {exc}"))
        if not isinstance(frame, Delta):
            return ("error", i, (Cbi1Error, "Flags", None, "header.flags", 6, 2, 1))
        deltas.append(frame)
    return ("ok", deltas)


def _batch_agrees(fmt: FilterFormat, frames: list[Any]) -> None:
    expected = _per_frame(fmt, frames)
    for fn in (decode_deltas, _decode_deltas_reference):
        try:
            batch = fn(fmt, frames)
        except Cbi1Error as exc:
            assert expected[0] == "error", exc
            _, index, error = expected
            assert exc.frame_index == index
            assert (*_error(exc), str(exc))[: len(error)] == error
            assert str(exc).startswith(f"frame {index}: ")
            continue
        assert expected[0] == "ok"
        deltas = expected[1]
        assert len(batch) == len(frames) and list(batch) == deltas
        assert batch.format is fmt
        assert batch.dc_id.tolist() == [d.header.dc_id for d in deltas]
        assert batch.epoch.tolist() == [d.header.epoch for d in deltas]
        assert batch.base_epoch.tolist() == [d.base_epoch for d in deltas]
        assert batch.image_counts.tolist() == [d.image_count for d in deltas]
        assert batch.images.dtype == IMAGE_DTYPE
        assert batch.images.tobytes() == b"".join(d.images.tobytes() for d in deltas)
        for array in (batch.images, batch.offsets, batch.dc_id, batch.epoch, batch.base_epoch):
            assert not array.flags.writeable
        assert all(not d.images.flags.writeable for d in batch)


@pytest.mark.parametrize(("fmt", "data"), _golden_frames())
def test_decode_deltas_matches_decode_on_every_golden_frame(fmt: FilterFormat, data: bytes) -> None:
    """Each golden frame alone, between two valid deltas, and after a frame that fails."""
    good = encode_delta(
        FilterFormat.unchecked(seed=fmt.seed, bucket_count=fmt.bucket_count), 5, 6, 7, [(0, 9)]
    )
    damaged = good[:-1]
    for frames in ([data], [good, data, good], [good, damaged, data], [data, data]):
        _batch_agrees(fmt, frames)
        _batch_agrees(fmt, [memoryview(f) for f in frames])


def test_decode_deltas_matches_decode_on_all_golden_frames_at_once() -> None:
    """Every golden frame of each format in one batch, valid deltas first: the first refusal
    among them is the one reported."""
    by_format: dict[FilterFormat, list[bytes]] = {}
    for param in _golden_frames():
        fmt, data = param.values
        by_format.setdefault(fmt, []).append(data)
    for fmt, frames in by_format.items():
        frames.sort(key=lambda f: _per_frame(fmt, [f])[0] != "ok")
        _batch_agrees(fmt, frames)


@st.composite
def delta_batches(draw: st.DrawFn) -> tuple[FilterFormat, list[Any]]:
    """A format and frames for it: mostly valid deltas, some damaged (a bucket past the lane,
    bytes flipped, cut or added, fields overwritten, with or without a fixed checksum), a
    snapshot chunk now and then, each as bytes, a bytearray or a memoryview."""
    fmt = draw(formats(max_log2=6))
    frames: list[Any] = []
    for i in range(draw(st.integers(0, 8))):
        frame = encode_delta(fmt, i, i, i + 1, draw(images_for(fmt, max_size=8)))
        how = draw(st.sampled_from(["ok"] * 4 + ["damaged", "bucket", "chunk"]))
        if how == "damaged":
            frame = _damaged(draw, frame)
        elif how == "bucket" and len(frame) > 60:
            buf = bytearray(frame)
            struct.pack_into("<I", buf, 60, draw(st.integers(fmt.bucket_count, 2**32 - 1)))
            struct.pack_into("<I", buf, 44, body_checksum(buf))
            frame = bytes(buf)
        elif how == "chunk":
            (frame,) = encode_snapshot_chunks(fmt, 1, 2, draw(lanes_for(fmt)))
        form = draw(st.sampled_from([bytes, bytearray, memoryview]))
        frames.append(form(frame))
    return fmt, frames


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(delta_batches())
def test_decode_deltas_matches_decode_frame_by_frame(case: tuple[FilterFormat, list[Any]]) -> None:
    _batch_agrees(*case)


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=120), max_size=6), formats())
def test_decode_deltas_matches_decode_on_arbitrary_bytes(
    frames: list[bytes], fmt: FilterFormat
) -> None:
    _batch_agrees(fmt, frames)


def test_decode_deltas_of_nothing_is_an_empty_batch() -> None:
    batch = decode_deltas(FMT, iter([]))
    assert len(batch) == 0 and list(batch) == [] and batch.images.shape == (0,)
    assert batch.offsets.tolist() == [0]


def test_delta_batch_is_a_sequence_of_deltas() -> None:
    frames = [encode_delta(FMT, 7, e, e + 1, [(e, e * 10)] * e) for e in range(5)]
    batch = decode_deltas(FMT, frames)
    assert isinstance(batch, DeltaBatch)
    assert batch[-1] == batch[4] == decode(FMT, frames[4])
    assert batch[1:3] == [decode(FMT, f) for f in frames[1:3]]
    assert batch.offsets.tolist() == [0, 0, 1, 3, 6, 10]
    with pytest.raises(IndexError):
        batch[5]
    assert repr(batch) == f"DeltaBatch({FMT!r}, deltas=5, images=10)"
    again = DeltaBatch.of(FMT, list(batch))
    assert again.images.tobytes() == batch.images.tobytes()
    assert again.offsets.tolist() == batch.offsets.tolist()


def test_decode_deltas_names_the_frame_that_failed() -> None:
    frames = [encode_delta(FMT, 1, e, e + 1, [(e, 1)]) for e in range(4)]
    short = bytearray(frames[2][:-1])
    struct.pack_into("<I", short, 44, body_checksum(short))  # an image cut short, checksum fixed
    with raises_variant(Cbi1Error, "Malformed", match=r"^frame 2: ") as info:
        decode_deltas(FMT, [*frames[:2], short, frames[3][:10]])
    assert info.value.frame_index == 2 and info.value.field == "delta.images"
    with raises_variant(Cbi1Error, "Truncated") as info:
        decode_deltas(FMT, [frames[0], frames[3][:10]])
    assert isinstance(info.value, EOFError) and info.value.frame_index == 1
    chunk = encode_snapshot_chunk(FMT, 1, 2, 0, 1, np.zeros(FMT.bucket_count, np.uint64))
    with raises_variant(Cbi1Error, "Flags", match="snapshot chunk") as info:
        decode_deltas(FMT, [frames[0], chunk])
    assert (info.value.frame_index, info.value.expected, info.value.actual) == (1, 2, 1)
