"""The relay adapter: chunking, exact iterator length, the format gate, base/sequence rules."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from errorcheck import is_variant, raises_variant

from cbi1kit.errors import Cbi1Error, PublicationError
from cbi1kit.hashing._identity import DcCkfFormatIdentity, ProducerIdentity
from cbi1kit.hashing._pools import (
    CacheSemanticsId,
    DcId,
    IdentitySource,
    IndexerDomainId,
    PoolId,
    RoutingScopeId,
)
from cbi1kit.relay._publication import (
    HubSnapshot,
    PublicationFrame,
    PublicationFrameKind,
    encode_delta_publication,
    encode_snapshot_publication,
)
from cbi1kit.wire._codec import decode
from cbi1kit.wire._format import SNAPSHOT_CHUNK_BUCKETS, FilterFormat
from cbi1kit.wire._frames import Delta, SnapshotChunk

SEED = 0x5DEECE66D1B54A33
DC = 0xAABBCCDDEEFF0011


def identity(bucket_count: int = 1024, **fmt: int) -> ProducerIdentity:
    return ProducerIdentity(
        PoolId(
            IndexerDomainId(
                CacheSemanticsId(b"\x11" * 16, IdentitySource.EXPLICIT),
                RoutingScopeId(b"\x22" * 16, IdentitySource.EXPLICIT),
            ),
            DcId(DC),
        ),
        11,
        1,
        # unchecked: the gate under test must see shapes the validating constructor refuses
        DcCkfFormatIdentity.unchecked(seed=SEED, bucket_count=bucket_count, **fmt),
    )


def lane(n: int, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    words = rng.integers(0, 1 << 64, size=n, dtype=np.uint64, endpoint=False)
    words[rng.random(n) < 0.5] = 0
    return words


@pytest.mark.parametrize(
    ("bucket_count", "chunks"),
    [(2, 1), (1024, 1), (SNAPSHOT_CHUNK_BUCKETS, 1), (2 * SNAPSHOT_CHUNK_BUCKETS, 2), (1 << 22, 8)],
)
def test_snapshot_chunk_count_and_exact_length(bucket_count: int, chunks: int) -> None:
    words = lane(bucket_count)
    frames = encode_snapshot_publication(HubSnapshot(identity(bucket_count), 5, words))
    assert len(frames) == chunks == frames.chunk_count
    fmt = FilterFormat(seed=SEED, bucket_count=bucket_count)
    got = np.zeros(bucket_count, dtype=np.uint64)
    for i, frame in enumerate(frames):
        assert len(frames) == chunks - i - 1  # exact remaining count after each pull
        assert frame.kind is PublicationFrameKind.SNAPSHOT_CHUNK
        assert frame.base_sequence == frame.sequence == 5
        assert frame.queued_bytes == len(frame.payload) + 256
        decoded = decode(fmt, frame.payload)
        assert isinstance(decoded, SnapshotChunk)
        assert (decoded.chunk_index, decoded.chunk_count) == (i, chunks)
        assert decoded.header.dc_id == DC and decoded.header.epoch == 5
        got[decoded.bucket_offset : decoded.bucket_offset + len(decoded.words)] = decoded.words
    assert len(frames) == 0
    assert list(frames) == []
    np.testing.assert_array_equal(got, words)


def test_snapshot_at_sequence_zero_and_u64_max() -> None:
    for seq in (0, (1 << 64) - 1):
        (frame,) = list(encode_snapshot_publication(HubSnapshot(identity(), seq, lane(1024))))
        assert frame.base_sequence == frame.sequence == seq


def test_snapshot_bucket_count_mismatch_is_raised_before_any_frame() -> None:
    with raises_variant(PublicationError, "SnapshotBucketCount") as info:
        encode_snapshot_publication(HubSnapshot(identity(1024), 1, lane(512)))
    assert (info.value.expected, info.value.actual) == (1024, 512)
    assert "512" in str(info.value) and "1024" in str(info.value)


@pytest.mark.parametrize(
    "fmt",
    [
        {"format_version": 2},
        {"fingerprint_bits": 8},
        {"slots_per_bucket": 8},
        {"format_version": 0, "fingerprint_bits": 0, "slots_per_bucket": 0},
    ],
)
def test_format_gate_rejects_other_shapes(fmt: dict[str, int]) -> None:
    ident = identity(1024, **fmt)
    with raises_variant(PublicationError, "UnsupportedFormatIdentity") as info:
        encode_snapshot_publication(HubSnapshot(ident, 1, lane(1024)))
    f = ident.format
    assert (info.value.format_version, info.value.fingerprint_bits) == (
        f.format_version,
        f.fingerprint_bits,
    )
    assert info.value.slots_per_bucket == f.slots_per_bucket
    delta = SimpleNamespace(identity=ident, base_sequence=1, sequence=2, images=[(1, 2)])
    with raises_variant(PublicationError, "UnsupportedFormatIdentity"):
        encode_delta_publication(delta)


@pytest.mark.parametrize("bucket_count", [0, 3, 1000, (1 << 24) * 2])
def test_format_gate_rejects_bad_bucket_counts(bucket_count: int) -> None:
    with raises_variant(PublicationError, "Format.BucketCount") as info:
        encode_snapshot_publication(
            HubSnapshot(identity(bucket_count), 1, lane(max(bucket_count, 1)))
        )
    assert is_variant(info.value.__cause__, Cbi1Error, "Format.BucketCount")


def test_delta_frame_and_payload() -> None:
    images = [(3, 0xAAAABBBBCCCCDDDD), (1000, 42), (3, 0)]
    delta = SimpleNamespace(identity=identity(), base_sequence=4, sequence=5, images=images)
    frame = encode_delta_publication(delta)
    assert frame.kind is PublicationFrameKind.DELTA
    assert (frame.base_sequence, frame.sequence) == (4, 5)
    assert frame.queued_bytes == 48 + 12 + 12 * 3 + 256
    decoded = decode(FilterFormat(seed=SEED, bucket_count=1024), frame.payload)
    assert isinstance(decoded, Delta)
    assert decoded.base_epoch == 4 and decoded.header.epoch == 5 and decoded.header.dc_id == DC
    assert list(zip(decoded.buckets.tolist(), decoded.words.tolist(), strict=True)) == images


def test_delta_from_array_fields_like_the_producer_model() -> None:
    delta = SimpleNamespace(
        identity=identity(),
        base_sequence=0,
        sequence=1,
        buckets=np.array([5, 6], dtype=np.uint32),
        values=np.array([(1 << 64) - 1, 7], dtype=np.uint64),
    )
    decoded = decode(
        FilterFormat(seed=SEED, bucket_count=1024), encode_delta_publication(delta).payload
    )
    assert isinstance(decoded, Delta)
    assert decoded.words.tolist() == [(1 << 64) - 1, 7]


def test_delta_bucket_index_overflow_of_u32() -> None:
    for images in ([(1, 1), (1 << 32, 5)], [(-1, 5)]):
        delta = SimpleNamespace(identity=identity(), base_sequence=0, sequence=1, images=images)
        with raises_variant(PublicationError, "BucketIndexOverflow") as info:
            encode_delta_publication(delta)
        assert info.value.bucket == images[-1][0]
    arr = SimpleNamespace(
        identity=identity(),
        base_sequence=0,
        sequence=1,
        buckets=np.array([0, 1 << 32], dtype=np.uint64),
        values=np.array([1, 2], dtype=np.uint64),
    )
    with raises_variant(PublicationError, "BucketIndexOverflow") as info:
        encode_delta_publication(arr)
    assert info.value.image_index == 1


def test_delta_codec_errors_come_wrapped_as_upstreams_wire_variant() -> None:
    """Upstream's adapter returns ``Cbi1AdapterError::Wire(..)``; the codec error is the cause."""
    delta = SimpleNamespace(identity=identity(), base_sequence=0, sequence=1, images=[(1024, 1)])
    with raises_variant(PublicationError, "Wire.BucketIndex") as info:
        encode_delta_publication(delta)
    assert is_variant(info.value.__cause__, Cbi1Error, "BucketIndex")
    many = SimpleNamespace(
        identity=identity(),
        base_sequence=0,
        sequence=1,
        buckets=np.zeros(349_526, dtype=np.uint32),
        values=np.zeros(349_526, dtype=np.uint64),
    )
    with raises_variant(PublicationError, "Wire.DeltaImageCount"):
        encode_delta_publication(many)


def test_frame_is_value_like() -> None:
    a = PublicationFrame(identity(), 1, 2, PublicationFrameKind.DELTA, b"x")
    b = PublicationFrame(identity(), 1, 2, PublicationFrameKind.DELTA, b"x")
    assert a == b and hash(a) == hash(b)
    assert a.queued_bytes == 257


@pytest.mark.parametrize("bucket_count", [1024, 2 * SNAPSHOT_CHUNK_BUCKETS])
def test_snapshot_frames_do_not_follow_the_callers_buckets(bucket_count: int) -> None:
    """Chunks are encoded when pulled; upstream's snapshot owns an immutable buffer, so the
    caller mutating its array afterwards (before the first pull, or between pulls) must not
    reach the frames."""
    words = lane(bucket_count, seed=18)
    pristine = words.copy()
    frames = encode_snapshot_publication(HubSnapshot(identity(bucket_count), 9, words))
    words[:] = ~pristine  # every word changes, after encode_snapshot_publication returned
    first = next(frames)
    words[::2] = 0  # and again, between pulls
    payloads = [first.payload, *(f.payload for f in frames)]
    expected = [
        f.payload
        for f in encode_snapshot_publication(HubSnapshot(identity(bucket_count), 9, pristine))
    ]
    assert payloads == expected
    chunks = [decode(FilterFormat(seed=SEED, bucket_count=bucket_count), p) for p in payloads]
    assert all(isinstance(c, SnapshotChunk) for c in chunks)
    np.testing.assert_array_equal(np.concatenate([c.words for c in chunks]), pristine)
