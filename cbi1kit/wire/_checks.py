"""What ``decode`` checks past a frame's envelope and checksum, one check at a time in upstream's
order: the header's format, then a delta's or a snapshot chunk's body, each error with the byte
offset and field path of what it rejected.
"""

from __future__ import annotations

import struct

import numpy as np

from cbi1kit.errors import Cbi1Error, Cbi1Variant
from cbi1kit.wire._format import (
    DELTA_BODY_PREFIX,
    FIXED_FIELDS,
    HEADER_LEN,
    IMAGE_BYTES,
    SNAPSHOT_BODY_PREFIX,
    SNAPSHOT_CHUNK_BUCKETS,
    U32_MAX,
    U64_MAX,
    WORD_BYTES,
    FilterFormat,
    max_delta_images,
)
from cbi1kit.wire._frames import (
    _DELTA_PREFIX,
    _OFF,
    _SNAPSHOT_PREFIX,
    IMAGE_DTYPE,
    Buffer,
    Delta,
    FrameHeader,
    SnapshotChunk,
)
from cbi1kit.wire._layout import DELTA_PREFIX, SNAPSHOT_PREFIX

_FIXED_VALUES = tuple(f.value for f in FIXED_FIELDS)


def _check_format(
    expected: FilterFormat,
    format_version: int,
    fingerprint_bits: int,
    slots: int,
    seed: int,
    bucket_count: int,
) -> None:
    """The header's fixed fields, then its seed and bucket count against ``expected``: upstream's
    ``Format`` errors, in its order."""
    actuals = (format_version, fingerprint_bits, slots)
    if actuals != _FIXED_VALUES:  # (one compare for a valid frame; the loop names the field)
        for (name, value, what, subvariant), actual in zip(FIXED_FIELDS, actuals, strict=True):
            if actual != value:
                raise Cbi1Error(
                    Cbi1Variant.Format,
                    f"unsupported {what} {actual} (expected {value})",
                    subvariant=subvariant,
                    offset=_OFF[name],
                    field=f"header.{name}",
                    expected=value,
                    actual=actual,
                )
    if seed != expected.seed or bucket_count != expected.bucket_count:
        name = "seed" if seed != expected.seed else "bucket_count"
        raise Cbi1Error(
            Cbi1Variant.Format,
            f"expected {expected!r}, frame says seed 0x{seed:x} buckets {bucket_count}",
            subvariant="Mismatch",
            offset=_OFF[name],
            field=f"header.{name}",
            expected=expected,
            actual=(seed, bucket_count),
        )


_SMALL_DELTA = 64
#: ``_BUCKET_READERS[n]`` reads the buckets of ``n`` images (1 <= n <= ``_SMALL_DELTA``).
_BUCKET_READERS = [struct.Struct("<" + "I8x" * max(n, 1)) for n in range(_SMALL_DELTA + 1)]
#: A delta's images start where its prefix ends.
_IMAGES_START = DELTA_PREFIX.end
#: ``_BUCKET_MASKS[bucket_count]``: see :func:`_bucket_masks` (filled as formats are seen)
_BUCKET_MASKS: dict[int, list[int]] = {}


def _bucket_masks(bucket_count: int) -> list[int]:
    """``masks[n]``: the bits of ``n`` images read as one little-endian integer that a bucket
    ``>= bucket_count`` would set, for a power of two (one AND checks every bucket of a small
    delta, where reading them out took a Python int each); ``[0]`` for any other count."""
    masks = [0]
    if bucket_count and not bucket_count & (bucket_count - 1):
        k = bucket_count.bit_length() - 1
        high = U32_MAX >> k << k if k < 32 else 0  # a bucket's bits k..31
        for i in range(_SMALL_DELTA):
            masks.append(masks[-1] | high << (8 * IMAGE_BYTES * i))
    _BUCKET_MASKS[bucket_count] = masks
    return masks


def _past_lane(view: Buffer, count: int, bucket_count: int) -> bool:
    """Whether any of a delta's ``count`` images (``count >= 1``) names a bucket past the lane's
    ``bucket_count``: a small delta's buckets read by one ``struct`` call."""
    if count <= _SMALL_DELTA:
        return bool(max(_BUCKET_READERS[count].unpack_from(view, _IMAGES_START)) >= bucket_count)
    images = np.frombuffer(view, IMAGE_DTYPE, count, _IMAGES_START)
    return bool(images["bucket"].max() >= bucket_count)


def _body_len(view: memoryview, body: str, prefix: int, field: str) -> int:
    """The body's length, refused when its fixed prefix does not fit."""
    body_len = len(view) - HEADER_LEN
    if body_len < prefix:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"{body} body is {body_len} bytes, its fixed prefix alone is {prefix}",
            offset=HEADER_LEN + body_len,
            field=field,
            expected=prefix,
            actual=body_len,
        )
    return body_len


def _decode_delta(header: FrameHeader, view: memoryview) -> Delta:
    body_len = _body_len(view, "delta", DELTA_BODY_PREFIX, "delta.image_count")
    base_epoch, count = _DELTA_PREFIX.unpack_from(view, HEADER_LEN)
    maximum = max_delta_images()
    if count > maximum:
        raise Cbi1Error(
            Cbi1Variant.DeltaImageCount,
            f"delta has {count} images, exceeding the CBI1 maximum {maximum}",
            offset=DELTA_PREFIX.field("image_count").offset,
            field="delta.image_count",
            expected=maximum,
            actual=count,
        )
    expected_len = DELTA_BODY_PREFIX + IMAGE_BYTES * count
    if body_len != expected_len:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"image_count {count} needs a {expected_len}-byte body, found {body_len}",
            offset=HEADER_LEN + min(body_len, expected_len),
            field="delta.images",
            expected=expected_len,
            actual=body_len,
        )
    images = np.frombuffer(view, dtype=IMAGE_DTYPE, count=count, offset=_IMAGES_START)
    images.flags.writeable = False
    limit = header.bucket_count
    if count and _past_lane(view, count, limit):
        i = int(np.flatnonzero(images["bucket"] >= limit)[0])
        bucket = int(images["bucket"][i])
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"image {i} names bucket {bucket}, the lane has {limit}",
            offset=_IMAGES_START + i * IMAGE_BYTES,
            field=f"delta.images[{i}].bucket",
            expected=f"< {limit}",
            actual=bucket,
        )
    frame = Delta.__new__(Delta)
    frame.header = header
    frame.base_epoch = base_epoch
    frame.images = images
    return frame


#: A snapshot chunk's words start where its prefix ends.
_CHUNK_WORDS = SNAPSHOT_PREFIX.end


def _decode_chunk(header: FrameHeader, view: memoryview) -> SnapshotChunk:
    """A snapshot chunk's body, in upstream's order: its prefix, its words, then whether they
    fit the lane; the words a read-only view over ``view``."""
    chunk_index, chunk_count, bucket_offset = _chunk_prefix(view)
    word_count = _chunk_word_count(view)
    _check_chunk_fits(header, bucket_offset, word_count)
    frame = SnapshotChunk.__new__(SnapshotChunk)
    frame.header = header
    frame.chunk_index = chunk_index
    frame.chunk_count = chunk_count
    frame.bucket_offset = bucket_offset
    words = np.frombuffer(view, dtype="<u8", count=word_count, offset=_CHUNK_WORDS)
    words.flags.writeable = False
    frame.words = words
    return frame


def _chunk_prefix(view: memoryview) -> tuple[int, int, int]:
    """The chunk's index, count and bucket offset: a whole prefix, at least one chunk, and an
    index below the count."""
    _body_len(view, "snapshot", SNAPSHOT_BODY_PREFIX, "snapshot")
    chunk_index, chunk_count, bucket_offset = _SNAPSHOT_PREFIX.unpack_from(view, HEADER_LEN)
    if chunk_count == 0:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            "chunk_count is 0",
            offset=SNAPSHOT_PREFIX.field("chunk_count").offset,
            field="snapshot.chunk_count",
            expected=">= 1",
            actual=0,
        )
    if chunk_index >= chunk_count:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"chunk_index {chunk_index} is not below chunk_count {chunk_count}",
            offset=SNAPSHOT_PREFIX.field("chunk_index").offset,
            field="snapshot.chunk_index",
            expected=f"< {chunk_count}",
            actual=chunk_index,
        )
    return chunk_index, chunk_count, bucket_offset


def _chunk_word_count(view: memoryview) -> int:
    """How many u64 words follow the prefix: whole words, at most a chunk's."""
    words_len = len(view) - _CHUNK_WORDS
    if words_len % WORD_BYTES:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"{words_len} word bytes is not a whole number of u64 words",
            offset=_CHUNK_WORDS + words_len - words_len % WORD_BYTES,
            field="snapshot.words",
            expected="a multiple of 8 bytes",
            actual=words_len,
        )
    word_count = words_len // WORD_BYTES
    if word_count > SNAPSHOT_CHUNK_BUCKETS:  # unreachable through FrameTooLarge; upstream keeps it
        raise Cbi1Error(
            Cbi1Variant.SnapshotChunkWordCount,
            f"snapshot chunk has {word_count} words, exceeding the CBI1 maximum "
            f"{SNAPSHOT_CHUNK_BUCKETS}",
            offset=_CHUNK_WORDS,
            field="snapshot.words",
            expected=SNAPSHOT_CHUNK_BUCKETS,
            actual=word_count,
        )
    return word_count


def _check_chunk_fits(header: FrameHeader, bucket_offset: int, word_count: int) -> None:
    """``Malformed`` unless the words from ``bucket_offset`` end inside the header's lane."""
    end = bucket_offset + word_count
    if end > U64_MAX or end > header.bucket_count:
        raise Cbi1Error(
            Cbi1Variant.Malformed,
            f"bucket_offset {bucket_offset} + {word_count} words ends past the "
            f"{header.bucket_count}-bucket lane",
            offset=SNAPSHOT_PREFIX.field("bucket_offset").offset,
            field="snapshot.bucket_offset",
            expected=f"<= {header.bucket_count - word_count}"
            if word_count <= header.bucket_count
            else "no offset fits",
            actual=bucket_offset,
        )
