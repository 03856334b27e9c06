"""Every case of the upstream golden manifest (tests/vectors/cbi1/manifest.json), none hand-picked.

The frames and expected results were produced by upstream's Rust codec. A case id that this file
does not know how to run fails the suite instead of being skipped.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xxhash
from errorcheck import is_variant, raises_variant

from cbi1kit import errors
from cbi1kit.errors import Cbi1Error
from cbi1kit.wire._assembly import AssembledSnapshot, SnapshotAssembly
from cbi1kit.wire._checks import _decode_delta
from cbi1kit.wire._codec import decode
from cbi1kit.wire._encode import encode_delta, encode_snapshot_chunks
from cbi1kit.wire._format import (
    FINGERPRINT_BITS,
    FORMAT_VERSION,
    HEADER_LEN,
    IMAGES_MAX_FRAME_BYTES,
    MAX_BUCKET_COUNT,
    SLOTS_PER_BUCKET,
    SNAPSHOT_CHUNK_BUCKETS,
    WIRE_VERSION,
    FilterFormat,
    max_delta_images,
)
from cbi1kit.wire._frames import Delta, FrameHeader, SnapshotChunk

VECTORS = Path(__file__).parent / "vectors" / "cbi1"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text())
CASES = MANIFEST["cases"]
BY_ID = {c["id"]: c for c in CASES}

# Upstream's ImagesWireError variants (and FormatError's, nested under Format) that decode and
# assembly can return: each vector's expected variant must be one of these.
VARIANTS = frozenset(errors.Cbi1Error.summaries) - {"Magic.Legacy"}


def _frame_bytes(rel: str) -> bytes:
    data = (VECTORS / rel).read_bytes()
    return gzip.decompress(data) if rel.endswith(".gz") else data


def _format(spec: dict[str, Any]) -> FilterFormat:
    seed, buckets = int(spec["seed"]), int(spec["bucket_count"])
    if spec.get("constructed_via", "FilterFormat::new") == "FilterFormat::new":
        return FilterFormat(seed=seed, bucket_count=buckets)
    return FilterFormat.unchecked(seed=seed, bucket_count=buckets)


def _images_digest(images: np.ndarray) -> int:
    return xxhash.xxh3_64_intdigest(images.tobytes())


def _check_error(exc: errors.Cbi1Error, expected: dict[str, Any]) -> None:
    fe = expected.get("format_error")
    if fe is not None:
        assert f"Format.{fe['variant']}" in VARIANTS
        assert is_variant(exc, errors.Cbi1Error, f"Format.{fe['variant']}"), repr(exc)
        if fe["variant"] == "Mismatch":
            assert is_variant(exc, Cbi1Error, "Format.Mismatch")
            assert exc.expected == _format(fe["expected"] | {"constructed_via": "literal"})
            assert exc.seed == int(fe["seed"])
            assert exc.buckets == int(fe["buckets"])
        else:
            assert exc.value == int(fe["value"])
        return
    assert expected["variant"] in VARIANTS
    assert is_variant(exc, errors.Cbi1Error, expected["variant"]), repr(exc)
    if "value" in expected:
        assert exc.value == int(expected["value"])
    if "actual" in expected:
        assert exc.actual == int(expected["actual"])
        assert exc.maximum == int(expected["maximum"])
    if "bucket" in expected:
        assert is_variant(exc, Cbi1Error, "BucketIndex")
        assert exc.bucket == int(expected["bucket"])
        assert exc.bucket_count == int(expected["bucket_count"])
    # Every decode error says where it happened.
    assert isinstance(exc, ValueError)
    assert str(exc)


def _check_frame(frame: Delta | SnapshotChunk, ok: dict[str, Any]) -> None:
    h = ok["header"]
    assert frame.header == FrameHeader(
        seed=int(h["seed"]),
        bucket_count=int(h["bucket_count"]),
        dc_id=int(h["dc_id"]),
        epoch=int(h["epoch"]),
    )
    if ok["kind"] == "Delta":
        assert isinstance(frame, Delta)
        assert frame.base_epoch == int(ok["base_epoch"])
        assert frame.image_count == ok["image_count"]
        assert _images_digest(frame.images) == int(ok["images_xxh3_64"])
        if "images" in ok:
            assert [(int(b), int(w)) for b, w in frame.images.tolist()] == [
                (i["bucket"], int(i["value"])) for i in ok["images"]
            ]
        assert frame.images.dtype.itemsize == 12
        assert not frame.images.flags.writeable
    else:
        assert isinstance(frame, SnapshotChunk)
        assert frame.chunk_index == ok["chunk_index"]
        assert frame.chunk_count == ok["chunk_count"]
        assert frame.bucket_offset == int(ok["bucket_offset"])
        assert frame.word_count == ok["word_count"]
        assert xxhash.xxh3_64_intdigest(frame.words.tobytes()) == int(ok["words_xxh3_64"])
        assert int(np.count_nonzero(frame.words)) == ok["nonzero_count"]
        if "words" in ok:
            assert [int(w) for w in frame.words.tolist()] == [int(w) for w in ok["words"]]
        if "nonzero_words" in ok:
            nz = np.flatnonzero(frame.words)
            assert [(int(i), int(frame.words[i])) for i in nz] == [
                (i, int(w)) for i, w in ok["nonzero_words"]
            ]
        assert frame.words.dtype == np.dtype("<u8")
        assert not frame.words.flags.writeable


def _built_format(spec: dict[str, Any]) -> FilterFormat:
    """The encoder took its format as given (quirk cases use non-power-of-two counts)."""
    return FilterFormat.unchecked(seed=int(spec["seed"]), bucket_count=int(spec["bucket_count"]))


def _lane_from_built_by(built: dict[str, Any], frames: list[bytes]) -> np.ndarray:
    fmt = _built_format(built["format"])
    if "words" in built:
        return np.array([int(w) for w in built["words"]], dtype=np.uint64)
    if "lane_nonzero_words" in built:
        lane = np.zeros(fmt.bucket_count, dtype=np.uint64)
        for i, w in built["lane_nonzero_words"]:
            lane[i] = int(w)
        return lane
    # dense lane: words come from the frames themselves
    return np.concatenate([np.frombuffer(f, dtype="<u8", offset=64) for f in frames])


def _check_reencode(case: dict[str, Any], data: bytes) -> None:
    built = case.get("built_by")
    if not isinstance(built, dict):
        return
    if built["fn"] == "encode_delta":
        images = [(i["bucket"], int(i["value"])) for i in built["images"]]
        out = encode_delta(
            _built_format(built["format"]),
            int(built["dc_id"]),
            int(built["base_epoch"]),
            int(built["epoch"]),
            images,
        )
        assert out == data
        return
    # encode_snapshot_chunks: rebuild the whole lane and compare the one chunk this file holds
    if "same_lane_as" in built:
        first = BY_ID[built["same_lane_as"]]
        built, index = first["built_by"], built["chunk_index"]
        siblings = [first["file"]] + [
            c["file"]
            for c in CASES
            if isinstance(c.get("built_by"), dict)
            and c["built_by"].get("same_lane_as") == first["id"]
        ]
    else:
        index, siblings = case["expected"]["ok"]["chunk_index"], None
    fmt = _built_format(built["format"])
    frames = [data] if siblings is None else [_frame_bytes(f) for f in sorted(siblings)]
    lane = _lane_from_built_by(built, frames)
    chunks = encode_snapshot_chunks(fmt, int(built["dc_id"]), int(built["epoch"]), lane)
    assert len(chunks) == fmt.chunk_count
    assert chunks[index] == data


def test_constants_match_manifest() -> None:
    c = MANIFEST["constants"]
    assert c["IMAGES_HEADER_LEN"] == HEADER_LEN
    assert c["SNAPSHOT_CHUNK_BUCKETS"] == SNAPSHOT_CHUNK_BUCKETS
    assert c["MAX_BUCKET_COUNT"] == MAX_BUCKET_COUNT
    assert c["IMAGES_MAX_FRAME_BYTES"] == IMAGES_MAX_FRAME_BYTES
    assert c["max_delta_images"] == max_delta_images()
    assert c["IMAGES_WIRE_VERSION"] == WIRE_VERSION
    assert c["FORMAT_VERSION"] == FORMAT_VERSION
    assert c["FINGERPRINT_BITS"] == FINGERPRINT_BITS
    assert c["SLOTS_PER_BUCKET"] == SLOTS_PER_BUCKET


def test_every_case_kind_is_known() -> None:
    kinds = {c["kind"] for c in CASES}
    assert kinds <= {
        "decode",
        "assembly",
        "filter_format_new",
        "encode_delta",
        "decode_body_internal",
    }
    assert len(CASES) == 127


def _ids(kind: str) -> list[Any]:
    return [pytest.param(c, id=c["id"]) for c in CASES if c["kind"] == kind]


@pytest.mark.parametrize("case", _ids("decode"))
def test_decode_case(case: dict[str, Any]) -> None:
    data = _frame_bytes(case["file"])
    assert len(data) == case["frame_len"]
    assert hashlib.sha256(data).hexdigest() == case["frame_sha256"]
    fmt = _format(case["expected_format"])
    expected = case["expected"]
    if "ok" in expected:
        frame = decode(fmt, data)
        _check_frame(frame, expected["ok"])
        assert frame.serialize() == data  # encode(decode(b)) == b
        _check_reencode(case, data)
    else:
        with pytest.raises(errors.Cbi1Error) as info:
            decode(fmt, data)
        _check_error(info.value, expected["error"])


@pytest.mark.parametrize("case", _ids("decode_body_internal"))
def test_decode_body_internal_case(case: dict[str, Any]) -> None:
    body = _frame_bytes(case["file"])
    assert hashlib.sha256(body).hexdigest() == case["body_sha256"]
    h = case["header"]
    header = FrameHeader(
        seed=int(h["seed"]),
        bucket_count=int(h["bucket_count"]),
        dc_id=int(h["dc_id"]),
        epoch=int(h["epoch"]),
    )
    with pytest.raises(errors.Cbi1Error) as info:
        _decode_delta(header, memoryview(bytes(HEADER_LEN) + body))
    _check_error(info.value, case["expected"]["error"])


@pytest.mark.parametrize("case", _ids("filter_format_new"))
def test_filter_format_case(case: dict[str, Any]) -> None:
    seed, buckets = int(case["input"]["seed"]), int(case["input"]["bucket_count"])
    expected = case["expected"]
    if "ok" in expected:
        fmt = FilterFormat(seed=seed, bucket_count=buckets)
        assert (fmt.seed, fmt.bucket_count) == (int(expected["ok"]["seed"]), buckets)
    else:
        with raises_variant(Cbi1Error, "Format.BucketCount") as info:
            FilterFormat(seed=seed, bucket_count=buckets)
        _check_error(info.value, expected["error"])


def _images_from_note(note: str, count: int) -> list[tuple[int, int]]:
    m = re.fullmatch(r"image_count copies of \{bucket: (\d+), value: (\d+)\}", note)
    assert m, note
    return [(int(m[1]), int(m[2]))] * count


@pytest.mark.parametrize("case", _ids("encode_delta"))
def test_encode_delta_case(case: dict[str, Any]) -> None:
    inp = case["input"]
    if "images" in inp:
        images = [(i["bucket"], int(i["value"])) for i in inp["images"]]
    else:
        images = _images_from_note(inp["images_note"], inp["image_count"])
    with pytest.raises(errors.Cbi1Error) as info:
        encode_delta(
            _format(inp["format"]),
            int(inp["dc_id"]),
            int(inp["base_epoch"]),
            int(inp["epoch"]),
            images,
        )
    _check_error(info.value, case["expected"]["error"])


def _constructed(spec: dict[str, Any]) -> SnapshotChunk:
    h = spec["header"]
    m = re.fullmatch(r"(\d+) copies of (\d+)", spec["words"])
    assert m, spec["words"]
    words = np.full(int(m[1]), int(m[2]), dtype=np.uint64)
    header = FrameHeader(
        seed=int(h["seed"]),
        bucket_count=int(h["bucket_count"]),
        dc_id=int(h["dc_id"]),
        epoch=int(h["epoch"]),
    )
    return SnapshotChunk(
        header, spec["chunk_index"], spec["chunk_count"], int(spec["bucket_offset"]), words
    )


def _check_absorb(result: AssembledSnapshot | None, ok: dict[str, Any] | None) -> None:
    if ok is None:
        assert result is None
        return
    assert result is not None
    assert result.epoch == int(ok["epoch"])
    assert result.image_count == ok["image_count"]
    assert _images_digest(result.images) == int(ok["images_xxh3_64"])
    if "images" in ok:
        assert [(int(b), int(w)) for b, w in result.images.tolist()] == [
            (i["bucket"], int(i["value"])) for i in ok["images"]
        ]


@pytest.mark.parametrize("case", _ids("assembly"))
def test_assembly_case(case: dict[str, Any]) -> None:
    assembly = SnapshotAssembly(_format(case["assembly_format"]))
    decode_fmt = _format(case["decode_format"])
    for step in case["steps"]:
        if step["action"] == "reset":
            assembly.reset()
            continue
        if step["action"] == "absorb_constructed_frame":
            frame: Delta | SnapshotChunk = _constructed(step["frame"])
        else:
            assert step["action"] == "decode_then_absorb", step["action"]
            data = _frame_bytes(step["file"])
            dec = step["decode_expected"]
            if "error" in dec:
                with pytest.raises(errors.Cbi1Error) as info:
                    decode(decode_fmt, data)
                _check_error(info.value, dec["error"])
                continue  # decode failed: assembly untouched
            frame = decode(decode_fmt, data)
            assert type(frame).__name__ == dec["ok"]["kind"]
        expected = step["absorb_expected"]
        if "error" in expected:
            with pytest.raises(errors.Cbi1Error) as info2:
                assembly.absorb(frame)
            _check_error(info2.value, expected["error"])
        else:
            _check_absorb(assembly.absorb(frame), expected["ok"])
